"""Run jobs in isolated worker processes, one per GPU, so that a bad variant cannot stop a sweep.

A variant that hangs is killed after `silence_s` without a word from its worker (`timeout`); one
that crashes its process or loses its CUDA context is a `launch_error`. Either way the worker is
replaced by a fresh process with a fresh context and the next job runs.

A worker is `python -m gen.gpu.workers --serve ...` in a session of its own, talking over a socket: it
imports nothing of the caller's main module (a user's script needs no `__main__` guard), a Ctrl-C
at the terminal reaches only tilegen (which stops it), and what it prints on the way to an early
death becomes the reason given.

The executor is the one interface the pipeline sees (`devices`, `run`, `close`, `by_model`), so a
multi-host engine (gen.gpu.dask) can stand in for `LocalExecutor`.
"""

from __future__ import annotations

import importlib
import json
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Callable, Iterable, Iterator, Protocol, Sequence

from ..core.errors import Interrupted, TilegenError
from ..core.processes import ProcessGroup, kill_session, python_environment
from .jobs import Job
from ..core.results import DeviceInfo, GpuModel, Measurement, Status, TimingOptions

START_TIMEOUT_S = 120.0  # importing pycuda and making a context can take a while on a cold machine
WORKER = "gen.gpu.workers:worker_main"


class GpuUnavailable(TilegenError):
    """No kernel can run here; the message says why (no pycuda, no device, ...). Sweeps catch it and
    compile only; where a GPU is needed (tune, gen.kernel) it reaches the user as one line."""


class Executor(Protocol):
    def devices(self) -> list[DeviceInfo]:
        """Start the workers (if need be) and say which GPUs they hold; GpuUnavailable if none."""

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Yield each job with its measurement as it completes (in any order). `jobs` is consumed
        lazily, one job whenever a GPU is free, so it may be a stream that blocks."""

    def close(self) -> None: ...

    def kill(self) -> None:
        """Stop at once (an interrupt): whatever runs is dropped."""

    def by_model(self) -> dict[GpuModel, "Executor"]:
        """Executors for each GPU model among this one's GPUs (models are tuned separately)."""


def worker_main(connection: Connection, physical_index: int) -> None:
    """The worker process: make a context on one GPU, then run jobs until told to stop."""
    try:
        from .runner import Runner

        runner = Runner(physical_index)
    except ImportError as error:
        connection.send(("unavailable", f"pycuda is not installed ({error}); pip install 'tilegen[cuda]' on a "
                                        f"machine with a CUDA driver"))
        return
    except Exception as error:  # pycuda raises its own errors when there is no usable device
        connection.send(("unavailable", f"no usable CUDA GPU {physical_index}: {type(error).__name__}: {error}"))
        return
    connection.send(("ready", runner.device))
    while (job := connection.recv()) is not None:
        try:
            measurement = runner.run(job, report=lambda phase: connection.send(("phase", phase)))
        except Exception:
            measurement = Measurement(Status.LAUNCH_ERROR, traceback.format_exc(limit=3), device=runner.device,
                                      context_lost=True)
        connection.send(("done", measurement))
        if measurement.context_lost:
            return


