"""What tilegen leaves on disk: it writes only files it made, one run writes a folder at a time,
readers never change what they read, and a full disk or a locked or read-only database ends in one
line with nothing recorded lost (issue 19).

Runs that must be live while the test acts on them block in a fake nvcc (first on PATH), which
announces through a FIFO that it has started and waits on another FIFO until the test lets it go.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gen
from gen.cli.main import main
from gen.compiling.compiler import nvcc_path
from gen.core.errors import RunFailed
from gen.store.export import write_t4
from gen.families.matmul import MatmulVariant
from gen.core.results import DeviceInfo, Row, Status
from gen.store.results_log import RUN_LOCK, RUN_MARKER, read_rows
from gen.store.tuning_db import TuningDB

from .conftest import REPO
from .waits import patient

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 80 * 2**30, 50 * 2**20, "580")
# A sweep of one point to compile and one not to run (tile 64 is too large): its first row, the
# skipped one, is written before nvcc starts.
TWO_POINTS = ["-p", "tile=8,64", "-p", "padding=0", "-p", "bounds=guard", "--size", "64x64x64", "--arch", "sm_90",
              "--jobs", "1"]
SIX_POINTS = ["-p", "tile=8,16,32", "-p", "padding=0,1", "-p", "bounds=guard", "--size", "64x64x64", "--arch",
              "sm_90"]
WAIT_S = 120.0  # how long a test waits for an event before it fails, never a pause


def run_main(capsys: pytest.CaptureFixture, args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    assert err.startswith("tilegen: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def after(setup: str, *arguments: str) -> list[str]:
    """A command running Python with `arguments` once `setup` (Python, with os, sys, signal and
    resource imported) has changed the process: limits and capabilities outlast the exec."""
    return [sys.executable, "-c", f"import os, resource, signal, sys; {setup}; os.execv(sys.executable, sys.argv[1:])",
            sys.executable, *arguments]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def measured(tile: int, shape: str = "1024x1024x1024") -> Row:
    variant = MatmulVariant(tile=tile)
    return Row(variant.name, variant.family, variant.params(), Status.OK, shape=shape, median_ms=1.0 / tile,
               error=1e-7, throughput=float(tile), unit="TFLOP/s", provenance=H100.provenance())


# ---- a live run, held in a fake nvcc ------------------------------------------------------------------

class HeldRun:
    """`tilegen sweep` in a process of its own, whose first compile waits until `release`."""

    def __init__(self, tmp_path: Path, args: list[str]):
        self.started, self.go = tmp_path / "nvcc-started", tmp_path / "nvcc-go"
        os.mkfifo(self.started)
        os.mkfifo(self.go)
        fake = tmp_path / "bin" / "nvcc"
        fake.parent.mkdir()
        fake.write_text(f"""#!/bin/sh
case " $* " in
  *" -cubin "*)
    if mkdir "{tmp_path}/nvcc-held" 2>/dev/null; then
      echo $$ > "{self.started}"
      read answer < "{self.go}"
    fi;;
