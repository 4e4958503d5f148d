"""Jobs on this host's GPUs: one isolated worker process per GPU (gen.gpu.isolated), one job per
GPU at a time, so that timings never share a GPU; and `run_job`, a job on one worker with
compute-sanitizer first when it asks for it (the Dask workers run jobs through it too).

One thread waits on every worker's socket at once (poll) and reads whatever each sent, so that
feeding 64 GPUs costs about what feeding one does: a thread per GPU spent more on handing the
interpreter lock around than on the jobs (scripts/bench_scale.py measures it)."""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from dataclasses import replace
from typing import Iterable, Iterator, Sequence

from ..core.errors import Interrupted
from ..core.processes import ProcessGroup
from ..core.results import DeviceInfo, GpuModel, Measurement, Status
from .isolated import IsolatedWorker
from .jobs import Job
from .worker_process import WORKER

POLL_S = 0.1  # the longest the table waits before it looks for a kill


class LocalExecutor:
    """Isolated workers on this host's GPUs; one job per GPU at a time, so timings never share a GPU."""

    def __init__(self, gpus: Sequence[int] = (0,), silence_s: float = 30.0, target: str = WORKER):
        self.workers = [IsolatedWorker(index, silence_s, target) for index in gpus]
        self._devices: list[DeviceInfo] | None = None
        self._killed = threading.Event()
        self._children = ProcessGroup()  # compute-sanitizer runs

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            self._devices = [worker.start() for worker in self.workers]
        return self._devices

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """One thread (the caller's) waits on every worker at once and reads what each sent as it
        comes; a dealer thread takes the next job whenever a worker is free. What may block for long
        (compute-sanitizer, a worker starting again) runs in a thread of its own meanwhile."""
        self.devices()
        table = _Table(self._killed)
        dealer = threading.Thread(target=self._deal, args=(iter(jobs), table), name="tilegen-dealer", daemon=True)
        for worker in self.workers:
            table.free.put(worker)
        dealer.start()
        try:
            yield from table.serve()
        finally:
            table.close()

    def _deal(self, source: Iterator[Job], table: "_Table") -> None:
        """Hand each job to a free worker, started again first if it died (or to a thread that runs
        compute-sanitizer first); then tell the table how many jobs there were."""
        dealt = 0
        try:
            while (worker := table.free.get()) is not None and not self._killed.is_set():
                if (job := next(source, None)) is None:
                    break
                dealt += 1
                if job.sanitize_size or not worker.alive:
                    threading.Thread(target=self._prepare, args=(worker, job, table), daemon=True).start()
                else:
                    table.post(("job", worker, job, None))
        finally:
            table.post(("dealt", dealt))

    def _prepare(self, worker: IsolatedWorker, job: Job, table: "_Table") -> None:
        """What comes before a job whenever it may take long: compute-sanitizer at the job's small
        size (on the same GPU, while nothing else runs there), starting the worker again."""
        try:
            hazards = sanitized(worker, job, self._children)
            if not worker.alive:
                worker.start()
        except Interrupted:  # killed: what was running is dropped
            return
        except Exception as error:  # a worker that cannot start again, say: a row that says so
            table.post(("done", worker, job, Measurement(Status.LAUNCH_ERROR, f"{type(error).__name__}: {error}",
                                                         device=worker.device, context_lost=True)))
            return
        table.post(("job", worker, job, hazards))

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()

    def kill(self) -> None:
        self._killed.set()
        self._children.kill_all()
        for worker in self.workers:
            worker.kill()

    def by_model(self) -> dict[GpuModel, "LocalExecutor"]:
        """One executor per GPU model, sharing this one's started workers: models tune separately."""
        groups: dict[GpuModel, LocalExecutor] = {}
        for worker, device in zip(self.workers, self.devices()):
            group = groups.setdefault(device.model, LocalExecutor([], target=worker.target))
            group.workers.append(worker)
            group._devices = (group._devices or []) + [device]
        return groups


def run_job(worker: IsolatedWorker, job: Job, children: ProcessGroup) -> Measurement:
    """A job on one worker's GPU: first compute-sanitizer at the job's small size, if it asks for
    that (in a process of its own, on the same GPU, so nothing else runs there meanwhile)."""
    hazards = sanitized(worker, job, children)
    return with_hazards(worker.run(job), hazards)


Hazards = tuple[dict[str, int], str] | None  # compute-sanitizer's hazards per tool and note, if it ran


def sanitized(worker: IsolatedWorker, job: Job, children: ProcessGroup) -> Hazards:
    """compute-sanitizer's findings on the job at its small size, if it asks for that."""
    if not job.sanitize_size:
        return None
    from .sanitize import sanitize

    small = replace(job, shape=job.sanitize_size, timing=None, seeds=job.seeds[:1], sanitize_size=None)
    return sanitize(small, worker.environment(), children)


