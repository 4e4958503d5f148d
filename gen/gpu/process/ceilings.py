"""The ceilings: rates measured once per GPU model that throughput is compared with, measured in the
GPU worker process and kept in `ceilings.json` in the cache folder.

A ceiling is measured the first time a job asks for it: by its family's own `measure`, or, for
tilegen's (COPY_BANDWIDTH and cuBLAS's GEMM in f32, f64, f16, bf16 and FP8), by the measurers here, found
by key. One that cannot be measured (a family's without `measure`, the cuBLAS rates without cuBLAS's
library, CuPy or PyTorch) has no rate, and its rows no share.

The file maps a GPU model's `key` (its fields) to {ceiling key: rate}. tilegen 0.1 and 0.2 keyed
it by the model's display string: such entries are still read, and left as they are.

Importing this module needs no pycuda (the measurers import gen.gpu.runtime when they run), so
that the file and the family's own measurers work in a stand-in worker too.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ...core.errors import UsageError
from ...core.own_files import open_own, write_atomically
from ...core.paths import cache_dir
from ...core.results import GpuModel
from ...core.timing import CEILING_SAMPLES
from ...families.problem import (COPY_BANDWIDTH, GEMM_BF16, GEMM_F16, GEMM_F32, GEMM_F64, GEMM_FP8, NUMPY_DTYPE,
                                Ceiling)



def ceilings_path() -> Path:
    return cache_dir() / "ceilings.json"


class Ceilings:
    """The ceilings of one GPU model: read from the file, each measured in this process when first
    asked for and not there, then written to it."""

    def __init__(self, model: GpuModel, path: Path | None = None):
        self.model, self.path = model, path or ceilings_path()
        self._rates: dict[str, float] | None = None
        self._unmeasurable: set[str] = set()  # asked for already: not measured again in this process

    def rate(self, ceiling: Ceiling, report: Callable[[str], None] = lambda phase: None) -> float | None:
        """The ceiling's rate on this model, measured now if it is not known yet; None when it
        cannot be measured."""
        if self._rates is None:
            self._rates = model_entry(_read(self.path), self.model)
        if ceiling.key not in self._rates and ceiling.key not in self._unmeasurable:
            measure = ceiling.measure or MEASURERS.get(ceiling.key)
            if measure is not None:
                report(f"measuring the ceiling {ceiling.key}")
            rate = measure() if measure is not None else None
            if rate is None:
                self._unmeasurable.add(ceiling.key)
            else:
                self._rates[ceiling.key] = _checked(ceiling, rate)
                self._write(ceiling.key, self._rates[ceiling.key])
        return self._rates.get(ceiling.key)

    def _write(self, key: str, rate: float) -> None:
        """Add one rate to the file as it is now: the workers of other GPUs write it too (one at a
        time, under a lock), and a reader sees it whole (it is replaced, never rewritten)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(f"{self.path.name}.lock")
        with os.fdopen(open_own(lock, os.O_RDWR | os.O_CREAT, "the ceilings file's lock"), "r+b") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            known = _read(self.path)
            known.setdefault(self.model.key, {})[key] = rate
            write_atomically(self.path, json.dumps(known, indent=1).encode())


def model_entry(known: dict[str, Any], model: GpuModel) -> dict[str, float]:
    """The rates a ceilings file holds for `model`: under its key, and under its display string in
    a file of tilegen 0.1 or 0.2 (the key's win where both have one)."""
    rates: dict[str, float] = {}
    for key, entry in known.items():
        if isinstance(entry, dict) and GpuModel.from_display(key) == model:
            rates.update(entry)
    rates.update(known.get(model.key, {}))
    return rates


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _checked(ceiling: Ceiling, rate: Any) -> float:
    """A measured rate as a float; UsageError for anything but a positive, finite number."""
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not (math.isfinite(rate) and rate > 0):
        raise UsageError(f"the ceiling {ceiling.key!r} measured {rate!r}: its measure must return the rate in "
                         f"{ceiling.unit}, a positive number")
    return float(rate)


# ---- tilegen's own ceilings, measured in the GPU worker process -----------------------------------

