"""A real local Dask cluster (worker processes, no GPU): each Dask worker runs the fake GPU worker
of tests/fakes.py in its isolated subprocess, exactly where a real one would run PyCUDA."""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the cluster extra is not installed (pip install 'tilegen[cluster]')")

from gen.gpu import dask as cluster  # noqa: E402
from gen.gpu.dask import DaskExecutor  # noqa: E402
from gen.core.errors import TilegenError  # noqa: E402
from gen.families import get_family  # noqa: E402
from gen.gpu.jobs import Job  # noqa: E402
from gen.evaluate.options import RunOptions  # noqa: E402
from gen.core.results import DeviceInfo, GpuModel, Row, Status  # noqa: E402
from gen.search.sweep import SweepOptions, sweep  # noqa: E402
from gen.search.revalidate import revalidate  # noqa: E402
from gen.search.tune import TuneOptions, tune  # noqa: E402
from gen.store.tuning_db import TuningDB  # noqa: E402

from . import fakes  # noqa: E402

FAKE = "tests.fakes:steady_worker"
SIZES = ["64x64x64", "96x96x96", "128x128x128"]  # 54 points of the default matmul space


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _sweep(out: Path, executor: DaskExecutor) -> None:
    sweep(SweepOptions("matmul", out, sizes=SIZES, progress=False, run=RunOptions(seed=1)), executor=executor)


def _assert_complete(rows: list[dict]) -> None:
    keys = [(row["name"], row["shape"]) for row in rows]
    assert len(keys) == len(set(keys)) == 54, collections.Counter(keys).most_common(3)
    statuses = collections.Counter(row["status"] for row in rows)
    assert statuses["ok"] + statuses["skipped"] == 54 and statuses["ok"] > 20, statuses


def test_a_local_cluster_spreads_a_sweep_over_its_workers_and_writes_each_row_once(tmp_path: Path) -> None:
    executor = DaskExecutor("local", gpus=[0, 1, 2], target=FAKE)
    _sweep(tmp_path, executor)
    rows = _rows(tmp_path)
    _assert_complete(rows)
    used = collections.Counter(row["provenance"]["gpu_index"] for row in rows if row["status"] == "ok")
    assert set(used) == {0, 1, 2} and min(used.values()) >= 3, used  # every worker took a share


def test_a_worker_killed_mid_sweep_loses_no_row_and_is_named(tmp_path: Path) -> None:
    executor = DaskExecutor("local", gpus=[0, 1, 2], target=FAKE)
    client = executor._client
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _sweep(tmp_path, executor)
        except BaseException as error:  # reported below
            failure.append(error)

    sweeping = threading.Thread(target=run)
    sweeping.start()
    results = tmp_path / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not results.exists() or len(results.read_text().splitlines()) < 25):
        time.sleep(0.05)
    victim = sorted(executor.gpu_workers())[1]
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)  # the Dask worker process, mid-job: its nanny starts a fresh one
    sweeping.join(120)
    assert not sweeping.is_alive() and not failure, failure
    _assert_complete(_rows(tmp_path))
    assert any(victim in name for name in executor.lost), executor.lost


