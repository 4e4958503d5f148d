"""Jobs on this host's GPUs: one isolated worker process per GPU (gen.gpu.isolated), one job per
GPU at a time, so that timings never share a GPU; and `run_job`, a job on one worker with
compute-sanitizer first when it asks for it (the Dask workers run jobs through it too)."""

from __future__ import annotations

import queue
import threading
from dataclasses import replace
from typing import Iterable, Iterator, Sequence

from ..core.errors import Interrupted
from ..core.processes import ProcessGroup
from ..core.results import DeviceInfo, GpuModel, Measurement, Status
from .isolated import IsolatedWorker
from .jobs import Job
from .worker_process import WORKER


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
        self.devices()
        source = iter(jobs)
        take = threading.Lock()
        finished: queue.Queue[tuple[Job, Measurement] | None] = queue.Queue()

        def serve(worker: IsolatedWorker) -> None:
            try:
                while not self._killed.is_set():
                    with take:  # the next job goes to whichever GPU is free first
                        job = next(source, None)
                    if job is None:
                        break
                    try:
                        measurement = run_job(worker, job, self._children)
                    except Interrupted:  # killed: what was running is dropped
                        break
                    except Exception as error:  # a worker that cannot start again, say: a row that says so
                        measurement = Measurement(Status.LAUNCH_ERROR, f"{type(error).__name__}: {error}",
                                                  device=worker.device, context_lost=True)
                    finished.put((job, measurement))
            finally:
                finished.put(None)

        for worker in self.workers:
            threading.Thread(target=serve, args=(worker,), daemon=True).start()
        serving = len(self.workers)
        while serving:
            item = finished.get()
            if item is None:
                serving -= 1
            elif not self._killed.is_set():
                yield item

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
    hazards, note = None, ""
    if job.sanitize_size:
        from .sanitize import sanitize

        small = replace(job, shape=job.sanitize_size, timing=None, seeds=job.seeds[:1], sanitize_size=None)
        hazards, note = sanitize(small, worker.environment(), children)
    measurement = worker.run(job)
    measurement.hazards, measurement.hazard_note = hazards, note
    return measurement
