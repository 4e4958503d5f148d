"""cuBLAS's GEMM through its C API (ctypes), on the library cuda.pathfinder finds in NVIDIA's wheels or
CUDA_HOME: the ceilings' vendor GEMM without importing PyTorch or CuPy (seconds of a fresh machine's
first tune). Row-major device arrays of the current context; bfloat16 as its bits in uint16."""

from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import Any, Callable, Iterator

# cublasGemmEx's data types (library_types.h) and compute types (cublas_api.h): C = A B with float32
# sums (float64 for f64), as PyTorch's matmul asks for
CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_16BF = 0, 1, 2, 14
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F = 68, 70
TYPES = {"f32": (CUDA_R_32F, CUBLAS_COMPUTE_32F), "f64": (CUDA_R_64F, CUBLAS_COMPUTE_64F),
         "f16": (CUDA_R_16F, CUBLAS_COMPUTE_32F), "bf16": (CUDA_R_16BF, CUBLAS_COMPUTE_32F)}


def available() -> bool:
    return _library() is not None


@contextlib.contextmanager
def product(dtype: str, a: Any, b: Any, c: Any) -> Iterator[Callable[[], None]]:
    """C = A B by cublasGemmEx on the default stream, for square row-major device arrays of `dtype`:
    cuBLAS reads them by columns, as A^T and B^T, so it is asked for B^T A^T, which is C^T, C by
    columns."""
    library, n = _library(), a.shape[0]
    if library is None:
        raise RuntimeError("cuBLAS's library is not found (cuda.pathfinder looks in NVIDIA's wheels and CUDA_HOME)")
    if any(array.shape != (n, n) or array.dtype != a.dtype for array in (b, c)):
        raise ValueError(f"cuBLAS's product here takes three n x n arrays of one type, got {a.shape}, {b.shape} and "
                         f"{c.shape} of {a.dtype}, {b.dtype} and {c.dtype}")
    data_type, compute_type = TYPES[dtype]
    scalar = ctypes.c_double if dtype == "f64" else ctypes.c_float
    one, zero = scalar(1), scalar(0)
    handle = ctypes.c_void_p()
    _checked(library.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
    try:
        def launch() -> None:
            _checked(library.cublasGemmEx(handle, 0, 0, n, n, n, ctypes.byref(one), int(b.gpudata), data_type, n,
                                          int(a.gpudata), data_type, n, ctypes.byref(zero), int(c.gpudata), data_type,
                                          n, compute_type, -1), "cublasGemmEx")
        yield launch
    finally:
        library.cublasDestroy_v2(handle)


@functools.cache
def _library() -> ctypes.CDLL | None:
    """cuBLAS's library; None where it is not installed."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        library = ctypes.CDLL(load_nvidia_dynamic_lib("cublas").abs_path)
    except Exception:  # noqa: BLE001 - no cuda-pathfinder, or no cuBLAS: the ceilings take PyTorch's then
        return None
    library.cublasGemmEx.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return library


def _checked(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLAS: {call} returned status {status}")
