"""Sweeps and tunes across many GPUs and hosts, on Dask distributed (the optional extra `cluster`).

    tilegen sweep ... --cluster local            # a Dask worker per visible GPU of this host
    tilegen sweep ... --cluster tcp://HOST:8786  # an existing scheduler; on each GPU host:
    tilegen worker tcp://HOST:8786               # one Dask worker per GPU, each pinned to it

Each Dask worker offers one `GPU` resource and runs one job at a time, in the same isolated
subprocess (`gen.worker.IsolatedWorker`) with the same hang timeout as on one host, so a crashing
kernel never kills a Dask worker. The coordinator compiles (once per architecture, with its own
compile cache), ships each cubin with its job, and is the only writer of results and of the
tuning database: rows come back as futures finish.

Faults: when a Dask worker or its host dies, the scheduler runs its jobs in flight elsewhere; each
job's future finishes exactly once, so no row is lost or written twice, and the lost worker is
named. A worker that joins mid-sweep takes jobs at once (jobs go to any worker with a GPU).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .errors import UsageError
from .jobs import Job
from .processes import ProcessGroup, visible_devices_for
from .results import DeviceInfo, GpuModel, Measurement, Status
from .worker import WORKER, GpuUnavailable, IsolatedWorker, run_job, visible_gpus

GPU = "GPU"  # the Dask worker resource: one per GPU, so one job per GPU at a time
CONNECT_TIMEOUT_S = 10.0
JOBS_AHEAD_PER_GPU = 2  # submitted per GPU, so the next job waits on its worker while one runs
WATCH_S = 1.0  # how often the coordinator looks for workers that left or joined

# ---- on a Dask worker ------------------------------------------------------------------------

_held: dict[str, IsolatedWorker] = {}  # this Dask worker's GPU subprocess, kept between jobs


def _gpu_worker(silence_s: float, target: str) -> IsolatedWorker:
    """This Dask worker's isolated GPU subprocess (started on first use, stopped at exit), with the
    hang timeout of the run that calls now (runs one after another may differ)."""
    worker = _held.get(target)
    if worker is None:
        index, visible = pinned_gpu()
        worker = _held[target] = IsolatedWorker(index, silence_s, target, visible)
        atexit.register(worker.stop)
    worker.silence_s = silence_s
    return worker


def pinned_gpu() -> tuple[int, str | None]:
    """The GPU this process is pinned to by CUDA_VISIBLE_DEVICES: its index (the first listed when
    that is an index, else 0; for provenance and nvidia-smi) and the value itself, which its GPU
    process gets as it is (a UUID, a MIG id, a list: CUDA runs on the first); (0, None) if unset."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return 0, None
    first = visible.split(",")[0].strip()
    return (int(first) if first.isdigit() else 0), visible


def device_task(silence_s: float, target: str) -> DeviceInfo:
    """Start this worker's GPU subprocess and say which GPU it holds."""
    worker = _gpu_worker(silence_s, target)
    return worker.device if worker.alive and worker.device else worker.start()


def job_task(job: Job, cubin: bytes, silence_s: float, target: str) -> Measurement:
    """Run one job on this worker's GPU, its cubin written to a local file first."""
    folder = Path(tempfile.gettempdir()) / "tilegen-cubins"
    folder.mkdir(exist_ok=True)
    path = folder / f"{hashlib.sha256(cubin).hexdigest()[:32]}.cubin"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.part")
        partial.write_bytes(cubin)
        partial.replace(path)
    return run_job(_gpu_worker(silence_s, target), replace(job, cubin=str(path)), ProcessGroup())


# ---- on the coordinator ----------------------------------------------------------------------

def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError("--cluster needs Dask distributed: pip install 'tilegen[cluster]'") from None
    return distributed


def local_cluster(gpus: Sequence[int]) -> Any:
    """A scheduler and one Dask worker process per GPU on this host, each pinned to its GPU."""
    distributed = _distributed()
    workers = {f"gpu{gpu}": {"cls": distributed.Nanny,
                             "options": {"nthreads": 1, "resources": {GPU: 1}, "host": "127.0.0.1",
                                         "env": {"CUDA_VISIBLE_DEVICES": str(gpu)}, "silence_logs": logging.CRITICAL}}
               for gpu in gpus}
    scheduler = {"cls": distributed.Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard": False}}
    return distributed.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.CRITICAL)


