"""wgmma's thin and narrow tiles and its split-K without a GPU: the default space searches bm=64
and bn=64 and splits of 2 and 4 where the rules keep them valid, split's rules say what to use, the
name and the launch of a split variant, and split variants rendered and compiled for sm_90a with
every store path and an epilogue (tests/test_gpu_wgmma_split.py runs them); the family's likely best
variants per shape (a tune's first picks, gen.matmul's untuned choice) fill the SMs with thin tiles
and splits where the default's tiles would leave them idle."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from gen.compiling.compiler import CompileOptions
from gen.compiling.pool import compile_variants
from gen.commands.tune import first_picks
from gen.core.errors import InvalidVariant
from gen.families import get_family
from gen.families.space import Space
from gen.families.wgmma import wave_cost
from gen.core.results import GpuModel
from gen.store.tuning_db import TuningDB, TuningKey

WGMMA = get_family("wgmma")


def test_the_default_space_has_thin_and_narrow_tiles_and_splits_of_a_tile_per_block_only() -> None:
    variants = Space.default(WGMMA).expand().valid
    tiles = {(v.bm, v.bn) for v in variants}
    assert {(64, 64), (64, 128), (64, 256), (128, 64)} <= tiles
    assert {v.consumers for v in variants if v.bm == 64 and v.schedule != "pingpong"} == {1}
    split = [v for v in variants if v.split > 1]
    assert {v.split for v in split} == {2, 4} and {(v.schedule, v.cluster) for v in split} == {("grid", 1)}
    assert {(v.bm, v.consumers, v.store) for v in variants if v.bm < 64} == {(16, 1, "direct")}  # 32: asked for
    assert len(variants) < 900  # a tune compiles what it evaluates (858; 564 before clusters of two, 472 before thin tiles)


def test_split_takes_a_cluster_per_tile_of_a_block_per_tile_schedule_and_room_for_its_sums() -> None:
    for other in ({"schedule": "persistent"}, {"schedule": "pingpong", "bn": 128}, {"schedule": "grid", "cluster": 2}):
        with pytest.raises(InvalidVariant, match="split 2 makes each tile's blocks a cluster that ends with the tile: "
                                                 "use schedule=grid and cluster=1"):
            WGMMA.variant_type(**{"split": 2, **other}).check()
    with pytest.raises(InvalidVariant, match=r"split 4 gathers each block's 128 x 256 float32 sums \(131072 bytes\) in "
                                             r"its stages' shared memory, 98304 bytes: use more stages"):
        WGMMA.variant_type(split=4, schedule="grid", stages=2).check()
    WGMMA.variant({"split": 8, "schedule": "grid", "stages": 3})


def test_a_split_variants_name_and_launch() -> None:
    variant = WGMMA.variant({"split": 4, "schedule": "grid", "bm": 64, "bn": 128, "consumers": 1})
    assert variant.name == "wgmma_f16_csame_bm64_bn128_wg1_s3_grid_g8_producer_cl1_bulk_split4"
    assert WGMMA.variant_type.from_name(variant.name) == variant
    assert WGMMA.default_variant().split == 1 and "split" not in WGMMA.default_variant().name
    launch = WGMMA.launch(variant, WGMMA.parse_shape("77x300x4096"))
    assert launch.grid == (2 * 3 * 4, 1, 1) and launch.block == (256, 1, 1)  # tiles of 64 x 128, four blocks each


FUSED_SPILL_LIMIT = 64  # bytes
SPLIT_VARIANTS = [
    {"split": 2, "bm": 64, "bn": 64, "consumers": 1, "store": "direct"},
    {"split": 4, "bm": 128, "bn": 128, "consumers": 2, "dtype": "bf16"},
    {"split": 8, "bm": 128, "bn": 256, "specialize": "none", "store": "direct"},
    {"split": 8, "bm": 128, "bn": 128, "out": "f32", "bias": "col", "act": "gelu-erf", "residual": "add",
     "scale": "alpha-beta"},
]


def test_split_variants_render_and_compile_for_sm_90a_without_spills(compile_options: CompileOptions) -> None:
    variants = [WGMMA.variant({**params, "schedule": "grid"}) for params in SPLIT_VARIANTS]
    results = compile_variants(variants, compile_options)
    assert not [(r.variant.name, r.log) for r in results if not r.ok]
    assert all("for 'sm_90a'" in r.log for r in results) and len(results) == len(variants)  # ptxas's report
    assert all(r.resources.spill_bytes == 0 for r in results[:-1])
    # the fused epilogue beside the sums of 128 x 128 over two consumers may spill a few bytes (nvcc 13.0: 44)
    assert results[-1].resources.spill_bytes <= FUSED_SPILL_LIMIT


LLAMA_SHAPES = ["1x6144x4096", "16x4096x14336", "16x8192x28672", "128x6144x4096", "128x8192x28672", "512x4096x14336",
                "512x6144x4096", "2048x28672x4096", "8192x8192x8192", "999x1001x1003:1008,1008,1001", "77x45x33:40,48,45"]


@pytest.mark.parametrize("size", LLAMA_SHAPES)
def test_the_likely_best_variants_fill_the_sms_and_a_tune_can_measure_each(size: str) -> None:
    shape = WGMMA.parse_shape(size)
    likely = WGMMA.likely_best(shape, "bf16")
    space = set(Space.default(WGMMA, {"dtype": ["bf16"]}).expand().valid)
    assert likely and len(set(likely)) == len(likely) and set(likely) <= space
    assert all(WGMMA.runnable(v, shape) == v for v in likely)
    untuned, default = WGMMA.safe_variant(shape, "bf16"), WGMMA.adapted_default(shape, "bf16")
    assert untuned == likely[0] and default in likely  # the default is always measured too
    rounds = {v: -(-WGMMA.launch(v, shape).grid[0] // 132) for v in (untuned, default)}
    tiles = -(-shape.m // 128) * -(-shape.n // 256)
    if shape.m <= 16:
        assert untuned.bm == 16  # a thin tile: its stages hold only the rows of A there are
    elif shape.m <= 64:
        assert untuned.bm == 64  # one 64-row wgmma high: no rows of zeros multiplied
    if shape.m <= 64 or tiles < 66:  # thinner tiles and a split put more blocks on the SMs, all at once
        blocks = WGMMA.launch(untuned, shape).grid[0]
        assert (tiles < blocks if shape.k >= 2048 else tiles <= blocks) and rounds[untuned] == 1
    else:  # the default's tiles fill the SMs: it, stream-K on tiles as large, or a narrower tile in no more rounds
        as_large = untuned.bm * untuned.bn == default.bm * default.bn
        assert untuned == default or (untuned.schedule == "streamk" and as_large) or (
            untuned.bm * untuned.bn < 128 * 256 and rounds[untuned] <= rounds[default])
    if size == "8192x8192x8192":
        assert untuned.bm * untuned.bn == default.bm * default.bn


def test_a_tune_first_measures_the_familys_likely_best_then_the_nearest_tuned_shapes(tmp_path) -> None:
    shape = WGMMA.parse_shape("16x6144x4096")
    valid = Space.default(WGMMA, {"dtype": ["bf16"]}).expand().valid
    problem = TuningKey(GpuModel("NVIDIA H200", "9.0", 132, 139), "wgmma", "bf16", str(shape))
    picks = first_picks(TuningDB(tmp_path / "t.sqlite"), problem, WGMMA, shape, valid)
    assert picks == WGMMA.likely_best(shape, "bf16")
    matmul = get_family("matmul")  # a family that names no likely best: only the nearest tuned shape's (none here)
    assert first_picks(TuningDB(tmp_path / "t.sqlite"), replace(problem, family="matmul", dtype="f32"), matmul,
                       matmul.parse_shape("64x64x64"), Space.default(matmul).expand().valid) == []


def test_a_tie_in_consumers_at_work_goes_to_the_most_blocks() -> None:
    """At 1000³ (16 steps of K: no split) 128 x 128 tiles take 64 SMs with two consumers each, 64 x 128 ones
    128 SMs with one: the same consumers at work, on twice the SMs (80% of cuBLAS against 74% on an H200)."""
    shape = WGMMA.parse_shape("1000x1000x1000")
    untuned = WGMMA.safe_variant(shape, "bf16")
    assert (untuned.bm, untuned.bn, untuned.consumers, WGMMA.launch(untuned, shape).grid[0]) == (64, 128, 1, 128)


def test_tall_stream_k_tiles_come_first_where_wave_cost_ties_them_with_wide_ones() -> None:
    """256 x 128 stream-K tiles ran as fast as 128 x 256 ones or up to 12% faster at eight suite shapes (an H200)."""
    tall = {"bm": 256, "bn": 128, "schedule": "streamk", "cluster": 1}
    for size in ("512x10240x8192", "2048x28672x4096", "8192x8192x28672"):
        likely = WGMMA.likely_best(WGMMA.parse_shape(size), "bf16")
        assert {k: getattr(likely[0], k) for k in tall} == tall, size
        wide = next(v for v in likely if (v.bm, v.bn, v.schedule, v.cluster) == (128, 256, "streamk", 1))
        assert wave_cost(likely[0], WGMMA.parse_shape(size)) == wave_cost(wide, WGMMA.parse_shape(size)), size
    likely = WGMMA.likely_best(WGMMA.parse_shape("2000x7000x3000"), "bf16")  # off the sectors: clusters first
    assert (likely[0].cluster, likely[0].schedule) == (2, "streamk")


def test_clusters_of_two_are_in_the_space_and_a_tunes_picks_but_not_fp8s() -> None:
    """Clusters of two ran 87% of cuBLAS at 3000x5000x1000 against 75% without, 86% at 2000x7000x3000
    against 72%, 87% at 1000^3 against 85% (rows of A and B off L2's 32-byte sectors), and 89-94% against
    92-96% where the rows fall on the sectors (an H200): a tune measures them, the untuned choice takes
    them first off the sectors only."""
    valid = Space.default(WGMMA, {"dtype": ["bf16"]}).expand().valid
    assert {v.cluster for v in valid} == {1, 2}
    assert {v.schedule for v in valid if v.cluster == 2} == {"grid", "persistent", "pingpong", "streamk"}
    assert {v.split for v in valid if v.cluster == 2} == {1}  # split-K makes a tile's blocks the cluster
    for size in ("3000x5000x1000", "2000x7000x3000", "1000x1000x1000"):
        assert any(v.cluster == 2 for v in WGMMA.likely_best(WGMMA.parse_shape(size), "bf16")), size
    for m, n, k in itertools.product((1, 100, 128, 1000, 3000, 8192), (64, 1000, 6144, 28672), (64, 1000, 14336)):
        likely = WGMMA.likely_best(WGMMA.parse_shape(f"{m}x{n}x{k}"), "bf16")  # more blocks or fewer rounds:
        off_sectors = n % 16 != 0 or k % 16 != 0  # rows of 2000 bytes: 16 off a sector
        first = 2 if off_sectors and any(v.cluster == 2 for v in likely) else 1
        assert likely[0].cluster == first, (m, n, k)  # clusters first there, else after the tiles alone
    assert {v.cluster for v in Space.default(get_family("fp8gemm")).expand().valid} == {1}
