"""The Dask cluster a run talks to, from the coordinator (gen.gpu.dask) or from `tilegen worker`
(gen.gpu.dask_worker): a local one, or a scheduler's address, reached with a one-line error when
it cannot be within $TILEGEN_CONNECT_TIMEOUT seconds (Dask distributed is an optional extra); and the
results of finished jobs, gathered with a deadline.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Sequence

from ..core.checks import env_seconds
from ..core.errors import Interrupted, UsageError
from .process.worker import WORKER

GPU = "GPU"  # the Dask worker resource: one per GPU, so one job per GPU at a time
CONNECT_TIMEOUT_ENV = "TILEGEN_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 10.0  # how long a scheduler is tried before it counts as unreachable, unless set
GATHER_TIMEOUT_S = 10.0  # a gather of finished jobs' results that takes longer lost one with its worker
STOP_POLL_S = 0.05  # how soon a gather waited on notices that the run stopped
PRELOAD = "gen.gpu.dask_worker"  # what a Dask worker loads as it starts (Dask's `dask_setup` hook)
GPU_TARGET_ENV = "TILEGEN_GPU_TARGET"  # what its GPU process runs, started with the Dask worker ("module:function")


def import_distributed() -> Any:
    """The `distributed` module; UsageError naming the extra when it is not installed."""
    try:
        import distributed
    except ImportError:
        raise UsageError("--cluster needs Dask distributed: pip install 'tilegen[cluster]'") from None
    return distributed


def connect(address: str) -> Any:
    """A client of the scheduler at `address`; a one-line error when it cannot be reached."""
    distributed = import_distributed()
    if not address.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        raise UsageError(f"--cluster {address!r} must be 'local' or a scheduler address like tcp://HOST:8786")
    try:
        return distributed.Client(address, timeout=connect_timeout(), set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise UsageError(f"cannot reach the Dask scheduler at {address} ({type(error).__name__}); is `dask scheduler` "
                         f"running there?") from None


def connect_timeout() -> float:
    """How long a scheduler is tried: $TILEGEN_CONNECT_TIMEOUT seconds, else CONNECT_TIMEOUT_S."""
    return env_seconds(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_S)


def check_reachable(address: str) -> None:
    """A one-line error now, when the scheduler at `address` cannot be reached."""
    connect(address).close()


class Reach:
    """The cluster a coordinator runs on, being reached: a scheduler's address at once (a one-line
    error now when it cannot be), 'local' (a scheduler and a Dask worker per GPU in `gpus`) in a
    thread of its own, so that the command plans and compiles during the 2-3 s that starting them
    takes. `wait` gives (the local cluster or None, the client), or raises what stopped the start."""

    def __init__(self, address: str, gpus: Sequence[int], target: str = WORKER):
        self._reached: tuple[Any, Any] | BaseException | None = None
        self._starting: threading.Thread | None = None
        self._lock = threading.Lock()
        self._abandoned = False  # closed while it started: the start closes what it made
        if address != "local":
            self._reached = (None, connect(address))
            return
        import_distributed()  # a one-line error now, without it
        self._starting = threading.Thread(target=self._start_local, args=(gpus, target), name="tilegen-dask-start")
        self._starting.start()

    def wait(self) -> tuple[Any, Any]:
        if self._starting is not None:
            self._starting.join()
        if isinstance(self._reached, BaseException):
            raise self._reached
        assert self._reached is not None
        return self._reached

    def close(self) -> None:
        """Close the client and the local cluster; one still starting (Ctrl-C, a bad option found
        meanwhile) is closed by its start as it ends, so that the command need not wait for it (the
        interpreter still does at exit: the start's thread is not a daemon, so it cleans up)."""
        with self._lock:
            self._abandoned = self._reached is None
            reached = self._reached
        if isinstance(reached, tuple):
            _close(*reached)

    def _start_local(self, gpus: Sequence[int], target: str) -> None:
        cluster = client = None
        try:
            cluster = local_cluster(gpus, target)
            client = connect(cluster.scheduler_address)
            client.wait_for_workers(len(gpus), timeout=120)
            reached: tuple[Any, Any] | BaseException = (cluster, client)
        except BaseException as error:
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
            reached = error
        with self._lock:
            self._reached, abandoned = reached, self._abandoned
        if abandoned and isinstance(reached, tuple):
            _close(*reached)


def _close(cluster: Any, client: Any) -> None:
    client.close()
    if cluster is not None:
        cluster.close()


def local_cluster(gpus: Sequence[int], target: str = WORKER) -> Any:
    """A scheduler and one Dask worker process per GPU on this host, each pinned to its GPU, each
    starting its GPU process (running `target`) as it starts (gen.gpu.dask_worker's preload)."""
    distributed = import_distributed()
    workers = {f"gpu{gpu}": {"cls": distributed.Nanny,
                             "options": {"nthreads": 1, "resources": {GPU: 1}, "host": "127.0.0.1",
                                         "env": {"CUDA_VISIBLE_DEVICES": str(gpu), GPU_TARGET_ENV: target},
                                         "preload": [PRELOAD], "silence_logs": logging.CRITICAL}}
               for gpu in gpus}
    scheduler = {"cls": distributed.Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard": False,
                                                          "dashboard_address": ":0"}}  # no fixed port 8787
    return distributed.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.CRITICAL)


def gather_within(client: Any, futures: list[Any], stop: threading.Event, timeout_s: float = GATHER_TIMEOUT_S
                  ) -> list[Any]:
    """`client.gather(futures)`: one gather for all (a round trip per future capped a cluster at
    about 95 rows/s), in a thread of its own, given up after `timeout_s` (TimeoutError), or at once
    when `stop` is set (Interrupted). A result lost with its worker stalls a gather until its
    future is cancelled: the caller's thread is never held by one."""
    answer: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)

    def gather() -> None:
        try:
            answer.put((True, client.gather(futures)))
        except BaseException as error:  # handed to the caller
            answer.put((False, error))

    threading.Thread(target=gather, daemon=True, name="tilegen-gather").start()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            gathered, value = answer.get(timeout=max(0.0, min(STOP_POLL_S, deadline - time.monotonic())))
            break
        except queue.Empty:
            if stop.is_set():
                raise Interrupted("stopped while gathering results") from None
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the results of {len(futures)} finished job(s) did not come within "
                                   f"{timeout_s:.0f} s") from None
    if not gathered:
        raise value
    return value
