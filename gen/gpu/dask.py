"""Sweeps and tunes across many GPUs and hosts on Dask distributed (the optional extra `cluster`):
the coordinator. What runs on each Dask worker is in gen.gpu.dask_worker.

    tilegen sweep ... --cluster local            # a Dask worker per visible GPU of this host
    tilegen sweep ... --cluster tcp://HOST:8786  # an existing scheduler; on each GPU host:
    tilegen worker tcp://HOST:8786               # one Dask worker per GPU, each pinned to it

The coordinator compiles (once per architecture), ships each cubin with its job (several jobs to
a Dask task when several wait: gen.gpu.dask_flight), and is the only writer of results and of the
tuning database. Jobs go only to the workers whose GPU answered; one
that joins mid-run is asked for its GPU first, and takes jobs if that is of a model the run
started with (each one refused is named).

Faults: when a Dask worker dies, the scheduler runs its jobs in flight on the run's other workers;
each job's row is written once, and the lost worker is named. A restarted worker comes back at a
new address, as a worker that joins: jobs in flight that only lost workers could take go to it. A
gather that stalls (a result lost with its worker) is given up and its jobs are sent again, each
in a task of its own, at most MAX_RESENDS times. When no worker of the run's GPU models is left and
none joins within the hang timeout, the run stops with an error that names them.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..core.results import DeviceInfo, GpuModel, Measurement
from .dask_cluster import GPU, Reach, gather_within
from .dask_flight import Sent, drain, failure, lost_verdict, task_size
from .dask_worker import device_task, jobs_task
from .executor import GpuUnavailable
from .feed import JobFeed
from .process.jobs import Job
from .process.worker import WORKER

JOBS_AHEAD_PER_GPU = 32  # jobs in flight per GPU: the next ones wait on its worker while results travel back
WATCH_S = 1.0  # how often the coordinator looks for workers that left or joined


class DaskExecutor:
    """The pipeline's executor on a Dask cluster: `address` is 'local' (a worker per GPU in
    `gpus`) or a scheduler's address. Jobs go only to the GPU workers it accepted: those whose GPU
    answered at the start and, later, those that join with a GPU of a model it started with.
    `gather(client, futures, stop)` fetches the results of finished futures, and gives up when
    `stop` is set (`gather_within`, or a stand-in that stalls)."""

    def __init__(self, address: str, gpus: Sequence[int] = (0,), silence_s: float = 30.0, target: str = WORKER,
                 *, gather: Callable[[Any, list[Any], threading.Event], list[Any]] = gather_within,
                 _parent: "DaskExecutor | None" = None):
        self.address, self.silence_s, self.target, self.gather = address, silence_s, target, gather
        self.lost: list[str] = []  # accepted Dask workers that left during a run
        self._devices: dict[str, DeviceInfo] | None = None  # the accepted GPU workers there are now
        self._models: set[GpuModel] = set()  # of the GPUs it started with: a worker that joins needs one
        self._known: set[str] = set()  # every GPU worker seen: accepted, refused, or another model's
        self._names: dict[str, str] = {}  # address -> Dask worker name
        self._checking: dict[str, Any] = {}  # address -> the device query of a worker that joined
        self._sent: dict[Any, Sent] = {}  # futures in flight
        self._alone_since: float | None = None  # when the last accepted worker left
        self._lock = threading.Condition()
        self._killed = threading.Event()
        if _parent is not None:
            self._client, self._owner = _parent.client, False
            return
        self._owner, self._client = True, None
        self._reach = Reach(address, gpus, target)

    @property
    def client(self) -> Any:
        """The Dask client it runs on (a local cluster's once it has started: Reach)."""
        if self._client is None:
            _, self._client = self._reach.wait()
        return self._client

    # ---- the Executor interface --------------------------------------------------------------

    def start(self) -> None:
        """Nothing more: the cluster is being reached since this executor was made."""

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            self._devices = self._first_devices()
        with self._lock:
            return list(self._devices.values())

    def capacity(self) -> int:
        return JOBS_AHEAD_PER_GPU * max(1, len(self._devices or {}))  # a glance, without the lock

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Jobs go out as GPUs free up (a few ahead per accepted GPU); measurements come back as they
        finish. Every WATCH_S the workers are looked at: see `_watch`."""
        self.devices()
        finished: queue.Queue[Any] = queue.Queue()  # this run's futures as they finish; None: all sent
        stop = threading.Event()
        threading.Thread(target=self._feed, args=(JobFeed.of(jobs), finished, stop), daemon=True).start()
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
                futures += drain(finished)  # all finished by now: their results come in one gather
                if None in futures:
                    feeding = False
                received = [(future, sent) for future in futures if future is not None
                            if (sent := self._received(future)) is not None]
                if received and not self._killed.is_set():
                    yield from self._measurements(received)
            if not self._killed.is_set() and (members := self._gpu_members()) is not None:
                with self._lock:  # a worker that left after the last look is named too
                    self._forget_left(members)
        finally:
            stop.set()
            self._cancel(finished)

    def close(self) -> None:
        if self._owner:
            self._reach.close()

    def kill(self) -> None:
        """Stop at once: cancel every job not finished, and shut a local cluster down."""
        self._killed.set()
        with self._lock:
            futures = [*self._sent, *self._checking.values()]
            self._lock.notify_all()
        if futures:
            self.client.cancel(futures)
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
        return sorted(self._gpu_members() or {})

    def _gpu_members(self) -> dict[str, str] | None:
        """address -> name of the scheduler's workers that offer a GPU; None while the client has no view
        of them (distributed empties its copy of the scheduler's identity as the client closes, as when a
        kill races the end of a run), so that none is named lost for it."""
        workers = self.client.scheduler_info(n_workers=-1).get("workers")
        if workers is None:
            return None
        return {address: str(info.get("name", address)) for address, info in workers.items()
                if info.get("resources", {}).get(GPU)}

    def _first_devices(self) -> dict[str, DeviceInfo]:
        """The GPU workers whose GPU answers now; each one refused is named, with why."""
        members = self._gpu_members() or {}
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
        group = DaskExecutor(self.address, silence_s=self.silence_s, target=self.target, gather=self.gather,
                             _parent=self)
        group._devices, group._models = devices, {model}
        group._known, group._names, group.lost = set(self._known), dict(self._names), self.lost
        return group

    def _query(self, address: str) -> Any:
        """The future of the GPU worker at `address` saying which GPU it holds."""
        return self.client.submit(device_task, self.silence_s, self.target, workers=[address],
                                   resources={GPU: 1}, allow_other_workers=False, pure=False)

    def _feed(self, feed: JobFeed, finished: queue.Queue, stop: threading.Event) -> None:
        """Send the jobs once the accepted GPUs have room for them, several to a task when several
        wait (`task_size`), until the run stops."""
        try:
            while not self._stopped(stop):
                if (job := feed.next(timeout=WATCH_S)) is None:
                    if feed.ended:
                        return
                    continue
                with self._lock:
                    while not self._stopped(stop) and self._room() <= 0:
                        self._lock.wait(WATCH_S)
                    if self._stopped(stop):
                        return  # the job is dropped with the run
                    jobs, size = [job], task_size(len(feed), len(self._devices or {}), self._room())
                    while len(jobs) < size and (more := feed.take()) is not None:
                        jobs.append(more)
                    self._submit(tuple(jobs), finished)
        finally:
            finished.put(None)

    def _room(self) -> int:
        """How many more jobs the accepted GPUs may have in flight (holding the lock)."""
        return JOBS_AHEAD_PER_GPU * len(self._devices or {}) - sum(len(sent.jobs) for sent in self._sent.values())

    def _stopped(self, stop: threading.Event) -> bool:
        return stop.is_set() or self._killed.is_set()

    def _submit(self, jobs: tuple[Job, ...], finished: queue.Queue, resends: int = 0) -> None:
        """Send jobs, in one task, to the accepted GPU workers there are now (holding the lock)."""
        assert self._devices is not None
        workers = frozenset(self._devices)
        cubins = {path: Path(path).read_bytes() for path in {job.cubin for job in jobs}}
        future = self.client.submit(jobs_task, list(jobs), cubins, self.silence_s, self.target,
                                     resources={GPU: 1}, workers=sorted(workers), allow_other_workers=False,
                                     pure=False)
        self._sent[future] = Sent(jobs, workers, finished, resends)
        future.add_done_callback(finished.put)

    def _received(self, future: Any) -> Sent | None:
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
            self.client.cancel(futures)

    def _measurements(self, received: list[tuple[Any, Sent]]) -> list[tuple[Job, Measurement]]:
        """The jobs' measurements, those that succeeded fetched in one gather, or a `launch_error` row
        for a job that itself kept killing workers (or whose workers were lost too often). When the
        gather stalls, a result was lost with its worker (its task pinned to workers that left):
        those jobs are sent again; so are the jobs of a task of several that failed, one per task."""
        succeeded = [future for future, sent in received if not sent.failure and future.status == "finished"]
        try:
            gathered = self.gather(self.client, succeeded, self._killed) if succeeded else []
            results = dict(zip((future.key for future in succeeded), gathered))
        except TimeoutError:
            self._send_again([(future, sent) for future, sent in received if future in succeeded])
            received, results = [(future, sent) for future, sent in received if future not in succeeded], {}
        together = [(future, sent) for future, sent in received
                    if future.key not in results and len(sent.jobs) > 1 and not sent.failure]
        self._split(together)
        again = {future.key for future, _ in together}
        measured: list[tuple[Job, Measurement]] = []
        for future, sent in received:
            if future.key not in again:
                measured.extend(zip(sent.jobs, results.get(future.key) or [failure(future, sent)] * len(sent.jobs)))
        return measured

    def _split(self, failed: list[tuple[Any, Sent]]) -> None:
        """Send the jobs of tasks of several that failed (a worker killed while running one, say)
        again, each in a task of its own: which of them failed is not known, and none was lost."""
        with self._lock:
            for _, sent in failed:
                for job in sent.jobs:
                    self._submit((job,), sent.finished, sent.resends)

    def _send_again(self, lost: list[tuple[Any, Sent]]) -> None:
        """Send jobs whose results were lost again (after MAX_RESENDS, they come back as launch_errors)."""
        if not lost:
            return
        with self._lock:
            for future, sent in lost:
                if not self._resend(future, sent):
                    sent.finished.put(future)  # finished already: its callback will not come again
        self.client.cancel([future for future, sent in lost if not sent.failure])

    def _resend(self, future: Any, sent: Sent) -> bool:
        """Send a task's jobs again, each in a task of its own, to the accepted workers there are now
        (holding the lock); a job sent MAX_RESENDS times already is instead marked failed and kept in
        flight (False), to come back as a launch_error."""
        sent.failure = "" if len(sent.jobs) > 1 else lost_verdict(sent.resends)
        if sent.failure:
            self._sent[future] = sent
            return False
        self._sent.pop(future, None)
        for job in sent.jobs:  # each in a task of its own
            self._submit((job,), sent.finished, sent.resends + 1)
        return True

    # ---- workers that leave and join -----------------------------------------------------------

    def _watch(self) -> None:
        """Name the accepted workers that left; ask each worker that joined for its GPU and accept it
        if that is of one of this executor's models; send jobs again that only workers that left
        could take (a restarted worker comes back at a new address). GpuUnavailable when no accepted
        worker has been left for the hang timeout. Nothing while the client has no view of the workers."""
        members = self._gpu_members()
        if members is None:
            return
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
        workers there are now; after MAX_RESENDS times, it is a launch_error, at once, even while no
        worker is there (the others wait for one to join)."""
        for future, sent in list(self._sent.items()):
            if future.done() or sent.failure or not sent.workers.isdisjoint(self._devices):
                continue
            if not self._devices and (len(sent.jobs) > 1 or not lost_verdict(sent.resends)):
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


def _worker_name(name: str, address: str) -> str:
    return f"{name} ({address})" if name != address else address
