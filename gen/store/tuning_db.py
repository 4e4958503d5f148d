"""The tuning database: every measured row with its provenance, in one SQLite file, and the
queries over it.

Winners and the top k per problem (GPU model, family, element type, shape) are queries over the
full-level measurements (a tune's screening rows, compiled at a fast level, are kept but never win:
gen.compiling.levels) (the latest measurement of each variant, ranked by median time, or by energy or
energy-delay product: gen.core.objectives), so writers only
ever insert and two tuning runs writing one file at once cannot disagree about a derived table.
Each write is one transaction; WAL journaling lets readers go on while a writer commits.

Readers (report, best, export, gen.tuned) never change the file: their connections cannot write,
and they neither switch its journal mode nor add tables; a database of tilegen 0.1 or 0.2 is read
as it is (tuning_schema). Every row read is checked field by field. What SQLite reports (a lock
held too long, a file that cannot be written, a full disk, a file that is not a database) ends in
one line that names the file.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..core.errors import UsageError
from ..core.paths import as_path, cache_dir, existing_file, writable_folder
from ..core.objectives import DEFAULT_OBJECTIVE, check_objective
from ..core.objectives import ranked as ranked_by
from ..core.results import FULL_LEVEL, GpuModel, Row, row_from_json
from ..families import element_type
from ..families.registry import epilogue_of_name
from .tuning_schema import (ADDED_COLUMNS, ELEMENT_TYPE, MODEL_COLUMNS, WRITE_WAIT_S, Layout, check_schema, connect,
                            database_errors, layout, migrate, model_values)

DB_ENV = "TILEGEN_DB"
FINALIST_KEY = "interleaved_rounds"  # the provenance key of a finalist's row: rounds it was measured in
# A stored row's compile level: its own field, else (a row of tilegen before levels, or one that is not
# JSON, which reading it refuses) full.
ROW_LEVEL = (f"CASE WHEN json_valid(row) THEN COALESCE(NULLIF(json_extract(row, '$.compile_level'), ''), "
             f"'{FULL_LEVEL}') ELSE '{FULL_LEVEL}' END")
FULL_ROWS = f"{ROW_LEVEL} = '{FULL_LEVEL}'"
_MEASURED = tuple(ADDED_COLUMNS["measurements"])  # the optional measured quantities' columns (gen.core.quantities)


@dataclass(frozen=True, order=True)
class TuningKey:
    """What a tuning result is for: a GPU model, a family, an element type, a shape, and what the
    kernel computes after its product (Family.epilogue_of: '' for the plain problem). The epilogue
    is no column: it is read from each row's variant, so databases written before it was part of the
    key keep every row, each under its own epilogue."""

    gpu_model: GpuModel
    family: str
    dtype: str
    shape: str
    epilogue: str = ""

    def __post_init__(self) -> None:
        _check_model(self.gpu_model, "a TuningKey's gpu_model")

    def __str__(self) -> str:
        epilogue = f" {self.epilogue}" if self.epilogue else ""
        return f"{self.family} {self.dtype} {self.shape}{epilogue} on {self.gpu_model}"


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
        with database_errors(path):
            connection = connect(path, writer=False)
            try:
                check_schema(connection, path, create)
            finally:
                connection.close()
    return path


class TuningDB:
    """The database at `path` (default: default_db_path()); `create`: make it when it is missing,
    or migrate one of tilegen 0.1 or 0.2 (tune), else refuse a path with no database (see
    checked_db_path) and only read it."""

    def __init__(self, path: Path | None = None, create: bool = True):
        self.path = checked_db_path(path, create)
        self.writer = create
        if create:
            self._make()

    def _make(self) -> None:
        """The file in WAL mode (readers go on while a writer commits), with the tables it lacks; a
        database of tilegen 0.1 or 0.2 migrated, in one transaction (tuning_schema.migrate)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"cannot write {self.path} ({error.strerror}); give another --db") from None
        with database_errors(self.path):
            _switch_to_wal(self.path)
        with self._transaction() as connection:
            migrate(connection)

    # ---- writing -----------------------------------------------------------------------------

    def record(self, rows: Iterable[Row], model: GpuModel | None = None) -> int:
        """Insert rows in one transaction, each under the GPU model its provenance names (a row
        that ran on a GPU), else under `model` (the model a tune compiled it for: a compile
        error). Rows with neither are not recorded."""
        if model is not None:
            _check_model(model, "TuningDB.record: model")
        keyed = [(found, row) for row in rows if (found := GpuModel.from_provenance(row.provenance) or model)]
        with self._transaction() as connection:
            connection.executemany(
                f"INSERT INTO measurements ({', '.join(MODEL_COLUMNS)}, family, dtype, shape, variant, cache_config, "
                f"status, median_ms, throughput, cc, driver, nvcc, measured_at, row, {', '.join(_MEASURED)}) "
                f"VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?{',?' * len(_MEASURED)})", [_values(found, row) for found, row in keyed])
        return len(keyed)

    def start_session(self, problem: TuningKey, strategy: str) -> int:
        with self._transaction() as connection:
            cursor = connection.execute(
                f"INSERT INTO sessions ({', '.join(MODEL_COLUMNS)}, family, dtype, shape, strategy, started_at) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (*model_values(problem.gpu_model), problem.family, problem.dtype, problem.shape, strategy,
                 time.time()))
            return int(cursor.lastrowid)

    def trace(self, session: int, step: int, variant: str, median_ms: float | None) -> None:
        """One evaluation of a tuning session, for convergence plots."""
        with self._transaction() as connection:
            connection.execute("INSERT INTO trace (session, step, variant, median_ms) VALUES (?,?,?,?)",
                               (session, step, variant, median_ms))

    # ---- reading -----------------------------------------------------------------------------

    def measured(self, problem: TuningKey, level: str = FULL_LEVEL) -> dict[str, Row]:
        """The latest row of every variant measured for this problem (any status) compiled at `level`."""
        with self._reading() as (connection, found):
            where, parameters = _of_problem(found, problem)
            query = f"SELECT id, row FROM measurements WHERE id IN ({_latest(found, f'{where} AND {ROW_LEVEL} = ?')}) " \
                    "ORDER BY id"
            return {row.name: row for row in self._rows(connection, query, (*parameters, level))
                    if epilogue_of_name(row.name) == problem.epilogue}

    def top(self, problem: TuningKey, count: int = 5, objective: str = DEFAULT_OBJECTIVE) -> list[Row]:
        """The best correct variants by `objective` (gen.core.objectives; by energy, only those
        measured with it), best first: those a tune confirmed in its interleaved rounds (its
        finalists) before the others, each group by its latest measurement. A finalist's median
        round is slower than the lucky single measurement that made it one; a variant measured once
        is no rival for it."""
        with self._reading() as (connection, found):
            where, parameters = _of_problem(found, problem)
            query = (f"SELECT id, row FROM measurements WHERE id IN ({_latest(found, f'{where} AND {FULL_ROWS}')}) "
                     "AND status = 'ok' AND median_ms IS NOT NULL ORDER BY median_ms, id")
            ranked = [row for row in self._rows(connection, query, parameters)
                      if epilogue_of_name(row.name) == problem.epilogue]
            confirmed = {name for (name,) in connection.execute(
                f"SELECT DISTINCT variant FROM measurements WHERE {where} AND row LIKE '%\"{FINALIST_KEY}\"%'",
                parameters)}
        # by each row's own checked figures (its median, its energy), not the columns beside them
        return sorted(ranked_by(ranked, check_objective(objective)), key=lambda row: row.name not in confirmed)[:count]

    def best(self, problem: TuningKey, objective: str = DEFAULT_OBJECTIVE) -> Row | None:
        top = self.top(problem, 1, objective)
        return top[0] if top else None

    def problems(self, family: str | None = None) -> list[TuningKey]:
        """Every problem with at least one correct measurement."""
        with self._reading() as (connection, found):
            latest = _latest(found, f"(? IS NULL OR family = ?) AND {FULL_ROWS}")
            query = (f"SELECT DISTINCT {found.columns}, family, {ELEMENT_TYPE}, shape, variant FROM measurements "
                     f"WHERE id IN ({latest}) AND status = 'ok' AND median_ms IS NOT NULL")
            values = connection.execute(query, (family, family)).fetchall()
        return sorted({TuningKey(found.model(v[:found.width]), *v[found.width:-1], epilogue_of_name(v[-1]))
                       for v in values})

    def models(self) -> list[GpuModel]:
        """Every GPU model that ran a kernel (a compile error names only the model it was compiled
        for: no GPU ran it)."""
        with self._reading() as (connection, found):
            query = f"SELECT DISTINCT {found.columns} FROM measurements WHERE cc IS NOT NULL"
            return sorted({found.model(values) for values in connection.execute(query)})

    def traces(self, problem: TuningKey) -> dict[int, tuple[str, list[float | None]]]:
        """session -> (strategy, median per evaluation in order) for every session on this problem (its
        epilogue: that of the variants it evaluated)."""
        sessions: dict[int, tuple[str, list[float | None]]] = {}
        with self._reading() as (connection, found):
            where, parameters = _of_problem(found, problem)
            query = ("SELECT s.id, s.strategy, t.variant, t.median_ms FROM sessions s JOIN trace t ON t.session = s.id "
                     f"WHERE {where} ORDER BY s.id, t.step")
            for session, strategy, variant, median in connection.execute(query, parameters):
                if epilogue_of_name(variant) == problem.epilogue:
                    sessions.setdefault(session, (strategy, []))[1].append(median)
        return sessions

    def rows(self, family: str | None = None, gpu_model: GpuModel | None = None) -> list[Row]:
        """Every measurement, oldest first, optionally of one family and GPU model."""
        if gpu_model is not None:
            _check_model(gpu_model, "TuningDB.rows: gpu_model")
        with self._reading() as (connection, found):
            where, parameters = found.where(gpu_model) if gpu_model is not None else ("1", ())
            query = f"SELECT id, row FROM measurements WHERE (? IS NULL OR family = ?) AND {where} ORDER BY id"
            return self._rows(connection, query, (family, family, *parameters))

    def latest_rows(self, family: str | None = None) -> list[Row]:
        """The latest full-level measurement of every variant of every problem."""
        with self._reading() as (connection, found):
            latest = _latest(found, f"(? IS NULL OR family = ?) AND {FULL_ROWS}")
            query = f"SELECT id, row FROM measurements WHERE id IN ({latest}) ORDER BY id"
            return self._rows(connection, query, (family, family))

    def count(self) -> int:
        with self._reading() as (connection, _):
            return int(connection.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

    def integrity(self) -> str:
        with self._reading() as (connection, _):
            return str(connection.execute("PRAGMA integrity_check").fetchone()[0])

    # ---- plumbing ----------------------------------------------------------------------------

    def _rows(self, connection: sqlite3.Connection, query: str, parameters: tuple) -> list[Row]:
        """The rows a query of (id, row) finds, each checked."""
        return [self._row(number, text) for number, text in connection.execute(query, parameters)]

    def _row(self, number: int, text: Any) -> Row:
        """A stored row, checked; UsageError naming the file, the measurement and the field."""
        try:
            return row_from_json(text)
        except (ValueError, TypeError) as error:
            raise UsageError(f"{self.path}: the row of measurement {number} is not a result row ({error}); delete "
                             f"that measurement, or give another --db") from None

    @contextmanager
    def _reading(self) -> Iterator[tuple[sqlite3.Connection, Layout]]:
        """A connection and its database's layout, read in one transaction: a tune may migrate the
        file between the reading of its layout and a query (closing the connection ends it)."""
        with database_errors(self.path):
            connection = connect(self.path, writer=self.writer)
            try:
                connection.execute("BEGIN")
                yield connection, layout(connection)
            finally:
                connection.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A transaction of a writer, whose database is this tilegen's (made so by _make)."""
        with database_errors(self.path):
            connection = connect(self.path, writer=True)
            try:
                connection.execute("BEGIN IMMEDIATE")  # take the write lock now, not half-way through
                yield connection
                connection.commit()
            except BaseException:
                connection.rollback()
                raise
            finally:
                connection.close()


def _switch_to_wal(path: Path) -> None:
    """Put the file in WAL mode. Two processes making one new file at once (two tunes, or a tune and
    a reader) can be refused at once, without SQLite's wait, to break a deadlock: try again until
    the writer's wait is over."""
    deadline = time.monotonic() + WRITE_WAIT_S
    while True:
        connection = connect(path, writer=True)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
        finally:
            connection.close()
        time.sleep(0.01)


def _check_model(model: Any, what: str) -> None:
    """Refuse anything but a GpuModel: a model is its fields (tilegen 0.2 took its display string)."""
    if not isinstance(model, GpuModel):
        raise UsageError(f"{what} is a gen.core.results.GpuModel (its fields), got {model!r}; a device's is "
                         f"DeviceInfo.model")


def _values(model: GpuModel, row: Row) -> tuple:
    """A row's columns in the measurements table, under `model`."""
    p = row.provenance
    return (*model_values(model), row.family, element_type(row.name), row.shape, row.name, row.cache_config or "none",
            str(row.status), row.median_ms, row.throughput, p.get("cc"), p.get("driver"), p.get("nvcc"), time.time(),
            row.to_json(), *(getattr(row, column) for column in _MEASURED))


def _of_problem(found: Layout, problem: TuningKey) -> tuple[str, tuple]:
    """An SQL condition (and its parameters) that holds for the rows of `problem`."""
    where, parameters = found.where(problem.gpu_model)
    return (f"{where} AND family = ? AND {ELEMENT_TYPE} = ? AND shape = ?",
            (*parameters, problem.family, problem.dtype, problem.shape))


def _latest(found: Layout, where: str) -> str:
    """A query of the ids of the latest measurement of each variant (and cache preference) of each
    problem, among the measurements `where` selects."""
    return (f"SELECT MAX(id) FROM measurements WHERE {where} "
            f"GROUP BY {found.columns}, family, {ELEMENT_TYPE}, shape, variant, cache_config")
