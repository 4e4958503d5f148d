"""Load, launch, check and time variants on one GPU. The only module that imports pycuda.

A `Runner` lives in a worker process that sees one GPU (CUDA_VISIBLE_DEVICES is set before it
starts). It works in the device's primary context (pycuda.autoprimaryctx), so CuPy or PyTorch in
the same process (for the cuBLAS ceiling) share it. Importing this module makes no context.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pycuda.driver as cuda
import pycuda.gpuarray as gpuarray
from pycuda.reduction import ReductionKernel

from .family import NUMPY_DTYPE, Family, Launch
from .families import get_family
from .jobs import CACHE_CONFIGS, DeviceInfo, Job, Measurement, Timing, TimingOptions, median_relative_error
from .paths import cache_dir
from .store import Status
from .variant import Variant

_CACHE_PREFERENCE = {
    "none": cuda.func_cache.PREFER_NONE,
    "shared": cuda.func_cache.PREFER_SHARED,
    "l1": cuda.func_cache.PREFER_L1,
    "equal": cuda.func_cache.PREFER_EQUAL,
}
PROBLEMS_KEPT = 3  # inputs and float64 references kept on the device per (shape, dtype, seed)
WARM_SAMPLE_MS = 1.0  # a warm sample times back-to-back launches for about this long


class Runner:
    def __init__(self, physical_index: int = 0):
        import pycuda.autoprimaryctx  # the primary context of the one visible GPU, made current

        self.device = read_device_info(pycuda.autoprimaryctx.device, physical_index)
        self._functions: dict[tuple[str, str, str], Any] = {}
        self._modules: list[Any] = []  # keep loaded modules alive
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
            function = self._function(job, variant)
            return self._check_and_time(job, family, variant, shape, function, report)
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
            if self.device.model not in known:
                report("measuring ceilings")
                known[self.device.model] = measure_ceilings()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(known, indent=1))
            self._ceilings = known[self.device.model]
        return self._ceilings

    # ---- stages ------------------------------------------------------------------------------

    def _check_and_time(self, job: Job, family: Family, variant: Variant, shape: Any, function: Any,
                        report: Callable[[str], None]) -> Measurement:
        run = launcher(function, family.launch(variant, shape))
        started = time.perf_counter()
        measurement, arguments = self._check(job, family, variant, shape, run, report)
        measurement.check_seconds = time.perf_counter() - started
        if measurement.status is not Status.OK or job.timing is None:
            return measurement
        measurement.ceiling = self.ceilings(report).get(family.ceiling_key(variant.dtype))
        report("time")
        started = time.perf_counter()
        measurement.timing = self._time(lambda: run(arguments), job.timing)
        measurement.l2_flushed = not job.timing.warm
        measurement.throughput = family.throughput(variant, shape, measurement.timing.median_ms / 1e3)
        measurement.time_seconds = time.perf_counter() - started
        return measurement

    def _check(self, job: Job, family: Family, variant: Variant, shape: Any, run: Callable[[list[Any]], None],
               report: Callable[[str], None]) -> tuple[Measurement, list[Any]]:
        """One launch per seed on fresh inputs into a NaN-poisoned output, each compared with its
        reference; the verdict, and the last launch's arguments (for timing)."""
        worst, problem, arguments = 0.0, "", []
        tolerance = family.tolerance(variant.dtype, shape)
        output_name, output_dims = family.output_dims(shape)
        for seed in job.seeds:
            report(f"check seed {seed}")
            expected = self._problem(family, variant, shape, seed)
            # Fresh copies, so that a kernel scribbling on its inputs cannot spoil the next check.
            arrays = {name: array.copy() for name, array in expected.inputs.items()}
            arrays[output_name] = gpuarray.empty(output_dims, dtype=NUMPY_DTYPE[variant.dtype])
            arrays[output_name].fill(np.nan)
            arguments = family.kernel_arguments(shape, {name: array.gpudata for name, array in arrays.items()})
            run(arguments)
            cuda.Context.synchronize()
            error, found = self._checker.compare(arrays[output_name], expected, family.output_region(shape), tolerance)
            worst = max(worst, error) if not math.isnan(error) else math.inf
            problem = problem or found
        measurement = Measurement(Status.WRONG if problem else Status.OK, problem, error=worst, tolerance=tolerance,
                                  checks=len(job.seeds), device=self.device, unit=family.throughput_unit)
        return measurement, arguments

    def _time(self, launch: Callable[[], None], options: TimingOptions) -> Timing:
        """CUDA events around each launch, after warm-up; sample until the median is steady.

        Cold (the default): an asynchronous L2 flush goes first, which also keeps the GPU busy
        while the host records the start event and launches, so launch latency is not timed.
        Warm: a batch of back-to-back launches per sample, long enough to hide that latency.
        """
        for _ in range(options.warmup):
            launch()
        start, end = cuda.Event(), cuda.Event()
        batch = 1 if not options.warm else self._warm_batch(launch, start, end)
        samples: list[float] = []
        deadline = time.monotonic() + options.budget_s
        while len(samples) < options.max_samples:
            if not options.warm:
                self._flush_l2(len(samples))
            start.record()
            for _ in range(batch):
                launch()
            end.record()
            end.synchronize()
            samples.append(end.time_since(start) / batch)
            if len(samples) >= options.min_samples and (
                    median_relative_error(samples) < options.target_rsd or time.monotonic() > deadline):
                break
        return Timing.of(samples)

    @staticmethod
    def _warm_batch(launch: Callable[[], None], start: Any, end: Any) -> int:
        """Launches per warm sample: enough for about a millisecond of work."""
        start.record()
        launch()
        end.record()
        end.synchronize()
        return max(1, min(1000, math.ceil(WARM_SAMPLE_MS / max(end.time_since(start), 1e-3))))

    def _flush_l2(self, salt: int) -> None:
        """Write a buffer twice the L2's size, so the next launch finds none of its data cached."""
        cuda.memset_d32_async(self._flush_buffer, salt, 2 * self.device.l2_bytes // 4, None)

    def _problem(self, family: Family, variant: Variant, shape: Any, seed: int) -> "DeviceProblem":
        """Random inputs and their float64 reference on the device, kept for the next variants."""
        key = (family.name, str(shape), variant.dtype, seed)
        if key not in self._problems:
            inputs = family.random_inputs(variant, shape, seed)
            reference = np.ascontiguousarray(family.reference(inputs, shape))
            self._problems[key] = DeviceProblem(
                inputs={name: gpuarray.to_gpu(host) for name, host in inputs.items()},
                reference=gpuarray.to_gpu(reference), reference_norm=float(np.linalg.norm(reference)))
            while len(self._problems) > PROBLEMS_KEPT:
                self._problems.popitem(last=False)
        self._problems.move_to_end(key)
        return self._problems[key]

    def _function(self, job: Job, variant: Variant) -> Any:
        key = (job.cubin, job.name, job.cache_config)
        if key not in self._functions:
            with open(job.cubin, "rb") as handle:
                module = cuda.module_from_buffer(handle.read())
            self._modules.append(module)
            function = module.get_function(job.name)
            configure(function, job.cache_config, variant.dynamic_shared_bytes)
            self._functions[key] = function
        return self._functions[key]

def configure(function: Any, cache_config: str, dynamic_shared_bytes: int) -> None:
    """Cache preference, the matching shared-memory carveout, and the opt-in for > 48 KiB dynamic shared."""
    if cache_config != "none":
        function.set_cache_config(_CACHE_PREFERENCE[cache_config])
        function.set_attribute(cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, CACHE_CONFIGS[cache_config])
    if dynamic_shared_bytes > 48 * 1024:
        function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_shared_bytes)


