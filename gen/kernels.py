"""Ready-to-call kernels: the tuned variant of any family, run on the caller's device arrays in the
caller's own CUDA context. pycuda is reached only through gen.gpu.launch.

    kernel = gen.kernel("reduce", "4096x8192")     # the tuned variant for this GPU and shape
    kernel(data=rows_gpu, sums=out_gpu)            # arrays by argument name (or in order)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .build.compiler import CompileOptions, compile_variant
from .core.errors import UsageError
from .families import get_family
from .families.family import Family
from .families.problem import Scalar, numpy_dtype
from .search.lookup import shape_text, tuned
from .families.variant import Variant

_GEMM_FOR = {np.dtype(np.float32): ("sgemm", "f32"), np.dtype(np.float64): ("matmul", "f64")}
VECTOR_BYTES = 16  # vector loads (float4) need every matrix to start on a 16-byte boundary
LAUNCHES_KEPT = 8


class Kernel:
    """One variant prepared for one shape: call it with the family's arrays, pycuda GPUArrays (or
    views) in the caller's CUDA context, or NumPy arrays (copied to the device and back)."""

    def __init__(self, family: Family, variant: Variant, shape: Any):
        self.family, self.variant, self.shape = family, variant, shape
        self.arrays = [a.name for a in family.problem.arguments if not isinstance(a, Scalar)]
        self.output = family.problem.output.name
        self._launches: dict[tuple[int, ...], Any] = {}  # prepared launches, by the arrays' addresses

    def __call__(self, *positional: Any, **named: Any) -> Any:
        """Launch on these arrays (in argument order, or by name); returns the output array. NumPy
        arrays are copied to the device first, and a NumPy output is filled in place."""
        given = self._named(positional, named)
        self._check(given)
        on_host = {name: array for name, array in given.items() if isinstance(array, np.ndarray)}
        if not on_host:
            self.prepared(given)()
            return given[self.output]
        device = {name: _gpu().to_device(array) if name in on_host else array for name, array in given.items()}
        self._launcher(device)()
        if self.output not in on_host:
            return device[self.output]
        return _gpu().to_host(device[self.output], on_host[self.output])

    def prepared(self, arrays: dict[str, Any]) -> Any:
        """A launch on these device arrays with its arguments packed once: call it to run the kernel."""
        addresses = tuple(int(arrays[name].gpudata) for name in self.arrays)
        if addresses not in self._launches:
            if len(self._launches) >= LAUNCHES_KEPT:  # each holds its arrays: keep the latest few
                del self._launches[next(iter(self._launches))]
            self._check(arrays)
            self._launches[addresses] = self._launcher(arrays)
        return self._launches[addresses]

    def _launcher(self, arrays: dict[str, Any]) -> Any:
        launch = self.family.launch(self.variant, self.shape)
        return _gpu().launcher(loaded(self.variant), launch, self.family.problem, self.shape, arrays)

    def _named(self, positional: tuple[Any, ...], named: dict[str, Any]) -> dict[str, Any]:
        """The arrays by argument name, each given once."""
        if len(positional) > len(self.arrays):
            raise UsageError(f"{self.family.name} takes {len(self.arrays)} arrays ({', '.join(self.arrays)}), "
                             f"got {len(positional)}")
        given = dict(zip(self.arrays, positional))
        for name, array in named.items():
            if name not in self.arrays or name in given:
                raise UsageError(f"{self.family.name} takes the arrays {', '.join(self.arrays)}; {name!r} is "
                                 f"{'given twice' if name in given else 'not one of them'}")
            given[name] = array
        missing = [n for n in self.arrays if n not in given]
        if missing:
            raise UsageError(f"{self.family.name} needs the arrays {', '.join(missing)} too")
        return given

    def _check(self, given: dict[str, Any]) -> None:
        """Each array must be dense, with the dimensions and element type the family expects."""
        expected = self.family.problem.arrays(self.shape)
        for name, array in given.items():
            dtype = numpy_dtype(self.variant.output_dtype if name == self.output else self.variant.dtype)
            is_array = isinstance(array, np.ndarray) or hasattr(array, "gpudata")
            if not is_array or np.dtype(getattr(array, "dtype", None)) != dtype:
                raise UsageError(f"{name} must be a {dtype} array, a NumPy array or a pycuda GPUArray; got "
                                 f"{type(array).__name__}{f' of {array.dtype}' if is_array else ''}")
            if tuple(array.shape) != expected[name]:
                raise UsageError(f"{name} of {self.family.name} at {self.shape} must be {expected[name]}, got "
                                 f"{tuple(array.shape)}")
            if tuple(array.strides) != _dense_strides(expected[name], dtype.itemsize):
                raise UsageError(f"{name} must be contiguous and row-major (strides {array.strides})")
        if isinstance(given[self.output], np.ndarray) and not given[self.output].flags.writeable:
            raise UsageError(f"{self.output} is a read-only NumPy array; give one the result can be written into")


