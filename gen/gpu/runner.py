"""Load, launch, check and time variants on one GPU. The only module that imports pycuda.

A `Runner` lives in a worker process that sees one GPU (CUDA_VISIBLE_DEVICES is set before it
starts). It works in the device's primary context (pycuda.autoprimaryctx), so CuPy or PyTorch in
the same process (for the cuBLAS ceiling) share it. Importing this module makes no context.

Everything here is generic over families: arrays, arguments, the output region and the reference
come from the family's Problem, in any number of dimensions.
"""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import pycuda.driver as cuda
import pycuda.gpuarray as gpuarray
from pycuda.reduction import ReductionKernel

from ..core import nvidia_smi
from ..core.errors import UsageError
from ..families import get_family
from ..families.family import COPY_BANDWIDTH, GEMM_F32, GEMM_F64, NUMPY_DTYPE, Family, Launch, Problem
from .jobs import CACHE_CONFIGS, Job
from ..core.paths import cache_dir
from ..core.results import DeviceInfo, Measurement, Status, Timing, TimingOptions, median_relative_error
from ..families.variant import Variant

_CACHE_PREFERENCE = {
    "none": cuda.func_cache.PREFER_NONE,
    "shared": cuda.func_cache.PREFER_SHARED,
    "l1": cuda.func_cache.PREFER_L1,
    "equal": cuda.func_cache.PREFER_EQUAL,
}
PROBLEMS_KEPT = 3  # inputs and float64 references kept on the device per (shape, dtype, seed)
WARM_SAMPLE_MS = 1.0  # a warm sample times back-to-back launches for about this long
CEILING_SAMPLES = TimingOptions(min_samples=10, max_samples=20, target_rsd=0.0, warmup=3, budget_s=30.0)


