"""Run jobs in isolated worker processes, one per GPU, so that a bad variant cannot stop a sweep.

A variant that hangs is killed after `silence_s` without a word from its worker (`timeout`); one
that crashes its process or loses its CUDA context is a `launch_error`. Either way the worker is
replaced by a fresh process with a fresh context and the next job runs.

The executor is the one interface the sweep and the tuner see (`devices`, `run`, `close`), so a
multi-host engine can replace `LocalExecutor` without touching them.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Callable, Iterable, Iterator, Protocol, Sequence

from .errors import UsageError
from .jobs import Job
from .results import DeviceInfo, GpuModel, Measurement, Status, TimingOptions

START_TIMEOUT_S = 120.0  # importing pycuda and making a context can take a while on a cold machine


class GpuUnavailable(Exception):
    """No kernel can run here; the message says why (no pycuda, no device, ...)."""


class Executor(Protocol):
    def devices(self) -> list[DeviceInfo]: ...

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Yield each job with its measurement as it completes (in any order)."""

    def close(self) -> None: ...

    def by_model(self) -> dict[GpuModel, "Executor"]:
        """Executors for each GPU model among this one's GPUs (models are tuned separately)."""


def worker_main(connection: Connection, physical_index: int) -> None:
    """The worker process: make a context on one GPU, then run jobs until told to stop."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(physical_index)
    try:
        from .run import Runner

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
    """One worker process for one GPU, restarted whenever a job kills or hangs it."""

    def __init__(self, physical_index: int = 0, silence_s: float = 30.0,
                 target: Callable[[Connection, int], None] = worker_main):
        self.physical_index, self.silence_s, self.target = physical_index, silence_s, target
        self._process: multiprocessing.Process | None = None
        self._connection: Connection | None = None
        self.device: DeviceInfo | None = None
        self.starts = 0

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    def start(self) -> DeviceInfo:
        self.starts += 1
        context = multiprocessing.get_context("spawn")  # never fork a process that may hold CUDA state
        parent, child = context.Pipe()
        self._process = context.Process(target=self.target, args=(child, self.physical_index), daemon=True)
        self._process.start()
        child.close()
        self._connection = parent
        if not parent.poll(START_TIMEOUT_S):
            self.stop()
            raise GpuUnavailable(f"worker for GPU {self.physical_index} did not start within {START_TIMEOUT_S:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            raise GpuUnavailable(f"worker for GPU {self.physical_index} died while starting "
                                 f"(exit code {self._process.exitcode})") from None
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
                self.stop()
                return Measurement(Status.TIMEOUT, f"no progress for {self.silence_s:.0f} s during {phase}; "
                                                   f"worker killed", device=self.device)
            try:
                kind, payload = self._connection.recv()
            except EOFError:
                code = self._wait_for_exit()
                return Measurement(Status.LAUNCH_ERROR, f"worker process died during {phase} ({describe_exit(code)})",
                                   device=self.device, context_lost=True)
            if kind == "phase":
                phase = payload
                continue
            if payload.context_lost:
                self._wait_for_exit()
            return payload

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.is_alive() and self._connection is not None:
            try:
                self._connection.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._process.join(1.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5.0)
        self._process = None

    def _wait_for_exit(self) -> int | None:
        assert self._process is not None
        self._process.join(10.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5.0)
        code = self._process.exitcode
        self._process = None
        return code


class LocalExecutor:
    """Isolated workers on this host's GPUs; one job per GPU at a time, so timings never share a GPU."""

    def __init__(self, gpus: Sequence[int] = (0,), silence_s: float = 30.0,
                 target: Callable[[Connection, int], None] = worker_main):
        self.workers = [IsolatedWorker(index, silence_s, target) for index in gpus]
        self._devices: list[DeviceInfo] | None = None

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            self._devices = [worker.start() for worker in self.workers]
        return self._devices

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        self.devices()
        idle: queue.Queue[IsolatedWorker] = queue.Queue()
        for worker in self.workers:
            idle.put(worker)

        def on_free_worker(job: Job) -> tuple[Job, Measurement]:
            worker = idle.get()
            try:
                return job, worker.run(job)
            finally:
                idle.put(worker)

        pool = ThreadPoolExecutor(max_workers=len(self.workers))
        try:
            for future in as_completed([pool.submit(on_free_worker, job) for job in jobs]):
                yield future.result()
        finally:  # a consumer that stops early (a tuning budget, Ctrl-C) cancels what has not started
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()

    def by_model(self) -> dict[GpuModel, "LocalExecutor"]:
        """One executor per GPU model, sharing this one's started workers: models tune separately."""
        groups: dict[str, LocalExecutor] = {}
        for worker, device in zip(self.workers, self.devices()):
            group = groups.setdefault(device.model, LocalExecutor([], target=worker.target))
            group.workers.append(worker)
            group._devices = (group._devices or []) + [device]
        return groups


def parse_gpus(text: str) -> list[int]:
    """'0,1' -> [0, 1]; 'all' -> every GPU nvidia-smi lists (or [0] when it lists none)."""
    if text.strip() == "all":
        try:
            listed = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.split()
            return [int(index) for index in listed] or [0]
        except (OSError, subprocess.SubprocessError, ValueError):
            return [0]
    try:
        gpus = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--gpus {text!r} must be 'all' or GPU indices like 0,1") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise UsageError(f"--gpus {text!r} must list distinct GPU indices like 0,1")
    return gpus


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def run_once(job_json: str) -> int:
    """Run one job in this process (used under compute-sanitizer); print its measurement as JSON."""
    from .run import Runner

    data = json.loads(job_json)
    data["seeds"] = tuple(data["seeds"])
    data["timing"] = TimingOptions(**data["timing"]) if data["timing"] else None
    measurement = Runner().run(Job(**data))
    print(json.dumps({"status": str(measurement.status), "message": measurement.message}))
    return 0


def job_json(job: Job) -> str:
    return json.dumps(asdict(job))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--once":
        sys.exit(run_once(sys.argv[2]))
    print("usage: python -m gen.worker --once JOB_JSON", file=sys.stderr)
    sys.exit(2)
