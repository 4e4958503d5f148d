"""The tuning database: winners and top k as views, transactions, and concurrent writers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import gen
from gen.cli.main import main
from gen.core.errors import UsageError
from gen.families import MatmulVariant
from gen.core.results import DeviceInfo, Row, Status
from gen.store.tuning_db import TuningKey, TuningDB

from .conftest import REPO
from .waits import patient

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 80 * 2**30, 50 * 2**20, "580")
OTHER = DeviceInfo("other GPU", "9.0", 1, 2**30, 2**20, "580")
PROBLEM = TuningKey(H100.model, "matmul", "f32", "256x256x256")


def measured_row(tile: int, median_ms: float, status: Status = Status.OK, device: DeviceInfo = H100,
                 shape: str = "256x256x256") -> Row:
    variant = MatmulVariant(tile=tile)
    return Row(variant.name, "matmul", variant.params(), status, shape=shape, median_ms=median_ms, error=1e-7,
               stdev_ms=median_ms / 100, throughput=1 / median_ms, unit="TFLOP/s",
               provenance={**device.provenance(), "nvcc": "13.0.88"})


def test_best_and_top_k_rank_the_latest_correct_measurement_of_each_variant(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "t.sqlite")
    db.record([measured_row(8, 3.0), measured_row(16, 1.0), measured_row(32, 2.0),
               measured_row(8, 0.5, Status.WRONG), measured_row(16, 9.0, device=OTHER)])
    assert [r.params["tile"] for r in db.top(PROBLEM, 5)] == [16, 32]  # the wrong t8 is the latest t8 row
    db.record([measured_row(32, 0.9)])  # measured again: the latest counts
    assert db.best(PROBLEM).params["tile"] == 32
    assert {name: row.status for name, row in db.measured(PROBLEM).items()}["matmul_f32_t8_p0_guard_both"] is Status.WRONG
    assert db.problems("matmul") == sorted([PROBLEM, TuningKey(OTHER.model, "matmul", "f32", "256x256x256")])


def test_rows_without_a_gpu_are_not_recorded(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "t.sqlite")
    row = measured_row(8, 1.0)
    row.provenance = {}
    assert db.record([row]) == 0 and db.count() == 0


def test_a_failed_transaction_leaves_nothing_behind(tmp_path: Path) -> None:
    db = TuningDB(tmp_path / "t.sqlite")
    without_family = replace(measured_row(16, 1.0), family=None)  # a NULL family: the second insert fails
    with pytest.raises(sqlite3.IntegrityError):
        db.record([measured_row(8, 1.0), without_family])
    assert db.count() == 0


def test_a_model_whose_newest_row_is_a_compile_error_is_still_known(tmp_path: Path, capsys) -> None:
    """A compile error has no GPU in its provenance, only the model a tune compiled it for: a model
    is one to look up once a kernel ran on it."""
    device, ran = H100, measured_row(16, 1.0)
    broken = MatmulVariant(tile=32)
    failed = Row(broken.name, "matmul", broken.params(), Status.COMPILE_ERROR, shape="256x256x256",
                 provenance={"gpu_model": str(device.model), "arch": "sm_90", "nvcc": "13.0.88"})
    db = TuningDB(tmp_path / "t.sqlite")
    db.record([ran, failed], device.model)  # the model a tune compiled the failed variant for
    db.record([failed], OTHER.model)
    assert db.models() == [device.model]  # a model that never ran a kernel is not one to look up
    assert main(["best", "matmul", "--size", "256x256x256", "--gpu-model", "H100", "--db", str(db.path)]) == 0
    assert capsys.readouterr().out.strip() == ran.name
    assert main(["export", "--t4", str(tmp_path / "t4.json"), "--db", str(db.path), "--gpu-model", "H100"]) == 0
    assert gen.tuned("matmul", 256, 256, 256, db=db.path, device=device).name == ran.name

WRITER = """
import sys
from dataclasses import replace
from pathlib import Path
from gen.store.tuning_db import TuningDB
from tests.test_tunedb import measured_row
db = TuningDB(Path(sys.argv[1]))
for batch in range(30):
    db.record([measured_row(8 + i % 3, 1.0 + batch + i / 100, shape=sys.argv[2]) for i in range(10)])
"""


def test_two_writers_at_once_lose_nothing_and_corrupt_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    TuningDB(path)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"{n}x{n}x{n}"], cwd=REPO)
               for n in (64, 128)]
    assert [w.wait(timeout=patient(120)) for w in writers] == [0, 0]
    db = TuningDB(path)
    assert db.count() == 2 * 30 * 10
    assert db.integrity() == "ok"
    assert {p.shape for p in db.problems()} == {"64x64x64", "128x128x128"}


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not sqlite " * 100)
    with pytest.raises(UsageError, match="is not a tilegen tuning database"):
        TuningDB(path)


def test_processes_making_one_new_database_at_once_all_open_it(tmp_path: Path) -> None:
    # A new file's switch to WAL mode can be refused at once, with no wait, to break a deadlock
    # between two openers; threads stand in for processes (SQLite locks them the same way).
    failures: list[str] = []
    for trial in range(100):
        path = tmp_path / f"{trial}.sqlite"
        start = threading.Barrier(6)

        def make() -> None:
            start.wait()
            try:
                TuningDB(path).rows()
            except Exception as error:  # noqa: BLE001 - any failure is the finding
                failures.append(str(error))
        threads = [threading.Thread(target=make) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