class Runner:
    def __init__(self, physical_index: int = 0):
        import pycuda.autoprimaryctx  # the primary context of the one visible GPU, made current

        self.device = read_device_info(pycuda.autoprimaryctx.device, physical_index)
        self._functions: dict[tuple[str, str, str], Any] = {}
        self._modules: dict[str, Any] = {}  # loaded cubins (a batch compile holds several kernels)
        self._problems: OrderedDict[tuple, DeviceProblem] = OrderedDict()
        self._checker = OutputChecker()
        self._flush_buffer = cuda.mem_alloc(2 * self.device.l2_bytes)
        self._ceilings: dict[str, float] | None = None

    def run(self, job: Job, report: Callable[[str], None] = lambda phase: None) -> Measurement:
        """Check the job's variant on fresh inputs for every seed, then time it if it is right."""
        family = get_family(job.family)
        variant = family.variant_type.from_name(job.name)
        shape = family.parse_shape(job.shape)
        try:
            launch = family.launch(variant, shape)
            function = self._function(job, launch)
            return self._check_and_time(job, family, variant, shape, launch, function, report)
        except cuda.MemoryError as error:
            return Measurement(Status.LAUNCH_ERROR, f"out of device memory: {error}", device=self.device)
        except cuda.Error as error:
            # A failed launch (illegal address, misaligned access, ...) leaves the context unusable.
            return Measurement(Status.LAUNCH_ERROR, f"{type(error).__name__}: {error}", device=self.device,
                               context_lost=True)

    def ceilings(self, report: Callable[[str], None] = lambda phase: None) -> dict[str, float]:
        """Copy bandwidth and cuBLAS rates of this GPU model, measured once and kept on disk."""
        if self._ceilings is None:
            path = cache_dir() / "ceilings.json"
            known = json.loads(path.read_text()) if path.exists() else {}
            model = str(self.device.model)
            if model not in known:
                report("measuring ceilings")
                known[model] = measure_ceilings()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(known, indent=1))
            self._ceilings = known[model]
        return self._ceilings

    # ---- stages ------------------------------------------------------------------------------

    def _check_and_time(self, job: Job, family: Family, variant: Variant, shape: Any, launch: Launch, function: Any,
                        report: Callable[[str], None]) -> Measurement:
        problem = family.problem
        started = time.perf_counter()
        measurement, call = self._check(job, problem, variant, shape, launch, function, report)
        measurement.check_seconds = time.perf_counter() - started
        if measurement.status is not Status.OK or job.timing is None:
            return measurement
        ceiling = problem.ceiling(variant.dtype)
        measurement.ceiling = self.ceilings(report).get(ceiling.key)
        report("time")
        started = time.perf_counter()
        flush = None if job.timing.warm else self._flush_l2
        measurement.timing = Timing.of(event_samples(call, job.timing, before_each=flush))
        measurement.l2_flushed = not job.timing.warm
        measurement.throughput = problem.throughput(shape, variant.dtype, measurement.timing.median_ms / 1e3)
        measurement.time_seconds = time.perf_counter() - started
        return measurement

    def _check(self, job: Job, problem: Problem, variant: Variant, shape: Any, launch: Launch, function: Any,
               report: Callable[[str], None]) -> tuple[Measurement, Callable[[], None]]:
        """One launch per seed on fresh inputs into a NaN-poisoned output, each compared with its
        reference; the verdict, and the last launch (for timing)."""
        worst, problem_found, call = 0.0, "", lambda: None
        tolerance = problem.tolerance(variant.dtype, shape)
        output = problem.output.name
        for seed in job.seeds:
            report(f"check seed {seed}")
            expected = self._problem(problem, variant.dtype, shape, seed,
                                     lambda step: report(f"check seed {seed}: {step}"))
            # Fresh copies, so that a kernel scribbling on its inputs cannot spoil the next check.
            arrays = {name: array.copy() for name, array in expected.inputs.items()}
            arrays[output] = gpuarray.empty(expected.expected.shape, dtype=NUMPY_DTYPE[variant.dtype])
            arrays[output].fill(np.nan)
            call = launcher(function, launch, problem, shape, arrays)
            call()
            cuda.Context.synchronize()
            error, found = self._checker.compare(arrays[output], expected, tolerance)
            worst = max(worst, error) if not math.isnan(error) else math.inf
            problem_found = problem_found or found
        measurement = Measurement(Status.WRONG if problem_found else Status.OK, problem_found, error=worst,
                                  tolerance=tolerance, checks=len(job.seeds), device=self.device,
                                  unit=problem.ceiling(variant.dtype).unit)
        return measurement, call

    def _flush_l2(self, salt: int) -> None:
        """Write a buffer twice the L2's size, so the next launch finds none of its data cached."""
        cuda.memset_d32_async(self._flush_buffer, salt, 2 * self.device.l2_bytes // 4, None)

    def _problem(self, problem: Problem, dtype: str, shape: Any, seed: int,
                 report: Callable[[str], None]) -> "DeviceProblem":
        """Random inputs and the expected output on the device, kept for the next variants."""
        key = (id(problem), str(shape), dtype, seed)
        if key not in self._problems:
            self._problems[key] = DeviceProblem.of(problem, dtype, shape, seed, report)
            while len(self._problems) > PROBLEMS_KEPT:
                self._problems.popitem(last=False)
        self._problems.move_to_end(key)
        return self._problems[key]

    def _function(self, job: Job, launch: Launch) -> Any:
        key = (job.cubin, job.name, job.cache_config)
        if key not in self._functions:
            if job.cubin not in self._modules:
                with open(job.cubin, "rb") as handle:
                    self._modules[job.cubin] = cuda.module_from_buffer(handle.read())
            function = self._modules[job.cubin].get_function(job.name)
            configure(function, job.cache_config, launch.dynamic_shared_bytes)
            self._functions[key] = function
        return self._functions[key]


def configure(function: Any, cache_config: str, dynamic_shared_bytes: int) -> None:
    """Cache preference, the matching shared-memory carveout, and the opt-in for > 48 KiB dynamic shared."""
    if cache_config != "none":
        function.set_cache_config(_CACHE_PREFERENCE[cache_config])
        function.set_attribute(cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, CACHE_CONFIGS[cache_config])
    if dynamic_shared_bytes > 48 * 1024:
        function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_shared_bytes)


def event_samples(call: Callable[[], Any], options: TimingOptions,
                  before_each: Callable[[int], None] | None = None) -> list[float]:
    """The one CUDA-event timing loop: warm up, then time `call` between two events per sample
    until the median is steady (or the budget or sample cap is reached); milliseconds per call.

    With `before_each` (an asynchronous L2 flush), the GPU is still busy with it while the host
    records the start event and enqueues the call, so launch latency stays out of the interval.
    Without it (warm), each sample times a batch of back-to-back calls long enough to hide that.
    """
    for _ in range(options.warmup):
        call()
    start, end = cuda.Event(), cuda.Event()
    batch = 1 if before_each else _warm_batch(call, start, end)
    samples: list[float] = []
    deadline = time.monotonic() + options.budget_s
    while len(samples) < options.max_samples:
        if before_each:
            before_each(len(samples))
        start.record()
        for _ in range(batch):
            call()
        end.record()
        end.synchronize()
        samples.append(end.time_since(start) / batch)
        if len(samples) >= options.min_samples and (
                median_relative_error(samples) < options.target_rsd or time.monotonic() > deadline):
            break
    return samples


