"""A real local Dask cluster (worker processes, no GPU): each Dask worker runs the fake GPU worker
of tests/fakes.py in its isolated subprocess, exactly where a real one would run PyCUDA.

No test here can hang: every sweep, tune and revalidate runs in a thread that the test waits for
with a deadline (`_InThread`); past it the executor is killed and the test fails. Deadlines, and the
executors' hang timeout (a lost worker's replacement must join within it), stretch with the
machine's load (tests.waits.patient).
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
from concurrent.futures import CancelledError
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

pytest.importorskip("distributed", reason="the cluster extra is not installed (pip install 'tilegen[cluster]')")

from gen.cli.main import main  # noqa: E402
from gen.gpu import dask_cluster, dask_worker  # noqa: E402
from gen.gpu.dask import DaskExecutor  # noqa: E402
from gen.gpu.dask_flight import JOBS_PER_TASK, MAX_RESENDS, lost_verdict, task_size  # noqa: E402
from gen.gpu.dask_cluster import gather_within, local_cluster  # noqa: E402
from gen.core.errors import Interrupted, TilegenError  # noqa: E402
from gen.families import get_family  # noqa: E402
from gen.gpu.process.jobs import Job  # noqa: E402
from gen.evaluate.options import RunOptions  # noqa: E402
from gen.core.results import DeviceInfo, GpuModel, Row, Status  # noqa: E402
from gen.commands.sweep import SweepOptions, sweep  # noqa: E402
from gen.commands.revalidate import revalidate  # noqa: E402
from gen.commands.tune import TuneOptions, tune  # noqa: E402
from gen.store.tuning_db import TuningDB  # noqa: E402

from . import fakes  # noqa: E402
from .conftest import REPO  # noqa: E402
from .fakes import Announcements, Gate, LineReader  # noqa: E402
from .waits import patient  # noqa: E402

FAKE = "tests.fakes:steady_worker"
HELD = "tests.fakes:held_worker"  # GPU 0 waits in the middle of a sweep until the test opens the gate
SIZES = ["64x64x64", "96x96x96", "128x128x128"]  # 54 points of the default matmul space


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _sweep(out: Path, executor: DaskExecutor) -> None:
    sweep(SweepOptions("matmul", out, sizes=SIZES, progress=False, run=RunOptions(seed=1)), executor=executor)


class _InThread:
    """`call(*args)` in a daemon thread, while the test acts; `result` waits for it with a deadline,
    past which the executor is killed and the test fails, rather than hanging (pytest too)."""

    def __init__(self, executor: DaskExecutor, call: Callable[..., Any], *args: Any):
        self.executor, self.value, self.error = executor, None, None
        self.thread = threading.Thread(target=self._run, args=(call, args), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[..., Any], args: tuple) -> None:
        try:
            self.value = call(*args)
        except BaseException as error:  # raised again by `result`
            self.error = error

    def result(self, seconds: float = 180) -> Any:
        self.thread.join(patient(seconds))
        if self.thread.is_alive():
            self.executor.kill()
            pytest.fail(f"still running after {patient(seconds):.0f} s")
        if self.error is not None:
            raise self.error
        return self.value


def _within(executor: DaskExecutor, call: Callable[..., Any], *args: Any, seconds: float = 180) -> Any:
    return _InThread(executor, call, *args).result(seconds)


def _wait_for_lines(path: Path, count: int) -> None:
    deadline = time.monotonic() + patient(60)
    while time.monotonic() < deadline and (not path.exists() or len(path.read_text().splitlines()) < count):
        time.sleep(0.05)


def _assert_complete(rows: list[dict]) -> None:
    keys = [(row["name"], row["shape"]) for row in rows]
    assert len(keys) == len(set(keys)) == 54, collections.Counter(keys).most_common(3)
    statuses = collections.Counter(row["status"] for row in rows)
    assert statuses["ok"] + statuses["skipped"] == 54 and statuses["ok"] > 20, statuses


def test_a_local_cluster_spreads_a_sweep_over_its_workers_and_writes_each_row_once(tmp_path: Path) -> None:
    executor = DaskExecutor("local", gpus=[0, 1, 2], silence_s=patient(30), target=FAKE)
    _within(executor, _sweep, tmp_path, executor)
    rows = _rows(tmp_path)
    _assert_complete(rows)
    used = collections.Counter(row["provenance"]["gpu_index"] for row in rows if row["status"] == "ok")
    assert set(used) == {0, 1, 2} and min(used.values()) >= 3, used  # every worker took a share


def test_a_local_clusters_gpu_processes_start_with_its_dask_workers(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Dask worker starts its GPU process as it starts (a second or more: python, pycuda, a
    context), not when the coordinator first asks for its GPU. The fake GPUs announce that they
    start, then wait at the gate: the test hears both before it asks for any device."""
    monkeypatch.setenv(fakes.ANNOUNCE_ENV, str(tmp_path / "announce"))
    monkeypatch.setenv(fakes.GATE_ENV, str(tmp_path / "gate"))
    said, gate = Announcements(tmp_path / "announce"), Gate(tmp_path / "gate")
    executor = DaskExecutor("local", gpus=[0, 1], silence_s=patient(30), target="tests.fakes:gated_start_worker")
    try:
        heard = {said.until("starting", timeout=patient(60)), said.until("starting", timeout=patient(60))}
        gate.open()
        gate.open()
        devices = _within(executor, executor.devices)
    finally:
        executor.close()
        said.close()
        gate.close()
    assert heard == {"starting 0", "starting 1"}
    assert sorted(device.index for device in devices) == [0, 1]


