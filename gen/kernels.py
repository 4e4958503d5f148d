"""Ready-to-call kernels: run the tuned variant on the caller's pycuda GPUArrays, in its own context."""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from .compiler import CompileOptions, compile_variant
from .errors import UsageError
from .families import get_family
from .lookup import tuned
from .variant import Variant

_FAMILY_FOR = {np.dtype(np.float32): ("sgemm", "f32"), np.dtype(np.float64): ("matmul", "f64")}


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """C = A·B for row-major pycuda GPUArrays (float32 through the tuned sgemm, float64 through matmul).

    Needs a current CUDA context (e.g. `import pycuda.autoprimaryctx`); returns `out` or a new GPUArray.
    """
    import pycuda.driver as cuda
    import pycuda.gpuarray as gpuarray

    if cuda.Context.get_current() is None:
        raise UsageError("gen.matmul needs a current CUDA context: import pycuda.autoprimaryctx first")
    (m, k), (k2, n) = _matrix(a, "a"), _matrix(b, "b")
    if k != k2 or a.dtype != b.dtype or a.dtype not in _FAMILY_FOR:
        raise UsageError(f"gen.matmul multiplies float32 or float64 matrices (M x K)(K x N); got {a.dtype} "
                         f"{a.shape} and {b.dtype} {b.shape}")
    family_name, dtype = _FAMILY_FOR[a.dtype]
    family = get_family(family_name)
    shape = family.parse_shape(f"{m}x{n}x{k}")
    variant = _choice(family_name, m, n, k, dtype)
    if variant.dtype != dtype:
        raise UsageError(f"the tuned {family_name} variant {variant.name} is not {dtype}; check the tuning database")
    if out is None:
        out = gpuarray.empty((m, n), dtype=a.dtype)
    launched(variant, shape)(family.kernel_arguments(shape, {"A": a.gpudata, "B": b.gpudata, "C": out.gpudata}))
    return out


@functools.cache
def _choice(family: str, m: int, n: int, k: int, dtype: str) -> Variant:
    """The tuned variant for a shape, looked up once per process (the database is not read per call)."""
    return tuned(family, m, n, k, dtype=dtype)


@functools.cache
def launched(variant: Variant, shape: Any) -> Callable[[list[Any]], None]:
    """A prepared launch of the variant on this shape, built once per process: call it with the
    family's kernel arguments (an output split-K adds into is zeroed first)."""
    from .run import launcher

    return launcher(loaded(variant), get_family(variant.family).launch(variant, shape))


@functools.cache
def loaded(variant: Variant) -> Any:
    """The variant's kernel, compiled (or from the cache) and loaded into the current context."""
    import pycuda.driver as cuda

    from .run import configure

    compiled = compile_variant(variant, CompileOptions.local())
    if not compiled.ok:
        raise UsageError(f"{variant.name} does not compile: {compiled.log.strip().splitlines()[-1]}")
    function = cuda.module_from_buffer(compiled.cubin.read_bytes()).get_function(variant.name)
    configure(function, "none", variant.dynamic_shared_bytes)
    return function


def _matrix(array: Any, label: str) -> tuple[int, int]:
    if len(array.shape) != 2 or not array.flags.c_contiguous:
        raise UsageError(f"{label} must be a C-contiguous 2-D GPUArray, got shape {array.shape}")
    return array.shape