def connect(address: str) -> Any:
    """A client of the scheduler at `address`; a one-line error when it cannot be reached."""
    distributed = _distributed()
    if not address.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        raise UsageError(f"--cluster {address!r} must be 'local' or a scheduler address like tcp://HOST:8786")
    try:
        return distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise UsageError(f"cannot reach the Dask scheduler at {address} ({type(error).__name__}); is `dask scheduler` "
                         f"running there?") from None


def check_reachable(address: str) -> None:
    """A one-line error now, when the scheduler at `address` cannot be reached."""
    connect(address).close()


class DaskExecutor:
    """The pipeline's executor on a Dask cluster: `address` is 'local' (a worker per GPU in
    `gpus`) or a scheduler's address. `workers` limits it to those Dask workers (one GPU model's)."""

    def __init__(self, address: str, gpus: Sequence[int] = (0,), silence_s: float = 30.0, target: str = WORKER,
                 *, _parent: "DaskExecutor | None" = None, workers: Sequence[str] = ()):
        self.address, self.silence_s, self.target = address, silence_s, target
        self.lost: list[str] = []  # Dask workers that left while jobs were in flight
        self._workers = list(workers)
        self._devices: dict[str, DeviceInfo] | None = None
        self._killed = threading.Event()
        self._futures: set[Any] = set()
        if _parent is not None:
            self._cluster, self._client, self._owner = _parent._cluster, _parent._client, False
            return
        self._owner = True
        self._cluster = local_cluster(gpus) if address == "local" else None
        try:
            self._client = connect(self._cluster.scheduler_address if self._cluster else address)
            if self._cluster:
                self._client.wait_for_workers(len(gpus), timeout=120)
        except BaseException:
            if self._cluster:
                self._cluster.close()
            raise

    # ---- the Executor interface --------------------------------------------------------------

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            addresses = self._workers or self.gpu_workers()
            if not addresses:
                raise GpuUnavailable(f"no Dask worker of {self.address} offers a GPU; start them with "
                                     f"`tilegen worker {self.address}` on each GPU host")
            futures = {address: self._client.submit(device_task, self.silence_s, self.target, workers=[address],
                                                    resources={GPU: 1}, allow_other_workers=False, pure=False)
                       for address in addresses}
            found, reasons = {}, []
            for address, future in futures.items():
                try:
                    found[address] = future.result()
                except GpuUnavailable as reason:
                    reasons.append(f"{address}: {reason}")
            if not found:
                raise GpuUnavailable("; ".join(reasons))
            self._devices = found
        return list(self._devices.values())

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Jobs go out as GPUs free up (a few ahead per GPU); measurements come back as they finish.
        A GPU worker that joins mid-run raises the jobs in flight by its share; one that leaves
        lowers it again (its jobs in flight run on the others)."""
        self.devices()
        finished: queue.Queue[tuple[Job, Any] | None] = queue.Queue()
        slots = threading.Semaphore(JOBS_AHEAD_PER_GPU * len(self._devices or {}))
        counts = {"sent": 0}
        feeder = threading.Thread(target=self._feed, args=(iter(jobs), slots, finished, counts), daemon=True)
        feeder.start()
        members, received, feeding, watched = self._members(), 0, True, time.monotonic()
        withheld = 0  # slots of workers that left, not given back as their jobs finish
        while (feeding or received < counts["sent"]) and not self._killed.is_set():
            if time.monotonic() - watched > WATCH_S:
                members, left, joined = self._watch(members)
                withheld += JOBS_AHEAD_PER_GPU * left
                repaid = min(withheld, JOBS_AHEAD_PER_GPU * joined)
                withheld -= repaid
                for _ in range(JOBS_AHEAD_PER_GPU * joined - repaid):
                    slots.release()
                watched = time.monotonic()
            try:
                item = finished.get(timeout=WATCH_S)
            except queue.Empty:
                continue
            if item is None:
                feeding = False
                continue
            job, future = item
            received += 1
            if withheld:
                withheld -= 1
            else:
                slots.release()
            self._futures.discard(future)
            if not self._killed.is_set() and future.status != "cancelled":
                yield job, self._measurement(future)

    def close(self) -> None:
        if self._owner:
            self._client.close()
            if self._cluster is not None:
                self._cluster.close()

    def kill(self) -> None:
        """Stop at once: cancel every job not finished, and shut a local cluster down."""
        self._killed.set()
        if self._futures:
            self._client.cancel(list(self._futures))
        self.close()

    def by_model(self) -> dict[GpuModel, "DaskExecutor"]:
        """An executor per GPU model, each on that model's workers: models tune separately."""
        self.devices()
        assert self._devices is not None
        groups: dict[GpuModel, list[str]] = {}
        for address, device in self._devices.items():
            groups.setdefault(device.model, []).append(address)
        return {model: self._group(addresses) for model, addresses in groups.items()}

    # ---- inside --------------------------------------------------------------------------------

    def gpu_workers(self) -> list[str]:
        """The addresses of the scheduler's workers that offer a GPU."""
        workers = self._client.scheduler_info(n_workers=-1)["workers"]
        return sorted(address for address, info in workers.items() if info.get("resources", {}).get(GPU))

    def _group(self, addresses: list[str]) -> "DaskExecutor":
        group = DaskExecutor(self.address, silence_s=self.silence_s, target=self.target, _parent=self,
                             workers=addresses)
        assert self._devices is not None
        group._devices = {address: self._devices[address] for address in addresses}
        group.lost = self.lost
        return group

    def _feed(self, jobs: Iterator[Job], slots: threading.Semaphore, finished: queue.Queue,
              counts: dict[str, int]) -> None:
        try:
            for job in jobs:
                while not slots.acquire(timeout=WATCH_S):
                    if self._killed.is_set():
                        return
                if self._killed.is_set():
                    return
                future = self._client.submit(job_task, job, Path(job.cubin).read_bytes(), self.silence_s, self.target,
                                             resources={GPU: 1}, workers=self._workers or None,
                                             allow_other_workers=False, pure=False)
                self._futures.add(future)
                counts["sent"] += 1
                future.add_done_callback(lambda done, job=job: finished.put((job, done)))
        finally:
            finished.put(None)

    def _measurement(self, future: Any) -> Measurement:
        """The job's measurement, or a `launch_error` row when the job itself kept killing workers."""
        error = future.exception()
        if error is None:
            return future.result()
        return Measurement(Status.LAUNCH_ERROR, f"on the Dask cluster: {type(error).__name__}: {error}",
                           context_lost=True)

    def _members(self) -> dict[str, str]:
        """address -> name of the GPU workers this executor may use now."""
        workers = self._client.scheduler_info(n_workers=-1)["workers"]
        return {address: str(info.get("name", address)) for address, info in workers.items()
                if info.get("resources", {}).get(GPU) and (not self._workers or address in self._workers)}

    def _watch(self, before: dict[str, str]) -> tuple[dict[str, str], int, int]:
        """The members now, and how many left and joined since `before`; each is named on stderr."""
        now = self._members()
        gone, new = sorted(set(before) - set(now)), sorted(set(now) - set(before))
        for address in gone:
            name = _worker_name(before[address], address)
            self.lost.append(name)
            print(f"tilegen: lost Dask worker {name}; its jobs in flight run on the others", file=sys.stderr,
                  flush=True)
        for address in new:
            print(f"tilegen: Dask worker {_worker_name(now[address], address)} joined; it takes jobs from now on",
                  file=sys.stderr, flush=True)
        return now, len(gone), len(new)


def _worker_name(name: str, address: str) -> str:
    return f"{name} ({address})" if name != address else address


# ---- tilegen worker ADDRESS ------------------------------------------------------------------

def serve_gpus(address: str, gpus: Sequence[int] | None = None) -> int:
    """Start one Dask worker per GPU of this host for the scheduler at `address`, each pinned to its
    GPU with one `GPU` resource, and wait for them; Ctrl-C stops them."""
    check_reachable(address)  # a one-line error now, rather than workers retrying for ever
    chosen = list(gpus) if gpus is not None else (visible_gpus() or [0])
    host = socket.gethostname()
    processes = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                   "--resources", f"{GPU}=1", "--name", f"{host}-gpu{gpu}", "--no-dashboard"],
                                  env=dict(os.environ, CUDA_VISIBLE_DEVICES=visible_devices_for(gpu)))
                 for gpu in chosen]
    print(f"tilegen: {len(processes)} Dask worker(s) for {address} on GPU(s) {', '.join(map(str, chosen))}; "
          f"Ctrl-C stops them", file=sys.stderr, flush=True)
    try:
        return max(process.wait() for process in processes)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