esac
exec "{nvcc_path()}" "$@"
""")
        fake.chmod(0o755)
        environment = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
                           TILEGEN_CACHE=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO),
                           TMPDIR=str(tmp_path), TILEGEN_COMPILER="nvcc")
        self.log = tmp_path / "held.log"
        self.process = subprocess.Popen([sys.executable, "-m", "gen", "sweep", "matmul", *args],
                                        stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), env=environment,
                                        cwd=tmp_path, start_new_session=True)

    def wait_until_compiling(self) -> None:
        """Block until the fake nvcc says it has started (the run's first row is written by then)."""
        fd = os.open(self.started, os.O_RDONLY | os.O_NONBLOCK)
        deadline = time.monotonic() + patient(WAIT_S)
        said = b""
        try:
            while not said.endswith(b"\n"):
                assert self.process.poll() is None, self.log.read_text()
                assert time.monotonic() < deadline, "the held run never started nvcc"
                if select.select([fd], [], [], 1.0)[0]:
                    said += os.read(fd, 64)
        finally:
            os.close(fd)
        self.nvcc = int(said)

    def release(self) -> None:
        with open(self.go, "w") as fifo:
            fifo.write("go\n")

    def kill(self) -> None:
        """SIGKILL to the run (and the workers of its process group), and to its nvcc (a session of its own)."""
        for group in (self.process.pid, self.nvcc):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps here compile and run no kernel, on a GPU machine too."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_gpu: None, compile_options) -> HeldRun:
    monkeypatch.chdir(tmp_path)
    run = HeldRun(tmp_path, [*TWO_POINTS, "--out", "out"])
    run.wait_until_compiling()
    yield run
    if run.process.poll() is None:
        run.kill()


def test_a_second_writer_or_a_resume_of_a_live_run_is_refused_naming_the_holder(
        held: HeldRun, capsys: pytest.CaptureFixture) -> None:
    out = Path("out")
    before = (out / "results.jsonl").read_bytes()
    holder = f"(pid {held.process.pid} on {socket.gethostname()})"
    for command in (["sweep", "matmul", *TWO_POINTS, "--out", "out"],
                    ["sweep", "matmul", *TWO_POINTS, "--out", "out", "--resume"],
                    ["compile", "matmul", "-p", "tile=8", "-p", "padding=0", "-p", "bounds=guard", "--out", "out"]):
        code, _, err = run_main(capsys, command)
        assert code == 2 and "--out out is being written by another tilegen run " + holder in one_line_error(err)
    assert (out / "results.jsonl").read_bytes() == before  # the skipped row, and nothing of theirs
    held.release()
    assert held.process.wait(timeout=patient(WAIT_S)) == 0, held.log.read_text()
    keys = [row.key for row in read_rows(out / "results.jsonl")]
    assert len(keys) == len(set(keys)) == 2
    assert (out / RUN_MARKER).is_file() and not (out / RUN_LOCK).exists()
    code, _, err = run_main(capsys, ["sweep", "matmul", *TWO_POINTS, "--out", "out", "--resume"])
    assert code == 0, err  # the run has ended: its folder is free


def test_a_lock_left_by_a_killed_run_is_taken_over(held: HeldRun, capsys: pytest.CaptureFixture) -> None:
    held.kill()
    lock = Path("out") / RUN_LOCK
    assert lock.read_text().split()[0] == str(held.process.pid)  # left behind by the dead run
    code, _, err = run_main(capsys, ["sweep", "matmul", *TWO_POINTS, "--out", "out", "--resume"])
    assert code == 0, err
    keys = [row.key for row in read_rows(Path("out") / "results.jsonl")]
    assert len(keys) == len(set(keys)) == 2 and not lock.exists()


# ---- files that are not tilegen's -------------------------------------------------------------------------

def test_a_run_of_tilegen_0_2_without_a_marker_resumes_and_is_marked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, no_gpu: None,
        compile_options) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, ["sweep", "matmul", *TWO_POINTS, "--out", "old"])
    assert code == 0, err
    (tmp_path / "old" / RUN_MARKER).unlink()  # as tilegen 0.2 left its runs
    kept = (tmp_path / "old" / "results.jsonl").read_bytes()
    code, _, err = run_main(capsys, ["sweep", "matmul", *TWO_POINTS, "--out", "old", "--resume"])
    assert code == 0, err
    assert (tmp_path / "old" / RUN_MARKER).is_file()
    assert (tmp_path / "old" / "results.jsonl").read_bytes().startswith(kept)


