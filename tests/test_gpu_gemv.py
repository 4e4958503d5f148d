"""gemv on a real GPU (marker `gpu`; sm_90, where its clusters run): a slice of its space and every
variant it names likeliest best, right at thin model shapes, odd N and K, a tiny shape and rows of B off
16-byte multiples, each output NaN-poisoned before its launch and compared with float64, and so is every
fused epilogue; the same split launch twice gives the same bits; the sanitizer finds nothing in a split
variant, plain or fused; and gen.matmul takes gemv at 1x4096x14336 in bfloat16 and matches torch.matmul."""

from __future__ import annotations

from pathlib import Path

import pytest

import gen
from gen.call.kernels import Kernel
from gen.call.matmul import matmul_family
from gen.core.results import Status
from gen.families import get_family

from .test_gpu import _only_skipped_and_ok, run, runnable, skip_unless_gpu
from .test_gpu_call_path import _torch
from .test_gpu_wgmma_split import assert_the_same_bits_twice

pytestmark = pytest.mark.gpu

SIZES = ["1x6144x4096", "3x1000x1003", "8x4096x14336", "1x8x8", "5x77x45"]
SLICE = {"dtype": ["bf16"], "rows": ["1", "8"], "bn": ["64", "256"], "kgroups": ["8", "16"], "unroll": ["4"],
         "split": ["1", "4"], "copy": ["vector", "scalar"]}
HALF = {"dtype": ["f16"], "rows": ["4"], "bn": ["128"], "kgroups": ["4", "16"], "unroll": ["2", "8"],
        "split": ["2", "8"], "copy": ["vector", "scalar"]}
# The epilogues (wgmma's): every activation with every other part, in both types, one and eight rows;
# then each part alone on the element-by-element path
EPILOGUES = {"dtype": ["bf16", "f16"], "rows": ["1", "8"], "bn": ["64"], "kgroups": ["16"], "unroll": ["4"],
             "split": ["4"], "scale": ["alpha-beta"], "bias": ["col"], "act": ["relu", "gelu-tanh", "gelu-erf", "silu"],
             "residual": ["add"]}
PARTS = {"dtype": ["bf16"], "rows": ["4"], "bn": ["128"], "kgroups": ["8"], "unroll": ["2"], "copy": ["scalar"],
         "scale": ["none", "alpha"], "bias": ["none", "col"], "act": ["gelu-tanh"]}
GEMV = get_family("gemv")


def _sm90() -> None:
    skip_unless_gpu(lambda cc: cc[0] >= 9, "gemv's clusters need an sm_90 GPU (H100, H200)")


def test_a_slice_of_the_space_is_right_at_thin_odd_and_tiny_shapes(tmp_path: Path) -> None:
    _sm90()
    for name, params, least in (("bf16", SLICE, 40), ("f16", HALF, 20), ("epilogues", EPILOGUES, 40), ("parts", PARTS, 15)):
        rows = run(tmp_path / name, "gemv", params, SIZES)
        assert _only_skipped_and_ok(rows) == runnable("gemv", params, SIZES) > least, name
        for row in rows.values():
            if row.status == Status.OK:
                assert row.error <= row.tolerance and row.checks >= 1


def test_every_likely_best_variant_is_right_with_its_output_poisoned_first() -> None:
    _sm90()
    torch = _torch()
    for size in SIZES:
        shape = GEMV.parse_shape(size)
        a = torch.randn(shape.m, shape.lda, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(shape.k, shape.ldb, device="cuda", dtype=torch.bfloat16)
        reference = a[:, :shape.k].double() @ b[:, :shape.n].double()
        variants = GEMV.likely_best(shape, "bf16")
        assert variants, size
        for variant in [*variants, GEMV.runnable(GEMV.variant({"dtype": "bf16", "split": 8, "copy": "scalar"}), shape)]:
            c = torch.full((shape.m, shape.ldc), float("nan"), device="cuda", dtype=torch.bfloat16)
            Kernel(GEMV, variant, shape)(a, b, c)
            torch.cuda.synchronize()
            error = float((c[:, :shape.n].double() - reference).norm() / reference.norm())
            assert error <= GEMV.problem.tolerance("bf16", shape), (size, variant.name, error)
            assert not c.isnan().any(), (size, variant.name)


def test_the_same_split_launch_twice_gives_the_same_bits() -> None:
    _sm90()
    variant = GEMV.variant({"dtype": "bf16", "rows": 4, "kgroups": 32, "unroll": 8, "split": 8})
    assert_the_same_bits_twice(GEMV, variant, "4x8192x28672")


def test_the_sanitizer_finds_nothing_in_a_split_variant_on_either_read_path(tmp_path: Path) -> None:
    _sm90()
    params = {"dtype": ["bf16"], "rows": ["4"], "bn": ["64"], "kgroups": ["4"], "unroll": ["2"], "split": ["4"],
              "copy": ["vector", "scalar"]}
    rows = run(tmp_path, "gemv", params, ["3x77x200:200,80,77"], sanitize=True)
    assert [row.status for row in rows.values()] == [Status.OK] * 2, {k: (r.status, r.message) for k, r in rows.items()}
    fused = {**params, "copy": ["vector"], "scale": ["alpha-beta"], "bias": ["col"], "act": ["gelu-tanh"], "residual": ["add"]}
    rows = run(tmp_path / "fused", "gemv", fused, ["3x77x200:200,80,77"], sanitize=True)
    assert [row.status for row in rows.values()] == [Status.OK], {k: (r.status, r.message) for k, r in rows.items()}


def test_gen_matmul_takes_gemv_for_one_token_and_matches_torch() -> None:
    _sm90()
    torch = _torch()
    shape = GEMV.parse_shape("1x4096x14336")
    a = torch.randn(1, 14336, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16)
    c = gen.matmul(a, b)
    expected = torch.matmul(a, b)
    torch.cuda.synchronize()
    chosen = matmul_family("bfloat16", str(shape), "bf16", "bfloat16", (a.data_ptr(), b.data_ptr(), c.data_ptr()),
                           "%d.%d" % torch.cuda.get_device_capability(), "")
    assert chosen == "gemv" and c.dtype == torch.bfloat16 and c.shape == (1, 4096)
    difference = float((c.double() - expected.double()).norm() / expected.double().norm())
    assert difference <= GEMV.problem.tolerance("bf16", shape)
