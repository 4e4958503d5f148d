"""What tilegen leaves on disk: readers never change the tuning database they read, and a locked
or read-only database ends in one line with nothing changed (issue 19)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import gen
from gen.cli import main
from gen.errors import RunFailed
from gen.families.matmul import MatmulVariant
from gen.results import DeviceInfo, Row, Status
from gen.tunedb import TuningDB

from .conftest import REPO

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 80 * 2**30, 50 * 2**20, "580")


def run_main(capsys: pytest.CaptureFixture, args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    assert err.startswith("tilegen: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def measured(tile: int, shape: str = "1024x1024x1024") -> Row:
    variant = MatmulVariant(tile=tile)
    return Row(variant.name, variant.family, variant.params(), Status.OK, shape=shape, median_ms=1.0 / tile,
               error=1e-7, throughput=float(tile), unit="TFLOP/s", provenance=H100.provenance())


# ---- the tuning database ------------------------------------------------------------------------------

def test_readers_never_change_the_database(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "tuned.sqlite"
    TuningDB(db).record([measured(16), measured(32)])
    with sqlite3.connect(db) as connection:  # as another tool may leave it: a rollback journal, not WAL
        connection.execute("PRAGMA journal_mode=DELETE")
    connection.close()
    before, files = digest(db), sorted(os.listdir(tmp_path))
    assert main(["report", "--db", str(db)]) == 0
    assert main(["best", "matmul", "--size", "1024x1024x1024", "--gpu", "H100", "--db", str(db)]) == 0
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
from gen.errors import TilegenError
from gen.tune import TuneOptions, tune
from tests.fakes import FakeExecutor
try:
    tune(TuneOptions("matmul", "64x64x64", params={"tile": ["8", "16"], "padding": ["0"], "bounds": ["guard"]},
                     db=Path(sys.argv[1]), strategy="brute", budget=2, progress=False), FakeExecutor())
except TilegenError as error:
    print(f"refused: {error}")
"""


def _without_root_powers() -> None:
    """In a child about to exec: root without CAP_DAC_OVERRIDE (and reading past permissions),
    so that a file's permission bits bind it as they bind anyone."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for capability in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_tune_into_a_database_it_cannot_write_is_refused_before_any_work(tmp_path: Path) -> None:
    db = tmp_path / "tuned.sqlite"
    TuningDB(db).record([measured(32, "64x64x64")])
    db.chmod(0o444)
    before, files = digest(db), sorted(os.listdir(tmp_path))
    done = subprocess.run([sys.executable, "-c", TUNE_INTO, str(db)], capture_output=True, text=True, cwd=REPO,
                          preexec_fn=_without_root_powers,
                          env=dict(os.environ, TILEGEN_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO)))
    assert done.stdout.startswith(f"refused: cannot write --db {db} (a read-only file); give a tuning database "
                                  f"you can write"), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert digest(db) == before and sorted(os.listdir(tmp_path)) == files  # nothing compiled, nothing written
