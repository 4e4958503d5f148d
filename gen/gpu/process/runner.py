"""A job in the GPU worker process: load a variant, check it on fresh inputs for every seed, and
time it if it is right.

A `Runner` lives in a worker process that sees one GPU (CUDA_VISIBLE_DEVICES is set before it
starts). It works in the device's primary context (gen.gpu.runtime.device), so CuPy or PyTorch in
the same process (for the cuBLAS ceiling) share it. Importing this module makes no context.

Everything here is generic over families: arrays, arguments, the output region and the reference
come from the family's Problem, in any number of dimensions.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from ...core.errors import UsageError
from ...core.objectives import NO_ENERGY
from ...core.results import Measurement, Status
from ...core.timing import Timing, slower_than_cutoff
from ...families import get_family
from ...families.family import Family, Launch
from ...families.problem import Problem, Workspace, numpy_dtype
from ...families.variant import Variant
from .ceilings import Ceilings
from .checker import DeviceProblem, OutputChecker
from ..runtime.device import open_primary_context, synchronize
from .energy import Meter, clock_summary, energy_per_launch, open_meter, settle_clock
from .jobs import Job
from ..runtime.launch import CubinModule, CudaError, OutOfMemory, empty, fill, launcher
from .timing import event_samples

UNCHECKED = "output not checked: the problem gives no reference (tune_kernel without an answer)"
PROBLEMS_KEPT = 3  # inputs and float64 references kept on the device per (shape, dtype, seed)


class Runner:
    def __init__(self, physical_index: int = 0):
        self.device, self._pci_bus_id = open_primary_context(physical_index)
        self._modules: dict[str, CubinModule] = {}  # by cubin (a batch compile holds several kernels)
        self._problems: OrderedDict[tuple, DeviceProblem] = OrderedDict()
        self._checker = OutputChecker()
        # written before each cold sample: twice the L2's size, so the next launch finds none of its data cached
        self._flush_buffer = empty((2 * self.device.l2_bytes // 4,), np.uint32)
        self._ceilings = Ceilings(self.device.model)
        self._meter: tuple[Meter | None, str] | None = None  # opened when a job first asks for energy
        self._workspaces: dict[int, Any] = {}  # zeros for a kernel's Workspace, by size in words

    def run(self, job: Job, report: Callable[[str], None] = lambda phase: None) -> Measurement:
        """Check the job's variant on fresh inputs for every seed, then time it if it is right."""
        family = get_family(job.family)
        variant = family.variant_type.from_name(job.name)
        shape = family.parse_shape(job.shape)
        try:
            launch = family.launch(variant, shape)
            return self._check_and_time(job, family, variant, shape, launch, report)
        except UsageError as error:  # a constant the module lacks or cannot hold
            return Measurement(Status.LAUNCH_ERROR, str(error), device=self.device)
        except OutOfMemory as error:
            return Measurement(Status.LAUNCH_ERROR, f"out of device memory: {error}", device=self.device)
        except CudaError as error:
            # A failed launch (illegal address, misaligned access, ...) leaves the context unusable.
            return Measurement(Status.LAUNCH_ERROR, f"{type(error).__name__}: {error}", device=self.device,
                               context_lost=True)

    # ---- stages ------------------------------------------------------------------------------

    def _check_and_time(self, job: Job, family: Family, variant: Variant, shape: Any, launch: Launch,
                        report: Callable[[str], None]) -> Measurement:
        launched = family.problem_of(variant)  # the kernel's arguments
        problem = launched.checked_as  # its inputs and reference, kept across the variants that share them (_problem)
        started = time.perf_counter()
        measurement, call = self._check(job, problem, variant, shape, launch, report, launched)
        measurement.check_seconds = time.perf_counter() - started
        if measurement.status is not Status.OK or job.timing is None:
            return measurement
        measurement.ceiling = self._ceilings.rate(problem.ceiling(variant.dtype), report)
        report("time")
        started = time.perf_counter()
        samples = self._samples(job, call, measurement)
        measurement.timing = Timing.of(samples)
        if slower_than_cutoff(samples, job.timing):
            measurement.message = (f"timing stopped after {len(samples)} samples, every one slower than the best so "
                                   f"far with a margin ({job.timing.stop_above_ms:.4g} ms)")
        measurement.l2_flushed = not job.timing.warm
        measurement.throughput = problem.throughput(shape, variant.dtype, measurement.timing.median_ms / 1e3)
        if job.timing.energy:
            report("energy")
            self._measure_energy(measurement, call, measurement.timing.median_ms / 1e3)
        measurement.time_seconds = time.perf_counter() - started
        return measurement

    def _samples(self, job: Job, call: Callable[[], None], measurement: Measurement) -> list[float]:
        """The job's timing samples; with energy, timed once the SM clock is steady, and the clock
        and what slowed it, read during the rounds, into the measurement."""
        meter = self._opened_meter()[0] if job.timing.energy else None
        clocks: list[tuple[float, int]] = []
        read_clock = (lambda: clocks.append(meter.clock())) if meter is not None and meter.clocks else None
        if read_clock:
            settle_clock(call, meter)
        flush_l2 = None if job.timing.warm else lambda salt: fill(self._flush_buffer, salt)
        samples = event_samples(call, job.timing, before_each=flush_l2, during_round=read_clock)
        if clocks:
            measurement.sm_clock_mhz, measurement.throttle = clock_summary(clocks)
        return samples

    def _opened_meter(self) -> tuple[Meter | None, str]:
        """The GPU's NVML meter, opened when a job first asks for energy; or None and why not."""
        if self._meter is None:
            self._meter = open_meter(self._pci_bus_id)
        return self._meter

    def _measure_energy(self, measurement: Measurement, call: Callable[[], None], seconds_per_launch: float) -> None:
        """Joules per launch and average watts into the measurement, or in its message why not."""
        meter, reason = self._opened_meter()
        found = energy_per_launch(call, meter, seconds_per_launch) if meter and meter.counter is not None else reason
        if isinstance(found, str):
            measurement.message = "; ".join(m for m in (measurement.message, f"{NO_ENERGY}: {found}") if m)
        else:
            measurement.energy_j, measurement.power_w = found

    def _check(self, job: Job, problem: Problem, variant: Variant, shape: Any, launch: Launch,
               report: Callable[[str], None], launched: Problem) -> tuple[Measurement, Callable[[], None]]:
        """One launch per seed on fresh inputs into a NaN-poisoned output, each compared with its
        reference; the verdict, and the last launch (for timing). `launched` is the problem as the
        variant's kernel takes it (Family.problem_of): its arguments."""
        worst, problem_found, call = 0.0, "", lambda: None
        tolerance = problem.tolerance(variant.output_dtype, shape)
        output = problem.output.name
        if job.cubin not in self._modules:
            self._modules[job.cubin] = CubinModule(job.cubin)
        for seed in job.seeds:
            report(f"check seed {seed}")
            expected = self._problem(problem, variant.dtype, shape, seed,
                                     lambda step: report(f"check seed {seed}: {step}"))
            arrays = {**expected.fresh_arrays(output, numpy_dtype(variant.output_dtype)), **self._zeroed(launched)}
            call = launcher(self._modules[job.cubin], job.name, job.cache_config, launch, launched, shape, arrays)
            call()
            synchronize()
            if problem.checks_on_host:
                problem_found = problem_found or problem.host_check(arrays[output].get(), shape)
            if not expected.checked:
                continue
            error, found = self._checker.compare(arrays[output], expected, tolerance)
            worst = max(worst, error) if not math.isnan(error) else math.inf
            problem_found = problem_found or found
        message = problem_found or ("" if expected.checked or problem.checks_on_host else UNCHECKED)
        measurement = Measurement(Status.WRONG if problem_found else Status.OK, message, error=worst,
                                  tolerance=tolerance, checks=len(job.seeds), device=self.device,
                                  unit=problem.ceiling(variant.dtype).unit)
        return measurement, call

    def _zeroed(self, launched: Problem) -> dict[str, Any]:
        """The kernel's workspaces (problem.Workspace), zeroed before each check (a wrong kernel may
        have left them dirty; a right one leaves them zeroed for its timing's launches)."""
        found = {}
        for argument in launched.arguments:
            if isinstance(argument, Workspace):
                if argument.words not in self._workspaces:
                    self._workspaces[argument.words] = empty((argument.words,), np.float32)
                found[argument.name] = self._workspaces[argument.words]
                fill(found[argument.name], 0.0)
        return found

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
