"""gemv, the GEMM of one to eight rows of A, without a GPU: its space is valid and renders without float
atomics, a handful of its variants (the likely best at Llama-3 shapes, the scalar path, eight rows)
compile for sm_90 without spills, a shape with more rows than a variant computes is refused in one line
naming what to use, odd strides are adapted, the likely best variants keep B's bytes in flight on every
SM, and gen.matmul takes gemv for float16 and bfloat16 products of up to 8 rows and nothing else
(tests/test_gpu_gemv.py runs them)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gen.call.matmul import matmul_family
from gen.compiling.compiler import CompileOptions
from gen.compiling.pool import compile_variants
from gen.compiling.render import render
from gen.core.errors import InvalidVariant, UsageError
from gen.families import gemm_families, get_family
from gen.families.gemv import THREADS_READING, rounds_full
from gen.families.space import Space

GEMV = get_family("gemv")
LLAMA_SHAPES = ["1x6144x4096", "1x4096x14336", "1x8192x28672", "1x57344x8192", "2x28672x4096", "8x4096x14336"]


def test_the_default_space_is_valid_and_renders_deterministic_sums() -> None:
    variants = Space.default(GEMV).expand().valid
    assert {v.rows for v in variants} == {1, 2, 4, 8} and {v.split for v in variants} == {1, 2, 4, 8}
    assert len(variants) <= 300  # what a tune's compile-ahead takes on
    for variant in variants[::7]:
        source = render(variant)
        assert "atomic" not in source and f"void __launch_bounds__({variant.threads_per_block})" in source
        assert ("__cluster_dims__(%d, 1, 1)" % variant.split in source) == (variant.split > 1)
    with pytest.raises(InvalidVariant, match="kgroups 64 x rows 8 x bn 64 float32 sums needs 131072 bytes of static"):
        GEMV.variant_type(rows=8, kgroups=64).check()
    with pytest.raises(InvalidVariant, match="rows 8 x unroll 8 values of A"):
        GEMV.variant_type(rows=8, kgroups=4, unroll=8).check()


def test_a_variants_launch_has_a_thread_per_8_columns_of_each_group_and_a_cluster_per_column_block() -> None:
    variant = GEMV.variant({"bn": 128, "kgroups": 8, "split": 4})
    launch = GEMV.launch(variant, GEMV.parse_shape("3x1000x1003"))
    assert launch.grid == (8 * 4, 1, 1) and launch.block == (128 // 8 * 8, 1, 1)
    assert variant.static_shared_bytes == 8 * 1 * 128 * 4 and not launch.clears_output
    assert GEMV.variant_type.from_name(variant.name) == variant and variant.name == "gemv_f16_r1_bn128_kg8_u4_split4"


def test_more_rows_than_a_variant_computes_are_refused_in_one_line_naming_what_to_use() -> None:
    one = GEMV.default_variant()
    assert GEMV.refusal(one, GEMV.parse_shape("3x4096x4096")) == (
        "rows 1 computes at most 1 rows of A; 3x4096x4096 has M = 3 (use rows=4)")
    assert GEMV.refusal(GEMV.variant({"rows": 8}), GEMV.parse_shape("9x4096x4096")) == (
        "rows 8 computes at most 8 rows of A; 9x4096x4096 has M = 9 (use wgmma or hgemm)")
    assert GEMV.refusal(one, GEMV.parse_shape("1x77x45")) == ("copy=vector reads B 16 bytes at a time: ldb must be a "
                                                              "multiple of 8; 1x77x45 is not (use copy=scalar)")
    assert GEMV.runnable(one, GEMV.parse_shape("5x77x45")) == GEMV.variant({"rows": 8, "copy": "scalar"})
    assert GEMV.runnable(one, GEMV.parse_shape("9x64x64")) is None
    assert GEMV.unaligned(one) == GEMV.variant({"copy": "scalar"}) and GEMV.unaligned(GEMV.unaligned(one)) is None
    assert "use split=1" in GEMV.arch_refusal(GEMV.variant({"split": 2}), "sm_80")
    assert GEMV.arch_refusal(GEMV.variant({"split": 2}), "sm_90") is None


@pytest.mark.parametrize("size", LLAMA_SHAPES)
def test_the_likely_best_have_enough_threads_reading_b_and_no_more_blocks_than_that_takes(size: str) -> None:
    shape = GEMV.parse_shape(size)
    likely = GEMV.likely_best(shape, "bf16")
    space = set(Space.default(GEMV, {"dtype": ["bf16"]}).expand().valid)
    assert likely and len(set(likely)) == len(likely) and set(likely) <= space
    assert all(GEMV.runnable(v, shape) == v and v.rows >= shape.m > v.rows // 2 for v in likely)
    assert GEMV.safe_variant(shape, "bf16") == likely[0]

    def reading(variant) -> int:
        launch = GEMV.launch(variant, shape)
        return launch.grid[0] * launch.threads_per_block

    for variant in likely:
        assert reading(variant) >= THREADS_READING, variant.name
        if variant.split > 1:  # the fewest blocks per cluster that get there with full rounds of blocks
            fewer = replace(variant, split=variant.split // 2)
            assert reading(fewer) < THREADS_READING or not rounds_full(fewer, shape), variant.name


@pytest.mark.parametrize("size, split", [("1x57344x8192", 4), ("1x28672x4096", 1), ("1x10240x8192", 2)])
def test_likely_best_splits_k_until_the_rounds_of_blocks_are_full(size: str, split: int) -> None:
    """448 blocks of 512 threads at 1x57344x8192, 264 of them at once on 132 SMs: unsplit or in two,
    the rounds are 85% full, in four 97% (measured 4% faster on an H200); 224 blocks at 1x28672x4096
    all fit at once."""
    shape = GEMV.parse_shape(size)
    first = GEMV.likely_best(shape, "bf16")[0]
    assert (first.bn, first.kgroups, first.split) == (128, 32, split)
    assert rounds_full(first, shape)
    if split == 4:  # unsplit and in two the rounds are 85% full
        assert not rounds_full(replace(first, split=1), shape) and not rounds_full(replace(first, split=2), shape)


def test_likely_best_names_none_beyond_eight_rows_and_runs_odd_shapes() -> None:
    assert GEMV.likely_best(GEMV.parse_shape("9x4096x4096")) == []
    for size in ("5x77x45", "1x8x8", "3x1000x1003"):
        shape = GEMV.parse_shape(size)
        assert GEMV.likely_best(shape, "f16") and all(GEMV.runnable(v, shape) == v for v in GEMV.likely_best(shape))


def test_the_likely_best_the_scalar_path_and_eight_rows_compile_for_sm_90_without_spills(
        compile_options: CompileOptions) -> None:
    variants = {*GEMV.likely_best(GEMV.parse_shape("1x4096x14336"), "bf16")[:2],
                *GEMV.likely_best(GEMV.parse_shape("8x4096x14336"), "f16")[:1],
                GEMV.variant({"rows": 4, "copy": "scalar", "split": 2, "bn": 256, "kgroups": 8, "unroll": 8})}
    results = compile_variants(sorted(variants), compile_options)
    assert not [(r.variant.name, r.log) for r in results if not r.ok] and len(results) == len(variants) == 4
    assert all(r.resources.spill_bytes == 0 and r.resources.static_shared_bytes == r.variant.static_shared_bytes
               for r in results)


POINTERS = (1 << 20, 2 << 20, 3 << 20)


def _chosen(size: str, cc: str = "9.0", epilogue: str = "") -> str:
    """gen.matmul's family for float16 arrays of this shape, at POINTERS, on a GPU of compute capability cc."""
    return matmul_family("float16", size, "f16", "float16", POINTERS, cc, epilogue)