def with_hazards(measurement: Measurement, hazards: Hazards) -> Measurement:
    measurement.hazards, measurement.hazard_note = hazards if hazards is not None else (None, "")
    return measurement


class _Table:
    """Where one run's jobs meet the workers: `free` workers wait for the dealer; jobs posted to
    the table go to their worker, and `serve` waits on every busy worker at once (poll), reading
    what each sent as it comes and timing each one's silence."""

    def __init__(self, killed: threading.Event):
        self.killed = killed
        self.free: queue.SimpleQueue[IsolatedWorker | None] = queue.SimpleQueue()
        self._posted: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe()
        self._open = True  # until `close`: the other threads post only while it is (under _lock)
        self._lock = threading.Lock()
        self._busy: dict[int, tuple[IsolatedWorker, Job, Hazards]] = {}  # by the worker's descriptor
        self._dealt: int | None = None  # jobs the dealer dealt, once it has dealt the last
        self._finished = 0  # jobs whose measurement came back
        self._poll = select.poll()
        self._poll.register(self._wake_read, select.POLLIN)

    def post(self, item: tuple) -> None:
        """From another thread: ("job", worker, job, hazards) to send, ("done", worker, job,
        measurement) finished without running, or ("dealt", count) once every job was dealt."""
        with self._lock:
            if self._open:
                self._posted.put(item)
                os.write(self._wake_write, b"!")

    def serve(self) -> Iterator[tuple[Job, Measurement]]:
        """Each job with its measurement as it finishes, until every job dealt has finished; nothing
        once killed (what was running is dropped)."""
        while self._dealt is None or self._finished < self._dealt:
            finished = self._round()
            if self.killed.is_set():
                return
            self._finished += len(finished)
            yield from finished

    def _round(self) -> list[tuple[Job, Measurement]]:
        """Wait until a worker sent something, a job was posted, or a worker's silence ran out; what
        finished meanwhile."""
        finished = []
        for descriptor, _ in self._poll.poll(self._wait_ms()):
            if descriptor == self._wake_read:
                os.read(self._wake_read, 1 << 16)
                finished += self._posted_now()
            elif (entry := self._busy.get(descriptor)) is not None:
                if (measurement := self._receive(entry[0])) is not None:
                    finished.append(self._done(descriptor, measurement))
        now = time.monotonic()
        for descriptor in [d for d, (worker, _, _) in self._busy.items() if worker.deadline <= now]:
            finished.append(self._done(descriptor, self._busy[descriptor][0].time_out()))
        return finished

    def _posted_now(self) -> list[tuple[Job, Measurement]]:
        """Jobs posted are sent to their workers; what finished without running comes back."""
        finished = []
        while not self._posted.empty():
            item = self._posted.get_nowait()
            if item[0] == "dealt":
                self._dealt = item[1]
            elif item[0] == "done":
                finished.append(self._finished_job(item[1], item[2], item[3]))
            else:
                self._send(*item[1:])
        return finished

    def close(self) -> None:
        """The run is over (or left early): the dealer stops at the next worker it waits for, and a
        worker still busy is stopped, its job dropped (its answer must not reach a later run)."""
        self.free.put(None)
        for worker, _, _ in self._busy.values():
            worker.kill()
        with self._lock:
            self._open = False
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _wait_ms(self) -> float:
        """Until the first busy worker's silence runs out; at most POLL_S, to notice a kill."""
        first = min((worker.deadline for worker, _, _ in self._busy.values()), default=time.monotonic() + POLL_S)
        return 1000 * max(0.0, min(POLL_S, first - time.monotonic()))

    def _send(self, worker: IsolatedWorker, job: Job, hazards: Hazards) -> None:
        """The job to its worker, unless the run was killed meanwhile (then the job is dropped)."""
        if self.killed.is_set():
            return
        try:  # a kill from another thread may stop the worker at any point of this
            descriptor = worker.fileno()
            worker.send(job)
        except (Interrupted, OSError):  # the worker stopped under us: by a kill, or it is an error
            if self.killed.is_set():
                return
            raise
        self._busy[descriptor] = (worker, job, hazards)
        self._poll.register(descriptor, select.POLLIN)

    def _receive(self, worker: IsolatedWorker) -> Measurement | None:
        try:
            return worker.receive()
        except Exception:  # its connection closed under it: killed
            if self.killed.is_set():
                return None
            raise

    def _done(self, descriptor: int, measurement: Measurement) -> tuple[Job, Measurement]:
        """A busy worker's job finished (or hung, or killed its worker): the worker is free again."""
        self._poll.unregister(descriptor)
        worker, job, hazards = self._busy.pop(descriptor)
        return self._finished_job(worker, job, with_hazards(measurement, hazards))

    def _finished_job(self, worker: IsolatedWorker, job: Job, measurement: Measurement) -> tuple[Job, Measurement]:
        self.free.put(worker)
        return job, measurement