def test_a_local_cluster_starts_while_the_command_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Making the executor starts the local cluster without waiting for it (2-3 s: a scheduler, a
    Dask worker per GPU), so that the command plans and compiles meanwhile: here the cluster starts
    only once the test, after the executor was made, says the command went on."""
    went_on = threading.Event()

    def after_the_command_went_on(gpus: list[int], target: str) -> Any:
        assert went_on.wait(patient(30)), "making the executor waited for its cluster's start"
        return local_cluster(gpus, target)

    monkeypatch.setattr(dask_cluster, "local_cluster", after_the_command_went_on)
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target=FAKE)
    went_on.set()
    try:
        assert [device.index for device in _within(executor, executor.devices)] == [0]
    finally:
        executor.close()


def test_a_kill_while_the_local_cluster_starts_waits_for_nothing_and_leaves_nothing_open(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while `--cluster local` starts: the kill returns at once (here the start is held until
    it has), and the start closes the cluster it made as it ends."""
    killed, made = threading.Event(), []

    def held_until_killed(gpus: list[int], target: str) -> Any:
        assert killed.wait(patient(30)), "the kill waited for the cluster's start"
        made.append(local_cluster(gpus, target))
        return made[-1]

    monkeypatch.setattr(dask_cluster, "local_cluster", held_until_killed)
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target=FAKE)
    executor.kill()
    killed.set()
    assert executor.client.status == "closed"  # the client waits for the start's end
    assert len(made) == 1 and made[0].status.name == "closed"


def test_a_worker_killed_mid_sweep_loses_no_row_and_is_named(tmp_path: Path, held: Held) -> None:
    """GPU 1's worker is killed while GPU 0 holds a job, so the sweep is still running when the
    executor next looks at the workers: it names the one it lost, and no row is lost."""
    executor = DaskExecutor("local", gpus=[0, 1, 2], silence_s=patient(30), target=HELD)
    sweeping = _InThread(executor, _sweep, tmp_path, executor)
    held.said.until("waiting")  # GPU 0 holds a job: the sweep goes on until the gate opens
    workers = executor.client.scheduler_info(n_workers=-1)["workers"]
    victim = next(address for address, info in workers.items() if info.get("name") == "gpu1")
    pid = executor.client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)  # the Dask worker process: its nanny starts a fresh one
    try:
        deadline = time.monotonic() + patient(60)
        while not any(victim in name for name in executor.lost) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        held.gate.open()
    sweeping.result(120)
    _assert_complete(_rows(tmp_path))
    assert any(victim in name for name in executor.lost), executor.lost