def copy_bandwidth(size: int = 1 << 30) -> float:
    """Device-to-device copy of `size` bytes, counting bytes read and written, in GB/s."""
    from ..runtime.launch import copy, empty, fill
    from .timing import event_samples

    source, target = empty((size // 4,), np.float32), empty((size // 4,), np.float32)
    fill(source, 1.0)
    samples = event_samples(lambda: copy(target, source), CEILING_SAMPLES, before_each=lambda salt: None)
    return 2 * size / (float(np.median(samples)) / 1e3) / 1e9


def gemm_rate(dtype: str, n: int = 8192) -> float | None:
    """cuBLAS GEMM at n³ in TFLOP/s, timed on the default stream: called through its C API where the
    library is found, else through CuPy or PyTorch (TF32 off); None without any of them."""
    from .timing import event_samples

    with vendor_product(dtype, n) as product:
        if product is None:
            return None
        samples = event_samples(product, CEILING_SAMPLES, before_each=lambda salt: None)
    return 2 * n**3 / (float(np.median(samples)) / 1e3) / 1e12


@contextlib.contextmanager
def vendor_product(dtype: str, n: int) -> Iterator[Callable[[], Any] | None]:
    """One launch of an n x n x n product of random matrices by cuBLAS: through ctypes on the library
    the CUDA toolkit or NVIDIA's wheels install (no import of PyTorch, seconds of a fresh machine's
    first tune), else CuPy's or PyTorch's; None where none serves."""
    from ..runtime import cublas

    if dtype in cublas.TYPES and cublas.available():
        from ..runtime.launch import empty, to_device

        a, b = to_device(random_operand(dtype, n, 0)), to_device(random_operand(dtype, n, 1))
        with contextlib.ExitStack() as stack:
            try:
                product = stack.enter_context(cublas.product(dtype, a, b, empty((n, n), a.dtype)))
                product()  # a first launch: a cuBLAS this driver cannot run leaves it to the libraries below
            except RuntimeError:
                product = None
            if product is not None:
                yield product
                return
    vendor = vendor_gemm(dtype)
    yield None if vendor is None else functools.partial(vendor[1], vendor[0](n), vendor[0](n))


def random_operand(dtype: str, n: int, seed: int) -> np.ndarray:
    """An n x n matrix uniform in [-1, 1) in `dtype`: bfloat16 as its bits, float32's top half (no
    ml_dtypes needed)."""
    values = np.random.default_rng(seed).random((n, n), dtype=np.float32) * 2 - 1
    if dtype == "bf16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(NUMPY_DTYPE[dtype])


def vendor_gemm(dtype: str) -> tuple[Callable[[int], Any], Callable[[Any, Any], Any]] | None:
    """(random n x n matrix of `dtype`, matrix product) from CuPy, else PyTorch (TF32 off), else None.
    CuPy has no bfloat16."""
    types = {"f32": "float32", "f64": "float64", "f16": "float16"}
    try:
        if dtype in types:  # CuPy is not imported for another type: a second of a worker's first job
            import cupy

            return (lambda n: cupy.random.uniform(-1, 1, (n, n)).astype(types[dtype]), cupy.matmul)
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    if dtype == "e4m3":  # torch._scaled_mm: B by columns, per-tensor scales, bfloat16 out
        one = torch.ones((), device="cuda")
        return (lambda n: (torch.rand(n, n, device="cuda") * 2 - 1).to(torch.float8_e4m3fn),
                lambda a, b: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    types = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
    return (lambda n: torch.rand(n, n, device="cuda", dtype=types[dtype]) * 2 - 1, torch.matmul)


# The measurer of each of tilegen's own ceilings, by key: None from one means it cannot be measured here.
MEASURERS: dict[str, Callable[[], float | None]] = {
    COPY_BANDWIDTH.key: copy_bandwidth,
    GEMM_F32.key: lambda: gemm_rate("f32"),
    GEMM_F64.key: lambda: gemm_rate("f64"),
    GEMM_F16.key: lambda: gemm_rate("f16"),
    GEMM_BF16.key: lambda: gemm_rate("bf16"),
    GEMM_FP8.key: lambda: gemm_rate("e4m3"),
}
