"""Jobs on this host's GPUs: one isolated worker process per GPU (gen.gpu.isolated), running one
job at a time, so that timings never share a GPU; a sanitizer job runs under compute-sanitizer
beside its worker. A Dask worker runs its tasks' jobs through one of these on its one GPU
(gen.gpu.dask_worker), so they reach its GPU process as they do here.

One thread feeds every worker (gen.gpu.table says how), so that feeding 64 GPUs costs about what
feeding one does: a thread per GPU spent more on handing the interpreter lock around than on the
jobs (scripts/bench_scale.py measures it)."""

from __future__ import annotations

import threading
from typing import Iterable, Iterator, Sequence

from ..core.errors import Interrupted
from ..core.processes import ProcessGroup
from ..core.results import DeviceInfo, GpuModel, Measurement
from .feed import JobFeed
from .isolated import IsolatedWorker
from .process.jobs import Job
from .sanitize import sanitize
from .table import JOBS_AHEAD, Table
from .process.worker import WORKER


class LocalExecutor:
    """Isolated workers on this host's GPUs, each running one job at a time, so timings never share a GPU."""

    def __init__(self, gpus: Sequence[int] = (0,), silence_s: float = 30.0, target: str = WORKER,
                 visible_devices: str | None = None):
        self.workers = [IsolatedWorker(index, silence_s, target, visible_devices) for index in gpus]
        self._devices: list[DeviceInfo] | None = None
        self._spawned = False
        self._killed = threading.Event()
        self._children = ProcessGroup()  # compute-sanitizer runs

    def start(self) -> None:
        if not self._spawned:
            self._spawned = True
            for worker in self.workers:  # every GPU's worker starts at once
                worker.spawn()

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            self.start()
            try:
                self._devices = [worker.ready() for worker in self.workers]
            except BaseException:  # one could not start (or Ctrl-C): none is left running
                self._spawned = False
                for worker in self.workers:
                    worker.kill()
                raise
        return self._devices

    def hang_after(self, silence_s: float) -> "LocalExecutor":
        """Its workers' jobs taken as hung after `silence_s` of silence from now on (a run asks its own)."""
        for worker in self.workers:
            worker.silence_s = silence_s
        return self

    def capacity(self) -> int:
        return JOBS_AHEAD * len(self.workers)

    def run(self, jobs: JobFeed | Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """The jobs dealt to the workers by a seat table in the caller's thread (gen.gpu.table)."""
        self.devices()
        table = Table(self.workers, self._killed, self._aside, JobFeed.of(jobs))
        try:
            yield from table.serve()
        finally:
            table.close()

    def _aside(self, worker: IsolatedWorker, job: Job) -> Measurement | None:
        """While the worker holds no job: a sanitizer job's measurement (on the worker's GPU), or
        else the worker started again."""
        if job.sanitizer:
            return sanitize(job, worker.environment(), self._children)
        if not worker.alive:
            worker.start()
            if self._killed.is_set():  # killed while it started: what kill() stopped was the old one
                worker.kill()
                raise Interrupted(f"the worker of GPU {worker.physical_index} was stopped")
        return None

    def close(self) -> None:
        for worker in self.workers:  # every GPU's worker asked first: they end together
            worker.finish()
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