@dataclass
class Held:
    """The fake GPUs of tests.fakes:held_worker: what they announce, and the gate GPU 0 waits at."""

    said: Announcements
    gate: Gate


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    """Named in the environment before a cluster starts: its workers and their GPU processes inherit it."""
    folder = tmp_path / "held"
    folder.mkdir()
    monkeypatch.setenv(fakes.ANNOUNCE_ENV, str(folder / "announce"))
    monkeypatch.setenv(fakes.GATE_ENV, str(folder / "gate"))
    held = Held(Announcements(folder / "announce"), Gate(folder / "gate"))
    yield held
    held.said.close()
    held.gate.close()


def test_a_worker_that_joins_mid_sweep_gets_work(tmp_path: Path, held: Held) -> None:
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target=HELD)
    sweeping = _InThread(executor, _sweep, tmp_path, executor)
    held.said.until("waiting")  # GPU 0 measured a few and holds the next: the sweep is in its middle
    joiner = _join(executor.client.scheduler.address, "joiner", "1")
    try:
        for _ in range(3):
            held.said.until("done 1 ")  # the worker that joined (pinned to GPU 1) measures ...
    finally:
        held.gate.open()  # ... while GPU 0 waited
        try:
            sweeping.result(180)
        finally:
            _stop(joiner)
    rows = _rows(tmp_path)
    _assert_complete(rows)
    used = collections.Counter(row["provenance"]["gpu_index"] for row in rows if row["status"] == "ok")
    assert used[1] >= 3 and used[0] >= fakes.HELD_AFTER, used


def test_a_cluster_tune_tunes_each_gpu_model_on_its_own_workers(tmp_path: Path) -> None:
    db = tmp_path / "tuning.sqlite"
    # GPUs 0, 1: one model; 2: another
    executor = DaskExecutor("local", gpus=[0, 1, 2], silence_s=patient(30), target=FAKE)
    options = TuneOptions("matmul", "64x64x64", strategy="brute", db=db, progress=False, run=RunOptions(seed=1))
    results = _within(executor, tune, options, executor)
    assert sorted(r.problem.gpu_model.name for r in results) == ["Fake GPU", "Fake GPU B"]
    stored = TuningDB(db)
    for result in results:
        rows = stored.measured(result.problem)
        assert len(rows) == result.evaluations > 5
        indices = {row.provenance["gpu_index"] for row in rows.values() if row.median_ms is not None}
        assert indices == ({2} if result.problem.gpu_model.name == "Fake GPU B" else {0, 1}), indices


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> str:
    """A scheduler address nothing answers at (the discard port refuses at once), tried for half a
    second ($TILEGEN_CONNECT_TIMEOUT) rather than the 10 s a run gives a scheduler by default."""
    monkeypatch.setenv("TILEGEN_CONNECT_TIMEOUT", "0.5")
    return "tcp://127.0.0.1:9"