def test_a_worker_that_joins_mid_sweep_gets_work(tmp_path: Path) -> None:
    executor = DaskExecutor("local", gpus=[0], target="tests.fakes:slow_steady_worker")
    address = executor._client.scheduler.address
    failure: list[BaseException] = []
    sweeping = threading.Thread(target=lambda: _guarded(failure, _sweep, tmp_path, executor))
    sweeping.start()
    results = tmp_path / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not results.exists() or len(results.read_text().splitlines()) < 20):
        time.sleep(0.05)  # the skipped rows come first, then a few measured ones
    joiner = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                               "--resources", "GPU=1", "--name", "joiner", "--no-dashboard"],
                              env=dict(os.environ, CUDA_VISIBLE_DEVICES="1"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        sweeping.join(180)
    finally:
        joiner.terminate()
        joiner.wait(30)
    assert not sweeping.is_alive() and not failure, failure
    rows = _rows(tmp_path)
    _assert_complete(rows)
    used = collections.Counter(row["provenance"]["gpu_index"] for row in rows if row["status"] == "ok")
    assert used[1] >= 3, used  # the worker that joined (pinned to GPU 1) measured its share


def _guarded(failure: list[BaseException], call, *args) -> None:
    try:
        call(*args)
    except BaseException as error:  # reported by the test
        failure.append(error)


def test_a_cluster_tune_tunes_each_gpu_model_on_its_own_workers(tmp_path: Path) -> None:
    db = tmp_path / "tuning.sqlite"
    executor = DaskExecutor("local", gpus=[0, 1, 2], target=FAKE)  # GPUs 0, 1: one model; 2: another
    results = tune(TuneOptions("matmul", "64x64x64", strategy="brute", db=db, progress=False, run=RunOptions(seed=1)),
                   executor=executor)
    assert sorted(r.problem.gpu_model.name for r in results) == ["Fake GPU", "Fake GPU B"]
    stored = TuningDB(db)
    for result in results:
        rows = stored.measured(result.problem)
        assert len(rows) == result.evaluations > 5
        indices = {row.provenance["gpu_index"] for row in rows.values() if row.median_ms is not None}
        assert indices == ({2} if result.problem.gpu_model.name == "Fake GPU B" else {0, 1}), indices


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gen", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("address, named", [("tcp://127.0.0.1:9", "tcp://127.0.0.1:9"), ("somewhere:8786", "somewhere")])
def test_a_scheduler_that_cannot_be_reached_is_a_one_line_error(tmp_path: Path, address: str, named: str) -> None:
    done = _cli("sweep", "matmul", "-p", "tile=8", "--size", "64x64x64", "--out", str(tmp_path / "out"),
                "--cluster", address)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_tilegen_worker_refuses_an_unreachable_scheduler(tmp_path: Path) -> None:
    done = _cli("worker", "tcp://127.0.0.1:9")
    assert done.returncode == 2 and "tcp://127.0.0.1:9" in done.stderr and "Traceback" not in done.stderr


# ---- the GPU worker state on a Dask worker (in this process: the functions a Dask worker runs) ----

def _stop_held(target: str) -> None:
    held = cluster._held.pop(target, None)
    if held is not None:
        held.stop()


def test_a_later_runs_hang_timeout_reaches_a_dask_workers_gpu_process() -> None:
    target = "tests.fakes:hanging_worker"  # hangs on every _t8_ variant
    try:
        cluster.device_task(30.0, target)  # a first run, with a 30 s hang timeout, started the GPU process
        started = time.monotonic()
        measurement = cluster.job_task(Job("matmul_f32_t8_p0_guard", "matmul", "", "64x64x64", timing=None),
                                       b"not a cubin", 1.0, target)  # a later run's: 1 s
        assert measurement.status == Status.TIMEOUT and time.monotonic() - started < 10, measurement
    finally:
        _stop_held(target)


@pytest.mark.parametrize("visible", ["GPU-5c3a1f2e-8d2e-4b1a-9f00-0123456789ab",
                                     "MIG-0f7c2d9e-41aa-5b3c-8e21-abcdefabcdef", "2,3", "1"])
def test_a_dask_worker_pinned_by_uuid_mig_or_list_keeps_that_pin_for_its_gpu_process(
        monkeypatch: pytest.MonkeyPatch, visible: str) -> None:
    target = "tests.fakes:visible_devices_worker"  # names its GPU after the CUDA_VISIBLE_DEVICES it got
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    try:
        assert cluster.device_task(5.0, target).name == visible
    finally:
        _stop_held(target)


# ---- which workers take jobs ------------------------------------------------------------------

def test_a_sweep_sends_no_job_to_a_worker_whose_gpu_was_refused(tmp_path: Path) -> None:
    executor = DaskExecutor("local", gpus=[0, 3], target=FAKE)  # GPU 3 has no usable GPU (tests/fakes.py)
    _sweep(tmp_path, executor)
    rows = _rows(tmp_path)
    _assert_complete(rows)
    assert {row["provenance"]["gpu_index"] for row in rows if row["status"] == "ok"} == {0}


def _join(address: str, name: str, gpu: str, *, nanny: bool = True) -> subprocess.Popen:
    """A plain dask worker with one GPU resource, pinned to fake GPU `gpu`."""
    return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                             "--resources", "GPU=1", "--name", name, "--no-dashboard",
                             *([] if nanny else ["--no-nanny"])],
                            env=dict(os.environ, CUDA_VISIBLE_DEVICES=gpu), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


