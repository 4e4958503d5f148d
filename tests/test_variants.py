"""Variants: validation with errors that name parameter, value and limit; names that round-trip."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from gen.api import Variant, integer
from gen.core.errors import InvalidVariant, UsageError
from gen.families import builtin_families, MatmulVariant, TransposeVariant, get_family, variant_from_name
from gen.families.copy import CopyVariant
from gen.families.plugin_checks import check_family
from gen.families.sgemm import SgemmVariant
from gen.families.space import Space
from gen.families.variant import Parameter

ALL_SPACES = [pytest.param(Space.emitted(f), id=f"{f.name}-emitted") for f in builtin_families().values()] + [
    pytest.param(Space.default(f), id=f"{f.name}-default") for f in builtin_families().values()]


@pytest.mark.parametrize("space", ALL_SPACES)
def test_every_valid_name_round_trips(space: Space) -> None:
    valid = space.expand().valid
    assert valid
    for variant in valid:
        assert variant_from_name(variant.name) == variant
        assert variant.name.isidentifier()


def test_names_are_unique_across_dtypes_and_smem() -> None:
    space = Space.default(get_family("matmul"), {"dtype": ["f32", "f64"], "smem": ["static", "dynamic"],
                                                 "sync": ["both", "after-load", "after-compute", "none"]})
    names = [v.name for v in space]
    assert len(names) == len(set(names)) == len(space)


def test_the_documented_example_name() -> None:
    variant = MatmulVariant(dtype="f32", tile=16, padding=1, bounds="guard", sync="both")
    assert variant.name == "matmul_f32_t16_p1_guard_both"
    assert MatmulVariant(smem="dynamic", sync="after-load").name == "matmul_f32_t16_p0_guard_afterload_dynamic"


@pytest.mark.parametrize("bad_name", [
    "matmul_f32_t16_p1_guard",  # a field missing
    "matmul_f32_t16_p1_guard_both_static_extra",
    "matmul_f16_t16_p1_guard_both",
    "matmul_f32_t016_p1_guard_both",  # would parse, but is not the canonical spelling
    "transpose_f32_t16_p1_guard_both",
])
def test_malformed_names_are_refused(bad_name: str) -> None:
    with pytest.raises(UsageError):
        variant_from_name(bad_name)


def test_variants_are_hashable_and_sortable() -> None:
    variants = [MatmulVariant(tile=32), MatmulVariant(tile=8), MatmulVariant(tile=8)]
    assert len(set(variants)) == 2
    assert [v.tile for v in sorted(variants)] == [8, 8, 32]


@pytest.mark.parametrize("variant, message", [
    (MatmulVariant(tile=64), "tile 64 gives 4096 threads per block; the CUDA limit is 1024"),
    (MatmulVariant(tile=32, padding=200), "static shared memory; the CUDA limit is 49152"),
    (MatmulVariant(padding=-1), "padding -1 is below its minimum of 0"),
    (MatmulVariant(bounds="clamp"), "bounds 'clamp' is not one of: none, guard, split"),
    (MatmulVariant(sync="divergent", bounds="none"), "sync=divergent puts the barriers inside the bounds branch"),
    (TransposeVariant(tile=32, rows=12), "rows 12 does not divide tile 32"),
    (TransposeVariant(tile=64, rows=32), "tile 64 with rows 32 gives 2048 threads per block"),
    (TransposeVariant(method="naive", padding=1), "padding 1 does not apply to method=naive"),
    (TransposeVariant(method="naive", padding=0, sync="none"), "sync none does not apply to method=naive"),
    (MatmulVariant(method="naive", bounds="split"), "bounds split does not apply to method=naive"),
    (TransposeVariant(method="naive", padding=0, vec=4), "vec 4 does not apply to method=naive"),
    (TransposeVariant(dtype="f64", vec=4), "vec 4 needs dtype f32"),
    (TransposeVariant(tile=16, rows=4, vec=4), "needs a tile that is a multiple of 32"),
    (TransposeVariant(tile=64, rows=2, vec=4), "needs rows to be a multiple of 4"),
    (TransposeVariant(method="diagonal", group=8), "group 8 applies to method=shared only"),
    (CopyVariant(dtype="f64", vec=4), "vec 4 needs dtype f32"),
])
def test_invalid_variants_name_parameter_value_and_limit(variant, message: str) -> None:
    with pytest.raises(InvalidVariant, match=message.replace("(", r"\(").replace(")", r"\)")):
        variant.check()


def test_dynamic_shared_memory_may_exceed_the_static_limit() -> None:
    big = MatmulVariant(tile=32, padding=200, smem="dynamic")
    big.check()
    assert big.dynamic_shared_bytes == big.shared_bytes == 2 * 32 * 232 * 4
    assert big.static_shared_bytes == 0


def test_user_values_are_parsed_and_checked_one_by_one() -> None:
    family = get_family("matmul")
    assert family.variant({"tile": "8", "bounds": "split"}) == MatmulVariant(tile=8, bounds="split")
    with pytest.raises(UsageError, match="tile must be an integer written in digits, like 16; got 'big'"):
        family.variant({"tile": "big"})
    with pytest.raises(UsageError, match="matmul has no parameter 'tiles'"):
        family.variant({"tiles": "8"})


@dataclass(frozen=True, order=True)
class ShiftVariant(Variant):
    """A parameter that may be negative, which no built-in family has."""

    family: ClassVar[str] = "shift"
    shift: int = integer(0, tag="s", minimum=-8, help="elements to shift by")


def typed(variant_type: type[Variant], name: str, text: str, value: int | None) -> Any:
    return pytest.param(variant_type.parameter(name), text, value, id=f"{name}={text}")


@pytest.mark.parametrize("parameter, text, value", [
    typed(MatmulVariant, "padding", "0", 0),
    typed(MatmulVariant, "padding", "007", 7),
    typed(MatmulVariant, "padding", "-0", None),
    typed(MatmulVariant, "padding", "-1", None),
    typed(MatmulVariant, "padding", "+1", None),
    typed(MatmulVariant, "padding", "1_0", None),
    typed(MatmulVariant, "padding", "١", None),
    typed(MatmulVariant, "padding", "²", None),
    typed(ShiftVariant, "shift", "-3", -3),
    typed(ShiftVariant, "shift", "3", 3),
    typed(ShiftVariant, "shift", "-0", None),
    typed(ShiftVariant, "shift", "+3", None),
    typed(ShiftVariant, "shift", "--3", None),
])
def test_one_rule_for_typed_integers_ascii_digits_and_a_minus_only_where_negatives_are_allowed(
        parameter: Parameter, text: str, value: int | None) -> None:
    if value is not None:
        assert parameter.parse(text) == value
        return
    negative = "'-' only before a negative value" if parameter.minimum < 0 else "no sign"
    with pytest.raises(UsageError, match=re.escape(f"got {text!r} (ASCII digits, {negative}, no '_')")):
        parameter.parse(text)


def test_space_keeps_invalid_points_out_with_their_reason() -> None:
    space = Space.from_options(get_family("transpose"), ["tile=32,64", "rows=8,32", "method=shared", "vec=1", "group=0"])
    expansion = space.expand()
    assert len(space) == len(expansion.valid) + len(expansion.skipped) == 2 * 2 * 2 * 2  # tile, rows, padding, bounds
    reasons = {s.variant.name: s.reason for s in expansion.skipped}
    assert all("t64_r32" in name for name in reasons)
    assert all("2048 threads per block" in reason for reason in reasons.values())


def test_space_filter_takes_substrings_and_globs() -> None:
    space = Space.default(get_family("matmul"))
    assert {v.bounds for v in space.expand("_split_").valid} == {"split"}
    assert {v.tile for v in space.expand("matmul_f32_t8_*").valid} == {8}
    assert len(space.expand().valid) == len(space) == 3 * 2 * 3


def test_bounds_none_refuses_a_shape_that_is_not_a_tile_multiple() -> None:
    matmul, transpose = get_family("matmul"), get_family("transpose")
    odd = matmul.parse_shape("1000x999x1001")
    reason = matmul.refusal(MatmulVariant(tile=16, bounds="none"), odd)
    assert reason and "multiples of tile 16" in reason and "1000x999x1001" in reason
    assert matmul.refusal(MatmulVariant(tile=16, bounds="guard"), odd) is None
    assert matmul.refusal(MatmulVariant(tile=8, bounds="none"), matmul.parse_shape("64x64x8")) is None
    assert transpose.refusal(TransposeVariant(bounds="none"), transpose.parse_shape("100x64"))


def test_vector_transposes_need_rows_of_whole_float4s_and_launch_fewer_threads() -> None:
    transpose = get_family("transpose")
    variant = TransposeVariant(tile=64, rows=8, vec=4)
    variant.check()
    assert variant.name == "transpose_f32_shared_t64_r8_p1_v4_guard_both"
    assert TransposeVariant(tile=64, rows=8).name == "transpose_f32_shared_t64_r8_p1_guard_both"  # vec=1 unnamed
    assert variant.threads_per_block == 16 * 8 and variant.elements_per_thread == 32
    assert transpose.launch(variant, transpose.parse_shape("1000x996")).block == (16, 8, 1)
    reason = transpose.refusal(variant, transpose.parse_shape("1000x999"))
    assert reason and "multiples of 4" in reason and "use vec=1" in reason
    assert transpose.refusal(variant, transpose.parse_shape(transpose.sanitize_size(variant))) is None


@pytest.mark.parametrize("text", ["4096x4096", "0x4x4", "axbxc", "8x8x8:4,8,8", "8x8x8:8,8"])
def test_bad_matmul_sizes_say_what_is_expected(text: str) -> None:
    with pytest.raises(UsageError, match="expected MxNxK"):
        get_family("matmul").parse_shape(text)


def test_leading_dimensions_describe_a_view() -> None:
    shape = get_family("matmul").parse_shape("100x50x70:80,64,64")
    assert (shape.m, shape.n, shape.k, shape.lda, shape.ldb, shape.ldc) == (100, 50, 70, 80, 64, 64)
    assert str(shape) == "100x50x70:80,64,64"
    assert str(get_family("matmul").parse_shape("100x50x70")) == "100x50x70"


@pytest.mark.parametrize("params, message", [
    ({"wm": 48}, "wm 48 does not divide bm 128; warps must tile the block"),
    ({"tm": 6}, "tm 6 must be a multiple of 4"),
    ({"bm": 256, "bn": 256, "wm": 32, "wn": 32}, "2048 threads per block; the CUDA limit is 1024"),
    ({"wm": 128, "wn": 128, "tm": 8, "tn": 8}, "560 registers; a thread has at most 255"),
    ({"padding": 2}, "padding 2 must be a multiple of 4"),
    ({"stages": 1, "load": "async"}, "load=async overlaps the next step's copy with this one's products: it needs stages=2"),
    ({"splitk": 3}, "splitk 3 is not one of: 1, 2, 4, 8, 16"),
])
def test_invalid_sgemm_variants_say_what_to_change(params: dict, message: str) -> None:
    with pytest.raises(InvalidVariant, match=re.escape(message)):
        SgemmVariant(**params).check()


def test_sgemm_names_shared_memory_and_split_k_launch() -> None:
    sgemm = get_family("sgemm")
    variant = SgemmVariant(bm=64, bn=256, bk=16, wm=32, wn=64, load="async", splitk=4, bounds="split")
    variant.check()
    assert variant.name == "sgemm_f32_bm64_bn256_bk16_wm32_wn64_tm8_tn4_p4_v4_s2_async_sk4_split_both"
    assert variant_from_name(variant.name) == variant
    assert SgemmVariant().name == "sgemm_f32_bm128_bn128_bk16_wm64_wn64_tm8_tn4_p4_v4_s2_guard_both"
    assert variant.shared_bytes == 2 * 16 * (64 + 4 + 256) * 4  # stages x bk x (bm + padding + bn) floats
    assert variant.threads_per_block == (64 // 32) * (256 // 64) * 32
    launch = sgemm.launch(variant, sgemm.parse_shape("1000x300x700:704,304,320"))
    assert launch.grid == (2, 16, 4) and launch.clears_output
    shape = sgemm.parse_shape("1000x300x700:704,304,320")
    # the launch zeroes C's region, M rows of N floats, and leaves its padding (ldc 320) alone
    assert sgemm.problem.output_region(shape) == (slice(0, 1000), slice(0, 300))
    assert sgemm.problem.arrays(shape)["C"] == (1000, 320)
    assert not sgemm.launch(SgemmVariant(), sgemm.parse_shape("64x64x64")).clears_output


@pytest.mark.parametrize("family", builtin_families().values(), ids=lambda f: f.name)
def test_every_builtin_family_keeps_the_contract_a_users_family_is_checked_against(family) -> None:
    check_family(family)  # loading skips the walk over the default space for the built-ins: it is made here
