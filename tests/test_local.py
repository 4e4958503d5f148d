"""This host's executor (gen.gpu.local) with many simulated GPUs: one thread feeds them all, and a
GPU that hangs, crashes or runs compute-sanitizer first holds none of the others up."""

from __future__ import annotations

import os
import sys
import threading
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import pytest

from gen.core.results import Status
from gen.gpu.process.jobs import Job
from gen.gpu.local import LocalExecutor
from gen.gpu.sanitize import sanitizer_path
from gen.evaluate import early
from gen.evaluate.options import RunOptions, make_executor
from gen.evaluate.session import Session

from . import fakes
from .waits import patient

# An exception in one of the executor's threads (a job sent to a killed worker, say) fails the test.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def _job(tile: int, number: int = 0, sanitizer: bool = False) -> Job:
    return Job(f"matmul_f32_t{tile}_p0_guard_both", "matmul", "/nonexistent.cubin", f"{64 * (number + 1)}x64x64",
               sanitizer=sanitizer)


def test_one_thread_feeds_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread per GPU made 64 simulated GPUs cost more than the jobs: the executor now waits on
    every worker from the caller's thread, which also deals the jobs."""
    monkeypatch.setenv(fakes.SERVICE_S, "0")
    executor = LocalExecutor(range(8), target="tests.fakes:timed_worker")
    try:
        executor.devices()
        before = threading.active_count()
        jobs = [_job(16, number) for number in range(40)]
        during = []
        results = []
        for job, measurement in executor.run(jobs):
            during.append(threading.active_count())
            results.append((job, measurement.status))
    finally:
        executor.close()
    assert sorted(job.shape for job, _ in results) == sorted(job.shape for job in jobs)
    assert {status for _, status in results} == {Status.OK}
    assert max(during) - before == 0, f"{max(during) - before} threads for 8 GPUs"


@pytest.mark.parametrize("target, status, message", [
    ("tests.fakes:hanging_worker", Status.TIMEOUT, "no progress for 1 s during start; worker killed"),
    ("tests.fakes:phase_hanging_worker", Status.TIMEOUT,
     "no progress for 1 s during measuring the ceiling gemm_f32; worker killed"),
    ("tests.fakes:crashing_worker", Status.LAUNCH_ERROR, "exit code 3"),
], ids=["hangs", "hangs-in-a-phase", "crashes"])
def test_a_bad_variant_on_one_gpu_is_a_row_and_every_other_job_runs(target, status, message) -> None:
    executor = LocalExecutor([0, 1, 2], silence_s=1.0, target=target)
    jobs = [_job(16, number) for number in range(6)] + [_job(8)] + [_job(16, number) for number in range(6, 12)]
    try:
        rows = {job: measurement for job, measurement in executor.run(jobs)}
        assert len(rows) == len(jobs)
        assert rows[_job(8)].status is status and message in rows[_job(8)].message
        assert all(rows[job].status is Status.OK for job in jobs if job != _job(8))
    finally:
        executor.close()
    alone = LocalExecutor([0], silence_s=1.0, target=target)
    try:
        statuses = [measurement.status for _, measurement in alone.run([_job(8), _job(16)])]
        assert statuses == [status, Status.OK] and alone.workers[0].restarts == 1  # a fresh worker ran the next
    finally:
        alone.close()


def test_a_message_longer_than_one_read_arrives_whole() -> None:
    executor = LocalExecutor([0, 1], target="tests.fakes:long_message_worker")
    try:
        measurements = [measurement for _, measurement in executor.run([_job(16, n) for n in range(4)])]
    finally:
        executor.close()
    assert [m.message for m in measurements] == ["x" * 300_000] * 4


