"""Jobs on this host's GPUs: one isolated worker process per GPU (gen.gpu.isolated), running one
job at a time, so that timings never share a GPU; and `run_job`, a job on one worker with
compute-sanitizer first when it asks for it (the Dask workers run jobs through it too).

One thread waits on every worker's socket at once (poll, gen.gpu.table) and reads whatever each
sent, so that feeding 64 GPUs costs about what feeding one does: a thread per GPU spent more on
handing the interpreter lock around than on the jobs (scripts/bench_scale.py measures it). Each
worker holds its next job while it runs one, so that it never waits for this process between jobs."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Iterable, Iterator, Sequence

from ..core.errors import Interrupted
from ..core.processes import ProcessGroup
from ..core.results import DeviceInfo, GpuModel, Measurement
from .isolated import IsolatedWorker
from .jobs import Job
from .table import Hazards, Table, with_hazards
from .worker_process import WORKER


class LocalExecutor:
    """Isolated workers on this host's GPUs, each running one job at a time, so timings never share a GPU."""

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
        """One thread (the caller's) sends the jobs and waits on every worker at once, reading what
        each sent as it comes (gen.gpu.table); a dealer thread takes the next job whenever a worker
        can hold one more. What may block for long (compute-sanitizer, a worker starting again)
        runs in a thread of its own meanwhile."""
        self.devices()
        table = Table(self.workers, self._killed, self._prepare)
        dealer = threading.Thread(target=self._deal, args=(iter(jobs), table), name="tilegen-dealer", daemon=True)
        dealer.start()
        try:
            yield from table.serve()
        finally:
            table.close()

    def _deal(self, source: Iterator[Job], table: Table) -> None:
        """Hand each job to a worker that can hold one more; then tell the table how many there were."""
        dealt = 0
        try:
            while (worker := table.free.get()) is not None and not self._killed.is_set():
                if (job := next(source, None)) is None:
                    break
                dealt += 1
                table.post(("job", worker, job))
        finally:
            table.post(("dealt", dealt))

    def _prepare(self, worker: IsolatedWorker, job: Job | None) -> Hazards:
        """compute-sanitizer on `job` at its small size (on the worker's GPU, which holds no job
        meanwhile), and the worker started again if it is not alive."""
        hazards = sanitized(worker, job, self._children) if job is not None else None
        if not worker.alive:
            worker.start()
            if self._killed.is_set():  # killed while it started: what kill() stopped was the old one
                worker.kill()
                raise Interrupted(f"the worker of GPU {worker.physical_index} was stopped")
        return hazards

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


def sanitized(worker: IsolatedWorker, job: Job, children: ProcessGroup) -> Hazards:
    """compute-sanitizer's findings on the job at its small size, if it asks for that."""
    if not job.sanitize_size:
        return None
    from .sanitize import sanitize

    small = replace(job, shape=job.sanitize_size, timing=None, seeds=job.seeds[:1], sanitize_size=None)
    return sanitize(small, worker.environment(), children)