def _warm_batch(call: Callable[[], Any], start: Any, end: Any) -> int:
    """Calls per warm sample: enough for about a millisecond of work."""
    start.record()
    call()
    end.record()
    end.synchronize()
    return max(1, min(1000, math.ceil(WARM_SAMPLE_MS / max(end.time_since(start), 1e-3))))


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


def launcher(function: Any, launch: Launch, problem: Problem, shape: Any, arrays: Mapping[str, Any]
             ) -> Callable[[], None]:
    """A prepared launch of `function` on these device arrays (GPUArrays, views included): little
    host work per call. An output the launch clears is zeroed first, in the same stream."""
    arguments = problem.kernel_arguments(shape, {name: array.gpudata for name, array in arrays.items()})
    function.prepare("".join(a.dtype.char for a in arguments))
    output = arrays[problem.output.name]
    clear = region_clearer(output, problem.output_region(shape)) if launch.clears_output else None

    def call() -> None:
        if clear:
            clear()
        function.prepared_async_call(launch.grid, launch.block, None, *arguments,
                                     shared_size=launch.dynamic_shared_bytes)

    call.arrays = dict(arrays)  # the arguments are bare addresses: keep their memory alive with the launch
    return call


def region_clearer(array: Any, region: tuple[slice, ...]) -> Callable[[], None]:
    """Zeroes `region` of a device array (its padding left alone): one 2-D memset per index of the
    leading dimensions (a single one for 1-D and 2-D arrays)."""
    item = array.dtype.itemsize
    strides = array.strides
    base = int(array.gpudata)
    if len(region) == 1:
        start, count = region[0].start or 0, region[0].stop - (region[0].start or 0)
        return lambda: cuda.memset_d8_async(base + start * strides[0], 0, count * item, None)
    *leading, rows, columns = region
    width = (columns.stop - (columns.start or 0)) * item
    height = rows.stop - (rows.start or 0)
    offsets = [base + sum((i + (s.start or 0)) * stride for i, s, stride in zip(index, leading, strides))
               + (rows.start or 0) * strides[-2] + (columns.start or 0) * strides[-1]
               for index in np.ndindex(*[s.stop - (s.start or 0) for s in leading])]

    def clear() -> None:
        for offset in offsets:
            cuda.memset_d2d8_async(offset, strides[-2], 0, width, height, None)

    return clear


# ---- the device and its ceilings --------------------------------------------------------------------

def read_device_info(device: Any, physical_index: int) -> DeviceInfo:
    """What identifies a pycuda Device's model, and its L2 size."""
    attribute = cuda.device_attribute
    major, minor = device.compute_capability()
    return DeviceInfo(
        name=device.name(), cc=f"{major}.{minor}", sm_count=device.get_attribute(attribute.MULTIPROCESSOR_COUNT),
        memory_bytes=device.total_memory(), l2_bytes=device.get_attribute(attribute.L2_CACHE_SIZE),
        driver=driver_version(physical_index), index=physical_index)


def current_device_info() -> DeviceInfo | None:
    """The GPU of the caller's current context, or None when there is none."""
    try:
        return read_device_info(cuda.Context.get_device(), 0)
    except cuda.Error:
        return None


def driver_version(physical_index: int) -> str:
    """The driver's version as nvidia-smi prints it (580.159.04), else the CUDA API version it serves."""
    listed = nvidia_smi.query(["driver_version"], gpu=physical_index)
    if listed:
        return listed[0]
    api = cuda.get_driver_version()
    return f"CUDA {api // 1000}.{api % 1000 // 10}"


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


# ---- ready-to-call kernels in the caller's context (gen.kernels) -------------------------------------

def load_function(cubin: bytes, name: str, dynamic_shared_bytes: int) -> Any:
    """A kernel loaded into the current context, configured for its dynamic shared memory."""
    _require_context()
    function = cuda.module_from_buffer(cubin).get_function(name)
    configure(function, "none", dynamic_shared_bytes)
    return function


def empty(dims: tuple[int, ...], dtype: Any) -> Any:
    return gpuarray.empty(dims, dtype=dtype)


def to_device(array: np.ndarray) -> Any:
    """A NumPy array copied into a new device array (in the current context)."""
    _require_context()
    return gpuarray.to_gpu(array)


def _require_context() -> None:
    if cuda.Context.get_current() is None:
        raise UsageError("running a tilegen kernel needs a current CUDA context: import pycuda.autoprimaryctx first")


def to_host(array: Any, into: np.ndarray) -> np.ndarray:
    """A device array copied into the NumPy array `into`, which is returned."""
    return array.get(ary=into)