def test_a_worker_that_joins_mid_sweep_without_a_usable_gpu_of_the_runs_model_gets_no_work(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    executor = DaskExecutor("local", gpus=[0], target="tests.fakes:slow_steady_worker")
    executor.devices()  # the run's GPUs are known: the two below join mid-run
    address = executor._client.scheduler.address
    failure: list[BaseException] = []
    sweeping = threading.Thread(target=lambda: _guarded(failure, _sweep, tmp_path, executor))
    sweeping.start()
    joiners = [_join(address, "joiner-no-gpu", "3"), _join(address, "joiner-model-b", "2")]
    try:
        sweeping.join(180)
    finally:
        for joiner in joiners:
            _stop(joiner)
    assert not sweeping.is_alive() and not failure, failure
    rows = _rows(tmp_path)
    _assert_complete(rows)
    assert {row["provenance"]["gpu_index"] for row in rows if row["status"] == "ok"} == {0}
    said = capsys.readouterr().err
    refused = [line for line in said.splitlines() if "takes no jobs" in line]
    assert any("joiner-no-gpu" in line and "no usable CUDA GPU 3" in line for line in refused), said
    assert any("joiner-model-b" in line and "Fake GPU B" in line for line in refused), said


def test_a_job_that_keeps_killing_its_only_worker_is_a_launch_error_not_an_endless_retry(tmp_path: Path) -> None:
    executor = DaskExecutor("local", gpus=[0], target="tests.fakes:dask_worker_killing_worker")
    sweep(SweepOptions("matmul", tmp_path, params={"tile": ["8", "16"], "padding": ["0"], "bounds": ["guard"]},
                       sizes=["64x64x64"], progress=False, run=RunOptions(seed=1)), executor=executor)
    rows = {row["params"]["tile"]: row for row in _rows(tmp_path)}  # each row once: no endless retry
    assert sorted(rows) == [8, 16] and rows[8]["status"] == "launch_error", rows
    assert f"lost {cluster.MAX_RESENDS + 1} times" in rows[8]["message"], rows[8]
    # (the tile-16 job, in flight on the same worker each time, may share that fate, as Dask's own
    # count of a task's lost workers would have it)


def _tune_in_thread(db: Path, executor: DaskExecutor, failure: list[BaseException]) -> threading.Thread:
    options = TuneOptions("matmul", "64x64x64", strategy="brute", db=db, progress=False, run=RunOptions(seed=1))
    tuning = threading.Thread(target=lambda: _guarded(failure, tune, options, executor), daemon=True)
    tuning.start()
    return tuning


def _wait_for_rows(db: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not db.exists() or len(TuningDB(db).rows()) < count):
        time.sleep(0.05)


def test_a_cluster_tune_goes_on_when_a_models_only_worker_is_restarted(tmp_path: Path) -> None:
    db = tmp_path / "tuning.sqlite"
    executor = DaskExecutor("local", gpus=[2], target=FAKE)  # the only worker of its model
    failure: list[BaseException] = []
    try:
        tuning = _tune_in_thread(db, executor, failure)
        _wait_for_rows(db, 3)
        (victim,) = executor.gpu_workers()
        pid = executor._client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)  # its nanny starts a fresh worker, at another address
        tuning.join(120)
        assert not tuning.is_alive() and not failure, failure
    finally:
        executor.kill()
    assert any(victim in name for name in executor.lost), executor.lost
    (problem,) = TuningDB(db).problems()
    assert problem.gpu_model.name == "Fake GPU B"


