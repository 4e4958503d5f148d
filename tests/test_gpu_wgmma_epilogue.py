"""wgmma's fused epilogues on a real GPU (marker `gpu`; sm_90 only): every epilogue parameter's every
value, in both element types (and every activation in both output types), on both store paths (and on ping-pong's and a
block per tile's), right at odd and padded shapes: each output NaN-poisoned before its launch and
compared with the float64 reference of the same epilogue (the sweep's check); the sanitizer finds nothing
in a fused bias and GELU."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.core.results import Status

from .test_gpu import _only_skipped_and_ok, run, runnable, skip_unless_gpu

pytestmark = pytest.mark.gpu

# Odd M, N and K with padded rows (16-byte rows of A and B, TMA's one demand; C's and R's rows 1001
# apart: the bulk path falls back to checked stores), a problem smaller than every tile, and one of
# whole tiles only, which the bulk path stores through shared memory.
SIZES = ["999x1001x1003:1008,1008,1001", "77x45x33:40,48,45", "1024x768x200"]
FIXED = {"bm": ["128"], "bn": ["128"], "consumers": ["2"], "stages": ["3"], "schedule": ["persistent"], "cluster": ["1"]}
BOTH = {**FIXED, "dtype": ["f16", "bf16"], "out": ["same", "f32"], "store": ["direct", "bulk"]}
ACTIVATIONS = {**BOTH, "act": ["none", "relu", "gelu-tanh", "gelu-erf", "silu"], "bias": ["col"],
               "residual": ["add"], "scale": ["alpha-beta"]}
PARTS = {**BOTH, "out": ["same"], "scale": ["none", "alpha", "alpha-beta"], "bias": ["none", "col"], "residual": ["none", "add"]}
SCHEDULES = {**FIXED, "dtype": ["bf16"], "schedule": ["grid", "pingpong", "streamk"], "cluster": ["1", "2"],
             "store": ["direct", "bulk"],
             "act": ["silu"], "bias": ["col"], "residual": ["add"], "scale": ["alpha-beta"]}


def test_every_epilogue_is_right_at_odd_padded_and_whole_tile_shapes(tmp_path: Path) -> None:
    skip_unless_gpu(lambda cc: cc == (9, 0), "the wgmma family runs on sm_90 GPUs (H100, H200) only")
    for name, params, least in (("act", ACTIVATIONS, 100), ("parts", PARTS, 100), ("schedules", SCHEDULES, 10)):
        rows = run(tmp_path / name, "wgmma", params, SIZES)
        assert _only_skipped_and_ok(rows) == runnable("wgmma", params, SIZES) > least
        for row in rows.values():
            if row.status == Status.OK:
                assert row.error <= row.tolerance and row.checks >= 1


def test_a_bias_is_right_where_each_consumer_stores_three_tiles_and_more(tmp_path: Path) -> None:
    """A consumer keeps its last two tiles' bias columns in two buffers taken in turn: at 4000x3000 each
    block of 128 x 128 tiles takes five or six of the 768 (persistent, ping-pong: three a consumer;
    stream-K: whole tiles and shared ones), in clusters and not; a split's other blocks fetch none."""
    skip_unless_gpu(lambda cc: cc == (9, 0), "the wgmma family runs on sm_90 GPUs (H100, H200) only")
    params = {**FIXED, "dtype": ["bf16"], "schedule": ["persistent", "pingpong", "streamk", "grid"], "cluster": ["1", "2"],
              "split": ["1", "2"], "store": ["direct", "bulk"], "bias": ["col"], "act": ["gelu-tanh"]}
    sizes = ["4000x3000x136", "3999x3001x136:136,3008,3001"]
    rows = run(tmp_path, "wgmma", params, sizes)
    assert _only_skipped_and_ok(rows) == runnable("wgmma", params, sizes) >= 30
    assert all(row.error <= row.tolerance for row in rows.values() if row.status == Status.OK)


def test_the_sanitizer_finds_nothing_in_a_fused_bias_and_gelu_variant(tmp_path: Path) -> None:
    """The bias read at an N smaller than a tile (each read clamped to the vector) and GELU's tanh by the
    special function unit, on both store paths."""
    skip_unless_gpu(lambda cc: cc == (9, 0), "the wgmma family runs on sm_90 GPUs (H100, H200) only")
    params = {**FIXED, "dtype": ["bf16"], "split": ["1"], "bias": ["col"], "act": ["gelu-tanh"], "store": ["direct", "bulk"]}
    rows = run(tmp_path, "wgmma", params, ["77x45x200:200,48,45"], sanitize=True)
    assert [row.status for row in rows.values()] == [Status.OK] * 2, {k: (r.status, r.message) for k, r in rows.items()}
