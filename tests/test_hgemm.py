"""The tensor-core GEMM's rules, without a GPU: what a variant may be, and what it may run."""

from __future__ import annotations

import pytest

from gen.core.errors import InvalidVariant
from gen.families import get_family

HGEMM = get_family("hgemm")


def test_the_swizzle_needs_b_rows_in_whole_groups_of_64_elements() -> None:
    HGEMM.variant({"bn": 128, "wn": 32, "layout": "swizzle"}).check()
    for bn in (96, 160):  # 12 or 20 chunks a row: chunk ^ (row % 8) would leave the row
        with pytest.raises(InvalidVariant, match=f"bn {bn} is not a multiple of 64"):
            HGEMM.variant_type(bn=bn, wn=32, layout="swizzle").check()
    HGEMM.variant({"bn": 96, "wn": 32, "layout": "pad"}).check()


def test_an_unaligned_view_gets_single_checked_stores_and_element_copies() -> None:
    for copy, bounds in (("async", "none"), ("scalar", "none"), ("async", "guard")):
        relative = HGEMM.unaligned(HGEMM.variant_type(copy=copy, bounds=bounds))
        assert (relative.copy, relative.bounds) == ("scalar", "guard")
    assert HGEMM.unaligned(HGEMM.variant_type(copy="scalar", bounds="guard")) is None


def test_odd_shapes_are_refused_by_what_cannot_run_them_and_adapted() -> None:
    shape = HGEMM.parse_shape("999x1001x1003")
    default = HGEMM.default_variant()
    assert "bounds=none" in HGEMM.refusal(default, shape)
    adapted = HGEMM.runnable(default, shape)
    assert (adapted.bounds, adapted.copy) == ("guard", "scalar")
    assert HGEMM.runnable(default, HGEMM.parse_shape("1000x1000x1000")).copy == "async"
