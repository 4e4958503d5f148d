"""Checking a variant's output in the GPU worker process: a problem's inputs and expected output kept
on the device, and the reductions that compare an output with it there."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pycuda.gpuarray as gpuarray
from pycuda.reduction import ReductionKernel

from ..families.problem import Problem


@dataclass
class DeviceProblem:
    """One problem on the device: pristine inputs (copied for each check) and the expected output
    buffer in float64, NaN outside the output region."""

    inputs: dict[str, Any]
    expected: Any
    reference_norm: float
    region_size: int

    @classmethod
    def of(cls, problem: Problem, dtype: str, shape: Any, seed: int,
           report: Callable[[str], None] = lambda step: None) -> "DeviceProblem":
        """Each step is reported: at 4 GiB an array, the steps together outlast the hang timeout
        (every transpose at 32768^2 was killed as hung while its reference was being made)."""
        report("random inputs")
        inputs = problem.random_inputs(dtype, shape, seed)
        report("float64 reference")
        reference = np.asarray(problem.reference({n: a.astype(np.float64) for n, a in inputs.items()}, shape))
        report("expected output")
        region = problem.output_region(shape)
        expected = np.full(problem.arrays(shape)[problem.output.name], np.nan)
        expected[region] = reference
        norm = float(np.linalg.norm(reference))
        report("inputs and expected output to the device")
        return cls({name: gpuarray.to_gpu(host) for name, host in inputs.items()}, gpuarray.to_gpu(expected),
                   norm, int(reference.size))


class OutputChecker:
    """Compares an output on the device with the expected buffer, in three reductions over the
    whole buffer: squared error inside the region, NaN (unwritten) elements inside it, and
    elements written outside it (the output is poisoned with NaN before the launch)."""

    def __init__(self) -> None:
        self._kernels: dict[str, tuple[Any, Any, Any]] = {}

    def compare(self, out: Any, expected: DeviceProblem, tolerance: float) -> tuple[float, str]:
        """Relative error ||out - ref|| / ||ref|| of the region, and what is wrong ('' when nothing is)."""
        squared, unwritten, stray = self._reductions(out.dtype)
        missing = int(unwritten(out, expected.expected).get())
        outside = int(stray(out, expected.expected).get())
        error = math.sqrt(float(squared(out, expected.expected).get())) / (expected.reference_norm or 1.0)
        if missing:
            return math.nan, f"{missing} of {expected.region_size} output elements were not written (or are NaN)"
        if outside:
            return error, f"{outside} elements outside the output region were written"
        if error > tolerance:
            return error, f"relative error {error:.3g} is above the tolerance {tolerance:.3g}"
        return error, ""

    def _reductions(self, dtype: np.dtype) -> tuple[Any, Any, Any]:
        ctype = "float" if dtype == np.float32 else "double"
        if ctype not in self._kernels:
            arguments = f"const {ctype} *result, const double *expected"
            difference = "((double)result[i] - expected[i])"
            self._kernels[ctype] = (
                ReductionKernel(np.float64, "0", "a+b", arguments=arguments,
                                map_expr=f"(!isnan(expected[i]) && !isnan(result[i])) ? {difference} * {difference} "
                                         f": 0.0"),
                ReductionKernel(np.int64, "0", "a+b", arguments=arguments,
                                map_expr="(!isnan(expected[i]) && isnan(result[i])) ? 1 : 0"),
                ReductionKernel(np.int64, "0", "a+b", arguments=arguments,
                                map_expr="(isnan(expected[i]) && !isnan(result[i])) ? 1 : 0"))
        return self._kernels[ctype]