def test_a_cluster_tune_whose_model_lost_every_worker_stops_with_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "tuning.sqlite"
    scheduler = cluster.local_cluster([])  # a scheduler and no worker
    executor = DaskExecutor(scheduler.scheduler_address, silence_s=3.0, target=FAKE)
    lonely = _join(scheduler.scheduler_address, "lonely", "2", nanny=False)  # no nanny: none restarts it
    failure: list[BaseException] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not executor.gpu_workers():
            time.sleep(0.05)
        tuning = _tune_in_thread(db, executor, failure)
        _wait_for_rows(db, 3)
        lonely.kill()
        tuning.join(60)
        assert not tuning.is_alive(), "the tune waits for ever"
    finally:
        _stop(lonely)
        executor.kill()
        scheduler.close()
    assert len(failure) == 1 and isinstance(failure[0], TilegenError), failure
    message = str(failure[0])
    assert "Fake GPU B" in message and "lonely" in message and "\n" not in message, message


# ---- revalidate ---------------------------------------------------------------------------------

def _store_winner(db: TuningDB, family_name: str, shape: str, device: DeviceInfo) -> None:
    """A stored winner measured on `device`: the family's safe variant, at fake speed."""
    family = get_family(family_name)
    variant = family.safe_variant(family.parse_shape(shape), "f32")
    row = Row(variant.name, family_name, variant.params(), Status.OK, shape=shape, provenance={"nvcc": "12.8"})
    replace(fakes.fake_measurement(Job(variant.name, family_name, "", shape)), device=device).apply_to(row)
    db.record([row])


def test_a_cluster_revalidate_re_times_the_winners_of_every_family(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "tuning.sqlite")
    _store_winner(db, "matmul", "64x64x64", fakes.FAKE_DEVICE)
    _store_winner(db, "transpose", "64x64", fakes.FAKE_DEVICE)
    checked = revalidate(db, RunOptions(seed=1), DaskExecutor("local", gpus=[0], target=FAKE))
    assert sorted((c.problem.family, c.new.status) for c in checked) == [
        ("matmul", Status.OK), ("transpose", Status.OK)]


def test_a_cluster_revalidate_times_each_models_winners_on_that_models_gpus(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "tuning.sqlite")
    model_b = replace(fakes.FAKE_DEVICE, name="Fake GPU B", index=2)
    for device in (fakes.FAKE_DEVICE, model_b):
        for shape in SIZES:
            _store_winner(db, "matmul", shape, device)
    checked = revalidate(db, RunOptions(seed=1), DaskExecutor("local", gpus=[0, 2], target=FAKE))
    assert len(checked) == 6
    for c in checked:
        assert c.new.status == Status.OK and GpuModel.from_provenance(c.new.provenance) == c.problem.gpu_model, c


class _StalledFuture:
    """A finished future whose result went with its worker: gathering it stalls."""

    status, key = "finished", "stalled"

    def done(self) -> bool:
        return True


def test_a_result_lost_with_its_worker_is_sent_again_not_waited_for_for_ever() -> None:
    executor = DaskExecutor.__new__(DaskExecutor)
    executor._lock = threading.Condition()
    executor._sent, resent, cancelled = {}, [], []
    executor._submit = lambda job, finished, resends: resent.append((job, resends))

    def stalled_gather(futures: list) -> list:
        raise TimeoutError

    executor._gather = stalled_gather
    executor._client = type("Client", (), {"cancel": lambda self, futures: cancelled.extend(futures)})()
    job, future = object(), _StalledFuture()
    sent = cluster._Sent(job, frozenset({"tcp://gone:1"}), queue.Queue(), resends=1)
    assert executor._measurements([(future, sent)]) == []  # no row now: the job runs again
    assert resent == [(job, 2)] and cancelled == [future]
    worn_out = cluster._Sent(job, frozenset({"tcp://gone:1"}), queue.Queue(), resends=cluster.MAX_RESENDS)
    assert executor._measurements([(future, worn_out)]) == []
    assert worn_out.finished.get_nowait() is future and "lost" in worn_out.failure  # a launch_error row next