def kernel(family: str, *dims: int | str, dtype: str | None = None) -> Kernel:
    """The tuned variant of `family` for this shape on the current GPU, ready to call."""
    chosen = get_family(family)
    shape = chosen.parse_shape(shape_text(dims))
    return Kernel(chosen, _choice(chosen.name, str(shape), chosen.check_dtype(dtype)), shape)


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """C = A·B for row-major pycuda GPUArrays, sub-matrix views included (float32 through the tuned
    sgemm, float64 through matmul). Needs a current CUDA context (import pycuda.autoprimaryctx)."""
    (m, k), (k2, n) = _matrix(a, "a"), _matrix(b, "b")
    if out is not None:
        _matrix(out, "out")
    if k != k2 or a.dtype != b.dtype or np.dtype(a.dtype) not in _GEMM_FOR:
        raise UsageError(f"gen.matmul multiplies float32 or float64 matrices (M x K)(K x N); got {a.dtype} "
                         f"{a.shape} and {b.dtype} {b.shape}")
    family, dtype = _GEMM_FOR[np.dtype(a.dtype)]
    if out is None:
        out = _gpu().empty((m, n), a.dtype)
    if _matrix(out, "out") != (m, n) or out.dtype != a.dtype:
        raise UsageError(f"out must be a {a.dtype} {m} x {n} matrix, got {out.dtype} {out.shape}")
    lda, ldb, ldc = (_leading(x) for x in (a, b, out))
    size = f"{m}x{n}x{k}" + (f":{lda},{ldb},{ldc}" if (lda, ldb, ldc) != (k, n, n) else "")
    chosen = kernel(family, size, dtype=dtype)
    relative = chosen.family.unaligned(chosen.variant)
    if relative is not None and any(int(x.gpudata) % VECTOR_BYTES for x in (a, b, out)):  # views off 16-byte alignment
        runnable = chosen.family.runnable(relative, chosen.shape)
        chosen = Kernel(chosen.family, runnable or chosen.family.safe_variant(chosen.shape, dtype), chosen.shape)
    return chosen(A=_as_allocated(a, (m, lda)), B=_as_allocated(b, (k, ldb)), C=_as_allocated(out, (m, ldc)))


@functools.cache
def _choice(family: str, shape: str, dtype: str) -> Variant:
    """The tuned variant for a shape, looked up once per process (the database is not read per call)."""
    variant = tuned(family, shape, dtype=dtype)
    if variant.dtype != dtype:
        raise UsageError(f"the tuned {family} variant {variant.name} is not {dtype}; check the tuning database")
    return variant


@functools.cache
def loaded(variant: Variant) -> Any:
    """The variant's kernel, compiled (or from the cache) and loaded into the current context."""
    load_function = _gpu().load_function
    compiled = compile_variant(variant, CompileOptions.local())
    if not compiled.ok:
        raise UsageError(f"{variant.name} does not compile: {compiled.log.strip().splitlines()[-1]}")
    return load_function(compiled.cubin.read_bytes(), variant.name, variant.dynamic_shared_bytes)


def _gpu() -> Any:
    """gen.gpu.launch, the kernels' way to pycuda; UsageError where pycuda is missing."""
    try:
        from .gpu import launch
    except ImportError as error:
        raise UsageError(f"running a kernel needs pycuda ({error}): pip install 'tilegen[cuda]' on a machine with "
                         f"an NVIDIA GPU and its driver") from None
    return launch


def _matrix(array: Any, label: str) -> tuple[int, int]:
    """The dimensions of a 2-D device array (a pycuda GPUArray or a view of one)."""
    if not hasattr(array, "gpudata"):
        raise UsageError(f"{label} must be a pycuda GPUArray (pycuda.gpuarray.to_gpu(...)), got "
                         f"{type(array).__name__}")
    if len(getattr(array, "shape", ())) != 2:
        raise UsageError(f"{label} must be a 2-D GPUArray, got shape {getattr(array, 'shape', None)}")
    return tuple(array.shape)


def _leading(array: Any) -> int:
    """The row stride in elements of a row-major matrix or sub-matrix view."""
    item = np.dtype(array.dtype).itemsize
    row, column = array.strides
    if column != item or row % item or row // item < array.shape[1]:
        raise UsageError(f"a {array.shape} matrix with strides {array.strides} is not a row-major view")
    return row // item


def _dense_strides(dims: tuple[int, ...], item: int) -> tuple[int, ...]:
    return tuple(int(np.prod(dims[i + 1:])) * item for i in range(len(dims)))


class _View:
    """A device array as the kernel sees it: a pointer and its allocated dimensions."""

    def __init__(self, array: Any, dims: tuple[int, ...]):
        self.gpudata, self.shape, self.dtype = array.gpudata, dims, array.dtype
        self.strides = _dense_strides(dims, np.dtype(array.dtype).itemsize)


def _as_allocated(array: Any, dims: tuple[int, int]) -> Any:
    """A matrix view (m x n, row stride ld) as the m x ld allocation the GEMM arguments describe."""
    return array if tuple(array.shape) == dims else _View(array, dims)
