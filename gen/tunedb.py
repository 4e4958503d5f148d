"""The tuning database: every measured row with its provenance, in one SQLite file.

Winners and the top k per (GPU model, family, dtype, shape) are views over the measurements
(latest measurement of each variant, ranked by median time), so writers only ever insert and
two tuning runs writing one file at once cannot disagree about a derived table. Each write is
one transaction; WAL journaling lets readers go on while a writer commits.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from .errors import UsageError
from .families import element_type
from .paths import as_path, cache_dir, existing_file, writable_folder
from .results import GpuModel, Row

DB_ENV = "TILEGEN_DB"
BUSY_TIMEOUT_S = 60.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    gpu_model TEXT NOT NULL,
    family TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    variant TEXT NOT NULL,
    cache_config TEXT NOT NULL,
    status TEXT NOT NULL,
    median_ms REAL,
    throughput REAL,
    cc TEXT,
    driver TEXT,
    nvcc TEXT,
    measured_at REAL NOT NULL,
    row TEXT NOT NULL
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
    id INTEGER PRIMARY KEY,
    gpu_model TEXT NOT NULL,
    family TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    strategy TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trace (
    session INTEGER NOT NULL REFERENCES sessions (id),
    step INTEGER NOT NULL,
    variant TEXT NOT NULL,
    median_ms REAL,
    PRIMARY KEY (session, step)
);
"""


@dataclass(frozen=True, order=True)
class Problem:
    """What a tuning result is for: a GPU model, a family, an element type and a shape."""

    gpu_model: str
    family: str
    dtype: str
    shape: str


def default_db_path() -> Path:
    """$TILEGEN_DB, else tuning.sqlite in tilegen's cache folder (platformdirs; $TILEGEN_CACHE)."""
    override = os.environ.get(DB_ENV)
    return Path(override) if override else cache_dir() / "tuning.sqlite"


def checked_db_path(path: Path | None, create: bool) -> Path:
    """The database path `path` gives (default: default_db_path()), checked without writing
    anything: `create` (tune) needs a file tilegen can make; readers (best, report, export) need a
    tilegen database that exists. Another program's SQLite file is refused either way."""
    what = "--db" if path is not None else f"the tuning database (${DB_ENV}, else in tilegen's cache folder)"
    path = as_path(path, what) if path is not None else default_db_path()
    if create:
        if path.is_dir():
            raise UsageError(f"{what} {path} is a folder; give a file, like {path / 'tuning.sqlite'}")
        writable_folder(path.parent, f"the folder of {what}")
    else:
        existing_file(path, what, "give the tuning database tilegen tune wrote")
    if not path.exists():
        return path
    try:
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            connection.close()
    except sqlite3.DatabaseError as error:
        raise UsageError(f"{path} is not a tilegen tuning database ({error}); give another --db") from None
    if tables and "measurements" not in tables:
        raise UsageError(f"{path} is an SQLite database but not tilegen's (its tables: "
                         f"{', '.join(sorted(tables))}); give another --db")
    if not tables and not create:
        raise UsageError(f"{path} holds no tuning data; give the tuning database tune wrote")
    return path


