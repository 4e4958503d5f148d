"""The FP8 GEMM (fp8gemm) on a real GPU (marker `gpu`; sm_90 only): both FP8 types, every output type
and every scaling, on both store paths and three schedules, with and without an epilogue, right at
odd, tiny and many-tile shapes: each output NaN-poisoned before its launch and compared with the
float64 product of the dequantised inputs, scaled (the sweep's check); compute-sanitizer clean on a
variant of each scaling; and gen.matmul on PyTorch's FP8 tensors beside torch._scaled_mm."""

from __future__ import annotations

from pathlib import Path

import pytest

import gen
from gen.call.kernels import Kernel
from gen.core.results import Status
from gen.families import get_family

from .test_gpu import _only_skipped_and_ok, run, runnable, skip_unless_gpu

pytestmark = pytest.mark.gpu

# Odd M, N and K with rows padded to 16 bytes (lda and ldb multiples of 16 one-byte elements, TMA's
# demand; C's rows 1001 apart: bulk stores fall back to checked ones); a problem smaller than every
# tile and than one step of K (128); more tiles than an H100 has SMs, whole tiles only.
SIZES = ["999x1001x1003:1008,1008,1001", "77x45x33:48,48,45", "1000x2048x512"]
FIXED = {"bm": ["128"], "bn": ["128"], "consumers": ["2"], "stages": ["4"], "split": ["1"]}
EVERY_TYPE = {**FIXED, "dtype": ["e4m3", "e5m2"], "out": ["bf16", "f16", "f32"], "scaling": ["none", "tensor", "rowcol"],
              "store": ["direct", "bulk"], "schedule": ["persistent"]}
SCHEDULES = {**FIXED, "dtype": ["e4m3"], "scaling": ["tensor", "rowcol"], "schedule": ["grid", "pingpong"],
             "store": ["direct", "bulk"], "bn": ["128", "256"], "cluster": ["1", "2"]}
# Split-K: the scales and the epilogue after the cluster's sum, both tile widths, both stores.
SPLITS = {**FIXED, "dtype": ["e4m3"], "out": ["bf16", "f32"], "scaling": ["tensor", "rowcol"], "schedule": ["grid"],
          "split": ["2", "4"], "store": ["direct", "bulk"], "bn": ["128", "256"], "stages": ["3"]}
SPLIT_EPILOGUES = {**FIXED, "dtype": ["e5m2"], "scaling": ["rowcol"], "schedule": ["grid"], "split": ["2"],
                   "scale": ["alpha-beta"], "act": ["silu"], "residual": ["add"], "store": ["direct", "bulk"]}
# DeepGEMM's block scales: K = 1003 ends in a partial block, K = 33 is one; both splits' shares.
BLOCKS = {**FIXED, "dtype": ["e4m3", "e5m2"], "out": ["bf16", "f32"], "scaling": ["block"],
          "schedule": ["persistent", "grid"], "split": ["1", "2"], "store": ["direct", "bulk"]}
BLOCK_EPILOGUES = {**FIXED, "bm": ["64"], "consumers": ["1"], "scaling": ["block"], "scale": ["alpha-beta"],
                   "act": ["silu"], "residual": ["add"], "store": ["direct", "bulk"]}
EPILOGUES = {**FIXED, "dtype": ["e4m3", "e5m2"], "out": ["bf16", "f32"], "scaling": ["tensor", "rowcol"],
             "scale": ["alpha-beta"], "act": ["relu", "silu"], "residual": ["add"], "store": ["bulk"]}


def _sm90() -> None:
    skip_unless_gpu(lambda cc: cc == (9, 0), "the fp8gemm family runs on sm_90 GPUs (H100, H200) only")


def test_every_fp8_type_output_and_scaling_is_right_at_odd_tiny_and_many_tile_shapes(tmp_path: Path) -> None:
    _sm90()
    for name, params, least in (("types", EVERY_TYPE, 100), ("schedules", SCHEDULES, 30), ("epilogues", EPILOGUES, 20),
                                 ("splits", SPLITS, 60), ("split epilogues", SPLIT_EPILOGUES, 4),
                                 ("blocks", BLOCKS, 60), ("block epilogues", BLOCK_EPILOGUES, 4)):
        rows = run(tmp_path / name, "fp8gemm", params, SIZES)
        assert _only_skipped_and_ok(rows) == runnable("fp8gemm", params, SIZES) > least
        for row in rows.values():
            if row.status == Status.OK:
                assert row.error <= row.tolerance and row.checks >= 1


def test_compute_sanitizer_finds_nothing_in_a_variant_of_each_scaling(tmp_path: Path) -> None:
    _sm90()
    params = {**FIXED, "scaling": ["none", "tensor", "rowcol"], "store": ["bulk"], "schedule": ["persistent"]}
    rows = run(tmp_path, "fp8gemm", params, ["300x200x160"], sanitize=True)
    assert _only_skipped_and_ok(rows) == 3
    ran = {row.name: (row.hazards, row.message) for row in rows.values()}
    assert all(hazards and not any(hazards.values()) for hazards, _ in ran.values()), ran


