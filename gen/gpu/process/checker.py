"""Checking a variant's output in the GPU worker process: a problem's inputs and expected output kept
on the device, and the reductions that compare an output with it there."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...core.errors import UsageError
from ...core.limits import DTYPE_CTYPE
from ...families.problem import Problem, numpy_dtype
from ..runtime.launch import copy, empty, fill, source_module, to_device


@dataclass
class DeviceProblem:
    """One problem on the device: pristine inputs (copied for each check) and the expected output
    buffer in float64, NaN outside the output region; and the buffers each check launches on, made
    once and reused by every variant checked on this problem."""

    inputs: dict[str, Any]
    expected: Any
    reference_norm: float
    region_size: int
    checked: bool = True  # False: the problem has no reference; the output is not compared
    initial: Any = None  # what the output holds before each launch (None: NaN)
    _work: dict[str, Any] = field(default_factory=dict)

    def fresh_arrays(self, output: str, dtype: np.dtype) -> dict[str, Any]:
        """The arrays of one launch: copies of the pristine inputs (so that a kernel scribbling on its
        inputs cannot spoil the next check) and the output poisoned with NaN (or the problem's
        initial output), in reused buffers."""
        for name, pristine in self.inputs.items():
            copy(self._buffer(name, pristine.shape, pristine.dtype), pristine)
        out = self._buffer(output, self.expected.shape, dtype)
        if self.initial is not None and self.initial.dtype == dtype:
            copy(out, self.initial)
        else:
            fill(out, np.nan)
        return {name: self._work[name] for name in (*self.inputs, output)}

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        if name not in self._work or self._work[name].dtype != dtype:
            self._work[name] = empty(shape, dtype)
        return self._work[name]

    @classmethod
    def of(cls, problem: Problem, dtype: str, shape: Any, seed: int,
           report: Callable[[str], None] = lambda step: None) -> "DeviceProblem":
        """Each step is reported: at 4 GiB an array, the steps together outlast the hang timeout
        (every transpose at 32768^2 was killed as hung while its reference was being made)."""
        report("random inputs")
        inputs = problem.random_inputs(dtype, shape, seed)
        report("float64 reference")
        reference = problem.reference({n: a.astype(np.float64) for n, a in inputs.items()}, shape)
        report("expected output")
        expected = np.full(problem.arrays(shape)[problem.output.name], np.nan)
        if reference is not None:
            expected[problem.output_region(shape)] = reference = np.asarray(reference)
        norm = float(np.linalg.norm(reference)) if reference is not None else 0.0
        report("inputs and expected output to the device")
        initial = problem.initial_output(shape)
        return cls({name: to_device(_bits(host)) for name, host in inputs.items()}, to_device(expected),
                   norm, int(reference.size) if reference is not None else 0, checked=reference is not None,
                   initial=to_device(np.ascontiguousarray(initial)) if initial is not None else None)


def _bits(host: np.ndarray) -> np.ndarray:
    """16- and 8-bit floats travel as their bits: the inputs are only copied on the device, never computed with."""
    return host.view(f"u{host.dtype.itemsize}") if host.dtype.itemsize <= 2 else host


COMPARE_BLOCKS, COMPARE_THREADS = 256, 256  # fixed, so that the sums are added in the same order on any GPU
_COMPARE_SOURCE = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ double as_double(float x) { return x; }
__device__ double as_double(double x) { return x; }
__device__ double as_double(__half x) { return __half2float(x); }
__device__ double as_double(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ void compare(const T *result, const double *expected, unsigned long long n, double *parts) {
    __shared__ double squared[%(threads)d], missing[%(threads)d], stray[%(threads)d];
    double sq = 0.0, miss = 0.0, out = 0.0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        double want = expected[i], got = as_double(result[i]);
        bool want_nan = isnan(want), got_nan = isnan(got);
        if (!want_nan && !got_nan) sq += (got - want) * (got - want);
        miss += (!want_nan && got_nan) ? 1.0 : 0.0;
        out += (want_nan && !got_nan) ? 1.0 : 0.0;
    }
    squared[threadIdx.x] = sq; missing[threadIdx.x] = miss; stray[threadIdx.x] = out;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            squared[threadIdx.x] += squared[threadIdx.x + half];
            missing[threadIdx.x] += missing[threadIdx.x + half];
            stray[threadIdx.x] += stray[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = squared[0];
        parts[gridDim.x + blockIdx.x] = missing[0];
        parts[2 * gridDim.x + blockIdx.x] = stray[0];
    }
}
""" % {"threads": COMPARE_THREADS} + "".join(  # a kernel per element type: compare_f32, ...
    f'extern "C" __global__ void compare_{dtype}(const {ctype} *r, const double *e, unsigned long long n, double *p) '
    f'{{\n    compare(r, e, n, p);\n}}\n' for dtype, ctype in DTYPE_CTYPE.items())


class OutputChecker:
    """Compares an output on the device with the expected buffer in one pass over the whole buffer
    (one launch, one small copy back): squared error inside the region, NaN (unwritten) elements
    inside it, and elements written outside it (the output is poisoned with NaN before the launch).
    Each block's sums come back and are added on the host in a fixed order: the same error every run."""

    def __init__(self) -> None:
        module = source_module(_COMPARE_SOURCE)
        self._kernels = {numpy_dtype(dtype): module.get_function(f"compare_{dtype}") for dtype in DTYPE_CTYPE
                         if dtype != "bf16" or _has_bfloat16()}
        for kernel in self._kernels.values():
            kernel.prepare("PPQP")
        self._parts = empty((3, COMPARE_BLOCKS), np.float64)

    def compare(self, out: Any, expected: DeviceProblem, tolerance: float) -> tuple[float, str]:
        """Relative error ||out - ref|| / ||ref|| of the region, and what is wrong ('' when nothing is)."""
        self._kernels[out.dtype].prepared_call((COMPARE_BLOCKS, 1, 1), (COMPARE_THREADS, 1, 1), out.gpudata,
                                               expected.expected.gpudata, expected.expected.size, self._parts.gpudata)
        squared, missing, outside = (math.fsum(row) for row in self._parts.get())
        missing, outside = int(missing), int(outside)
        error = math.sqrt(squared) / (expected.reference_norm or 1.0)
        if missing:
            return math.nan, f"{missing} of {expected.region_size} output elements were not written (or are NaN)"
        if outside:
            return error, f"{outside} elements outside the output region were written"
        if error > tolerance:
            return error, f"relative error {error:.3g} is above the tolerance {tolerance:.3g}"
        return error, ""


def _has_bfloat16() -> bool:
    """Whether bfloat16 arrays can be made here (ml_dtypes is installed)."""
    try:
        numpy_dtype("bf16")
    except UsageError:
        return False
    return True