def _main(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    """The command line in this process: its exit code and what it said on stderr."""
    try:
        code = main(list(args))
    except SystemExit as stop:  # argparse's own exit
        code = stop.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("address, named", [(None, "tcp://127.0.0.1:9"), ("somewhere:8786", "somewhere")])
def test_a_scheduler_that_cannot_be_reached_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                unreachable: str, address: str | None,
                                                                named: str) -> None:
    code, said = _main(capsys, "sweep", "matmul", "-p", "tile=8", "--size", "64x64x64", "--out", str(tmp_path / "out"),
                       "--cluster", address or unreachable)
    assert code == 2, said
    assert named in said and "Traceback" not in said and len(said.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_tilegen_worker_refuses_an_unreachable_scheduler(capsys: pytest.CaptureFixture, unreachable: str) -> None:
    code, said = _main(capsys, "worker", unreachable)
    assert code == 2 and f"cannot reach the Dask scheduler at {unreachable}" in said and "Traceback" not in said


# ---- the GPU worker state on a Dask worker (in this process: the functions a Dask worker runs) ----

def test_a_later_runs_hang_timeout_reaches_a_dask_workers_gpu_process() -> None:
    target = "tests.fakes:hanging_worker"  # hangs on every _t8_ variant
    try:
        dask_worker.device_task(30.0, target)  # a first run, with a 30 s hang timeout, started the GPU process
        started = time.monotonic()
        (measurement,) = dask_worker.jobs_task([Job("matmul_f32_t8_p0_guard", "matmul", "t8.cubin", "64x64x64",
                                                    timing=None)], {"t8.cubin": b"not a cubin"}, 1.0, target)  # 1 s
        assert measurement.status == Status.TIMEOUT and time.monotonic() - started < patient(10), measurement
    finally:
        dask_worker.stop_gpu_worker(target)


def test_a_dask_workers_gpu_process_holds_a_tasks_next_job_while_it_runs_one() -> None:
    """As on one host (tests/test_local.py): the next job of a task waits in the GPU process's
    socket, so the GPU never waits for the Dask worker between two jobs; the measurements come back
    in the task's order."""
    target = "tests.fakes:lookahead_worker"  # says in each row whether the next job was already there
    jobs = [Job(f"matmul_f32_t{tile}_p0_guard", "matmul", "t.cubin", "64x64x64", timing=None) for tile in (8, 16, 32)]
    jobs.append(replace(jobs[0], shape=fakes.LAST_SHAPE))  # the last: it waits for none
    try:
        measured = dask_worker.jobs_task(jobs, {"t.cubin": b"a cubin"}, patient(30), target)
    finally:
        dask_worker.stop_gpu_worker(target)
    assert [measurement.message for measurement in measured] == ["next waiting"] * 3 + ["none"]
    assert [measurement.throughput for measurement in measured] == [8.0, 16.0, 32.0, 8.0]  # in the task's order


def test_a_dask_worker_writes_cubins_into_a_private_folder_and_never_uses_a_planted_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's own /tmp
    cubin, target = b"the coordinator's cubin", "tests.fakes:cubin_reading_worker"
    planted = tmp_path / f"tilegen-cubins-{os.getuid()}" / f"{hashlib.sha256(cubin).hexdigest()[:32]}.cubin"
    planted.parent.mkdir(mode=0o700)
    planted.write_bytes(b"somebody else's bytes!")  # the same name and size, other contents
    job = Job("matmul_f32_t8_p0_guard", "matmul", "t8.cubin", "64x64x64", timing=None)
    try:
        (measurement,) = dask_worker.jobs_task([job], {"t8.cubin": cubin}, 30.0, target)
        assert measurement.message == f"{cubin.decode()} 0o700"
        planted.parent.chmod(0o777)  # a folder open to others is refused in one line
        with pytest.raises(TilegenError, match="is not a folder of this user's alone"):
            dask_worker.jobs_task([job], {"t8.cubin": cubin}, 30.0, target)
    finally:
        dask_worker.stop_gpu_worker(target)


@pytest.mark.parametrize("visible", ["GPU-5c3a1f2e-8d2e-4b1a-9f00-0123456789ab",
                                     "MIG-0f7c2d9e-41aa-5b3c-8e21-abcdefabcdef", "2,3", "1"])
def test_a_dask_worker_pinned_by_uuid_mig_or_list_keeps_that_pin_for_its_gpu_process(
        monkeypatch: pytest.MonkeyPatch, visible: str) -> None:
    target = "tests.fakes:visible_devices_worker"  # names its GPU after the CUDA_VISIBLE_DEVICES it got
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    try:
        assert dask_worker.device_task(5.0, target).name == visible
    finally:
        dask_worker.stop_gpu_worker(target)


# ---- which workers take jobs ------------------------------------------------------------------

def test_a_sweep_sends_no_job_to_a_worker_whose_gpu_was_refused(tmp_path: Path) -> None:
    # GPU 3 has no usable GPU (tests/fakes.py)
    executor = DaskExecutor("local", gpus=[0, 3], silence_s=patient(30), target=FAKE)
    _within(executor, _sweep, tmp_path, executor)
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
        process.wait(patient(30))
    except subprocess.TimeoutExpired:
        process.kill()


class Stderr(io.TextIOBase):
    """What the coordinator says on stderr (contextlib.redirect_stderr), for a test to wait for."""

    def __init__(self) -> None:
        super().__init__()
        self.text, self.changed = "", threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            self.text += text
            self.changed.notify_all()
        return len(text)

    def wait_for(self, *wanted: Callable[[str], bool], timeout: float = 120) -> None:
        """Until, for each of `wanted`, a line it holds true of has been said."""
        with self.changed:
            said = self.changed.wait_for(lambda: all(any(map(w, self.text.splitlines())) for w in wanted), timeout)
            assert said, self.text


def test_a_worker_that_joins_mid_sweep_without_a_usable_gpu_of_the_runs_model_gets_no_work(
        tmp_path: Path, held: Held) -> None:
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target=HELD)
    executor.devices()  # the run's GPUs are known: the two below join mid-run
    address = executor.client.scheduler.address
    stderr = Stderr()
    with contextlib.redirect_stderr(stderr):
        sweeping = _InThread(executor, _sweep, tmp_path, executor)
        held.said.until("waiting")  # GPU 0 holds a job: the sweep waits in its middle
        joiners = [_join(address, "joiner-no-gpu", "3"), _join(address, "joiner-model-b", "2")]
        try:
            stderr.wait_for(lambda line: "joiner-no-gpu" in line and "takes no jobs" in line,
                            lambda line: "joiner-model-b" in line and "takes no jobs" in line)
        finally:
            held.gate.open()
            try:
                sweeping.result(180)
            finally:
                for joiner in joiners:
                    _stop(joiner)
    rows = _rows(tmp_path)
    _assert_complete(rows)
    assert {row["provenance"]["gpu_index"] for row in rows if row["status"] == "ok"} == {0}
    refused = [line for line in stderr.text.splitlines() if "takes no jobs" in line]
    assert any("joiner-no-gpu" in line and "no usable CUDA GPU 3" in line for line in refused), stderr.text
    assert any("joiner-model-b" in line and "Fake GPU B" in line for line in refused), stderr.text