@dataclass
class DeviceProblem:
    inputs: dict[str, Any]  # pristine device arrays, copied for each check
    reference: Any  # float64 device array: the output region, row-major
    reference_norm: float


class OutputChecker:
    """Compares an output on the device with its float64 reference, in three reductions over the
    whole buffer: squared error inside the region, NaN (unwritten) elements inside it, and
    elements written outside it (the buffer is poisoned with NaN before the launch)."""

    def __init__(self) -> None:
        self._kernels: dict[str, tuple[Any, Any, Any]] = {}

    def compare(self, out: Any, expected: DeviceProblem, region: tuple[slice, ...], tolerance: float
                ) -> tuple[float, str]:
        """Relative error ||out - ref|| / ||ref|| of the region, and what is wrong ('' when nothing is)."""
        rows, cols, lead = region[0].stop, region[1].stop, out.shape[1]
        squared, unwritten, stray = self._reductions(out.dtype)
        arguments = (out, expected.reference, np.int32(rows), np.int32(cols), np.int32(lead))
        missing = int(unwritten(*arguments).get())
        outside = int(stray(*arguments).get())
        error = math.sqrt(float(squared(*arguments).get())) / (expected.reference_norm or 1.0)
        if missing:
            return math.nan, f"{missing} of {rows * cols} output elements were not written (or are NaN)"
        if outside:
            return error, f"{outside} elements outside the output region were written"
        if error > tolerance:
            return error, f"relative error {error:.3g} is above the tolerance {tolerance:.3g}"
        return error, ""

    def _reductions(self, dtype: np.dtype) -> tuple[Any, Any, Any]:
        ctype = "float" if dtype == np.float32 else "double"
        if ctype not in self._kernels:
            arguments = f"const {ctype} *result, const double *ref, int rows, int cols, int ld"
            inside = "((long long)(i / ld) < rows && (long long)(i % ld) < cols)"
            difference = "((double)result[i] - ref[(i / ld) * cols + i % ld])"
            self._kernels[ctype] = (
                ReductionKernel(np.float64, "0", "a+b", arguments=arguments,
                                map_expr=f"({inside} && !isnan(result[i])) ? {difference} * {difference} : 0.0"),
                ReductionKernel(np.int32, "0", "a+b", arguments=arguments,
                                map_expr=f"({inside} && isnan(result[i])) ? 1 : 0"),
                ReductionKernel(np.int32, "0", "a+b", arguments=arguments,
                                map_expr=f"(!{inside} && !isnan(result[i])) ? 1 : 0"))
        return self._kernels[ctype]