class TuningDB:
    """The database at `path` (default: default_db_path()); `create`: make it when it is missing
    (tune), else refuse a path with no database (see checked_db_path)."""

    def __init__(self, path: Path | None = None, create: bool = True):
        self.path = checked_db_path(path, create)
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._reading() as connection:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.executescript(SCHEMA)
                connection.commit()
        except sqlite3.DatabaseError as error:
            raise UsageError(f"{self.path} is not a tilegen tuning database ({error}); give another --db") from None
        except OSError as error:
            raise UsageError(f"cannot write {self.path} ({error.strerror}); give another --db") from None

    # ---- writing -----------------------------------------------------------------------------

    def record(self, rows: Iterable[Row]) -> int:
        """Insert measured rows (those with a GPU in their provenance) in one transaction."""
        values = [self._values(row) for row in rows if row.provenance.get("gpu_model")]
        with self._transaction() as connection:
            connection.executemany(
                "INSERT INTO measurements (gpu_model, family, dtype, shape, variant, cache_config, status, median_ms,"
                " throughput, cc, driver, nvcc, measured_at, row) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", values)
        return len(values)

    def start_session(self, problem: Problem, strategy: str) -> int:
        with self._transaction() as connection:
            cursor = connection.execute(
                "INSERT INTO sessions (gpu_model, family, dtype, shape, strategy, started_at) VALUES (?,?,?,?,?,?)",
                (problem.gpu_model, problem.family, problem.dtype, problem.shape, strategy, time.time()))
            return int(cursor.lastrowid)

    def trace(self, session: int, step: int, variant: str, median_ms: float | None) -> None:
        """One evaluation of a tuning session, for convergence plots."""
        with self._transaction() as connection:
            connection.execute("INSERT INTO trace (session, step, variant, median_ms) VALUES (?,?,?,?)",
                               (session, step, variant, median_ms))

    # ---- reading -----------------------------------------------------------------------------

    def measured(self, problem: Problem) -> dict[str, Row]:
        """The latest row of every variant measured for this problem (any status)."""
        query = "SELECT row FROM latest WHERE gpu_model=? AND family=? AND dtype=? AND shape=?"
        with self._reading() as connection:
            rows = [Row.from_dict(json.loads(r[0])) for r in connection.execute(query, _key(problem))]
        return {row.name: row for row in rows}

    def top(self, problem: Problem, count: int = 5) -> list[Row]:
        query = ("SELECT row FROM ranked WHERE gpu_model=? AND family=? AND dtype=? AND shape=? AND rank<=? "
                 "ORDER BY rank")
        with self._reading() as connection:
            return [Row.from_dict(json.loads(r[0])) for r in connection.execute(query, (*_key(problem), count))]

    def best(self, problem: Problem) -> Row | None:
        top = self.top(problem, 1)
        return top[0] if top else None

    def problems(self, family: str | None = None) -> list[Problem]:
        """Every problem with at least one correct measurement."""
        query = "SELECT DISTINCT gpu_model, family, dtype, shape FROM ranked"
        with self._reading() as connection:
            found = [Problem(*r) for r in connection.execute(query)]
        return sorted(p for p in found if family is None or p.family == family)

    def models(self) -> list[GpuModel]:
        """Every GPU model measured, as the newest of its rows that ran on the GPU records it (a
        compile error names only the model it was compiled for: no GPU in its provenance)."""
        with self._reading() as connection:
            names = [name for (name,) in connection.execute("SELECT DISTINCT gpu_model FROM measurements")]
            found = [_newest_model(connection, name) for name in names]
        return sorted(model for model in found if model is not None)

    def traces(self, problem: Problem) -> dict[int, tuple[str, list[float | None]]]:
        """session -> (strategy, median per evaluation in order) for every session on this problem."""
        query = ("SELECT s.id, s.strategy, t.median_ms FROM sessions s JOIN trace t ON t.session = s.id "
                 "WHERE s.gpu_model=? AND s.family=? AND s.dtype=? AND s.shape=? ORDER BY s.id, t.step")
        sessions: dict[int, tuple[str, list[float | None]]] = {}
        with self._reading() as connection:
            for session, strategy, median in connection.execute(query, _key(problem)):
                sessions.setdefault(session, (strategy, []))[1].append(median)
        return sessions

    def rows(self, family: str | None = None, gpu_model: str | None = None) -> list[Row]:
        """Every measurement, oldest first, optionally of one family and GPU model."""
        query = "SELECT row FROM measurements WHERE (? IS NULL OR family = ?) AND (? IS NULL OR gpu_model = ?) ORDER BY id"
        with self._reading() as connection:
            return [Row.from_dict(json.loads(r[0])) for r in connection.execute(query, (family, family, gpu_model,
                                                                                        gpu_model))]

    def latest_rows(self, family: str | None = None) -> list[Row]:
        """The latest measurement of every variant of every problem."""
        query = "SELECT row FROM latest WHERE (? IS NULL OR family = ?) ORDER BY id"
        with self._reading() as connection:
            return [Row.from_dict(json.loads(r[0])) for r in connection.execute(query, (family, family))]

    def count(self) -> int:
        with self._reading() as connection:
            return int(connection.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

    def integrity(self) -> str:
        with self._reading() as connection:
            return str(connection.execute("PRAGMA integrity_check").fetchone()[0])

    # ---- plumbing ----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        connection = self._connect()
        try:
            yield connection
        finally:
            connection.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        connection = self._connect()
        try:
            connection.execute("BEGIN IMMEDIATE")  # take the write lock now, not half-way through
            yield connection
            connection.commit()
        except BaseException:
            connection.rollback()
            raise
        finally:
            connection.close()

    @staticmethod
    def _values(row: Row) -> tuple:
        p = row.provenance
        return (p["gpu_model"], row.family, element_type(row.name), row.shape, row.name, row.cache_config or "none",
                str(row.status), row.median_ms, row.throughput, p.get("cc"), p.get("driver"), p.get("nvcc"),
                time.time(), row.to_json())


def _newest_model(connection: sqlite3.Connection, name: str) -> GpuModel | None:
    """The GPU model `name` as the newest of its rows that ran on the GPU records it; None if none ran."""
    query = "SELECT row FROM measurements WHERE gpu_model = ? ORDER BY id DESC"
    for (text,) in connection.execute(query, (name,)):
        model = GpuModel.from_provenance(json.loads(text).get("provenance", {}))
        if model is not None:
            return model
    return None


def _key(problem: Problem) -> tuple[str, str, str, str]:
    return (problem.gpu_model, problem.family, problem.dtype, problem.shape)