def test_a_job_that_keeps_killing_its_only_worker_is_a_launch_error_not_an_endless_retry(tmp_path: Path) -> None:
    """The job's row comes as soon as its worker is lost the last time: the run does not wait for
    the nanny to start the worker again (under load Dask's nanny took 75-100 s to, after a fourth kill)."""
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target="tests.fakes:dask_worker_killing_worker")
    _within(executor, _sweep_tiles, tmp_path, executor, ["8"])
    (row,) = _rows(tmp_path)  # one row: no endless retry
    assert row["params"]["tile"] == 8 and row["status"] == "launch_error", row
    assert f"lost {MAX_RESENDS + 1} times" in row["message"], row


def _sweep_two(out: Path, executor: DaskExecutor) -> None:
    """Two variants (tile 8 and 16) at one size."""
    _sweep_tiles(out, executor, ["8", "16"])


def _sweep_tiles(out: Path, executor: DaskExecutor, tiles: list[str]) -> None:
    """The matmul variants of these tiles at one size."""
    sweep(SweepOptions("matmul", out, params={"tile": tiles, "padding": ["0"], "bounds": ["guard"]},
                       sizes=["64x64x64"], progress=False, run=RunOptions(seed=1)), executor=executor)


def _tune_in_thread(db: Path, executor: DaskExecutor) -> _InThread:
    options = TuneOptions("matmul", "64x64x64", strategy="brute", db=db, progress=False, run=RunOptions(seed=1))
    return _InThread(executor, tune, options, executor)