def read_device_info(device: Any, physical_index: int) -> DeviceInfo:
    """What identifies a pycuda Device's model, and its L2 size."""
    attribute = cuda.device_attribute
    major, minor = device.compute_capability()
    return DeviceInfo(
        name=device.name(), cc=f"{major}.{minor}", sm_count=device.get_attribute(attribute.MULTIPROCESSOR_COUNT),
        memory_bytes=device.total_memory(), l2_bytes=device.get_attribute(attribute.L2_CACHE_SIZE),
        driver=driver_version(physical_index), index=physical_index)


def driver_version(physical_index: int) -> str:
    """The driver's version as nvidia-smi prints it (580.159.04), else the CUDA API version it serves."""
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                                 "-i", str(physical_index)], capture_output=True, text=True, timeout=20).stdout
        if listed.strip():
            return listed.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    api = cuda.get_driver_version()
    return f"CUDA {api // 1000}.{api % 1000 // 10}"


def measure_ceilings() -> dict[str, float]:
    """Device-to-device copy bandwidth (GB/s, bytes read + written) and, when CuPy or PyTorch is
    importable, cuBLAS SGEMM and DGEMM rates (TFLOP/s, no TF32) at 8192^3."""
    ceilings = {"copy": copy_bandwidth()}
    ceilings.update(gemm_rates())
    return ceilings


def copy_bandwidth(size: int = 1 << 30, repeats: int = 20) -> float:
    source, target = cuda.mem_alloc(size), cuda.mem_alloc(size)
    cuda.memset_d32(source, 0x3F800000, size // 4)
    start, end = cuda.Event(), cuda.Event()
    samples = []
    for _ in range(repeats + 3):
        start.record()
        cuda.memcpy_dtod(target, source, size)
        end.record()
        end.synchronize()
        samples.append(end.time_since(start))
    seconds = float(np.median(samples[3:])) / 1e3
    return 2 * size / seconds / 1e9


def gemm_rates(n: int = 8192, repeats: int = 10) -> dict[str, float]:
    """cuBLAS through CuPy or PyTorch, timed with events on the default stream both libraries use."""
    vendor = _vendor_gemm()
    if vendor is None:
        return {}
    random_matrix, multiply = vendor
    start, end = cuda.Event(), cuda.Event()
    rates = {}
    for dtype in ("f32", "f64"):
        a, b = random_matrix(n, dtype), random_matrix(n, dtype)
        samples = []
        for _ in range(repeats + 2):
            start.record()
            multiply(a, b)
            end.record()
            end.synchronize()
            samples.append(end.time_since(start))
        rates[f"gemm_{dtype}"] = 2 * n**3 / (float(np.median(samples[2:])) / 1e3) / 1e12
        del a, b
    return rates


def _vendor_gemm() -> tuple[Callable[[int, str], Any], Callable[[Any, Any], Any]] | None:
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


def launcher(function: Any, launch: Launch) -> Callable[[list[Any]], None]:
    """Launches `function` with prepared arguments: little host work per launch. An output the
    launch marks as cleared is zeroed just before, in the same stream (inside any timing)."""
    prepared: list[str] = []

    def run(arguments: list[Any]) -> None:
        if not prepared:
            prepared.append("".join("P" if isinstance(a, cuda.DeviceAllocation) else a.dtype.char for a in arguments))
            function.prepare(prepared[0])
        if launch.cleared:  # a split-K kernel adds into its output: zero it first, as part of the call
            cleared = launch.cleared
            cuda.memset_d2d32_async(arguments[cleared.argument], cleared.pitch_bytes, 0, cleared.width, cleared.rows,
                                    None)
        function.prepared_async_call(launch.grid, launch.block, None, *arguments,
                                     shared_size=launch.dynamic_shared_bytes)

    return run
