"""The FP8 GEMM on Hopper (fp8gemm) without a GPU: names, the refused combinations and shapes, B taken
N x K, the scales' arguments and arrays, exact FP8 inputs, the float64 reference against a case worked
out by hand, the tolerance's terms, and each FP8 type, output type and scaling compiled for sm_90a."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from gen.compiling.compiler import CompileOptions
from gen.compiling.pool import compile_variants
from gen.compiling.render import render
from gen.core.errors import InvalidVariant
from gen.families import get_family
from gen.families.epilogue import ACTIVATION_ROUNDINGS
from gen.families.problem import numpy_dtype
from gen.families.space import Space

from .test_bad_inputs import assert_one_line_error, run_main

FP8 = get_family("fp8gemm")


def test_names_round_trip_and_say_the_scaling() -> None:
    default = FP8.default_variant()
    assert default.name == "fp8gemm_e4m3_cbf16_bm128_bn256_wg2_s3_persistent_g8_producer_cl1_bulk_bytensor"
    for dtype in ("e4m3", "e5m2"):
        for out in ("bf16", "f16", "f32"):
            for scaling in ("none", "tensor", "rowcol"):
                variant = FP8.variant_type(dtype=dtype, out=out, scaling=scaling, act="relu", store="direct")
                assert FP8.variant_type.from_name(variant.name) == variant
                assert variant.output_dtype == out
    assert {v.dtype for v in Space.default(FP8).expand().valid} == {"e4m3"}


def test_the_space_splits_k_in_clusters_of_a_block_per_tile_only() -> None:
    variants = Space.default(FP8).expand().valid
    split = [v for v in variants if v.split > 1]
    assert {v.split for v in split} == {2, 4} and {(v.schedule, v.cluster) for v in split} == {("grid", 1)}
    assert len(variants) < 300  # what a tune's compile-ahead takes on
    variant = FP8.variant({"split": 2, "schedule": "grid", "scaling": "rowcol"})
    assert variant.name == "fp8gemm_e4m3_cbf16_bm128_bn256_wg2_s3_grid_g8_producer_cl1_bulk_split2_byrowcol"
    assert FP8.variant_type.from_name(variant.name) == variant
    assert FP8.launch(variant, FP8.parse_shape("512x4096x4096")).grid == (4 * 16 * 2, 1, 1)  # two blocks a tile
    with pytest.raises(InvalidVariant, match="split 2 makes each tile's blocks a cluster that ends with the tile"):
        FP8.variant_type(split=2).check()  # persistent


@pytest.mark.parametrize("size, tiles", [("512x4096x4096", "narrow"), ("512x4096x14336", "split"),
                                         ("512x6144x4096", "narrow"), ("512x10240x8192", "narrow"),
                                         ("512x8192x8192", "default"), ("4096x4096x4096", "default"),
                                         ("8192x8192x8192", "default"), ("512x57344x8192", "default")])
def test_the_untuned_choice_fills_the_sms_where_the_default_tiles_do_not(size: str, tiles: str) -> None:
    chosen = FP8.safe_variant(FP8.parse_shape(size), "e5m2")
    assert chosen.dtype == "e5m2"
    assert {"split": chosen.split > 1, "narrow": chosen.bn < 256 and chosen.split == 1,
            "default": chosen == FP8.default_variant().with_element_type("e5m2")}[tiles], chosen.name


def test_a_bias_is_refused_with_what_to_use_instead(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(InvalidVariant, match="fp8gemm has no bias yet.*residual=add"):
        FP8.variant_type(bias="col").check()
    assert_one_line_error(*run_main(capsys, ["render", "fp8gemm", "-p", "bias=col"]), "fp8gemm has no bias yet")


def test_b_is_n_by_k_and_rows_off_16_bytes_are_refused(capsys: pytest.CaptureFixture) -> None:
    shape = FP8.parse_shape("70x50x64")
    assert (shape.lda, shape.ldb, shape.ldc) == (64, 64, 50) and str(shape) == "70x50x64"
    assert FP8.problem.arrays(shape)["B"] == (50, 64)  # N rows of K
    assert str(FP8.parse_shape("64x300x64:64,64,300")) == "64x300x64"  # ldb is K's, not N's
    padded = FP8.parse_shape("999x1001x1003:1008,1008,1001")
    assert FP8.refusal(FP8.default_variant(), padded) is None
    assert "multiples of 16" in FP8.refusal(FP8.default_variant(), FP8.parse_shape("64x64x40"))
    assert_one_line_error(*run_main(capsys, ["sweep", "fp8gemm", "--size", "64x300x64:64,32,300", "--dry-run"]),
                          "ldb 32 is smaller than the row it must hold (64)")


def test_the_kernel_takes_the_scales_after_the_residual_and_their_arrays_follow_the_scaling() -> None:
    shape = FP8.parse_shape("70x50x64")
    fused = FP8.problem_of(FP8.variant({"scaling": "rowcol", "scale": "alpha", "residual": "add"}))
    assert [a.name for a in fused.arguments] == ["A", "B", "C", "R", "scale_a", "scale_b", "M", "N", "K", "lda",
                                                 "ldb", "ldc", "alpha"]
    per_tensor = FP8.problem_of(FP8.variant({"scaling": "tensor"}))
    assert (per_tensor.arrays(shape)["scale_a"], per_tensor.arrays(shape)["scale_b"]) == ((1,), (1,))
    assert (fused.arrays(shape)["scale_a"], fused.arrays(shape)["scale_b"]) == ((70,), (50,))
    assert "scale_a" not in FP8.problem_of(FP8.variant({"scaling": "none"})).arrays(shape)


@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
def test_inputs_are_exact_fp8_values_the_scales_positive_float32_and_r_in_cs_type(dtype: str) -> None:
    shape = FP8.parse_shape("70x50x64")
    problem = FP8.problem_of(FP8.variant({"scaling": "rowcol", "residual": "add", "out": "f16", "store": "direct"}))
    inputs = problem.checked_as.random_inputs(dtype, shape, 0)  # what the GPU worker checks it on
    for name in ("A", "B"):
        assert inputs[name].dtype == numpy_dtype(dtype)
        wide = inputs[name].astype(np.float64)
        assert np.array_equal(wide.astype(numpy_dtype(dtype)).astype(np.float64), wide) and len(np.unique(wide)) > 10
    for name, size in (("scale_a", 70), ("scale_b", 50)):
        assert inputs[name].dtype == np.float32 and inputs[name].shape == (size,)
        assert 0.5 <= inputs[name].min() and inputs[name].max() < 2.0
    assert inputs["R"].dtype == np.float16


def _hand_case() -> tuple[dict[str, np.ndarray], object]:
    """A (1 x 2) and B (2 x 2, N x K): A·Bᵀ = [1 * 0.5 + 2 * 1, 1 * -1 + 2 * 0.25] = [2.5, -0.5]."""
    shape = FP8.parse_shape("1x2x2")
    return {"A": np.array([[1.0, 2.0]]), "B": np.array([[0.5, 1.0], [-1.0, 0.25]]),
            "scale_a": np.array([2.0]), "scale_b": np.array([0.5, 4.0]), "R": np.array([[1.0, -1.0]])}, shape


def test_the_reference_takes_b_by_columns_then_the_scales_then_the_epilogue() -> None:
    inputs, shape = _hand_case()
    plain = FP8.problem_of(FP8.variant({"scaling": "none"}))
    assert plain.reference(inputs, shape).tolist() == [[2.5, -0.5]]
    per_tensor = FP8.problem_of(FP8.variant({"scaling": "tensor"}))  # scale_a[0] * scale_b[0] = 1
    tensor_inputs = {**inputs, "scale_a": np.array([2.0]), "scale_b": np.array([0.25])}
    assert per_tensor.reference(tensor_inputs, shape).tolist() == [[1.25, -0.25]]
    per_row_column = FP8.problem_of(FP8.variant({"scaling": "rowcol"}))  # [2.5 * 2 * 0.5, -0.5 * 2 * 4]
    assert per_row_column.reference(inputs, shape).tolist() == [[2.5, -4.0]]
    fused = FP8.problem_of(FP8.variant({"scaling": "rowcol", "act": "relu", "residual": "add", "scale": "alpha"}))
    assert fused.reference(inputs, shape).tolist() == [[0.25 * 2.5 + 1.0, 0.0 - 1.0]]  # relu(alpha x) + R


def test_block_scales_multiply_each_128_of_k_by_its_rows_scale_and_its_128_x_128_blocks() -> None:
    """A = ones (1 x 129), B = ones (129 x 129, N x K): K's blocks are 128 and 1 elements, N's 128 and 1
    columns; scale_a per block of K [2, 3], scale_b per block (N/128 x K/128) [[1, 10], [0.5, 100]]."""
    shape = FP8.parse_shape("1x129x129:144,144,129")
    block = FP8.problem_of(FP8.variant({"scaling": "block", "bn": 128}))
    assert (block.arrays(shape)["scale_a"], block.arrays(shape)["scale_b"]) == ((2,), (4,))  # KB x M, NB x KB
    inputs = {"A": np.ones((1, 144)), "B": np.ones((129, 144)), "scale_a": np.array([2.0, 3.0]),
              "scale_b": np.array([1.0, 10.0, 0.5, 100.0])}
    product = block.reference(inputs, shape)
    assert product.shape == (1, 129)
    assert set(product[0, :128].tolist()) == {128 * 2 * 1.0 + 3 * 10.0} and product[0, 128] == 128 * 2 * 0.5 + 3 * 100.0
    assert block.arrays(FP8.parse_shape("70x300x300:304,304,300"))["scale_a"] == (3 * 70,)


def test_block_scaling_refuses_tiles_whose_second_sums_spill_in_one_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(InvalidVariant, match="scaling=block keeps a second set of float32 sums: 64 rows x bn 256 need "
                                             "256 per consumer thread, more than 128"):
        FP8.variant_type(scaling="block").check()
    with pytest.raises(InvalidVariant, match="scaling=block has its products waited for step by step"):
        FP8.variant_type(scaling="block", bn=128, specialize="none").check()
    assert_one_line_error(*run_main(capsys, ["render", "fp8gemm", "-p", "scaling=block"]),
                          "scaling=block keeps a second set of float32 sums")


def test_the_tolerance_is_the_fp8_sums_plus_the_outputs_rounding() -> None:
    shape = FP8.parse_shape("64x64x4096")
    f32, bf16, f16 = (FP8.problem.tolerance(out, shape) for out in ("f32", "bf16", "f16"))
    assert math.isclose(bf16 - f32, 2 * 2.0**-8) and math.isclose(f16 - f32, 2 * 2.0**-11)
    assert math.isclose(2 * FP8.problem.tolerance("f32", FP8.parse_shape("64x64x1024")), f32)  # grows like sqrt(K)
    assert f32 == 16 * 2.0**-14 * 64 < 0.1  # a dropped k32 piece or a wrong row is off by far more
    fused = FP8.problem_of(FP8.variant({"act": "relu"}))
    assert math.isclose(fused.tolerance("f32", shape), 2 * f32 + ACTIVATION_ROUNDINGS * 2.0**-24)


COMPILED = [  # each FP8 type, output type and scaling at least once; an epilogue; both stores and two schedules
    {"dtype": "e4m3", "out": "bf16", "scaling": "tensor"},
    {"dtype": "e5m2", "out": "f16", "scaling": "rowcol", "store": "direct", "act": "gelu-tanh", "residual": "add"},
    {"dtype": "e4m3", "out": "f32", "scaling": "none", "store": "direct", "schedule": "pingpong", "bn": 128},
    {"dtype": "e5m2", "out": "bf16", "scaling": "rowcol", "scale": "alpha", "cluster": 2},
]
SPILL_LIMIT = 16  # bytes stored (and loaded back): a full epilogue with per-row scales spills a few (nvcc 13.0)


SPLIT_COMPILED = [  # split-K, its sums scaled and the epilogue applied once, after the cluster's sum
    {"split": 2, "schedule": "grid", "scaling": "tensor"},
    {"split": 4, "schedule": "grid", "bn": 128, "scaling": "rowcol", "store": "direct", "out": "f32",
     "scale": "alpha-beta", "act": "silu", "residual": "add"},
    {"scaling": "block", "bn": 128, "dtype": "e5m2", "out": "f16"},  # block scales: a second set of sums
    {"scaling": "block", "bm": 64, "consumers": 1, "bn": 128, "split": 2, "schedule": "grid", "act": "relu"},
]


def test_each_fp8_type_output_and_scaling_renders_and_compiles_for_sm_90a(compile_options: CompileOptions) -> None:
    variants = [FP8.variant(params) for params in COMPILED + SPLIT_COMPILED]
    source = render(variants[0])
    assert "m64n256k32.f32.e4m3.e4m3" in source and "*scale_a * *scale_b" in source
    assert "k32.f32.e5m2.e5m2" in render(variants[1]) and "scale_a[r] * scale_b[c]" in render(variants[1])
    split = render(variants[-3])  # the scales after the cluster's sum: once, by the block that stores
    assert split.index("reduce_split(d, stages") < split.index("* (scale_a[r] * scale_b[c])")
    block = render(variants[-2])  # each step's sums into the second set, scaled; none left for the epilogue
    assert "multiply_add(part[i]" in block and "fmaf(part[i][s], row_scale[i][s % 4 / 2], d[i][s])" in block
    assert "scale_a[r]" not in block and "wgmma.wait_group.sync.aligned 0" in block
    results = compile_variants(variants, compile_options)
    assert not [(r.variant.name, r.log) for r in results if not r.ok] and len(results) == len(variants)
    assert all("for 'sm_90a'" in r.log for r in results)  # ptxas's report: each compiled for sm_90a
    assert all(r.resources.spill_store_bytes <= SPILL_LIMIT and r.resources.stack_bytes <= SPILL_LIMIT for r in results)


def test_a_call_runs_the_tuned_tiles_with_its_scaling_or_their_nearest_relative_that_takes_it() -> None:
    from gen.call.matmul import fp8_variant

    pingpong = FP8.variant({"bn": 128, "schedule": "pingpong", "stages": 4, "store": "direct"})
    assert fp8_variant(pingpong, "rowcol", "f32") == replace(pingpong, scaling="rowcol", out="f32")
    # 128 rows a consumer: block scales' two sets of sums fit on no relative of it, so the default's on 128 columns
    assert fp8_variant(pingpong, "block", "bf16") == replace(FP8.default_variant(), bn=128, scaling="block")
    split = FP8.variant({"schedule": "grid", "split": 2, "dtype": "e5m2"})
    assert fp8_variant(split, "block", "f16") == replace(split, bn=128, scaling="block", out="f16")


class FakeTensor:
    """What gen.call.arrays reads of a PyTorch CUDA tensor, without PyTorch: no GPU is touched
    before these calls are refused."""

    is_cuda = True

    def __init__(self, shape: tuple[int, ...], dtype: str = "float8_e4m3fn", stride: tuple[int, ...] | None = None,
                 pointer: int = 1 << 20):
        self.shape, self.dtype, self.pointer = shape, f"torch.{dtype}", pointer
        self._stride = stride or tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        self.device = type("Device", (), {"index": 0})()

    def data_ptr(self) -> int:
        return self.pointer

    def stride(self) -> tuple[int, ...]:
        return self._stride


FakeTensor.__module__ = "torch"  # how gen.call.arrays tells a PyTorch tensor


def _fp8_call(**changes) -> None:
    """gen.matmul on a 64 x 32 FP8 a and a 32 x 48 b by columns, per-tensor scales, a bfloat16 out."""
    import gen

    arrays = {"a": FakeTensor((64, 32)), "b": FakeTensor((32, 48), stride=(1, 32)), "out": FakeTensor((64, 48), "bfloat16"),
              "scale_a": FakeTensor((), "float32"), "scale_b": FakeTensor((), "float32")}
    gen.matmul(**{**arrays, **changes})


@pytest.mark.parametrize("changes, said", [
    ({"b": FakeTensor((32, 48))}, "b must be K x N by columns, as torch._scaled_mm takes it"),
    ({"scale_b": None}, "give scale_a and scale_b together"),
    ({"scale_a": FakeTensor((64,), "float32"), "scale_b": FakeTensor((47,), "float32")},
     "scale_a and scale_b must hold one number each (per tensor), 64 and 48 (per row of a, per column of b), or be "
     "64 x 1 and 1 x 1 (per 128 of K"),
    ({"a": FakeTensor((64, 256)), "b": FakeTensor((256, 48), stride=(1, 256)), "scale_a": FakeTensor((64, 2), "float32"),
      "scale_b": FakeTensor((2, 1), "float32")}, "scale_a must be a column-major float32 array on the GPU, got float32 "
                                                 "(64, 2): block scales go by columns"),
    ({"scale_a": FakeTensor((), "bfloat16")}, "scale_a must be a contiguous float32 array on the GPU"),
    ({"out_dtype": "int32"}, "out_dtype must be bfloat16, float16 or float32"),
    ({"out": FakeTensor((64, 48), "float16"), "out_dtype": "float32"}, "out must be a float32 64 x 48 matrix"),
    ({"b": FakeTensor((32, 48), "float8_e5m2", stride=(1, 32))}, "matrices of one type"),
    ({"a": FakeTensor((64, 40)), "b": FakeTensor((40, 48), stride=(1, 40))}, "must be multiples of 16"),
    ({"a": FakeTensor((64, 32), "float32"), "b": FakeTensor((32, 48), "float32"), "out": FakeTensor((64, 48), "float32")},
     "scale_a, scale_b and out_dtype go with FP8 matrices"),
])
def test_gen_matmul_refuses_fp8_calls_it_cannot_run_in_one_line(changes: dict, said: str) -> None:
    from gen.core.errors import UsageError

    with pytest.raises(UsageError, match=None) as refused:
        _fp8_call(**changes)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_fused_fp8_kernel_takes_its_own_one_byte_tensor_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A with M x K and B with N x K one-byte elements, fused or not (tensor maps are encoded by the
    driver: here each records what it was asked for)."""
    import gen.families.fp8gemm

    monkeypatch.setattr(gen.families.fp8gemm, "box_map", lambda *asked: np.void(repr(asked).encode()))
    shape = FP8.parse_shape("1000x2048x512")
    pointers = {"A": 1 << 20, "B": 2 << 20, "C": 3 << 20, "R": 4 << 20, "scale_a": 5 << 20, "scale_b": 6 << 20}
    for params in ({}, {"act": "relu", "residual": "add", "scale": "alpha-beta"}):
        a_map, b_map = FP8.problem_of(FP8.variant(params)).kernel_arguments(shape, pointers)[:2]
        assert (a_map.tobytes().decode(), b_map.tobytes().decode()) == (
            repr((1 << 20, 1000, 512, 512, "A", 1)), repr((2 << 20, 2048, 512, 512, "B", 1))), params