def _wait_for_rows(db: Path, count: int) -> None:
    deadline = time.monotonic() + patient(60)
    while time.monotonic() < deadline and (not db.exists() or len(TuningDB(db).rows()) < count):
        time.sleep(0.05)


def test_a_cluster_tune_goes_on_when_a_models_only_worker_is_restarted(tmp_path: Path) -> None:
    db = tmp_path / "tuning.sqlite"
    executor = DaskExecutor("local", gpus=[2], silence_s=patient(30), target=FAKE)  # the only worker of its model
    try:
        tuning = _tune_in_thread(db, executor)
        _wait_for_rows(db, 3)
        (victim,) = executor.gpu_workers()
        pid = executor.client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)  # its nanny starts a fresh worker, at another address
        tuning.result(120)
    finally:
        executor.kill()
    assert any(victim in name for name in executor.lost), executor.lost
    (problem,) = TuningDB(db).problems()
    assert problem.gpu_model.name == "Fake GPU B"


def test_a_cluster_tune_whose_model_lost_every_worker_stops_with_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "tuning.sqlite"
    scheduler = local_cluster([])  # a scheduler and no worker
    executor = DaskExecutor(scheduler.scheduler_address, silence_s=3.0, target=FAKE)
    lonely = _join(scheduler.scheduler_address, "lonely", "2", nanny=False)  # no nanny: none restarts it
    try:
        deadline = time.monotonic() + patient(60)
        while time.monotonic() < deadline and not executor.gpu_workers():
            time.sleep(0.05)
        tuning = _tune_in_thread(db, executor)
        _wait_for_rows(db, 3)
        lonely.kill()
        with pytest.raises(TilegenError) as stopped:
            tuning.result(60)  # past it: "the tune waits for ever"
    finally:
        _stop(lonely)
        executor.kill()
        scheduler.close()
    message = str(stopped.value)
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
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target=FAKE)
    checked = _within(executor, revalidate, db, RunOptions(seed=1), executor)
    assert sorted((c.problem.family, c.new.status) for c in checked) == [
        ("matmul", Status.OK), ("transpose", Status.OK)]


def test_a_cluster_revalidate_times_each_models_winners_on_that_models_gpus(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "tuning.sqlite")
    model_b = replace(fakes.FAKE_DEVICE, name="Fake GPU B", index=2)
    for device in (fakes.FAKE_DEVICE, model_b):
        for shape in SIZES:
            _store_winner(db, "matmul", shape, device)
    executor = DaskExecutor("local", gpus=[0, 2], silence_s=patient(30), target=FAKE)
    checked = _within(executor, revalidate, db, RunOptions(seed=1), executor)
    assert len(checked) == 6
    for c in checked:
        assert c.new.status == Status.OK and GpuModel.from_provenance(c.new.provenance) == c.problem.gpu_model, c


# ---- results that do not come: a gather that stalls is given up, its jobs sent again ---------------

def test_a_job_is_sent_again_until_its_workers_were_lost_too_often() -> None:
    assert [lost_verdict(resends) for resends in range(MAX_RESENDS)] == [""] * MAX_RESENDS
    assert lost_verdict(MAX_RESENDS) == f"its Dask workers were lost {MAX_RESENDS + 1} times while it was in flight"


class _Client:
    """Stands in for a Dask client's gather: it answers `results`, raises `error`, or (neither)
    stalls until the test lets it go, as one does whose result went with its worker."""

    def __init__(self, results: list | None = None, error: BaseException | None = None):
        self.results, self.error = results, error
        self.asked, self.released = threading.Event(), threading.Event()

    def gather(self, futures: list) -> list:
        self.asked.set()
        if self.error is not None:
            raise self.error
        if self.results is None:
            self.released.wait(patient(60))
            raise CancelledError("released")
        return self.results