def test_the_sanitizer_finds_nothing_in_split_and_block_scaled_variants(tmp_path: Path) -> None:
    _sm90()
    split = {**FIXED, "scaling": ["rowcol"], "schedule": ["grid"], "split": ["2"], "store": ["direct", "bulk"]}
    rows = run(tmp_path / "split", "fp8gemm", split, ["300x200x160"], sanitize=True)
    block = {**FIXED, "scaling": ["block"], "schedule": ["persistent"], "store": ["bulk"]}
    rows.update(run(tmp_path / "block", "fp8gemm", block, ["300x200x160"], sanitize=True))
    assert _only_skipped_and_ok(rows) == 3
    ran = {row.name: (row.hazards, row.message) for row in rows.values()}
    assert all(hazards and not any(hazards.values()) for hazards, _ in ran.values()), ran


def test_the_same_split_launch_twice_gives_the_same_bits() -> None:
    _sm90()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    family = get_family("fp8gemm")
    variant = family.variant({"bm": 128, "bn": 128, "schedule": "grid", "split": 4, "scaling": "rowcol"})
    m, n, k = 200, 384, 4096
    kernel = Kernel(family, variant, family.parse_shape(f"{m}x{n}x{k}"))
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
    b = (torch.rand(n, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)  # N x K, as the kernel takes B
    scale_a, scale_b = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
    outputs = []
    for _ in range(2):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(a, b, c, scale_a, scale_b)
        outputs.append(c)
    torch.cuda.synchronize()
    assert torch.equal(outputs[0].view(torch.int16), outputs[1].view(torch.int16))
    reference = (a.double() @ b.double().t()) * scale_a.double()[:, None] * scale_b.double()[None, :]
    assert not outputs[0].isnan().any()
    assert float((outputs[0].double() - reference).norm() / reference.norm()) < 1e-2


def test_gen_matmul_multiplies_torch_fp8_tensors_as_torch_scaled_mm_does() -> None:
    _sm90()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    m, n, k = 1000, 2000, 1008  # odd M; K a multiple of 16 (dense rows of 16 bytes)
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
    b = (torch.rand(n, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn).t()  # K x N by columns
    scale_a, scale_b = torch.tensor(0.5, device="cuda"), torch.tensor(1.5, device="cuda")
    got = gen.matmul(a, b, scale_a=scale_a, scale_b=scale_b)
    assert got.dtype == torch.bfloat16 and got.shape == (m, n)
    vendor = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    reference = (a.double() @ b.double()) * 0.75
    for result in (got, vendor):
        assert float(torch.linalg.norm(result.double() - reference) / torch.linalg.norm(reference)) < 2e-2
    rows_a, columns_b = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    gen.matmul(a, b, out, scale_a=rows_a, scale_b=columns_b)
    reference = (a.double() @ b.double()) * rows_a.double() * columns_b.double()
    assert not torch.isnan(out).any()
    assert float(torch.linalg.norm(out.double() - reference) / torch.linalg.norm(reference)) < 2e-2
    unscaled = gen.matmul(a, b)  # no scales: bfloat16 out
    assert unscaled.dtype == torch.bfloat16 and not unscaled.isnan().any()
    few_tiles_a = (torch.rand(500, 14336, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)  # untuned: split-K
    few_tiles_b = (torch.rand(4096, 14336, device="cuda") * 2 - 1).to(torch.float8_e4m3fn).t()
    got = gen.matmul(few_tiles_a, few_tiles_b, scale_a=scale_a, scale_b=scale_b)
    reference = (few_tiles_a.double() @ few_tiles_b.double()) * 0.75
    assert not got.isnan().any()
    assert float(torch.linalg.norm(got.double() - reference) / torch.linalg.norm(reference)) < 2e-2


def _block_scaled(torch, m: int, n: int, k: int):
    """FP8 a (M x K) and b (K x N by columns) with DeepGEMM's block scales as torch._scaled_mm takes them
    (a's M x K/128 column-major, b's the transpose of w's row-major N/128 x K/128), and their float64
    product, dequantised block by block."""
    blocks_k, blocks_n = -(-k // 128), -(-n // 128)
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
    w = (torch.rand(n, k, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
    scale_a = (torch.rand(m, blocks_k, device="cuda") + 0.5).t().contiguous().t()
    scale_w = torch.rand(blocks_n, blocks_k, device="cuda") + 0.5
    spread_a = scale_a.double().repeat_interleave(128, 1)[:, :k]
    spread_w = scale_w.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
    reference = (a.double() * spread_a) @ (w.double() * spread_w).t()
    return a, w.t(), scale_a, scale_w.t(), reference


def test_gen_matmul_takes_block_scales_as_torch_scaled_mm_does() -> None:
    _sm90()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
    a, b, scale_a, scale_b, reference = _block_scaled(torch, 1000, 2000, 1024)
    out = torch.full((1000, 2000), float("nan"), device="cuda", dtype=torch.bfloat16)
    gen.matmul(a, b, out, scale_a=scale_a, scale_b=scale_b)
    assert not out.isnan().any()
    assert float(torch.linalg.norm(out.double() - reference) / torch.linalg.norm(reference)) < 2e-2
    vendor = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    assert float(torch.linalg.norm(vendor.double() - reference) / torch.linalg.norm(reference)) < 2e-2
