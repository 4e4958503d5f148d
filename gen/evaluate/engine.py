"""One evaluation pipeline, used by sweep, tune, compile and revalidate. Callers differ only in
who proposes the points (a space, a search strategy, a stored winner).

    with Pipeline(family, options) as pipeline:
        pipeline.submit(points)                 # a variant on a shape (and a cache preference)
        for row in pipeline.rows():             # rows as they finish, in any order
            ...

Inside, compile threads (one per core) take variants as they are submitted, several to an nvcc
run when many wait; a compiled variant's points go straight to the GPU queue, which the executor's
workers drain one job per GPU at a time. So the GPU never waits for nvcc while there is compiled
work, and nvcc never idles while points wait to be compiled. `prefetch` compiles variants that may
be proposed later at low priority, when cores are free. The GPU workers start while the first
variants compile.

An interrupt (Ctrl-C, SIGTERM raised as KeyboardInterrupt) leaving the `with` block stops it all
at once: queued compiles are dropped, running nvcc processes and GPU workers are killed, and no
row is produced for work that was cut short.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from .options import RunOptions, make_executor, runs_on  # noqa: F401 (RunOptions: until the engine is rewritten)
from ..build.compiler import CompileOptions, Compiled, batch_size, compile_batch, compiled_row, provenance
from ..core.errors import Interrupted, UsageError
from ..families.family import Family, point_refusal
from ..core.processes import ProcessGroup
from ..gpu.jobs import Job, job_for
from ..core.results import DeviceInfo, Measurement, Row, TimingOptions, row_key, skipped_row
from ..families.variant import Variant
from ..gpu.executor import Executor, GpuUnavailable

POLL_S = 0.1  # how often waiting threads look for a stop


@dataclass(frozen=True)
class Point:
    """One evaluation: a variant on a shape (None: compile only) with a run-time cache preference."""

    variant: Variant
    shape: Any = None
    cache_config: str = ""

    @property
    def key(self) -> str:
        return row_key(self.variant.name, "" if self.shape is None else str(self.shape), self.cache_config)


@dataclass
class PipelineStats:
    """Where the time went."""

    started: float = field(default_factory=time.perf_counter)
    compiled: int = 0  # variants nvcc compiled
    cached: int = 0  # variants the compile cache held
    compile_seconds: float = 0.0  # nvcc's wall time, summed over its runs
    gpu_seconds: float = 0.0  # checking and timing in the workers, summed over GPUs
    check_seconds: float = 0.0
    time_seconds: float = 0.0
    measured: int = 0

    @property
    def wall_seconds(self) -> float:
        return time.perf_counter() - self.started


class Pipeline:
    """`executor`: the GPUs (None: local workers on `options.gpus`). With `gpus_later`, compiling
    starts now and the GPUs come with `use_gpus` (tune learns the GPU models meanwhile). The
    pipeline closes only an executor it made: one it was given stays open for the giver's next use."""

    def __init__(self, family: Family, options: RunOptions, executor: Executor | None = None,
                 gpus_later: bool = False):
        self.family, self.options = family, options
        self.compile_options = CompileOptions.local(options.arch, options.compile_jobs)
        self.provenance = provenance(self.compile_options, family)
        self.seed = options.seed if options.seed is not None else random.randrange(1, 2**31)
        self.stats = PipelineStats()
        self.unavailable: str | None = None  # why no kernel can run here, once that is known
        self._gpus_later = gpus_later and options.run_kernels
        self._owns_executor = executor is None and options.run_kernels and not gpus_later
        self._executor = make_executor(options) if self._owns_executor else executor
        self._lock = threading.Condition()
        self._urgent: deque[Variant] = deque()  # submitted points wait for these
        self._later: deque[Variant] = deque()  # prefetched: compiled when cores are free
        self._waiting: dict[Variant, list[Point]] = {}
        self._compiled: dict[Variant, Compiled] = {}
        self._sanitized: set[Variant] = set()
        self._rows: queue.Queue[Row] = queue.Queue()
        self._jobs: queue.Queue[tuple[Job, Row]] = queue.Queue()
        self._pending_rows: dict[Job, list[Row]] = {}  # jobs with the GPU (two may be alike)
        self._outstanding = 0  # submitted points whose row has not been taken yet
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._children = ProcessGroup()  # nvcc runs
        self._threads: list[threading.Thread] = []
        self._nvcc_runs = 0  # started so far: the first wave compiles one variant each, to feed the GPU soon

    # ---- the caller's side -----------------------------------------------------------------

    def __enter__(self) -> "Pipeline":
        for number in range(self.compile_options.jobs):
            self._spawn(self._compile_loop, f"compile-{number}")
        if self._executor is not None:
            self._spawn(self._gpu_loop, "gpu")
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    def use_gpus(self, executor: Executor) -> None:
        """The GPUs for a pipeline made with `gpus_later`: compiled points waiting for them start."""
        assert self._gpus_later and self._executor is None, "the pipeline has its GPUs already"
        self._executor = executor
        self._spawn(self._gpu_loop, "gpu")

    def devices(self) -> list:
        """The GPUs this pipeline runs on (starting their workers if need be); none for compile only."""
        return [] if self._executor is None else self._executor.devices()

    def submit(self, points: Iterable[Point]) -> int:
        """Queue points for evaluation; each gives one row. Invalid variants and shapes a variant
        refuses give their `skipped` row at once. Returns how many were queued."""
        count = 0
        for point in points:
            count += 1
            with self._lock:
                self._outstanding += 1
            if (reason := self._refusal(point)) is not None:
                self._rows.put(skipped_row(point.variant, reason, "" if point.shape is None else str(point.shape),
                                           cache_config=point.cache_config, provenance=dict(self.provenance)))
                continue
            with self._lock:
                variant = point.variant
                if variant in self._compiled:
                    self._after_compile(self._compiled[variant], [point])
                    continue
                if variant not in self._waiting:
                    self._waiting[variant] = []
                    self._urgent.append(variant)
                    if variant in self._later:
                        self._later.remove(variant)
                self._waiting[variant].append(point)
                self._lock.notify()
        return count

    def prefetch(self, variants: Iterable[Variant]) -> None:
        """Compile these when cores are free (proposals to come): speculation, never rows."""
        with self._lock:
            known = set(self._waiting) | set(self._compiled) | set(self._later)
            self._later.extend(v for v in variants if v not in known)
            self._lock.notify_all()

    @property
    def outstanding(self) -> int:
        """Submitted points whose row has not been taken yet."""
        return self._outstanding

    @property
    def uncompiled(self) -> int:
        """Submitted points still waiting for their compile."""
        with self._lock:
            return sum(len(points) for points in self._waiting.values())

    def rows(self) -> Iterator[Row]:
        """Every submitted point's row as it finishes, until none is outstanding."""
        while self._outstanding:
            yield from self.take(timeout=POLL_S)

    def take(self, timeout: float = POLL_S) -> list[Row]:
        """Rows finished since the last call, waiting up to `timeout` seconds for the first. After a
        failure (a compile that cannot be done, the GPUs gone), the rows finished before it come
        first, so they are recorded; then it is raised."""
        found = []
        try:
            found.append(self._rows.get(timeout=0 if self._failure is not None else timeout))
            while True:
                found.append(self._rows.get_nowait())
        except queue.Empty:
            pass
        if self._failure is not None and not found:
            raise self._failure
        with self._lock:
            self._outstanding -= len(found)
        return found

    def close(self) -> None:
        """After the last row: stop the threads, and the workers if the pipeline made them, and drop
        speculative compiles."""
        self._stop.set()
        self._children.kill_all()
        with self._lock:
            self._lock.notify_all()
        if self._executor is not None and self._owns_executor:
            self._executor.close()

    def abort(self) -> None:
        """Stop now (an interrupt or an error): kill nvcc and the workers; nothing more is recorded."""
        self._stop.set()
        self._children.kill_all()
        with self._lock:
            self._lock.notify_all()
        if self._executor is not None:
            self._executor.kill()
        deadline = time.monotonic() + 1.0
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # ---- compiling ---------------------------------------------------------------------------

    def _refusal(self, point: Point) -> str | None:
        return point_refusal(self.family, point.variant, point.shape)

    def _compile_loop(self) -> None:
        """Compile what waits, urgent first, until the pipeline stops; any error ends the run."""
        try:
            while not self._stop.is_set():
                batch = self._next_batch()
                if batch:
                    self._compiled_batch(compile_batch(batch, self.compile_options, self._children))
        except Interrupted:
            return
        except BaseException as error:  # a template that does not render, a plugin's property that raises, ...
            self._fail(error)

    def _next_batch(self) -> list[Variant]:
        """The next variants to compile together (none after a short wait when nothing waits)."""
        with self._lock:
            source = self._urgent or self._later
            if not source:
                self._lock.wait(POLL_S)
                return []
            first_wave = self._nvcc_runs < self.compile_options.jobs
            count = 1 if first_wave else batch_size(len(source), self.compile_options.jobs)
            self._nvcc_runs += 1
            return [source.popleft() for _ in range(min(count, len(source)))]

    def _compiled_batch(self, results: list[Compiled]) -> None:
        with self._lock:
            for compiled in results:
                self._compiled[compiled.variant] = compiled
                self.stats.cached += compiled.cached
                self.stats.compiled += not compiled.cached
                self.stats.compile_seconds += 0.0 if compiled.cached else compiled.seconds
                self._after_compile(compiled, self._waiting.pop(compiled.variant, []))

    def _after_compile(self, compiled: Compiled, points: list[Point]) -> None:
        """Rows for what needs no GPU, jobs for the rest (called holding the lock)."""
        for point in points:
            shape = "" if point.shape is None else str(point.shape)
            row = compiled_row(compiled, shape, cache_config=point.cache_config, provenance=dict(self.provenance))
            if not compiled.ok or point.shape is None or (self._executor is None and not self._gpus_later):
                self._rows.put(row)
                continue
            sanitize = None
            if self.options.sanitize and compiled.variant not in self._sanitized:
                self._sanitized.add(compiled.variant)
                sanitize = self.family.sanitize_size(compiled.variant)
            job = job_for(compiled, point.shape, point.cache_config or "none", self.seed, self.options.timing,
                          sanitize)
            self._jobs.put((job, row))

    # ---- the GPU -----------------------------------------------------------------------------

    def _gpu_loop(self) -> None:
        """Start the workers, then feed them jobs as they come; without a GPU, every job becomes a
        `compiled` row that says why no kernel ran."""
        assert self._executor is not None
        try:
            self._check_arch(self._executor.devices())
        except GpuUnavailable as reason:
            self.unavailable = str(reason)
            while not self._stop.is_set():
                try:
                    _, row = self._jobs.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                row.message = f"not run: {reason}"
                self._rows.put(row)
            return
        except BaseException as error:
            self._fail(error)
            return
        try:
            for job, measurement in self._executor.run(self._job_stream()):
                if self._stop.is_set():
                    return
                self._measured(job, measurement)
            if not self._stop.is_set():
                raise RuntimeError("the GPU workers stopped taking jobs")
        except BaseException as error:
            if not self._stop.is_set():
                self._fail(error)

    def _check_arch(self, devices: Sequence[DeviceInfo]) -> None:
        """Refuse GPUs that cannot load what is compiled here (an --arch, or a cluster of other GPUs)."""
        arch = self.compile_options.arch
        wrong = sorted({f"{d.name} (cc {d.cc})" for d in devices if not runs_on(arch, d.cc)})
        if wrong:
            raise UsageError(f"the variants are compiled for {arch}, which {', '.join(wrong)} cannot run; pass the "
                             f"GPUs' --arch (a sweep compiles for one; tune compiles per GPU model)")

    def _job_stream(self) -> Iterator[Job]:
        while not self._stop.is_set():
            try:
                job, row = self._jobs.get(timeout=POLL_S)
            except queue.Empty:
                continue
            with self._lock:
                self._pending_rows.setdefault(job, []).append(row)
            yield job

    def _measured(self, job: Job, measurement: Measurement) -> None:
        with self._lock:
            row = self._pending_rows[job].pop(0)
            if not self._pending_rows[job]:
                del self._pending_rows[job]
        measurement.apply_to(row)
        self.stats.measured += 1
        self.stats.check_seconds += measurement.check_seconds
        self.stats.time_seconds += measurement.time_seconds
        self.stats.gpu_seconds += measurement.check_seconds + measurement.time_seconds
        self._rows.put(row)

    # ---- plumbing ----------------------------------------------------------------------------

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=f"tilegen-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _fail(self, error: BaseException) -> None:
        """An error no row can hold: the caller's next `take` raises it."""
        if self._failure is None:
            self._failure = error
        self._stop.set()