def test_a_gather_that_stalls_is_given_up_at_its_deadline() -> None:
    client = _Client()
    try:
        with pytest.raises(TimeoutError, match="the results of 2 finished job"):
            gather_within(client, ["a", "b"], threading.Event(), timeout_s=0.5)
        assert client.asked.is_set()
    finally:
        client.released.set()


def test_a_gather_that_stalls_is_left_when_the_run_stops() -> None:
    client, stop = _Client(), threading.Event()
    gathering = threading.Thread(target=lambda: client.asked.wait(patient(60)) and stop.set(), daemon=True)
    gathering.start()  # stops the run once the gather has begun
    try:
        with pytest.raises(Interrupted):
            gather_within(client, ["a"], stop, timeout_s=600)
    finally:
        client.released.set()


def test_a_gather_hands_back_its_results_or_its_error() -> None:
    assert gather_within(_Client(results=[1, 2]), ["a", "b"], threading.Event(), timeout_s=60) == [1, 2]
    with pytest.raises(CancelledError, match="gone"):
        gather_within(_Client(error=CancelledError("gone")), ["a"], threading.Event(), timeout_s=60)


def _stalls(times: int) -> tuple[Callable[[Any, list, threading.Event], list], list[int]]:
    """A gather that stalls its first `times` calls (past its deadline: TimeoutError), then gathers;
    and how many results each stalled call was asked for."""
    stalled: list[int] = []

    def gather(client: Any, futures: list, stop: threading.Event) -> list:
        if len(stalled) < times:
            stalled.append(len(futures))
            raise TimeoutError("stalled")
        return gather_within(client, futures, stop)

    return gather, stalled


def _counted() -> tuple[Callable[[Any, list, threading.Event], list], list[int]]:
    """A gather that gathers, and how many results (tasks) each call was asked for."""
    asked: list[int] = []

    def gather(client: Any, futures: list, stop: threading.Event) -> list:
        asked.append(len(futures))
        return gather_within(client, futures, stop)

    return gather, asked


def test_results_lost_with_their_worker_are_sent_again_and_each_row_written_once(tmp_path: Path) -> None:
    gather, stalled = _stalls(2)
    executor = DaskExecutor("local", gpus=[0, 1], silence_s=patient(30), target=FAKE, gather=gather)
    _within(executor, _sweep_two, tmp_path, executor)
    rows = {row["params"]["tile"]: row for row in _rows(tmp_path)}  # each row once
    assert sorted(rows) == [8, 16] and {row["status"] for row in rows.values()} == {"ok"}, rows
    assert len(stalled) == 2, stalled


def test_results_that_never_come_are_launch_errors_not_an_endless_wait(tmp_path: Path) -> None:
    gather, stalled = _stalls(1000)
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target=FAKE, gather=gather)
    _within(executor, _sweep_two, tmp_path, executor)
    rows = {row["params"]["tile"]: row for row in _rows(tmp_path)}  # each row once
    assert sorted(rows) == [8, 16] and {row["status"] for row in rows.values()} == {"launch_error"}, rows
    assert all(f"lost {MAX_RESENDS + 1} times" in row["message"] for row in rows.values()), rows
    sendings = 2 * (MAX_RESENDS + 1)  # each job gathered in vain once per sending; the first sending
    assert sum(stalled) in (sendings, sendings - 1), stalled  # may carry both jobs in one task


