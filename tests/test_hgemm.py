"""The tensor-core GEMM's rules, without a GPU: what a variant may be, and what it may run."""

from __future__ import annotations

import pytest

from gen.compiling.render import render
from gen.core.errors import InvalidVariant, UsageError
from gen.families import get_family

from .test_bad_inputs import run_main

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


def test_tma_copies_need_64_wide_swizzled_boxes_and_say_what_does_not_fit() -> None:
    tma = HGEMM.variant_type(bk=64, copy="tma")
    tma.check()
    for change, named in (({"bk": 32}, "bk 32"), ({"layout": "pad"}, "layout=pad"), ({"bm": 96, "wm": 32}, "bm 96"),
                          ({"pipeline": "plain"}, "pipeline=plain"), ({"bn": 192, "wn": 48}, "wn 48")):
        with pytest.raises(InvalidVariant, match=f"copy=tma .*{named}"):
            HGEMM.variant_type(**{**tma.params(), **change}).check()


def test_tma_copies_take_any_m_n_k_but_rows_on_16_byte_boundaries() -> None:
    guarded = HGEMM.variant_type(bk=64, copy="tma", bounds="guard")
    assert HGEMM.refusal(guarded, HGEMM.parse_shape("999x1001x1003:1008,1008,1001")) is None
    assert "lda and ldb must be multiples of 8" in HGEMM.refusal(guarded, HGEMM.parse_shape("999x1001x1003"))
    relative = HGEMM.unaligned(guarded)  # a view off a 16-byte boundary: element copies
    assert (relative.copy, relative.bounds) == ("scalar", "guard")


def test_a_tma_variant_takes_tensor_maps_like_wgmma_and_the_others_take_pointers() -> None:
    tma = HGEMM.variant_type(bk=64, copy="tma")
    assert HGEMM.problem_of(tma) is get_family("wgmma").problem  # (a_map, b_map, C, M, N, K, ldc)
    assert HGEMM.problem_of(HGEMM.default_variant()) is HGEMM.problem
    assert "const __grid_constant__ TensorMap a_map" in render(tma)
    with pytest.raises(UsageError, match="C must start at a 16-byte boundary"):
        HGEMM.problem_of(tma).kernel_arguments(HGEMM.parse_shape("64x64x64"), {"A": 0x1000, "B": 0x2000, "C": 0x3004})
    # the stages start at the first 1024-byte boundary, then a barrier and a counter per stage
    assert tma.shared_bytes == HGEMM.variant_type(bk=64).shared_bytes + 1024 + 16 * tma.stages


def test_tma_variants_are_skipped_with_their_reason_where_the_run_compiles_for_an_older_gpu(
        compile_options, capsys: pytest.CaptureFixture) -> None:
    tma = HGEMM.variant_type(bk=64, copy="tma")
    assert "sm_90 or later" in HGEMM.arch_refusal(tma, "sm_80") and HGEMM.arch_refusal(tma, "sm_90") is None
    assert HGEMM.arch_refusal(HGEMM.variant_type(bk=64), "sm_80") is None
    code, out, err = run_main(capsys, ["compile", "hgemm", "-p", "bk=64", "-p", "copy=tma,async", "-p", "bm=128",
                                       "-p", "bn=128", "-p", "wm=64", "-p", "wn=64", "--arch", "sm_80",
                                       "--keep-skipped"])
    assert code == 0, err
    skipped = [line for line in out.splitlines() if line.startswith(tma.name)]
    assert skipped and "skipped" in skipped[0] and "this run compiles for sm_80" in skipped[0]
    assert "0 failed" in out + err  # the async variant compiles; no TMA variant reaches the compiler
