"""Sweeps and tunes across many GPUs and hosts, on Dask distributed (the optional extra `cluster`).

    tilegen sweep ... --cluster local            # a Dask worker per visible GPU of this host
    tilegen sweep ... --cluster tcp://HOST:8786  # an existing scheduler; on each GPU host:
    tilegen worker tcp://HOST:8786               # one Dask worker per GPU, each pinned to it

Each Dask worker offers one `GPU` resource and runs one job at a time, in the same isolated
subprocess (`gen.gpu.isolated.IsolatedWorker`) with the same hang timeout as on one host, so a crashing
kernel never kills a Dask worker. The coordinator compiles (once per architecture, with its own
compile cache), ships each cubin with its job, and is the only writer of results and of the
tuning database: rows come back as futures finish.

Jobs go only to the workers whose GPU answered. A worker that joins mid-run is asked for its GPU
first, and takes jobs if that is of a model the run started with; each one refused is named.

Faults: when a Dask worker or its host dies, the scheduler runs its jobs in flight on the run's
other workers; each job's row is written exactly once, and the lost worker is named. A restarted
worker comes back at a new address, as a worker that joins: jobs in flight that only lost workers
could take are sent to it. When no worker of the run's GPU models is left and none joins within
the hang timeout, the run stops with an error that names them.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ..core.errors import UsageError
from .jobs import Job
from ..core.processes import ProcessGroup, visible_devices_for
from ..core.results import DeviceInfo, GpuModel, Measurement, Status
from ..core.nvidia_smi import visible_gpus
from .executor import GpuUnavailable
from .isolated import IsolatedWorker
from .local import run_job
from .worker_process import WORKER

GPU = "GPU"  # the Dask worker resource: one per GPU, so one job per GPU at a time
CONNECT_TIMEOUT_S = 10.0
JOBS_AHEAD_PER_GPU = 8  # submitted per GPU: the next jobs wait on its worker while results travel back
MAX_RESENDS = 3  # a job whose workers all left is sent again this often (then it is a launch_error)
GATHER_TIMEOUT_S = 10.0  # a gather of finished jobs' results that takes longer lost one with its worker
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


@dataclass
class _Sent:
    """A job in flight: the workers it may run on, the queue its future goes to when it finishes,
    how often it was sent again (its workers all lost), and why it failed without running, if so."""

    job: Job
    workers: frozenset[str]
    finished: queue.Queue
    resends: int = 0
    failure: str = ""


class DaskExecutor:
    """The pipeline's executor on a Dask cluster: `address` is 'local' (a worker per GPU in
    `gpus`) or a scheduler's address. Jobs go only to the GPU workers it accepted: those whose GPU
    answered at the start and, later, those that join with a GPU of a model it started with."""

    def __init__(self, address: str, gpus: Sequence[int] = (0,), silence_s: float = 30.0, target: str = WORKER,
                 *, _parent: "DaskExecutor | None" = None):
        self.address, self.silence_s, self.target = address, silence_s, target
        self.lost: list[str] = []  # accepted Dask workers that left during a run
        self._devices: dict[str, DeviceInfo] | None = None  # the accepted GPU workers there are now
        self._models: set[GpuModel] = set()  # of the GPUs it started with: a worker that joins needs one
        self._known: set[str] = set()  # every GPU worker seen: accepted, refused, or another model's
        self._names: dict[str, str] = {}  # address -> Dask worker name
        self._checking: dict[str, Any] = {}  # address -> the device query of a worker that joined
        self._sent: dict[Any, _Sent] = {}  # futures in flight
        self._alone_since: float | None = None  # when the last accepted worker left
        self._lock = threading.Condition()
        self._killed = threading.Event()
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
            self._devices = self._first_devices()
        with self._lock:
            return list(self._devices.values())

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Jobs go out as GPUs free up (a few ahead per accepted GPU); measurements come back as they
        finish. Every WATCH_S the workers are looked at: see `_watch`."""
        self.devices()
        finished: queue.Queue[Any] = queue.Queue()  # this run's futures as they finish; None: all sent
        stop = threading.Event()
        threading.Thread(target=self._feed, args=(iter(jobs), finished, stop), daemon=True).start()
        feeding, watched, self._alone_since = True, time.monotonic(), None
        try:
            while (feeding or self._pending(finished)) and not self._killed.is_set():
                if time.monotonic() - watched > WATCH_S:
                    self._watch()
                    watched = time.monotonic()
                try:
                    futures = [finished.get(timeout=WATCH_S)]
                except queue.Empty:
                    continue
                futures += _drain(finished)  # all finished by now: their results come in one gather
                if None in futures:
                    feeding = False
                received = [(future, sent) for future in futures if future is not None
                            if (sent := self._received(future)) is not None]
                if received and not self._killed.is_set():
                    yield from self._measurements(received)
        finally:
            stop.set()
            self._cancel(finished)

    def close(self) -> None:
        if self._owner:
            self._client.close()
            if self._cluster is not None:
                self._cluster.close()

    def kill(self) -> None:
        """Stop at once: cancel every job not finished, and shut a local cluster down."""
        self._killed.set()
        with self._lock:
            futures = [*self._sent, *self._checking.values()]
            self._lock.notify_all()
        if futures:
            self._client.cancel(futures)
        self.close()

    def by_model(self) -> dict[GpuModel, "DaskExecutor"]:
        """An executor per GPU model, each on that model's workers: models tune separately."""
        self.devices()
        assert self._devices is not None
        groups: dict[GpuModel, dict[str, DeviceInfo]] = {}
        for address, device in self._devices.items():
            groups.setdefault(device.model, {})[address] = device
        return {model: self._group(model, devices) for model, devices in groups.items()}

    # ---- inside --------------------------------------------------------------------------------

    def gpu_workers(self) -> list[str]:
        """The addresses of the scheduler's workers that offer a GPU."""
        return sorted(self._gpu_members())

    def _gpu_members(self) -> dict[str, str]:
        """address -> name of the scheduler's workers that offer a GPU."""
        workers = self._client.scheduler_info(n_workers=-1)["workers"]
        return {address: str(info.get("name", address)) for address, info in workers.items()
                if info.get("resources", {}).get(GPU)}

    def _first_devices(self) -> dict[str, DeviceInfo]:
        """The GPU workers whose GPU answers now; each one refused is named, with why."""
        members = self._gpu_members()
        if not members:
            raise GpuUnavailable(f"no Dask worker of {self.address} offers a GPU; start them with "
                                 f"`tilegen worker {self.address}` on each GPU host")
        queries = {address: self._query(address) for address in sorted(members)}
        answers = {address: _device_of(query) for address, query in queries.items()}
        found = {address: answer for address, answer in answers.items() if isinstance(answer, DeviceInfo)}
        refused = {address: answer for address, answer in answers.items() if isinstance(answer, str)}
        if not found:
            raise GpuUnavailable("; ".join(f"{address}: {reason}" for address, reason in refused.items()))
        for address, reason in refused.items():
            _say(f"Dask worker {_worker_name(members[address], address)}: {reason}; it takes no jobs")
        self._known, self._names, self._models = set(members), members, {device.model for device in found.values()}
        return found

    def _group(self, model: GpuModel, devices: dict[str, DeviceInfo]) -> "DaskExecutor":
        group = DaskExecutor(self.address, silence_s=self.silence_s, target=self.target, _parent=self)
        group._devices, group._models = devices, {model}
        group._known, group._names, group.lost = set(self._known), dict(self._names), self.lost
        return group

    def _query(self, address: str) -> Any:
        """The future of the GPU worker at `address` saying which GPU it holds."""
        return self._client.submit(device_task, self.silence_s, self.target, workers=[address],
                                   resources={GPU: 1}, allow_other_workers=False, pure=False)

    def _feed(self, jobs: Iterator[Job], finished: queue.Queue, stop: threading.Event) -> None:
        """Send each job once an accepted GPU has room for it, until the run stops."""
        try:
            for job in jobs:
                with self._lock:
                    while not self._stopped(stop) and len(self._sent) >= JOBS_AHEAD_PER_GPU * len(self._devices or {}):
                        self._lock.wait(WATCH_S)
                    if self._stopped(stop):
                        return
                    self._submit(job, finished)
        finally:
            finished.put(None)

    def _stopped(self, stop: threading.Event) -> bool:
        return stop.is_set() or self._killed.is_set()

    def _submit(self, job: Job, finished: queue.Queue, resends: int = 0) -> None:
        """Send a job to the accepted GPU workers there are now (holding the lock)."""
        assert self._devices is not None
        workers = frozenset(self._devices)
        future = self._client.submit(job_task, job, Path(job.cubin).read_bytes(), self.silence_s, self.target,
                                     resources={GPU: 1}, workers=sorted(workers), allow_other_workers=False,
                                     pure=False)
        self._sent[future] = _Sent(job, workers, finished, resends)
        future.add_done_callback(finished.put)

    def _received(self, future: Any) -> _Sent | None:
        """What a finished future was sent for; None for one sent again or cancelled by `_cancel`."""
        with self._lock:
            self._lock.notify_all()  # room for the next job
            return self._sent.pop(future, None)

    def _pending(self, finished: queue.Queue) -> bool:
        with self._lock:
            return any(sent.finished is finished for sent in self._sent.values())

    def _cancel(self, finished: queue.Queue) -> None:
        """Cancel what a run that stopped early left in flight."""
        with self._lock:
            futures = [future for future, sent in self._sent.items() if sent.finished is finished]
            for future in futures:
                del self._sent[future]
        if futures:
            self._client.cancel(futures)

    def _measurements(self, received: list[tuple[Any, _Sent]]) -> list[tuple[Job, Measurement]]:
        """The jobs' measurements, those that succeeded fetched in one gather (a round trip per
        future capped a cluster at about 95 rows/s), or a `launch_error` row for a job that itself
        kept killing workers (or whose workers were lost too often). When the gather stalls, a result
        was lost with its worker (its task pinned to workers that left): those jobs are sent again."""
        succeeded = [future for future, sent in received if not sent.failure and future.status == "finished"]
        try:
            results = dict(zip((f.key for f in succeeded), self._gather(succeeded))) if succeeded else {}
        except TimeoutError:
            self._send_again([(future, sent) for future, sent in received if future in succeeded])
            received, results = [(future, sent) for future, sent in received if future not in succeeded], {}
        return [(sent.job, results[future.key] if future.key in results else _failure(future, sent))
                for future, sent in received]

    def _gather(self, futures: list[Any]) -> list[Measurement]:
        return self._client.sync(self._client._gather, futures, callback_timeout=GATHER_TIMEOUT_S)

    def _send_again(self, lost: list[tuple[Any, _Sent]]) -> None:
        """Send jobs whose results were lost again (their futures come back as launch_errors after
        MAX_RESENDS)."""
        with self._lock:
            for future, sent in lost:
                if not self._resend(future, sent):
                    sent.finished.put(future)  # finished already: its callback will not come again
        self._client.cancel([future for future, sent in lost if not sent.failure])

    def _resend(self, future: Any, sent: _Sent) -> bool:
        """Send a job again to the accepted workers there are now (holding the lock); after
        MAX_RESENDS, instead mark it failed and keep it in flight (False), to come back as a
        launch_error."""
        if sent.resends >= MAX_RESENDS:
            sent.failure = f"its Dask workers were lost {sent.resends + 1} times while it was in flight"
            self._sent[future] = sent
            return False
        self._sent.pop(future, None)
        self._submit(sent.job, sent.finished, sent.resends + 1)
        return True

    # ---- workers that leave and join -----------------------------------------------------------

    def _watch(self) -> None:
        """Name the accepted workers that left; ask each worker that joined for its GPU and accept it
        if that is of one of this executor's models; send jobs again that only workers that left
        could take (a restarted worker comes back at a new address). GpuUnavailable when no accepted
        worker has been left for the hang timeout."""
        members = self._gpu_members()
        with self._lock:
            self._names.update(members)
            self._forget_left(members)
            self._check_joined(members)
            self._resend_orphans()
            self._lock.notify_all()
            if not self._alone_too_long():
                return
            waiting = len(self._sent)
        raise GpuUnavailable(f"no Dask worker with a {self._model_names()} is left (lost: {', '.join(self.lost)}) "
                             f"and none joined within {self.silence_s:.0f} s (the hang timeout); {waiting} job(s) in "
                             f"flight were not run")

    def _alone_too_long(self) -> bool:
        """Whether no accepted worker has been left for longer than the hang timeout."""
        if self._devices:
            self._alone_since = None
            return False
        self._alone_since = self._alone_since or time.monotonic()
        return time.monotonic() - self._alone_since > self.silence_s

    def _forget_left(self, members: dict[str, str]) -> None:
        """Drop the accepted workers that are gone, naming each."""
        assert self._devices is not None
        for address in sorted(set(self._devices) - set(members)):
            del self._devices[address]
            name = _worker_name(self._names.get(address, address), address)
            self.lost.append(name)
            then = "run on the others" if self._devices else \
                f"wait up to {self.silence_s:.0f} s for a worker with a {self._model_names()} to join"
            _say(f"lost Dask worker {name}; its jobs in flight {then}")

    def _check_joined(self, members: dict[str, str]) -> None:
        """Ask each GPU worker not seen before for its GPU; admit those whose answer came."""
        for address in sorted(set(members) - self._known):
            self._known.add(address)
            self._checking[address] = self._query(address)
        for address, query in list(self._checking.items()):
            if address not in members:
                del self._checking[address]
                query.cancel()
            elif query.done():
                del self._checking[address]
                self._admit(address, _worker_name(members[address], address), _device_of(query))

    def _admit(self, address: str, name: str, answer: DeviceInfo | str) -> None:
        """Accept a worker that joined if its GPU answered and is of one of this executor's models."""
        assert self._devices is not None
        if isinstance(answer, DeviceInfo) and answer.model not in self._models:
            answer = f"its GPU is a {answer.model}, not a {self._model_names()}"
        if isinstance(answer, str):
            _say(f"Dask worker {name} joined, but {answer}; it takes no jobs")
            return
        self._devices[address] = answer
        _say(f"Dask worker {name} joined; it takes jobs from now on")

    def _resend_orphans(self) -> None:
        """Send again each job in flight that only workers that left could take, to the accepted
        workers there are now; after MAX_RESENDS times, it is a launch_error."""
        if not self._devices:
            return
        for future, sent in list(self._sent.items()):
            if future.done() or sent.failure or not sent.workers.isdisjoint(self._devices):
                continue
            self._resend(future, sent)
            future.cancel()  # its callback brings a failed one back as a launch_error

    def _model_names(self) -> str:
        return " or a ".join(sorted(map(str, self._models)))


def _device_of(query: Any) -> DeviceInfo | str:
    """The GPU a device query found, or why there is none."""
    try:
        return query.result()
    except GpuUnavailable as reason:
        return str(reason)
    except Exception as error:  # the worker died or failed while asked
        return f"its GPU did not answer ({type(error).__name__}: {error})"


def _say(message: str) -> None:
    print(f"tilegen: {message}", file=sys.stderr, flush=True)


def _failure(future: Any, sent: _Sent) -> Measurement:
    """The `launch_error` row of a job that did not finish: lost too often, cancelled, or raising."""
    if sent.failure or future.status == "cancelled":
        reason = sent.failure or "cancelled"
    else:
        error = future.exception()
        reason = f"{type(error).__name__}: {error}"
    return Measurement(Status.LAUNCH_ERROR, f"on the Dask cluster: {reason}", context_lost=True)


def _drain(items: queue.Queue) -> list[Any]:
    """Everything in the queue now, without waiting."""
    drained = []
    while True:
        try:
            drained.append(items.get_nowait())
        except queue.Empty:
            return drained


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