def test_a_sanitizer_job_runs_compute_sanitizer_and_its_measurement_holds_the_hazards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "compute-sanitizer"
    tool.write_text('#!/bin/sh\necho "$2 ran" >> "' + str(tmp_path / "ran") + '"\n'
                    'echo "========= ERROR SUMMARY: 2 errors"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    sanitizer_path.cache_clear()
    executor = LocalExecutor([0, 1], target="tests.fakes:steady_worker")
    try:
        rows = {job: measurement for job, measurement in
                executor.run([_job(16, 0, sanitizer=True), _job(16, 1), _job(16, 2)])}
    finally:
        executor.close()
        sanitizer_path.cache_clear()
    assert (tmp_path / "ran").read_text().split() == ["racecheck", "ran", "synccheck", "ran", "memcheck", "ran"]
    assert rows[_job(16, 0, sanitizer=True)].hazards == {"racecheck": 2, "synccheck": 2, "memcheck": 2}
    assert rows[_job(16, 1)].hazards is None and rows[_job(16, 1)].status is Status.OK


def test_a_kill_ends_a_run_whose_gpu_hangs() -> None:
    executor = LocalExecutor([0], silence_s=3600.0, target="tests.fakes:hanging_worker")
    first = threading.Event()
    seen = []

    def consume() -> None:
        for job, measurement in executor.run([_job(16), _job(8), _job(16, 1)]):
            seen.append(measurement.status)
            first.set()

    runner = threading.Thread(target=consume, daemon=True)
    runner.start()
    assert first.wait(patient(60))  # the first job's row: the second, which hangs, is sent next
    executor.kill()
    runner.join(patient(30))
    assert not runner.is_alive() and seen == [Status.OK]


def test_a_worker_holds_its_next_job_while_it_runs_one() -> None:
    """The next job waits in the worker's socket, so the GPU never waits for a round trip through
    tilegen between jobs (and runs them one at a time: each row comes before the next job's)."""
    executor = LocalExecutor([0], target="tests.fakes:lookahead_worker")
    jobs = [_job(16, number) for number in range(4)] + [replace(_job(16), shape=fakes.LAST_SHAPE)]
    try:
        rows = [(job, measurement.message) for job, measurement in executor.run(jobs)]
    finally:
        executor.close()
    assert rows == [(job, "next waiting") for job in jobs[:-1]] + [(jobs[-1], "none")]


def test_a_job_queued_behind_one_that_loses_the_context_runs_on_the_fresh_worker() -> None:
    executor = LocalExecutor([0], target="tests.fakes:context_losing_worker")
    jobs = [_job(16, 0), _job(8), _job(16, 1), _job(16, 2)]
    try:
        rows = [(job, measurement.status) for job, measurement in executor.run(jobs)]
        restarts = executor.workers[0].restarts
    finally:
        executor.close()
    assert rows == [(jobs[0], Status.OK), (jobs[1], Status.LAUNCH_ERROR), (jobs[2], Status.OK), (jobs[3], Status.OK)]
    assert restarts == 1


def test_a_job_queued_behind_one_after_which_the_worker_died_runs_on_the_fresh_worker() -> None:
    """The worker ended between jobs, with the next one unread in its socket: that job is not blamed."""
    executor = LocalExecutor([0], target="tests.fakes:exiting_worker")
    jobs = [_job(8), _job(16, 0), _job(16, 1)]
    try:
        rows = [(job, measurement.status) for job, measurement in executor.run(jobs)]
        restarts = executor.workers[0].restarts
    finally:
        executor.close()
    assert rows == [(job, Status.OK) for job in jobs] and restarts == 1


def test_a_job_whose_phases_follow_each_other_fast_is_not_taken_for_a_hang() -> None:
    executor = LocalExecutor([0], silence_s=1.0, target="tests.fakes:busy_phases_worker")
    try:
        rows = [measurement.status for _, measurement in executor.run([_job(8), _job(16)])]
    finally:
        executor.close()
    assert rows == [Status.OK, Status.OK]


def test_the_workers_of_every_gpu_start_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker takes a second or two to start (python, pycuda, a context): started one after another,
    two GPUs began a sweep that much later than one. Each fake GPU here announces that it starts,
    then waits at the gate before it is ready: the test hears both start before it opens the gate
    only when the executor starts them together (one at a time, the first would wait for ever)."""
    monkeypatch.setenv(fakes.ANNOUNCE_ENV, str(tmp_path / "announce"))
    monkeypatch.setenv(fakes.GATE_ENV, str(tmp_path / "gate"))
    said, gate = fakes.Announcements(tmp_path / "announce"), fakes.Gate(tmp_path / "gate")
    executor = LocalExecutor([0, 1], target="tests.fakes:gated_start_worker")
    devices: list = []
    starting = threading.Thread(target=lambda: devices.extend(executor.devices()), daemon=True)
    starting.start()
    try:
        heard = {said.until("starting", timeout=60), said.until("starting", timeout=60)}
    finally:
        gate.open()
        gate.open()
        starting.join(patient(60))
        executor.close()
        said.close()
        gate.close()
    assert heard == {"starting 0", "starting 1"}
    assert [device.index for device in devices] == [0, 1]


def test_a_command_takes_the_workers_started_before_its_command_line_was_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tilegen sweep` and `tune` start their GPU workers before they import the command line
    (gen.cli.entry), which takes about as long: the executor the command then makes for the same
    GPUs is the one already starting (its workers alive before it is started), with the command's
    silence. The fake GPUs wait at the gate until the test has heard both start."""
    monkeypatch.setenv(fakes.ANNOUNCE_ENV, str(tmp_path / "announce"))
    monkeypatch.setenv(fakes.GATE_ENV, str(tmp_path / "gate"))
    said, gate = fakes.Announcements(tmp_path / "announce"), fakes.Gate(tmp_path / "gate")
    early.start([0, 1], target="tests.fakes:gated_start_worker")
    executor = None
    try:
        heard = {said.until("starting", timeout=60), said.until("starting", timeout=60)}
        executor = make_executor(RunOptions(gpus=[0, 1], silence_s=7.0))
        alive = [worker.alive for worker in executor.workers]
        gate.open()
        gate.open()
        devices = executor.devices()
    finally:
        early.stop()
        if executor is not None:
            executor.close()
        said.close()
        gate.close()
    assert heard == {"starting 0", "starting 1"}
    assert alive == [True, True]
    assert [device.index for device in devices] == [0, 1]
    assert [worker.silence_s for worker in executor.workers] == [7.0, 7.0]


def _children() -> set[int]:
    """This process's child processes now."""
    return {int(pid) for path in Path(f"/proc/{os.getpid()}/task").glob("*/children") for pid in path.read_text().split()}


def test_workers_started_early_that_no_command_takes_are_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers started early for GPUs other than those the command asks for are killed when it makes
    its own; those no command asked for, when it ends (gen.cli.entry calls `stop`). Each simulated
    GPU here would take a minute to start."""
    monkeypatch.setenv(fakes.START_S, "60")
    before = _children()
    early.start([0, 1], target="tests.fakes:timed_worker")
    for_other_gpus = _children() - before
    fresh = make_executor(RunOptions(gpus=[1]))
    left_after_the_command_asked = _children() & for_other_gpus
    early.start([0], target="tests.fakes:timed_worker")
    never_asked = _children() - before
    early.stop()
    assert len(for_other_gpus) == 2 and left_after_the_command_asked == set()
    assert not any(worker.alive for worker in fresh.workers)  # a fresh executor, not started yet
    assert len(never_asked) == 1 and _children() & never_asked == set()


def test_workers_that_cannot_start_early_leave_the_start_to_the_command(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting early is only sooner: when no process can be made then, nothing is left started, and
    the command starts its workers itself (and says what fails)."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    early.start([0], target="tests.fakes:timed_worker")
    assert early.take([0], 5.0) is None


def test_the_workers_of_every_gpu_stop_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker takes a while to end (its modules, its context): stopped one after another, two GPUs
    ended a run that much later than one. Each fake GPU here, told to stop, announces it and waits at
    the gate before it ends: the test hears both before it opens the gate, and then both end, only
    when the executor tells them together (one at a time, the first is killed at the gate)."""
    monkeypatch.setenv(fakes.ANNOUNCE_ENV, str(tmp_path / "announce"))
    monkeypatch.setenv(fakes.GATE_ENV, str(tmp_path / "gate"))
    said, gate = fakes.Announcements(tmp_path / "announce"), fakes.Gate(tmp_path / "gate")
    executor = LocalExecutor([0, 1], target="tests.fakes:gated_stop_worker")
    closing = threading.Thread(target=executor.close, daemon=True)
    try:
        assert [device.index for device in executor.devices()] == [0, 1]
        closing.start()
        asked = {said.until("stopping", timeout=60), said.until("stopping", timeout=60)}
        gate.open()
        gate.open()
        ended = {said.until("stopped", timeout=60), said.until("stopped", timeout=60)}
    finally:
        closing.join(patient(60))
        executor.kill()
        said.close()
        gate.close()
    assert asked == {"stopping 0", "stopping 1"} and ended == {"stopped 0", "stopped 1"}
    assert not any(worker.alive for worker in executor.workers)

@pytest.mark.parametrize("ends", ["ready", "interrupted"])
def test_a_session_starts_its_gpu_workers_before_anything_asks_for_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          ends: str) -> None:
    """A command plans while its GPU workers start: the session starts them when it is made, and
    waits for none. Interrupted while they start, it leaves none running."""
    monkeypatch.setenv(fakes.ANNOUNCE_ENV, str(tmp_path / "announce"))
    monkeypatch.setenv(fakes.GATE_ENV, str(tmp_path / "gate"))
    said, gate = fakes.Announcements(tmp_path / "announce"), fakes.Gate(tmp_path / "gate")
    executor = LocalExecutor([0, 1], target="tests.fakes:gated_start_worker")
    try:
        with pytest.raises(KeyboardInterrupt) if ends == "interrupted" else nullcontext():
            with Session(RunOptions(arch="sm_90", gpus=[0, 1]), executor):
                heard = {said.until("starting", timeout=60), said.until("starting", timeout=60)}
                if ends == "interrupted":
                    raise KeyboardInterrupt
                gate.open()
                gate.open()
                assert [device.index for device in executor.devices()] == [0, 1]
    finally:
        said.close()
        gate.close()
    assert heard == {"starting 0", "starting 1"}
    assert not any(worker.alive for worker in executor.workers)