class IsolatedWorker:
    """One worker process for one GPU, restarted whenever a job kills or hangs it.
    `target` names the function the process runs, as "module:function". The process sees GPU
    `physical_index` alone, or what `visible_devices` names (its CUDA_VISIBLE_DEVICES, as it is)."""

    def __init__(self, physical_index: int = 0, silence_s: float = 30.0, target: str = WORKER,
                 visible_devices: str | None = None):
        self.physical_index, self.silence_s, self.target = physical_index, silence_s, target
        self.visible_devices = visible_devices
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self._stderr = None
        self.device: DeviceInfo | None = None
        self.starts = 0

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def gpu(self) -> str:
        """The GPU as its process is pinned to it: an index, or a UUID, MIG id or list."""
        return str(self.physical_index) if self.visible_devices is None else self.visible_devices

    def environment(self) -> dict[str, str]:
        """The environment of a process on this worker's GPU (its own, compute-sanitizer's)."""
        return python_environment(self.physical_index, self.visible_devices)

    def start(self) -> DeviceInfo:
        self.starts += 1
        ours, theirs = socket.socketpair()
        self._stderr = tempfile.TemporaryFile()
        environment = self.environment()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "gen.gpu.workers", "--serve", str(theirs.fileno()), str(self.physical_index),
             self.target], pass_fds=(theirs.fileno(),), env=environment, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self._stderr, start_new_session=True)
        theirs.close()
        self._connection = Connection(ours.detach())
        if not self._connection.poll(START_TIMEOUT_S):
            self.kill()
            raise GpuUnavailable(f"worker for GPU {self.gpu} did not start within {START_TIMEOUT_S:.0f} s")
        try:
            kind, payload = self._connection.recv()
        except (EOFError, OSError):
            code = self._wait_for_exit()
            raise GpuUnavailable(f"worker for GPU {self.gpu} died while starting ({describe_exit(code)})"
                                 f"{self._last_words()}") from None
        if kind != "ready":
            self.stop()
            raise GpuUnavailable(payload)
        self.device = payload
        return payload

    def run(self, job: Job) -> Measurement:
        if not self.alive:
            self.start()
        assert self._connection is not None
        self._connection.send(job)
        phase = "start"
        while True:
            if not self._connection.poll(self.silence_s):
                self.kill()
                return Measurement(Status.TIMEOUT, f"no progress for {self.silence_s:.0f} s during {phase}; "
                                                   f"worker killed", device=self.device)
            try:
                kind, payload = self._connection.recv()
            except (EOFError, OSError):
                code = self._wait_for_exit()
                return Measurement(Status.LAUNCH_ERROR, f"worker process died during {phase} ({describe_exit(code)})"
                                   f"{self._last_words()}", device=self.device, context_lost=True)
            if kind == "phase":
                phase = payload
                continue
            if payload.context_lost:
                self._wait_for_exit()
            return payload

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Ask the worker to finish, then make sure it has."""
        if self._process is None:
            return
        if self.alive and self._connection is not None:
            try:
                self._connection.send(None)
                self._process.wait(1.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                kill_session(self._process.pid)
                self._process.wait(5.0)
            self._process = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _wait_for_exit(self) -> int | None:
        assert self._process is not None
        try:
            code = self._process.wait(10.0)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        return code

    def _last_words(self) -> str:
        """The last line the worker printed (a Python error, say), to say why it died."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().decode(errors="replace").splitlines() if line.strip()]
        return f": {lines[-1]}" if lines else ""


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


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def run_once(job_json: str) -> int:
    """Run one job in this process (used under compute-sanitizer); print its measurement as JSON."""
    from .runner import Runner

    data = json.loads(job_json)
    data["seeds"] = tuple(data["seeds"])
    data["timing"] = TimingOptions(**data["timing"]) if data["timing"] else None
    measurement = Runner().run(Job(**data))
    print(json.dumps({"status": str(measurement.status), "message": measurement.message}))
    return 0


def _serve(descriptor: str, physical_index: str, target: str) -> int:
    """The worker process's entry: the socket it was given, its GPU, and the function to run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only tilegen stops its workers
    module, _, function = target.partition(":")
    serve: Callable[[Connection, int], None] = getattr(importlib.import_module(module), function)
    connection = Connection(int(descriptor))
    serve(connection, int(physical_index))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        sys.exit(_serve(*sys.argv[2:]))
    if len(sys.argv) == 3 and sys.argv[1] == "--once":
        sys.exit(run_once(sys.argv[2]))
    print("usage: python -m gen.gpu.workers --once JOB_JSON | --serve FD GPU MODULE:FUNCTION", file=sys.stderr)
    sys.exit(2)
