"""wgmma's stream-K schedule on a real GPU (marker `gpu`; sm_90 only): every tile and store path right
at odd shapes with padded rows, a K of one step (a tile shared by blocks that each hold less than a
step is impossible: the blocks with no run must be skipped), a thin model shape, and a shape of 448
tiles (whole waves of tiles, then the rest shared along K), each output NaN-poisoned before its launch
and compared with float64 (the sweep's check, its workspace zeroed by the worker); an epilogue after
the shared sums; through gen.kernel (a workspace per stream) the same bits twice, right against
float64; its first call captured in a CUDA graph replays right, launches on one stream with new
inputs each are each right (a flag left up would add the last launch's sums), and the same launch
on two streams at once keeps each stream's sums apart; and the sanitizer finds nothing in one
variant."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.call.kernels import Kernel
from gen.core.results import Status
from gen.families import get_family

from .test_gpu import _only_skipped_and_ok, run, runnable
from .test_gpu_call_path import _error, _torch
from .test_gpu_wgmma_split import _sm90, assert_the_same_bits_twice

pytestmark = pytest.mark.gpu

SIZES = ["999x1001x1003:1008,1008,1001", "77x45x33:40,48,45", "16x6144x4096", "2000x7000x3000"]  # K of one step: whole tiles
TILES = {"dtype": ["bf16"], "bm": ["64", "128", "256"], "bn": ["64", "128", "256"], "consumers": ["1", "2"],
         "schedule": ["streamk"], "stages": ["4"], "store": ["direct", "bulk"]}
FUSED = {"dtype": ["f16"], "bm": ["128"], "bn": ["256"], "schedule": ["streamk"], "stages": ["3"],
         "store": ["direct", "bulk"], "out": ["same", "f32"], "bias": ["col"], "act": ["gelu-tanh"],
         "residual": ["add"], "scale": ["alpha-beta"]}


def test_every_stream_k_tile_is_right_at_odd_short_k_thin_and_many_tile_shapes(tmp_path: Path) -> None:
    _sm90()
    for name, params, least in (("tiles", TILES, 30), ("fused", FUSED, 10)):
        rows = run(tmp_path / name, "wgmma", params, SIZES)
        assert _only_skipped_and_ok(rows) == runnable("wgmma", params, SIZES) > least, name
        for row in rows.values():
            if row.status == Status.OK:
                assert row.error <= row.tolerance and row.checks >= 1


@pytest.mark.parametrize("size", ["2000x7000x3000", "1000x1000x1000"])
def test_the_same_stream_k_launch_twice_gives_the_same_bits(size: str) -> None:
    _sm90()
    wgmma = get_family("wgmma")
    for cluster in (1, 2):  # clusters of two: a worker is a cluster, each block adding its own tile's sums
        variant = wgmma.variant({"dtype": "bf16", "schedule": "streamk", "store": "direct", "cluster": cluster})
        assert_the_same_bits_twice(wgmma, variant, size)


def test_the_sanitizer_finds_nothing_in_a_stream_k_variant(tmp_path: Path) -> None:
    _sm90()
    params = {"dtype": ["bf16"], "bm": ["128"], "bn": ["128"], "consumers": ["2"], "stages": ["3"],
              "schedule": ["streamk"], "split": ["1"], "store": ["direct", "bulk"], "cluster": ["1", "2"]}
    rows = run(tmp_path, "wgmma", params, ["77x45x200:200,48,45", "200x136x520"], sanitize=True)
    assert [row.status for row in rows.values()] == [Status.OK] * 8, {k: (r.status, r.message) for k, r in rows.items()}


def test_a_stream_k_kernel_first_called_in_a_graph_replays_right_and_two_streams_keep_their_sums_apart() -> None:
    _sm90()
    torch = _torch()
    wgmma = get_family("wgmma")
    shape = wgmma.parse_shape("1000x1000x1024")  # 32 tiles of 16 steps: every tile shared by about four blocks
    kernel = Kernel(wgmma, wgmma.variant({"dtype": "bf16", "schedule": "streamk", "store": "direct"}), shape)
    a = torch.randn(shape.m, shape.k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(shape.k, shape.n, device="cuda", dtype=torch.bfloat16)
    tolerance = wgmma.problem.tolerance("bf16", shape)
    c = torch.full((shape.m, shape.n), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the first call: its workspace is made inside the capture
        kernel(a, b, c)
    for _ in range(2):
        a.copy_(torch.randn(shape.m, shape.k, device="cuda", dtype=torch.bfloat16))
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert _error(torch, c, a, b) <= tolerance
    for _ in range(2):  # one stream, new inputs each launch: a flag left up would add the last launch's sums
        a.copy_(torch.randn(shape.m, shape.k, device="cuda", dtype=torch.bfloat16))
        c.fill_(float("nan"))
        kernel(a, b, c)
        torch.cuda.synchronize()
        assert _error(torch, c, a, b) <= tolerance
    streams = [torch.cuda.Stream() for _ in range(2)]
    outputs = [torch.full((shape.m, shape.n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in streams]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    for _ in range(10):  # the same launch on two streams at once, each into its own output
        for stream, out in zip(streams, outputs):
            with torch.cuda.stream(stream):
                kernel(a, b, out)
    torch.cuda.synchronize()
    assert [_error(torch, out, a, b) <= tolerance for out in outputs] == [True, True]
