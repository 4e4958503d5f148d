"""Stand-ins for the GPU: worker processes that hang or crash, and an in-process executor.

Worker targets live at module level so that spawned processes can import them.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import zlib
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Iterable, Iterator

from gen.jobs import Job
from gen.results import DeviceInfo, Measurement, Status, Timing

FAKE_DEVICE = DeviceInfo(name="Fake GPU", cc="9.0", sm_count=132, memory_bytes=80 * 2**30, l2_bytes=50 * 2**20,
                         driver="13.0", index=0)


def fake_measurement(job: Job) -> Measurement:
    """Larger tiles are faster (matmul, transpose); other families get a stable pseudo-random speed."""
    found = re.search(r"_t(\d+)_", job.name)
    tile = int(found.group(1)) if found else 1 + zlib.crc32(job.name.encode()) % 64
    median = (1.0 + zlib.crc32(job.name.encode()) % 100 / 1000) / tile  # distinct: no ties between variants
    timing = Timing(median_ms=median, min_ms=0.9 * median, max_ms=1.1 * median, stdev_ms=0.01 * median, samples=20)
    return Measurement(Status.OK, error=1e-7, tolerance=1e-5, checks=len(job.seeds), timing=timing,
                       l2_flushed=True, throughput=float(tile), unit="TFLOP/s", ceiling=50.0, device=FAKE_DEVICE)


def _serve(connection: Connection, on_t8) -> None:
    connection.send(("ready", FAKE_DEVICE))
    while (job := connection.recv()) is not None:
        if "_t8_" in job.name:
            on_t8()
        connection.send(("done", fake_measurement(job)))


def hanging_worker(connection: Connection, index: int) -> None:
    _serve(connection, lambda: time.sleep(3600))


def crashing_worker(connection: Connection, index: int) -> None:
    _serve(connection, lambda: os._exit(3))


def chatty_slow_worker(connection: Connection, index: int) -> None:
    """Slow, but reports progress: must not be mistaken for a hang."""
    def slow() -> None:
        for _ in range(4):
            time.sleep(0.4)
            connection.send(("phase", "still checking"))
    _serve(connection, slow)


def steady_worker(connection: Connection, index: int, seconds_per_job: float = 0.1) -> None:
    """Every job ok after 0.1 s, on a device that names its GPU index: GPUs 0 and 1 are one model,
    any other index another, but GPU 3 is not usable (a stand-in for the Dask cluster tests)."""
    if index == 3:
        connection.send(("unavailable", "no usable CUDA GPU 3: fake"))
        return
    device = replace(FAKE_DEVICE, index=index, name="Fake GPU" if index < 2 else "Fake GPU B")
    connection.send(("ready", device))
    while (job := connection.recv()) is not None:
        time.sleep(seconds_per_job)
        connection.send(("done", replace(fake_measurement(job), device=device)))


def slow_steady_worker(connection: Connection, index: int) -> None:
    """steady_worker at 0.4 s a job: a sweep long enough for a worker to join in the middle."""
    steady_worker(connection, index, seconds_per_job=0.4)


def dask_worker_killing_worker(connection: Connection, index: int) -> None:
    """steady_worker, but a _t8_ variant kills the Dask worker process that started this one."""
    _serve(connection, lambda: os.kill(os.getppid(), signal.SIGKILL))


def visible_devices_worker(connection: Connection, index: int) -> None:
    """A GPU named after the CUDA_VISIBLE_DEVICES its process was started with."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)")
    connection.send(("ready", replace(FAKE_DEVICE, name=visible, index=index)))
    connection.recv()  # None: stop


def unavailable_worker(connection: Connection, index: int) -> None:
    connection.send(("unavailable", "no usable CUDA GPU 0: fake"))


class FakeExecutor:
    """Runs jobs in this process: every variant is ok, faster with larger tiles."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s, self.ran, self.killed, self.closed = delay_s, [], False, False

    def devices(self) -> list[DeviceInfo]:
        return [FAKE_DEVICE]

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        for job in jobs:
            time.sleep(self.delay_s)
            if self.killed:
                return
            self.ran.append(job)
            yield job, fake_measurement(job)

    def close(self) -> None:
        self.closed = True

    def kill(self) -> None:
        self.killed = True

    def by_model(self) -> dict:
        return {FAKE_DEVICE.model: self}


class NoGpuExecutor(FakeExecutor):
    """A machine without a usable GPU: a sweep compiles its points and marks them `compiled`."""

    def devices(self) -> list[DeviceInfo]:
        from gen.worker import GpuUnavailable

        raise GpuUnavailable("no usable CUDA GPU 0: fake")


def slow_sweep(out: str) -> None:
    """A sweep of 18 variants x 2 sizes at 0.3 s a job, for a test to kill in the middle."""
    from gen.pipeline import RunOptions
    from gen.sweep import SweepOptions, sweep

    sweep(SweepOptions("matmul", Path(out), sizes=["64x64x64", "96x96x96"], progress=False, run=RunOptions(seed=1)),
          executor=FakeExecutor(delay_s=0.3))


if __name__ == "__main__":
    slow_sweep(sys.argv[1])
