"""wgmma's split-K and its thin and narrow tiles on a real GPU (marker `gpu`; sm_90 only): splits of
2 to 8 blocks per tile, tiles of 64 and 128 rows and columns, both store paths, an epilogue after the
split's sum, right at odd shapes with padded rows, a shape whose K is one step (most blocks of a
cluster multiply only zeros) and a thin model shape (16 tokens), each output NaN-poisoned before its
launch and compared with float64 (the sweep's check); the same split launch twice gives the same
bits; the sanitizer finds nothing in one split variant nor in thin tiles (16 and 32 rows); and every variant the family names likeliest
best at thin, few-tile and odd shapes (a tune's first picks, gen.matmul's untuned choice) is right."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.call.kernels import Kernel
from gen.core.results import Status
from gen.families import get_family
from gen.families.family import Family
from gen.families.variant import Variant

from .test_gpu import _only_skipped_and_ok, run, runnable, skip_unless_gpu
from .test_gpu_call_path import _torch

pytestmark = pytest.mark.gpu

SIZES = ["999x1001x1003:1008,1008,1001", "77x45x33:40,48,45", "16x6144x4096"]
TILES = {"bm": ["64", "128"], "bn": ["64", "128"], "consumers": ["1", "2"], "schedule": ["grid"], "stages": ["3"],
         "cluster": ["1"]}
SPLITS = {**TILES, "dtype": ["bf16"], "split": ["1", "2", "4", "8"], "store": ["direct", "bulk"]}
HALF = {**TILES, "dtype": ["f16"], "out": ["same", "f32"], "split": ["4"], "store": ["bulk"]}
FUSED = {"dtype": ["bf16"], "bm": ["128", "256"], "bn": ["128"], "schedule": ["grid"], "split": ["2", "8"],
         "specialize": ["producer", "none"], "store": ["direct", "bulk"], "bias": ["col"], "act": ["gelu-tanh"],
         "residual": ["add"], "scale": ["alpha-beta"]}
# thin tiles: 16 or 32 rows of A a stage, wgmma's m64 reading on into B's (those sums dropped); at the
# odd shape 63 and 32 tiles one above the other, the last partly past M
THIN = {"dtype": ["f16", "bf16"], "out": ["same", "f32"], "bm": ["16", "32"], "bn": ["64", "128", "256"],
        "consumers": ["1"], "stages": ["4", "12"], "schedule": ["grid", "persistent"], "store": ["direct"],
        "split": ["1", "2"]}
THIN_FUSED = {**THIN, "dtype": ["bf16"], "out": ["same"], "bn": ["128"], "stages": ["8"], "bias": ["col"],
              "act": ["gelu-tanh", "silu"], "residual": ["add"], "scale": ["alpha-beta"]}


def _sm90() -> None:
    skip_unless_gpu(lambda cc: cc == (9, 0), "the wgmma family runs on sm_90 GPUs (H100, H200) only")


def test_every_split_and_tile_is_right_at_odd_short_k_and_thin_shapes(tmp_path: Path) -> None:
    _sm90()
    for name, params, least in (("splits", SPLITS, 100), ("half", HALF, 20), ("fused", FUSED, 20), ("thin", THIN, 100),
                                ("thin-fused", THIN_FUSED, 20)):
        rows = run(tmp_path / name, "wgmma", params, SIZES)
        assert _only_skipped_and_ok(rows) == runnable("wgmma", params, SIZES) > least, name
        for row in rows.values():
            if row.status == Status.OK:
                assert row.error <= row.tolerance and row.checks >= 1


def test_the_same_split_launch_twice_gives_the_same_bits() -> None:
    _sm90()
    wgmma = get_family("wgmma")
    variant = wgmma.variant({"dtype": "bf16", "bm": 64, "bn": 128, "consumers": 1, "schedule": "grid", "split": 8})
    assert_the_same_bits_twice(wgmma, variant, "16x6144x4096")


def assert_the_same_bits_twice(family: Family, variant: Variant, size: str) -> None:
    """Two launches of a bfloat16 GEMM variant on the same inputs, each output NaN-poisoned first, give
    the same bits, right against float64."""
    torch = _torch()
    shape = family.parse_shape(size)
    kernel = Kernel(family, variant, shape)
    a = torch.randn(shape.m, shape.k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(shape.k, shape.n, device="cuda", dtype=torch.bfloat16)
    outputs = []
    for _ in range(2):
        c = torch.full((shape.m, shape.n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(a, b, c)
        outputs.append(c)
    torch.cuda.synchronize()
    assert torch.equal(outputs[0].view(torch.int16), outputs[1].view(torch.int16))
    reference = a.double() @ b.double()
    assert float((outputs[0].double() - reference).norm() / reference.norm()) <= family.problem.tolerance("bf16", shape)
    assert not outputs[0].isnan().any()


def test_the_sanitizer_finds_nothing_in_a_split_variant_on_either_store_path(tmp_path: Path) -> None:
    _sm90()
    params = {"dtype": ["bf16"], "bm": ["128"], "bn": ["128"], "consumers": ["2"], "stages": ["3"],
              "schedule": ["grid"], "split": ["2"], "store": ["direct", "bulk"], "cluster": ["1"]}
    rows = run(tmp_path, "wgmma", params, ["77x45x200:200,48,45"], sanitize=True)
    assert [row.status for row in rows.values()] == [Status.OK] * 2, {k: (r.status, r.message) for k, r in rows.items()}


def test_the_sanitizer_finds_nothing_in_a_thin_tile_fused_or_split(tmp_path: Path) -> None:
    """wgmma's m64 reads past a thin tile's rows of A into the stage's B: inside shared memory, and none of
    those rows is stored."""
    _sm90()
    params = {"dtype": ["bf16"], "bm": ["16"], "bn": ["64"], "consumers": ["1"], "stages": ["4"], "schedule": ["grid"],
              "store": ["direct"], "split": ["1", "2"], "bias": ["col"], "act": ["gelu-tanh"], "cluster": ["1"]}
    rows = run(tmp_path, "wgmma", params, ["77x45x200:200,48,45"], sanitize=True)
    assert [row.status for row in rows.values()] == [Status.OK] * 2, {k: (r.status, r.message) for k, r in rows.items()}


def test_every_likely_best_variant_is_right_at_thin_few_tile_and_odd_shapes() -> None:
    _sm90()
    torch = _torch()
    wgmma = get_family("wgmma")
    for size in ("16x6144x4096", "1x4096x14336", "16x28672x4096", "16x10240x8192", "128x4096x14336", "512x6144x4096",
                 "512x10240x8192", "1000x1000x1000", "999x1001x1003:1008,1008,1001", "77x45x33:40,48,45"):
        shape = wgmma.parse_shape(size)
        a = torch.randn(shape.m, shape.lda, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(shape.k, shape.ldb, device="cuda", dtype=torch.bfloat16)
        reference = a[:, :shape.k].double() @ b[:, :shape.n].double()
        for variant in wgmma.likely_best(shape, "bf16"):
            c = torch.full((shape.m, shape.ldc), float("nan"), device="cuda", dtype=torch.bfloat16)
            Kernel(wgmma, variant, shape)(a, b, c)
            torch.cuda.synchronize()
            error = float((c[:, :shape.n].double() - reference).norm() / reference.norm())
            assert error <= wgmma.problem.tolerance("bf16", shape), (size, variant.name, error)
            assert not c[:, :shape.n].isnan().any(), (size, variant.name)
