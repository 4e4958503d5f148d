"""The tuning database's keys are data: a GPU model is stored as its fields, so rewording its display
string orphans nothing. Databases of tilegen 0.1 and 0.2 keep working: they named a GPU model by
its display string ("NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs, 79 GiB)") and stored the rows of a
family without a dtype parameter with dtype ''. Readers find their rows without changing the file;
a tune migrates the file once, keeping every row."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import gen
from gen.cli.main import main
from gen.core.results import DeviceInfo, GpuModel, Row, Status
from gen.families import get_family
from gen.families.registry import registry
from gen.families.space import Space
from gen.call.lookup import tuned_with_reason
from gen.commands.tune import INTERLEAVED_ROUNDS, TuneOptions, tune, warm_start
from gen.store.tuning_db import TuningDB

from .conftest import REPO
from .fakes import FAKE_DEVICE, FakeExecutor

RELEASE_DB = REPO / "tests" / "data" / "tuning-0.1.0.sqlite"  # written by tilegen 0.1.0 (tests/data/README.md)
H100 = DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132, 85017493504, 50 * 2**20, "580")

# The schema tilegen 0.1 and 0.2 wrote, as they wrote it: a GPU model is its display string.
SCHEMA_0_2 = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY, gpu_model TEXT NOT NULL, family TEXT NOT NULL, dtype TEXT NOT NULL, shape TEXT NOT NULL,
    variant TEXT NOT NULL, cache_config TEXT NOT NULL, status TEXT NOT NULL, median_ms REAL, throughput REAL, cc TEXT,
    driver TEXT, nvcc TEXT, measured_at REAL NOT NULL, row TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS by_problem ON measurements (gpu_model, family, dtype, shape, variant);
CREATE VIEW IF NOT EXISTS latest AS
    SELECT * FROM measurements AS m WHERE m.id = (
        SELECT MAX(id) FROM measurements AS x
        WHERE x.gpu_model = m.gpu_model AND x.family = m.family AND x.dtype = m.dtype
          AND x.shape = m.shape AND x.variant = m.variant AND x.cache_config = m.cache_config);
CREATE VIEW IF NOT EXISTS ranked AS
    SELECT *, ROW_NUMBER() OVER (PARTITION BY gpu_model, family, dtype, shape ORDER BY median_ms) AS rank
    FROM latest WHERE status = 'ok' AND median_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY, gpu_model TEXT NOT NULL, family TEXT NOT NULL, dtype TEXT NOT NULL, shape TEXT NOT NULL,
    strategy TEXT NOT NULL, started_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trace (
    session INTEGER NOT NULL REFERENCES sessions (id), step INTEGER NOT NULL, variant TEXT NOT NULL, median_ms REAL,
    PRIMARY KEY (session, step)
);
"""
STENCIL_SPACE = {"bx": ["32", "64"], "by": ["4"], "rows": ["1"]}  # the stencil variants stored at 512x512


def write_0_2_database(path: Path, rows: list[Row]) -> None:
    """A database as tilegen 0.2 wrote it: the display string as the model, the `dtype` parameter's
    value as the element type ('' for a family without one), WAL journaling, one tuning session."""
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.executescript(SCHEMA_0_2)
    connection.executemany(
        "INSERT INTO measurements (gpu_model, family, dtype, shape, variant, cache_config, status, median_ms,"
        " throughput, cc, driver, nvcc, measured_at, row) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [(row.provenance["gpu_model"], row.family, row.params.get("dtype", ""), row.shape, row.name,
          row.cache_config or "none", str(row.status), row.median_ms, row.throughput, row.provenance.get("cc"),
          row.provenance.get("driver"), row.provenance.get("nvcc"), time.time(), row.to_json()) for row in rows])
    first = rows[0]
    session = connection.execute(
        "INSERT INTO sessions (gpu_model, family, dtype, shape, strategy, started_at) VALUES (?,?,?,?,?,?)",
        (first.provenance["gpu_model"], first.family, first.params.get("dtype", ""), first.shape, "brute",
         time.time())).lastrowid
    connection.executemany("INSERT INTO trace (session, step, variant, median_ms) VALUES (?,?,?,?)",
                           [(session, step, row.name, row.median_ms) for step, row in enumerate(rows)])
    connection.commit()
    connection.close()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def key_values(path: Path) -> list[str]:
    """Every value of every column but the stored row (its provenance) in every table of a database."""
    found = []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [c[1] for c in connection.execute(f"PRAGMA table_info({table})") if c[1] != "row"]
            for values in connection.execute(f"SELECT {', '.join(columns)} FROM {table}"):
                found.extend(str(value) for value in values)
    connection.close()
    return found


