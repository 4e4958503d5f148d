"""One conformance test of the executor protocol (gen.gpu.executor, where its duties are written),
run against every executor: this host's (over simulated GPUs, with a stand-in compute-sanitizer
that finds nothing), Dask's where `distributed` is installed, and the test fakes. A new executor
joins EXECUTORS.

The protocol, as the test holds every executor to it: it has each duty of `Executor`; `devices`
names its GPUs and `capacity` is at least one job; `run` takes the engine's JobFeed (or a finite
list) and gives back each job it was given exactly once, as it was given, with a Measurement; a
sanitizer job's measurement holds each compute-sanitizer tool's hazards, any other's none;
`by_model` groups its GPUs by model; `close` may be called twice; without a usable GPU, `devices`
and `by_model` raise GpuUnavailable."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

from gen.core.results import DeviceInfo, GpuModel, Measurement
from gen.gpu.executor import Executor, GpuUnavailable
from gen.gpu.feed import JobFeed
from gen.gpu.process.jobs import Job
from gen.gpu.local import LocalExecutor
from gen.gpu.sanitize import TOOLS, sanitizer_path

from . import fakes

STEADY, UNAVAILABLE = "tests.fakes:steady_worker", "tests.fakes:unavailable_worker"  # simulated GPUs
NO_DASK = pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="distributed is not installed")


def _dask(gpus: list[int], target: str) -> Executor:
    from gen.gpu.dask import DaskExecutor

    return DaskExecutor("local", gpus=gpus, target=target)


EXECUTORS: list = [  # each made with two GPUs of one model where it simulates GPUs
    pytest.param(lambda: LocalExecutor([0, 1], target=STEADY), id="local"),
    pytest.param(lambda: _dask([0, 1], STEADY), id="dask", marks=NO_DASK),
    pytest.param(fakes.FakeExecutor, id="fake"),
    pytest.param(fakes.EnergyExecutor, id="fake-energy"),
]
WITHOUT_GPUS: list = [
    pytest.param(lambda: LocalExecutor([0], target=UNAVAILABLE), id="local"),
    pytest.param(lambda: _dask([0], UNAVAILABLE), id="dask", marks=NO_DASK),
    pytest.param(fakes.NoGpuExecutor, id="fake"),
]
DUTIES = sorted(name for name, value in vars(Executor).items() if callable(value) and not name.startswith("_"))


def _jobs(count: int, cubin: Path) -> list[Job]:
    """`count` jobs, the second of them a sanitizer job."""
    return [Job("matmul_f32_t16_p0_guard_both", "matmul", str(cubin), f"{64 * (n + 1)}x64x64", ticket=n + 1,
                sanitizer=n == 1) for n in range(count)]


@pytest.fixture
def quiet_sanitizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A compute-sanitizer first on PATH that finds no hazard, for the executors that run it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "compute-sanitizer"
    tool.write_text('#!/bin/sh\necho "========= ERROR SUMMARY: 0 errors"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    sanitizer_path.cache_clear()
    yield
    sanitizer_path.cache_clear()


def _fed(jobs: list[Job]) -> JobFeed:
    feed = JobFeed()
    for job in jobs:
        feed.put(job)
    feed.close()
    return feed


@pytest.mark.parametrize("make", EXECUTORS)
@pytest.mark.usefixtures("quiet_sanitizer")
def test_every_executor_keeps_the_protocol(make: Callable[[], Executor], tmp_path: Path) -> None:
    cubin = tmp_path / "stand-in.cubin"  # the simulated GPUs load nothing, but a cubin is sent where it runs
    cubin.write_bytes(b"not a cubin")
    executor = make()
    try:
        assert [duty for duty in DUTIES if not callable(getattr(executor, duty, None))] == []
        devices = executor.devices()
        assert devices and all(isinstance(device, DeviceInfo) for device in devices)
        assert isinstance(executor.capacity(), int) and executor.capacity() >= 1
        for jobs in (_jobs(6, cubin), _jobs(2, cubin)):  # the engine's JobFeed, then a finite list read whole
            done = list(executor.run(_fed(jobs) if len(jobs) > 2 else jobs))
            assert sorted(job.ticket for job, _ in done) == [job.ticket for job in jobs]  # each once
            assert {job.ticket: job for job, _ in done} == {job.ticket: job for job in jobs}  # as it was given
            assert all(isinstance(measurement, Measurement) for _, measurement in done)
            assert {job.ticket: measurement.hazards for job, measurement in done} == {
                job.ticket: {tool: 0 for tool in TOOLS} if job.sanitizer else None for job in jobs}
        models = executor.by_model()
        assert models and all(isinstance(model, GpuModel) for model in models)
        assert all({device.model for device in group.devices()} == {model} for model, group in models.items())
    finally:
        executor.close()
    executor.close()  # closing again is harmless


@pytest.mark.parametrize("make", WITHOUT_GPUS)
def test_an_executor_without_a_usable_gpu_says_so_with_gpu_unavailable(make: Callable[[], Executor]) -> None:
    executor = make()
    try:
        with pytest.raises(GpuUnavailable, match="no usable CUDA GPU"):
            executor.devices()
        with pytest.raises(GpuUnavailable):
            executor.by_model()
    finally:
        executor.close()