def test_export_writes_over_its_own_t4_file_and_another_file_only_with_force(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "tuned.sqlite"
    TuningDB(db).record([measured(16), measured(32)])
    t4, mine = tmp_path / "t4.json", tmp_path / "mine.json"
    for _ in range(2):  # the second export writes over the first one's file
        assert main(["export", "--t4", str(t4), "--db", str(db)]) == 0
    mine.write_text('{"my": "own results"}\n')
    code, _, err = run_main(capsys, ["export", "--t4", str(mine), "--db", str(db)])
    assert code == 2 and "is not a T4 file tilegen wrote; give another file, or pass --force" in one_line_error(err)
    assert mine.read_text() == '{"my": "own results"}\n'
    assert main(["export", "--t4", str(mine), "--db", str(db), "--force"]) == 0
    assert json.loads(mine.read_text())["metadata"]["tool"] == f"tilegen {gen.__version__}"
    assert write_t4(TuningDB(db, create=False).rows(), mine) == 2  # tilegen's now


# ---- a full disk --------------------------------------------------------------------------------------

def test_a_full_disk_stops_a_sweep_in_one_line_with_no_torn_row_and_resume_finishes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture, no_gpu: None, compile_options) -> None:
    warm = tmp_path / "warm"  # the same sweep once: every compile cached, the size of its rows known
    assert main(["sweep", "matmul", *SIX_POINTS, "--out", str(warm)]) == 0
    capsys.readouterr()
    limit = (warm / "results.jsonl").stat().st_size // 2

    out = tmp_path / "out"
    small_files = (f"signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "  # a write past `limit` fails with EFBIG,
                   f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))")  # as on a full disk
    stopped = subprocess.run(after(small_files, "-m", "gen", "sweep", "matmul", *SIX_POINTS, "--out", str(out)),
                             capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert stopped.returncode == 1, stopped.stderr
    said = stopped.stderr.strip().splitlines()[-1]
    assert said.startswith(f"tilegen: error: cannot write {out / 'results.jsonl'} (File too large); the ")
    assert "rows before it are kept; make room, then run the same sweep with --resume" in said
    assert "Traceback" not in stopped.stderr
    kept = (out / "results.jsonl").read_bytes()
    assert kept.endswith(b"\n") and 1 <= len(read_rows(out / "results.jsonl")) < 6  # whole rows only
    assert not (out / "results.csv").exists() and not (out / RUN_LOCK).exists()
    assert main(["sweep", "matmul", *SIX_POINTS, "--out", str(out), "--resume"]) == 0
    assert (out / "results.jsonl").read_bytes().startswith(kept)
    keys = [row.key for row in read_rows(out / "results.jsonl")]
    assert len(keys) == len(set(keys)) == 6


# ---- the tuning database ------------------------------------------------------------------------------

def test_readers_never_change_the_database(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "tuned.sqlite"
    TuningDB(db).record([measured(16), measured(32)])
    with sqlite3.connect(db) as connection:  # as another tool may leave it: a rollback journal, not WAL
        connection.execute("PRAGMA journal_mode=DELETE")
    connection.close()
    before, files = digest(db), sorted(os.listdir(tmp_path))
    assert main(["report", "--db", str(db)]) == 0
    assert main(["best", "matmul", "--size", "1024x1024x1024", "--gpu-model", "H100", "--db", str(db)]) == 0
    assert main(["export", "--t4", str(tmp_path / "t4.json"), "--db", str(db)]) == 0
    assert gen.tuned("matmul", 1024, 1024, 1024, db=db, device=H100).name == measured(32).name
    capsys.readouterr()
    assert digest(db) == before and sorted(os.listdir(tmp_path)) == sorted([*files, "t4.json"])
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    connection.close()


def test_a_locked_database_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "tuned.sqlite"
    TuningDB(db).record([measured(16)])
    holder = sqlite3.connect(db)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")  # another program holding the file, WAL or not
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, _, err = run_main(capsys, ["report", "--db", str(db)])
        assert code == 1 and f"{db} is locked by another process; try again when it finishes" in one_line_error(err)
        with pytest.raises(RunFailed, match="is locked by another process"):
            gen.tuned("matmul", 1024, 1024, 1024, db=db, device=H100)
    finally:
        holder.rollback()
        holder.close()


TUNE_INTO = """
import sys
from pathlib import Path
from gen.core.errors import TilegenError
from gen.commands.tune import TuneOptions, tune
from tests.fakes import FakeExecutor
try:
    tune(TuneOptions("matmul", "64x64x64", params={"tile": ["8", "16"], "padding": ["0"], "bounds": ["guard"]},
                     db=Path(sys.argv[1]), strategy="brute", budget=2, progress=False), FakeExecutor())
except TilegenError as error:
    print(f"refused: {error}")
"""


# Root without CAP_DAC_OVERRIDE (nor reading past permissions), so that a file's permission bits
# bind it as they bind anyone: the capabilities leave the bounding set, and so every program it runs.
WITHOUT_ROOT_POWERS = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                       "os.geteuid() == 0 and [libc.prctl(24, cap, 0, 0, 0) == 0 or sys.exit(f'prctl: errno "
                       "{ctypes.get_errno()}') for cap in (1, 2)]")  # PR_CAPBSET_DROP; DAC_OVERRIDE, DAC_READ_SEARCH


def test_a_tune_into_a_database_it_cannot_write_is_refused_before_any_work(tmp_path: Path) -> None:
    db = tmp_path / "tuned.sqlite"
    TuningDB(db).record([measured(32, "64x64x64")])
    db.chmod(0o444)
    before, files = digest(db), sorted(os.listdir(tmp_path))
    done = subprocess.run(after(WITHOUT_ROOT_POWERS, "-c", TUNE_INTO, str(db)), capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, TILEGEN_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO)))
    assert done.stdout.startswith(f"refused: cannot write --db {db} (a read-only file); give a tuning database "
                                  f"you can write"), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert digest(db) == before and sorted(os.listdir(tmp_path)) == files  # nothing compiled, nothing written