def reword(monkeypatch: pytest.MonkeyPatch) -> None:
    """GpuModel's display string worded anew: a database must not depend on its wording."""
    monkeypatch.setattr(GpuModel, "__str__", lambda model: f"{model.name} [sm_{model.cc.replace('.', '')}, "
                                                           f"{model.sm_count} SMs, {model.memory_gib} GiB]")


@pytest.fixture
def reworded(monkeypatch: pytest.MonkeyPatch) -> None:
    reword(monkeypatch)


@pytest.fixture
def own_families(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test families (stencil has no dtype parameter) on the family path."""
    monkeypatch.setenv("TILEGEN_FAMILY_PATH", str(REPO / "tests" / "families"))
    registry.cache_clear()
    yield
    registry.cache_clear()


def stencil_rows(shape: str = "512x512") -> list[Row]:
    """Measured stencil rows on the fake GPU, the last fastest."""
    family = get_family("stencil")
    variants = Space.from_options(family, [f"{k}={','.join(v)}" for k, v in STENCIL_SPACE.items()]).expand().valid
    return [Row(v.name, "stencil", v.params(), Status.OK, shape=shape, median_ms=1.0 / (1 + n), error=1e-7,
                throughput=1.0 + n, unit="GB/s", provenance=FAKE_DEVICE.provenance())
            for n, v in enumerate(variants)]


@pytest.fixture
def database_0_2(tmp_path: Path, own_families: None) -> Path:
    """A 0.2 database holding stencil rows stored with dtype ''."""
    folder = tmp_path / "db"
    folder.mkdir()
    write_0_2_database(folder / "tuning.sqlite", stencil_rows())
    return folder / "tuning.sqlite"


def run_main(capsys: pytest.CaptureFixture, args: list[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


# ---- a GPU model's display string is not a key ------------------------------------------------------

def test_a_reworded_gpu_model_finds_what_was_tuned_before(tmp_path: Path, capsys, compile_options,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "t.sqlite"
    options = TuneOptions("matmul", "64x64x64", params={"tile": ["8", "16"], "padding": ["0"], "bounds": ["guard"],
                                                       "sync": ["both"]}, strategy="brute", db=db, progress=False,
                          top=1)
    (first,) = tune(options, FakeExecutor())
    assert not [value for value in key_values(db) if str(FAKE_DEVICE.model) in value]
    reword(monkeypatch)
    assert gen.tuned("matmul", 64, 64, 64, db=db, device=FAKE_DEVICE).name == first.winner.name
    code, out, err = run_main(capsys, ["best", "matmul", "--size", "64x64x64", "--gpu-model", "Fake", "--db", str(db)])
    assert code == 0 and out.strip() == first.winner.name and "the exact shape on this GPU" in err, err
    executor = FakeExecutor()
    (again,) = tune(options, executor)
    assert len(executor.ran) == INTERLEAVED_ROUNDS  # what was measured before is known: only the finalist runs
    assert TuningDB(db).problems() == [again.problem]


# ---- tilegen 0.1.0's database ----------------------------------------------------------------------

def test_readers_find_the_rows_of_a_0_1_database_after_a_rewording_and_change_nothing(
        tmp_path: Path, capsys, reworded: None) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    db = folder / "old.sqlite"
    shutil.copy(RELEASE_DB, db)
    before = snapshot(folder)
    code, out, err = run_main(capsys, ["best", "sgemm", "--size", "4096x4096x4096", "--gpu-model", "H200", "--db", str(db)])
    assert code == 0 and out.startswith("sgemm_f32_") and "the exact shape on this GPU" in err, err
    assert "4096x4096x4096 on NVIDIA H200 [sm_90, 132 SMs, 139 GiB]" in err  # printed in today's words
    variant, reason = tuned_with_reason("transpose", 16384, 16384, db=db, device=H100)
    assert variant.name.startswith("transpose_f32_") and reason.startswith("the exact shape on this GPU"), reason
    code, out, _ = run_main(capsys, ["report", "copy", "--db", str(db)])
    assert code == 0 and "copy_f32_" in out
    assert run_main(capsys, ["export", "--t4", str(tmp_path / "t4.json"), "--db", str(db), "--gpu-model", "H100"])[0] == 0
    assert len(json.loads((tmp_path / "t4.json").read_text())["results"]) > 0
    assert snapshot(folder) == before  # not a byte changed, no file left behind


def test_a_tune_migrates_a_0_1_database_once_keeping_every_row(tmp_path: Path, capsys, compile_options) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(RELEASE_DB, db)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        old = connection.execute("SELECT id, variant, shape, row FROM measurements ORDER BY id").fetchall()
    connection.close()
    options = TuneOptions("matmul", "64x64x64", params={"tile": ["8", "16"], "padding": ["0"], "bounds": ["guard"],
                                                       "sync": ["both"]}, strategy="brute", db=db, progress=False,
                          top=1)
    tune(options, FakeExecutor())
    tune(options, FakeExecutor())  # the second tune finds the database migrated
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        kept = connection.execute("SELECT id, variant, shape, row FROM measurements WHERE id <= ? ORDER BY id",
                                  (old[-1][0],)).fetchall()
    connection.close()
    assert kept == old  # every row, as it was, under its id
    assert not [value for value in key_values(db) if "GiB)" in value]  # no display string is a key
    code, out, err = run_main(capsys, ["best", "sgemm", "--size", "4096x4096x4096", "--gpu-model", "H200", "--db", str(db)])
    assert code == 0 and "the exact shape on this GPU" in err, err
    assert TuningDB(db).integrity() == "ok"


# ---- a 0.2 database: display strings, and dtype '' for a family without dtype -------------------------

def test_readers_find_rows_stored_with_dtype_blank_as_the_familys_element_type(database_0_2: Path, capsys) -> None:
    before = snapshot(database_0_2.parent)
    fastest = stencil_rows()[-1].name
    code, out, err = run_main(capsys, ["best", "stencil", "--size", "512x512", "--gpu-model", "Fake", "--db",
                                       str(database_0_2)])
    assert code == 0 and out.strip() == fastest and "the exact shape on this GPU" in err, (out, err)
    assert gen.tuned("stencil", 512, 512, db=database_0_2, device=FAKE_DEVICE).name == fastest
    assert gen.tuned("stencil", 512, 512, dtype="f32", db=database_0_2, device=FAKE_DEVICE).name == fastest
    (problem,) = TuningDB(database_0_2, create=False).problems("stencil")
    assert problem.dtype == "f32" and len(TuningDB(database_0_2, create=False).traces(problem)) == 1
    assert snapshot(database_0_2.parent) == before


def test_a_later_tune_does_not_measure_again_what_a_0_2_database_holds(database_0_2: Path, compile_options) -> None:
    executor = FakeExecutor()
    (result,) = tune(TuneOptions("stencil", "512x512", params=STENCIL_SPACE, strategy="brute", db=database_0_2,
                                 progress=False, top=1), executor)
    stored = {row.name for row in stencil_rows()}
    assert result.problem.dtype == "f32"
    # every variant is known: only the finalist's interleaved rounds run
    assert len(executor.ran) == INTERLEAVED_ROUNDS and {job.name for job in executor.ran} <= stored
    db = TuningDB(database_0_2, create=False)
    assert set(db.measured(result.problem)) == stored and len(db.traces(result.problem)) == 2  # 0.2's session too
    assert not [value for value in key_values(database_0_2) if "GiB)" in value]  # migrated


def test_a_new_shape_starts_from_the_winners_a_0_2_database_holds(database_0_2: Path, compile_options) -> None:
    other = {"bx": ["32"], "by": ["8"], "rows": ["1"]}  # tuned at 256x256, farther from 1024x1024 than 512x512
    (result,) = tune(TuneOptions("stencil", "256x256", params=other, strategy="brute", db=database_0_2,
                                 progress=False, top=1), FakeExecutor())
    family = get_family("stencil")
    shape = family.parse_shape("1024x1024")
    valid = Space.default(family).expand().valid
    leaders = [row.name for row in reversed(stencil_rows())]  # fastest first
    problem = type(result.problem)(result.problem.gpu_model, "stencil", "f32", str(shape))
    assert [v.name for v in warm_start(TuningDB(database_0_2), problem, family, shape, valid)] == leaders