def test_jobs_that_wait_together_go_in_one_task_and_a_lost_task_s_jobs_go_again_one_by_one(tmp_path: Path) -> None:
    """Dask's cost per task is about a job's: the jobs waiting when a task is sent share it. When its
    result is lost, each of its jobs is sent again in a task of its own, and measured once."""
    cubin = tmp_path / "fake.cubin"
    cubin.write_bytes(b"not a cubin")
    jobs = [Job("matmul_f32_t16_p0_guard_both", "matmul", str(cubin), f"{64 * n}x64x64", timing=None)
            for n in range(1, JOBS_PER_TASK + 1)]
    gather, stalled = _stalls(1)
    executor = DaskExecutor("local", gpus=[0], silence_s=patient(30), target=FAKE, gather=gather)
    try:
        measured = [(job.shape, measurement.status) for job, measurement in executor.run(jobs)]
    finally:
        executor.close()
    assert stalled == [1]  # one task held every job ...
    assert sorted(measured) == sorted((job.shape, Status.OK) for job in jobs)  # ... each measured once, later


STALLED_SWEEP = """
import sys, threading
from pathlib import Path
from gen.evaluate.options import RunOptions
from gen.gpu.dask import DaskExecutor
from gen.gpu.dask_cluster import gather_within
from gen.commands.sweep import SweepOptions, sweep


class Stalled:
    def gather(self, futures):  # the results went with their worker: no answer, ever
        print("gathering", file=sys.stderr, flush=True)
        threading.Event().wait()


def gather(client, futures, stop):
    return gather_within(Stalled(), futures, stop, timeout_s=600)


if __name__ == "__main__":
    executor = DaskExecutor("local", gpus=[0], target="tests.fakes:steady_worker", gather=gather)
    sweep(SweepOptions("matmul", Path("out"), params={"tile": ["8"], "padding": ["0"], "bounds": ["guard"]},
                       sizes=["64x64x64"], progress=False, run=RunOptions(seed=1)), executor=executor)
"""
STOP_WITHIN_S = 5.0  # the stop includes closing the local cluster (its nanny and worker processes): 2.2-4.4 s seen


def test_ctrl_c_stops_a_cluster_sweep_at_once_while_a_gather_stalls(tmp_path: Path) -> None:
    (tmp_path / "stalled_sweep.py").write_text(STALLED_SWEEP)
    process = subprocess.Popen([sys.executable, "stalled_sweep.py"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)),
                               start_new_session=True)  # a group of its own, as a shell runs a job
    said = LineReader(process.stderr.fileno())
    try:
        said.until("gathering")
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C at its terminal
        process.wait(timeout=patient(30))
        assert time.monotonic() - started < patient(STOP_WITHIN_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert "RunInterrupted: 0 rows kept in" in said.until("RunInterrupted:")  # the job whose result never came: no row


def test_jobs_waiting_together_are_shared_out_so_that_no_gpu_idles_while_another_has_several(tmp_path: Path) -> None:
    cubin = tmp_path / "fake.cubin"
    cubin.write_bytes(b"not a cubin")
    jobs = [Job("matmul_f32_t16_p0_guard_both", "matmul", str(cubin), f"{64 * n}x64x64", timing=None) for n in (1, 2)]
    gather, asked = _counted()
    executor = DaskExecutor("local", gpus=[0, 1], silence_s=patient(30), target=FAKE, gather=gather)
    try:
        measured = [(job.shape, measurement.status) for job, measurement in executor.run(jobs)]
    finally:
        executor.close()
    assert sum(asked) == 2  # a task each: two GPUs were free
    assert sorted(measured) == sorted((job.shape, Status.OK) for job in jobs)


def test_a_task_holds_up_to_its_gpus_share_of_the_jobs_waiting_within_the_room() -> None:
    assert task_size(waiting=0, gpus=2, room=16) == 1  # the last job
    assert task_size(waiting=2, gpus=2, room=16) == 2  # three waiting, two GPUs: 2 and 1
    assert task_size(waiting=100, gpus=2, room=16) == JOBS_PER_TASK
    assert task_size(waiting=100, gpus=2, room=2) == min(2, JOBS_PER_TASK)
    assert task_size(waiting=100, gpus=0, room=0) == 1  # never less than the job in hand
