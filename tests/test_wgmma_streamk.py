"""wgmma's stream-K schedule without a GPU: its rule, launch and workspace (an argument the kernel
takes after C, never one of the caller's arrays; checked on the inputs of its kin without one), its variants rendered and
compiled for sm_90a without spills but a fused epilogue's few bytes (tests/test_gpu_wgmma_streamk.py
runs them), and where the family names it likeliest best: a last round of many tiles that leaves
SMs idle, or a few tiles (128 columns wide in a single row of tiles); never a short K, short runs
or a nearly full last round."""

from __future__ import annotations

import pytest

from gen.call.kernels import Kernel
from gen.compiling.compiler import CompileOptions
from gen.compiling.pool import compile_variants
from gen.compiling.render import render
from gen.core.errors import InvalidVariant
from gen.families import get_family
from gen.families.problem import Workspace

from .test_wgmma_split import FUSED_SPILL_LIMIT

WGMMA = get_family("wgmma")
STREAM_K = {"schedule": "streamk"}


def test_stream_k_in_clusters_shares_units_cluster_by_cluster_and_takes_no_split() -> None:
    clustered = WGMMA.variant({**STREAM_K, "cluster": 2})
    for size, clusters in (("2000x7000x3000", 66), ("77x45x200:200,48,45", 4)):  # 224 units of two tiles; 1 x 4 steps
        assert WGMMA.launch(clustered, WGMMA.parse_shape(size)).grid == (2 * clusters, 1, 1), size
    with pytest.raises(InvalidVariant, match="schedule=streamk in clusters of 2 takes tiles of at most 128 rows"):
        WGMMA.variant_type(schedule="streamk", cluster=2, bm=256, bn=128).check()
    with pytest.raises(InvalidVariant, match="split 2 makes each tile's blocks a cluster"):
        WGMMA.variant_type(schedule="streamk", split=2).check()


def test_a_stream_k_launch_puts_a_block_on_each_sm_with_steps_to_share() -> None:
    variant = WGMMA.variant(STREAM_K)
    assert WGMMA.launch(variant, WGMMA.parse_shape("2000x7000x3000")).grid == (132, 1, 1)  # 448 tiles
    assert WGMMA.launch(variant, WGMMA.parse_shape("77x45x200:200,48,45")).grid == (4, 1, 1)  # a tile, 4 steps


def test_the_workspace_follows_c_is_not_the_callers_and_the_checks_share_their_kins_inputs() -> None:
    variant, shape = WGMMA.variant({**STREAM_K, "bias": "col"}), WGMMA.parse_shape("77x45x200:200,48,45")
    problem = WGMMA.problem_of(variant)
    assert [a.name for a in problem.arguments[:5]] == ["A", "B", "C", "bias", "W"]
    (workspace,) = [a for a in problem.arguments if isinstance(a, Workspace)]
    assert workspace.words >= 132 * 128 * 256 and problem.arrays(shape)["W"] == (workspace.words,)
    assert problem.checked_as is WGMMA.problem_of(WGMMA.variant({"bias": "col"}))  # one set of inputs
    assert WGMMA.problem_of(WGMMA.variant(STREAM_K)).checked_as is WGMMA.problem.checked_as
    assert "W" not in problem.random_inputs("f16", shape, 1)
    assert Kernel(WGMMA, variant, shape).arrays == ["A", "B", "C", "bias"]
    assert "float* __restrict__ workspace" in render(variant)
    assert "workspace" not in render(WGMMA.variant({"schedule": "persistent"}))


def test_stream_k_variants_render_and_compile_for_sm_90a_without_spills(compile_options: CompileOptions) -> None:
    variants = [WGMMA.variant({**STREAM_K, **params}) for params in (
        {}, {"bm": 64, "bn": 128, "consumers": 1, "stages": 8, "store": "direct", "dtype": "bf16"},
        {"bn": 128, "stages": 6, "store": "direct", "out": "f32", "bias": "col", "act": "gelu-tanh", "residual": "add",
         "scale": "alpha-beta"})]
    results = compile_variants(variants, compile_options)
    assert [r.ok for r in results] == [True] * 3, [r.log for r in results if not r.ok]
    assert [r.resources.spill_bytes for r in results[:2]] == [0, 0]
    assert results[2].resources.spill_bytes <= FUSED_SPILL_LIMIT  # the fused epilogue's, as split's (nvcc 13: 16)


@pytest.mark.parametrize("size, first", [("2000x7000x3000", "streamk"), ("512x10240x8192", "streamk"),
                                         ("512x4096x14336", "streamk"), ("8192x8192x8192", "streamk"),
                                         ("128x4096x14336", "streamk"), ("3000x5000x1000", None),
                                         ("1000x1000x1000", None), ("128x6144x4096", None), ("4096x4096x4096", None),
                                         ("2048x8192x28672", None)])
def test_stream_k_is_likeliest_best_where_a_last_wave_or_few_tiles_would_idle_sms(size: str, first: str | None) -> None:
    likely = WGMMA.likely_best(WGMMA.parse_shape(size), "f16")
    if first is None:  # 16 steps of K; runs of 23 steps; a last round 94% or 88% full: the sums cost more than they save
        assert not any(v.schedule == "streamk" for v in likely)
    else:
        assert likely[0].schedule == first
    if size.startswith("128x"):  # one row of tiles: stream-K's only 128 columns wide
        assert {v.bn for v in likely if v.schedule == "streamk"} <= {128}