def test_gen_matmul_takes_gemv_for_one_row_of_half_precision_and_nothing_else() -> None:
    assert [f.name for f in gemm_families(np.dtype("float16"))] == ["gemv", "wgmma", "hgemm"]
    assert [f.name for f in gemm_families(np.dtype("float32"))] == ["sgemm"]
    for size in ("1x4096x14336", "1x6144x4096", "1x1000x1003", "1x8x8"):
        assert _chosen(size) == "gemv", size
    assert _chosen("1x28672x4096:4096,28680,28672") == "gemv"  # a padded view of B
    for size in ("2x6144x4096", "8x6144x4096", "3x1000x1003"):  # two rows tie wgmma, more lose (matmul_rows)
        assert _chosen(size) != "gemv", size
    assert _chosen("9x4096x14336") != "gemv"
    assert _chosen("1x4096x14336", epilogue="bias=col,act=gelu-tanh") == "gemv"  # its epilogues are wgmma's
    assert _chosen("1x4096x14336", epilogue="scale=alpha-beta,residual=add") == "gemv"
    assert _chosen("1x4096x14336", cc="8.0") == "hgemm"  # made and measured for sm_90


def test_an_epilogue_is_named_takes_the_bias_and_residual_after_c_and_compiles_without_spills(
        compile_options: CompileOptions) -> None:
    plain = GEMV.likely_best(GEMV.parse_shape("1x4096x14336"), "bf16")[0]
    fused = GEMV.with_epilogue(plain, "scale=alpha-beta,bias=col,act=gelu-tanh,residual=add")
    assert fused.name == plain.name + "_alphabeta_biascol_gelutanh_resadd"
    assert GEMV.epilogue_of(fused) == "scale=alpha-beta,bias=col,act=gelu-tanh,residual=add"
    assert GEMV.with_epilogue(fused, "") == plain
    shape = GEMV.parse_shape("1x45x77:80,48,45")
    arguments = GEMV.problem_of(fused).kernel_arguments(
        shape, {"A": 16, "B": 32, "C": 48, "bias": 64, "R": 80, "alpha": 0.5, "beta": -2.0})
    assert [int(x) for x in arguments[:5]] == [16, 32, 48, 64, 80]  # pointers: A, B, C, then the epilogue's
    assert [int(x) for x in arguments[5:11]] == [1, 45, 77, 80, 48, 45] and [float(x) for x in arguments[11:]] == [0.5, -2.0]
    with pytest.raises(UsageError, match="none of gemv's epilogue parameters"):
        GEMV.with_epilogue(plain, "bias=col,gelu=tanh")
    variants = [GEMV.with_epilogue(replace(plain, dtype=dtype), f"bias=col,act={act}")
                for dtype, act in (("bf16", "gelu-tanh"), ("f16", "silu"), ("bf16", "gelu-erf"), ("f16", "relu"))]
    results = compile_variants(variants, compile_options)
    assert not [(r.variant.name, r.log) for r in results if not r.ok] and len(results) == 4
    assert all(r.resources.spill_bytes == 0 for r in results)
