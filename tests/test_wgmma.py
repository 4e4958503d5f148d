"""Hopper's wgmma family without a GPU: its rules, its one architecture (sm_90a, refused in one line
elsewhere), its tensor-map arguments' demands, which copies of B carry an L2 policy, and its whole default
space rendered and compiled."""

from __future__ import annotations

import pytest

from gen.compiling.compiler import CompileOptions
from gen.compiling.pool import compile_variants
from gen.compiling.render import render
from gen.core.errors import InvalidVariant, UsageError
from gen.families import get_family
from gen.families.space import Space

from .test_bad_inputs import assert_one_line_error, run_main

WGMMA = get_family("wgmma")


def test_a_consumer_multiplies_64_or_128_rows_and_keeps_its_sums_in_registers() -> None:
    WGMMA.variant({"bm": 128, "bn": 256, "consumers": 2}).check()
    with pytest.raises(InvalidVariant, match="gives each 32 rows"):
        WGMMA.variant_type(bm=64, consumers=2).check()
    with pytest.raises(InvalidVariant, match="256 float32 sums per consumer thread"):
        WGMMA.variant_type(bm=128, bn=256, consumers=1).check()
    with pytest.raises(InvalidVariant, match="shared memory"):
        WGMMA.variant_type(bm=128, bn=256, consumers=2, stages=5).check()


def test_without_a_producer_the_multiplying_warps_neither_take_turns_nor_wait_for_another_block() -> None:
    assert WGMMA.variant({"specialize": "none"}).threads_per_block == 256  # two consumer warp groups, no producer
    for other in ({"schedule": "pingpong", "bm": 128, "bn": 128}, {"cluster": 2}):
        with pytest.raises(InvalidVariant, match="specialize=none has the multiplying warps copy too"):
            WGMMA.variant_type(**{"specialize": "none", **other}).check()


def test_rows_of_a_and_b_off_16_byte_multiples_are_refused_with_the_family_to_use() -> None:
    variant = WGMMA.default_variant()
    assert WGMMA.refusal(variant, WGMMA.parse_shape("999x1001x1003:1008,1008,1001")) is None
    assert "use hgemm" in WGMMA.refusal(variant, WGMMA.parse_shape("999x1001x1003"))


def test_arrays_off_a_16_byte_boundary_are_refused_before_the_driver_is_asked() -> None:
    shape = WGMMA.parse_shape("64x64x64")
    for pointers, name in (({"A": 0x1008, "B": 0x2000, "C": 0x3000}, "A"),
                           ({"A": 0x1000, "B": 0x2000, "C": 0x3004}, "C")):
        with pytest.raises(UsageError, match=f"{name} must start at a 16-byte boundary"):
            WGMMA.problem.kernel_arguments(shape, pointers)


def test_b_copies_leave_l2_first_only_from_unclustered_16_bit_tiles_of_two_boxes_or_more() -> None:
    # where one row of tiles covers M (B read once) the policy is evict-first, else evict-unchanged; a
    # 64-column tile's box is half of L2's 256-byte fetch (the next tile's half would leave first), a
    # cluster multicasts its copies, and FP8's B is K-major: those copy B as before
    tagged = "load_box_tagged(b + j * BOX_BYTES, b_map"
    for change in ({}, {"bn": 128, "schedule": "streamk"}, {"bm": 16, "bn": 128, "consumers": 1, "store": "direct"}):
        source = render(WGMMA.variant(change))
        assert tagged in source and "l2_policy(units_m == 1)" in source
    for change in ({"bn": 64}, {"cluster": 2}, {"bm": 16, "bn": 64, "consumers": 1, "store": "direct"}):
        source = render(WGMMA.variant(change))
        assert tagged not in source and "l2_policy" not in source
        assert "load_box(b + j * BOX_BYTES, b_map" in source or "load_box_to_all(b + j * BOX_BYTES, b_map" in source
    assert "l2_policy" not in render(get_family("fp8gemm").default_variant())


def test_compiling_for_another_architecture_is_refused_in_one_line(capsys: pytest.CaptureFixture) -> None:
    assert_one_line_error(*run_main(capsys, ["compile", "wgmma", "--arch", "sm_80"]),
                          "wgmma kernels use sm_90a's own instructions and run on sm_90 GPUs only")


def test_the_whole_default_wgmma_space_compiles_for_sm_90a_without_spills(compile_options: CompileOptions) -> None:
    variants = Space.default(WGMMA).expand().valid
    results = compile_variants(variants, compile_options)
    assert len(results) == len(variants) > 20
    assert not [(r.variant.name, r.log) for r in results if not r.ok]
    assert all("for 'sm_90a'" in r.log for r in results)  # ptxas's report: each compiled for sm_90a
    assert all(r.resources.spill_bytes == 0 and r.resources.stack_bytes == 0 for r in results)
