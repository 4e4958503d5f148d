"""The tuning database: every measured row with its provenance, in one SQLite file.

Winners and the top k per (GPU model, family, dtype, shape) are views over the measurements
(latest measurement of each variant, ranked by median time), so writers only ever insert and
two tuning runs writing one file at once cannot disagree about a derived table. Each write is
one transaction; WAL journaling lets readers go on while a writer commits.

Readers (report, best, export, gen.tuned) never change the file: their connections cannot write,
and they neither switch its journal mode nor add tables. Every row read is checked field by field.
What SQLite reports (a lock held too long, a file that cannot be written, a full disk, a file that
is not a database) ends in one line that names the file.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..core.errors import RunFailed, TilegenError, UsageError
from ..families import element_type
from ..core.paths import as_path, cache_dir, existing_file, writable_folder
from ..core.results import GpuModel, Row, row_from_json

DB_ENV = "TILEGEN_DB"
FINALIST_KEY = "interleaved_rounds"  # the provenance key of a finalist's row: rounds it was measured in
WRITE_WAIT_S = 60.0  # a writer waits this long for another's transaction (two tunes into one file)
READ_WAIT_S = 1.0  # a reader waits this long: in WAL mode only a crash's recovery or a locking program holds one up

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
    return as_path(override, f"${DB_ENV}") if override else cache_dir() / "tuning.sqlite"


def checked_db_path(path: Path | None, create: bool) -> Path:
    """The database path `path` gives (default: default_db_path()), checked without writing
    anything: `create` (tune) needs a file tilegen can make, or a tilegen database it can write;
    readers (best, report, export) need a tilegen database that exists. Another program's SQLite
    file is refused either way."""
    what = "--db" if path is not None else f"the tuning database (${DB_ENV}, else in tilegen's cache folder)"
    path = as_path(path, what) if path is not None else default_db_path()
    if create:
        if path.is_dir():
            raise UsageError(f"{what} {path} is a folder; give a file, like {path / 'tuning.sqlite'}")
        writable_folder(path.parent, f"the folder of {what}")
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"cannot write {what} {path} (a read-only file); give a tuning database you can write")
    else:
        existing_file(path, what, "give the tuning database tilegen tune wrote")
    if path.exists():
        with _database_errors(path):
            connection = _connect(path, writer=False)
            try:
                _check_schema(connection, path, create)
            finally:
                connection.close()
    return path


class TuningDB:
    """The database at `path` (default: default_db_path()); `create`: make it when it is missing
    (tune), else refuse a path with no database (see checked_db_path) and only read it."""

    def __init__(self, path: Path | None = None, create: bool = True):
        self.path = checked_db_path(path, create)
        self.writer = create
        if create:
            self._make()

    def _make(self) -> None:
        """The file and the tables it lacks, in WAL mode: readers go on while a writer commits."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"cannot write {self.path} ({error.strerror}); give another --db") from None
        with _database_errors(self.path):
            connection = _connect(self.path, writer=True)
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.executescript(SCHEMA)
                connection.commit()
            finally:
                connection.close()

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
        query = "SELECT id, row FROM latest WHERE gpu_model=? AND family=? AND dtype=? AND shape=?"
        return {row.name: row for row in self._rows(query, _key(problem))}

    def top(self, problem: Problem, count: int = 5) -> list[Row]:
        """The fastest correct variants, best first: those a tune confirmed in its interleaved rounds
        (its finalists) before the others, each group by its latest median. A finalist's median
        round is slower than the lucky single measurement that made it one; a variant measured once
        is no rival for it."""
        query = "SELECT id, row FROM ranked WHERE gpu_model=? AND family=? AND dtype=? AND shape=? ORDER BY rank"
        confirmed = self._confirmed(problem)
        return sorted(self._rows(query, _key(problem)), key=lambda row: row.name not in confirmed)[:count]

    def _confirmed(self, problem: Problem) -> set[str]:
        """The variants of a problem that a tune measured again in interleaved rounds."""
        query = ("SELECT DISTINCT variant FROM measurements WHERE gpu_model=? AND family=? AND dtype=? AND shape=? "
                 f"AND row LIKE '%\"{FINALIST_KEY}\"%'")
        with self._reading() as connection:
            return {name for (name,) in connection.execute(query, _key(problem))}

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
            found = [self._newest_model(connection, name) for name in names]
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
        query = ("SELECT id, row FROM measurements WHERE (? IS NULL OR family = ?) AND (? IS NULL OR gpu_model = ?) "
                 "ORDER BY id")
        return self._rows(query, (family, family, gpu_model, gpu_model))

    def latest_rows(self, family: str | None = None) -> list[Row]:
        """The latest measurement of every variant of every problem."""
        query = "SELECT id, row FROM latest WHERE (? IS NULL OR family = ?) ORDER BY id"
        return self._rows(query, (family, family))

    def count(self) -> int:
        with self._reading() as connection:
            return int(connection.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

    def integrity(self) -> str:
        with self._reading() as connection:
            return str(connection.execute("PRAGMA integrity_check").fetchone()[0])

    # ---- plumbing ----------------------------------------------------------------------------

    def _rows(self, query: str, parameters: tuple) -> list[Row]:
        """The rows a query of (id, row) finds, each checked."""
        with self._reading() as connection:
            return [self._row(number, text) for number, text in connection.execute(query, parameters)]

    def _row(self, number: int, text: Any) -> Row:
        """A stored row, checked; UsageError naming the file, the measurement and the field."""
        try:
            return row_from_json(text)
        except (ValueError, TypeError) as error:
            raise UsageError(f"{self.path}: the row of measurement {number} is not a result row ({error}); delete "
                             f"that measurement, or give another --db") from None

    def _newest_model(self, connection: sqlite3.Connection, name: str) -> GpuModel | None:
        """The GPU model `name` as the newest of its rows that ran on the GPU records it; None if none ran."""
        query = "SELECT id, row FROM measurements WHERE gpu_model = ? ORDER BY id DESC"
        for number, text in connection.execute(query, (name,)):
            model = GpuModel.from_provenance(self._row(number, text).provenance)
            if model is not None:
                return model
        return None

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with _database_errors(self.path):
            connection = _connect(self.path, writer=self.writer)
            try:
                yield connection
            finally:
                connection.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with _database_errors(self.path):
            connection = _connect(self.path, writer=True)
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


def _connect(path: Path, writer: bool) -> sqlite3.Connection:
    """A connection to the database file at `path`; a reader's never makes the file and cannot
    write (query_only). It is not opened read-only (mode=ro): such a connection leaves the -wal
    and -shm files of a WAL database behind, which a read-write one removes when it closes last."""
    mode, wait = ("rwc", WRITE_WAIT_S) if writer else ("rw", READ_WAIT_S)
    connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode={mode}", uri=True, timeout=wait)
    if not writer:
        connection.execute("PRAGMA query_only = ON")
    return connection


@contextmanager
def _database_errors(path: Path) -> Iterator[None]:
    """What SQLite reports about the file, as one line (errors of tilegen's own making pass)."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if not isinstance(error, sqlite3.OperationalError) and type(error) is not sqlite3.DatabaseError:
            raise  # an integrity or programming error: tilegen's, not the file's
        raise _database_failure(path, error) from None


def _database_failure(path: Path, error: sqlite3.DatabaseError) -> TilegenError:
    name = getattr(error, "sqlite_errorname", "")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return RunFailed(f"{path} is locked by another process; try again when it finishes")
    if name.startswith("SQLITE_READONLY"):
        return UsageError(f"cannot write {path} ({error}); give a tuning database you can write")
    if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")):
        return RunFailed(f"cannot write {path} ({error}); make room, then run again: what was recorded is kept")
    if name.startswith("SQLITE_CANTOPEN"):
        return UsageError(f"cannot open {path} ({error}); give a tuning database tilegen can open")
    return UsageError(f"{path} is not a tilegen tuning database ({error}); give another --db")


def _check_schema(connection: sqlite3.Connection, path: Path, create: bool) -> None:
    """Refuse a database whose tables and views are not tilegen's. A tune may add what is missing
    to a tilegen database; a reader needs it all."""
    found = _objects(connection)
    if not found:
        if create:
            return
        raise UsageError(f"{path} holds no tuning data; give the tuning database tune wrote")
    expected = _schema()
    if "measurements" in found and all(_holds(found.get(name), kind, columns) for name, (kind, columns)
                                       in expected.items() if name in found or not create):
        return
    tables = sorted(name for name, (kind, _) in found.items() if kind == "table")
    raise UsageError(f"{path} is an SQLite database but not tilegen's (its tables: {', '.join(tables) or 'none'}); "
                     f"give another --db")


def _holds(found: tuple[str, set[str]] | None, kind: str, columns: set[str]) -> bool:
    return found is not None and found[0] == kind and columns <= found[1]


@functools.cache
def _schema() -> dict[str, tuple[str, set[str]]]:
    """The tables and views SCHEMA makes, with their columns: what a tilegen database holds."""
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(SCHEMA)
        return _objects(connection)
    finally:
        connection.close()


def _objects(connection: sqlite3.Connection) -> dict[str, tuple[str, set[str]]]:
    """name -> (table or view, its columns) for every table and view of a database."""
    named = connection.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                               "AND name NOT LIKE 'sqlite_%'").fetchall()
    return {name: (kind, {column[1] for column in connection.execute(f'PRAGMA table_info("{_quoted(name)}")')})
            for name, kind in named}


def _quoted(name: str) -> str:
    return name.replace('"', '""')


def _key(problem: Problem) -> tuple[str, str, str, str]:
    return (problem.gpu_model, problem.family, problem.dtype, problem.shape)

