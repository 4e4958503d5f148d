"""The engine: compiles ahead and drains the GPUs. Points submitted go to the compile pool; a
compiled variant's points become jobs, which the executor's GPU workers take as they free up (or
rows at once, for a compile error, a compile-only point, or no GPU); finished rows come back in
completion order.

    with Engine(CompilePool(compiling), executor, checking) as engine:
        engine.submit(points)          # trusted: the plan checked them
        rows = engine.finished()       # whatever finished since the last call

Callers see `submit`, `compile_ahead` (variants whose points come later), `finished`, `room`
(how many more points keep every compile thread and GPU busy) and `idle`; never the engine's
queues: jobs go to the GPUs through a JobFeed (gen.gpu.feed). An error no row can hold (a template that does
not render, a compiler that keeps failing, GPUs that cannot load the cubins) comes out of
`finished` once the rows finished before it are out. Leaving the `with` block on an exception (an
interrupt) kills the compiler runs and the GPU workers: work cut short gives no row.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Iterable, Sequence

from ..compiling.compiler import Compiled, compiled_row
from ..compiling.pool import CompilePool
from ..core.errors import Interrupted, UsageError
from ..core.processes import POLL_S
from ..core.results import DeviceInfo, Measurement, Row
from ..core.timing import TimingOptions
from ..families import get_family
from ..families.variant import Variant
from ..gpu.feed import JobFeed
from ..gpu.process.jobs import Job, job_for, sanitizer_job
from ..gpu.executor import Executor, GpuUnavailable
from ..families.family import runs_on
from .plan import Point, shape_text



@dataclass(frozen=True)
class Checking:
    """How the GPU checks and times each point."""

    seed: int  # of the random inputs
    timing: TimingOptions | None  # None: check only
    sanitize: bool = False  # compute-sanitizer on each variant, once, at a small size, before it is timed


@dataclass
class EngineStats:
    """Where the time went."""

    started: float = field(default_factory=time.perf_counter)
    compiled: int = 0  # variants the compiler compiled
    cached: int = 0  # variants the compile cache held
    compile_seconds: float = 0.0  # the compiler's wall time, summed over its runs
    gpu_seconds: float = 0.0  # checking and timing in the workers, summed over GPUs
    check_seconds: float = 0.0
    time_seconds: float = 0.0
    measured: int = 0

    @property
    def wall_seconds(self) -> float:
        return time.perf_counter() - self.started

    def count_compile(self, compiled: Compiled) -> None:
        self.cached += compiled.cached
        self.compiled += not compiled.cached
        self.compile_seconds += 0.0 if compiled.cached else compiled.seconds

    def count_measurement(self, measurement: Measurement) -> None:
        self.measured += 1
        self.check_seconds += measurement.check_seconds
        self.time_seconds += measurement.time_seconds
        self.gpu_seconds += measurement.check_seconds + measurement.time_seconds


class Engine:
    """`compiler`: the pool the engine compiles with (it closes it when it ends); `executor`: the
    GPUs (None: compile only), which the engine never closes: their owner does."""

    def __init__(self, compiler: CompilePool, executor: Executor | None, checking: Checking):
        self.compiler, self.checking = compiler, checking
        self.stats = EngineStats()
        self.unavailable: str | None = None  # why no kernel can run here, once that is known
        self._executor = executor
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue[Row | BaseException] = queue.SimpleQueue()
        self._jobs = JobFeed(on_take=self._with_cutoff)
        self._tickets = itertools.count(1)
        self._waiting_rows: dict[int, Row] = {}  # by its job's ticket, from the feed to the job's end
        self._after_sanitizer: dict[int, Job] = {}  # by a sanitizer job's ticket: the job it goes before
        self._hazards: dict[int, Measurement] = {}  # by a job's ticket: its sanitizer job's measurement
        self._in_flight = 0  # submitted points whose row has not been taken yet
        self._counted: set[tuple[Variant, str]] = set()  # compiles counted in the stats, with their level
        self._sanitized: set[Variant] = set()
        self._failure: BaseException | None = None
        self._cutoff_ms: float | None = None  # timing stops early above this (see stop_timing_above)
        self._stopping = threading.Event()
        self._feeder = threading.Thread(target=self._feed_gpus, name="tilegen-gpus", daemon=True)
        if executor is not None:
            self._feeder.start()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    # ---- the caller's side -----------------------------------------------------------------------

    def submit(self, points: Iterable[Point]) -> int:
        """Evaluate these points (checked already: see gen.evaluate.plan); each gives one row."""
        count = 0
        for point in points:
            count += 1
            with self._lock:
                self._in_flight += 1
            self.compiler.submit(point.variant, point.level).add_done_callback(partial(self._compiled, point))
        return count

    def compile_ahead(self, points: Iterable[Point]) -> None:
        """Compile these points' variants now, ahead of the points (which come once there is room):
        never a row."""
        for point in points:
            self.compiler.submit(point.variant, point.level)

    def speculate(self, points: Sequence[Point]) -> None:
        """Compile these points' variants when a compile thread is free, ahead of other speculative
        compiles: what a search will most likely propose next. Never a row."""
        for level in dict.fromkeys(point.level for point in points):
            self.compiler.prefetch([p.variant for p in points if p.level == level], level, first=True)

    def stop_timing_above(self, cutoff_ms: float | None) -> None:
        """Jobs that start from now on stop timing once their samples are clearly slower than
        `cutoff_ms` (a search's best so far, with a margin); None: time them in full."""
        self._cutoff_ms = cutoff_ms

    def room(self) -> int:
        """How many more points keep every compile thread and GPU busy without queueing more: as
        many jobs again as the GPUs hold (ready for them in the feed), and one per compile thread."""
        held = self._executor.capacity() if self._executor is not None else 1
        capacity = 2 * held + self.compiler.workers
        with self._lock:
            return max(0, capacity - self._in_flight)

    @property
    def idle(self) -> bool:
        """No submitted point is still without its row."""
        with self._lock:
            return self._in_flight == 0

    def finished(self, timeout: float = POLL_S) -> list[Row]:
        """Rows finished since the last call, waiting up to `timeout` seconds for the first; after a
        failure, the rows finished before it, then the failure."""
        found: list[Row] = []
        try:
            self._take(self._events.get(timeout=0 if self._failure else timeout), found)
            while True:
                self._take(self._events.get_nowait(), found)
        except queue.Empty:
            pass
        if self._failure is not None and not found:
            raise self._failure
        with self._lock:
            self._in_flight -= len(found)
        return found

    def close(self) -> None:
        """After the last row: stop the threads; speculative compiles still running are killed."""
        self._stopping.set()
        self._jobs.close()
        self.compiler.kill()

    def abort(self) -> None:
        """Stop now (an interrupt or an error): kill the compiler runs and the GPU workers."""
        self._stopping.set()
        self._jobs.close()
        self.compiler.kill()
        if self._executor is not None:
            self._executor.kill()
        deadline = time.monotonic() + 1.0
        self.compiler.join(max(0.0, deadline - time.monotonic()))
        if self._feeder.is_alive():
            self._feeder.join(max(0.0, deadline - time.monotonic()))

    # ---- compiled ------------------------------------------------------------------------------

    def _take(self, event: Row | BaseException, found: list[Row]) -> None:
        if isinstance(event, BaseException):
            self._failure = self._failure or event
        else:
            found.append(event)

    def _compiled(self, point: Point, future: Future[Compiled]) -> None:
        """A row for what needs no GPU, else a job (in the thread that compiled the variant)."""
        if self._stopping.is_set():
            return
        try:
            compiled = future.result()  # done: no wait
        except (CancelledError, Interrupted):
            return
        except BaseException as error:
            self._events.put(error)
            return
        try:
            self._compiled_point(point, compiled)
        except BaseException as failure:  # a family's property that raises, say: the run ends with it
            self._events.put(failure)

    def _compiled_point(self, point: Point, compiled: Compiled) -> None:
        with self._lock:
            if (compiled.variant, compiled.level) not in self._counted:
                self._counted.add((compiled.variant, compiled.level))
                self.stats.count_compile(compiled)
        row = compiled_row(compiled, shape_text(point.shape), cache_config=point.cache_config,
                           provenance=dict(self.compiler.provenance(get_family(compiled.variant.family))))
        if not compiled.ok or point.shape is None or self._executor is None:
            self._events.put(row)
            return
        timing = self.checking.timing
        if point.energy and timing is not None:
            timing = replace(timing, energy=True)
        job = job_for(compiled, point.shape, point.cache_config or "none", self.checking.seed, timing,
                      next(self._tickets))
        with self._lock:
            self._waiting_rows[job.ticket] = row
        self._jobs.put(self._sanitizer_first(job, compiled.variant))

    def _sanitizer_first(self, job: Job, variant: Variant) -> Job:
        """With `sanitize`, a variant's first job goes after a sanitizer job at the family's small
        shape, whose measurement decides the row: its hazards join the job's, or, when the tools
        could not run, it is the row."""
        with self._lock:
            if not self.checking.sanitize or variant in self._sanitized:
                return job
            self._sanitized.add(variant)
        first = sanitizer_job(job, get_family(variant.family).sanitize_size(variant), next(self._tickets))
        with self._lock:
            self._after_sanitizer[first.ticket] = job
        return first

    # ---- the GPUs --------------------------------------------------------------------------------

    def _feed_gpus(self) -> None:
        """Start the workers, then feed them jobs as they come; without a GPU, every job becomes a
        `compiled` row that says why no kernel ran."""
        assert self._executor is not None
        try:
            devices = self._executor.devices()
        except GpuUnavailable as reason:
            self.unavailable = str(reason)
            self._without_gpus(str(reason))
            return
        except BaseException as error:
            self._events.put(error)
            return
        try:
            self._check_arch(devices)
            for job, measurement in self._executor.run(self._jobs):
                if self._stopping.is_set():
                    return
                self._measured(job, measurement)
            if not self._stopping.is_set():
                raise RuntimeError("the GPU workers stopped taking jobs")
        except BaseException as error:  # the GPUs lost (a cluster with no worker left), say
            if not self._stopping.is_set():
                self._events.put(error)

    def _without_gpus(self, reason: str) -> None:
        for job in self._jobs:  # until the engine closes
            with self._lock:
                row = self._waiting_rows.pop(self._after_sanitizer.pop(job.ticket, job).ticket)
            row.message = f"not run: {reason}"
            self._events.put(row)

    def _check_arch(self, devices: Sequence[DeviceInfo]) -> None:
        """Refuse GPUs that cannot load what is compiled here (an --arch, or a cluster of other GPUs)."""
        arch = self.compiler.options.arch
        wrong = sorted({f"{d.name} (cc {d.cc})" for d in devices if not runs_on(arch, d.cc)})
        if wrong:
            raise UsageError(f"the variants are compiled for {arch}, which {', '.join(wrong)} cannot run; pass the "
                             f"GPUs' --arch (a sweep compiles for one; tune compiles per GPU model)")

    def _with_cutoff(self, job: Job) -> Job:
        """The job as it goes to a GPU, with the freshest timing cutoff."""
        cutoff = self._cutoff_ms
        if cutoff is not None and job.timing is not None:
            job = replace(job, timing=replace(job.timing, stop_above_ms=cutoff))
        return job

    def _measured(self, job: Job, measurement: Measurement) -> None:
        with self._lock:
            after = self._after_sanitizer.pop(job.ticket, None)
        if after is not None and measurement.hazards is not None:  # the tools ran: now the job they went before
            with self._lock:
                self._hazards[after.ticket] = measurement
            self._jobs.put(after)
            return
        with self._lock:
            row = self._waiting_rows.pop((after or job).ticket)
            self.stats.count_measurement(measurement)
            sanitized = self._hazards.pop(job.ticket, None)
        if sanitized is not None:
            measurement.hazards, measurement.hazard_note = sanitized.hazards, sanitized.hazard_note
        measurement.apply_to(row)
        self._events.put(row)
