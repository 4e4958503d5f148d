"""The ceilings: rates measured once per GPU model that throughput is compared with, measured in the
GPU worker process and kept on disk."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
import pycuda.driver as cuda

from ..core.paths import cache_dir
from ..core.results import GpuModel, TimingOptions
from ..families.family import COPY_BANDWIDTH, GEMM_F32, GEMM_F64
from .timing import event_samples

CEILING_SAMPLES = TimingOptions(min_samples=10, max_samples=20, target_rsd=0.0, warmup=3, budget_s=30.0)


def known_ceilings(model: GpuModel, report: Callable[[str], None] = lambda phase: None) -> dict[str, float]:
    """Copy bandwidth and cuBLAS rates of this GPU model, measured once and kept on disk."""
    path = cache_dir() / "ceilings.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    if str(model) not in known:
        report("measuring ceilings")
        known[str(model)] = measure_ceilings()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1))
    return known[str(model)]


def measure_ceilings() -> dict[str, float]:
    """Each ceiling of gen.families.family.CEILINGS that can be measured here: copy bandwidth always, the
    cuBLAS rates when CuPy or PyTorch is importable."""
    ceilings = {COPY_BANDWIDTH.key: copy_bandwidth()}
    ceilings.update(gemm_rates())
    return ceilings


def copy_bandwidth(size: int = 1 << 30) -> float:
    source, target = cuda.mem_alloc(size), cuda.mem_alloc(size)
    cuda.memset_d32(source, 0x3F800000, size // 4)
    samples = event_samples(lambda: cuda.memcpy_dtod_async(target, source, size), CEILING_SAMPLES,
                            before_each=lambda salt: None)
    return 2 * size / (float(np.median(samples)) / 1e3) / 1e9


def gemm_rates(n: int = 8192) -> dict[str, float]:
    """cuBLAS through CuPy or PyTorch (TF32 off), timed on the default stream both libraries use."""
    vendor = vendor_gemm()
    if vendor is None:
        return {}
    random_matrix, multiply = vendor
    rates = {}
    for ceiling, dtype in ((GEMM_F32, "f32"), (GEMM_F64, "f64")):
        operands = (random_matrix(n, dtype), random_matrix(n, dtype))
        samples = event_samples(lambda: multiply(*operands), CEILING_SAMPLES, before_each=lambda salt: None)
        rates[ceiling.key] = 2 * n**3 / (float(np.median(samples)) / 1e3) / 1e12
    return rates


def vendor_gemm() -> tuple[Callable[[int, str], Any], Callable[[Any, Any], Any]] | None:
    """(random n x n matrix of a dtype, matrix product) from CuPy, else PyTorch (TF32 off), else None."""
    try:
        import cupy

        types = {"f32": cupy.float32, "f64": cupy.float64}
        return (lambda n, dtype: cupy.random.uniform(-1, 1, (n, n)).astype(types[dtype]), cupy.matmul)
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    types = {"f32": torch.float32, "f64": torch.float64}
    return (lambda n, dtype: torch.rand(n, n, device="cuda", dtype=types[dtype]) * 2 - 1, torch.matmul)
