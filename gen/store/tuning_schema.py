"""The tuning database's tables; connections to it, and what SQLite reports, in one line; and the
databases of tilegen 0.1 and 0.2, read as they are and migrated once by a writer.

A GPU model is stored as its fields (name, compute capability, SM count, memory), never as its
display string, which may be reworded. Tilegen 0.1 and 0.2 keyed rows by that string
("NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs, 79 GiB)") and stored the rows of a family without a
`dtype` parameter with dtype ''. A Layout says how a connection's database names the model; the
SQL expression ELEMENT_TYPE reads '' as the family's one element type. Columns added since
(ADDED_COLUMNS: energy, power, the SM clock and throttling) are added by a writer to a file that lacks them. Readers never
change a database (no migration, no journal switch); a writer migrates an old one in one
transaction, keeping every row and its id.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..core.errors import RunFailed, TilegenError, UsageError
from ..core.checks import strict_json
from ..core.quantities import OPTIONAL_COLUMNS
from ..core.results import GpuModel
from ..families import registry

WRITE_WAIT_S = 60.0  # a writer waits this long for another's transaction (two tunes into one file)
READ_WAIT_S = 1.0  # a reader waits this long: in WAL mode only a crash's recovery or a locking program holds one up

MODEL_COLUMNS = ("gpu_name", "gpu_cc", "gpu_sm_count", "gpu_memory_gib")  # GpuModel's fields, in order
# The columns every table starts with: an id, the GPU model (MODEL_COLUMNS) and the problem.
_PROBLEM_COLUMNS = """
    id INTEGER PRIMARY KEY,
    gpu_name TEXT NOT NULL,
    gpu_cc TEXT NOT NULL,
    gpu_sm_count INTEGER NOT NULL,
    gpu_memory_gib INTEGER NOT NULL,
    family TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
"""
_MEASUREMENTS = "CREATE TABLE IF NOT EXISTS {table} (" + _PROBLEM_COLUMNS + """\
    variant TEXT NOT NULL,
    cache_config TEXT NOT NULL,
    status TEXT NOT NULL,
    median_ms REAL,
    throughput REAL,
    cc TEXT,  -- the compute capability the row ran on; NULL: it ran on no GPU (a compile error)
    driver TEXT,
    nvcc TEXT,  -- nvcc's version where nvcc compiled it (the row's provenance names any compiler)
    measured_at REAL NOT NULL,
    row TEXT NOT NULL{added}
)"""
# Columns added after tilegen 0.3's tables, each with its SQL type: a writer's migrate adds them to
# an older file (ALTER TABLE); readers take a file without them as it is, and read them from the row.
ADDED_COLUMNS = {"measurements": {column.field: column.sql for column in OPTIONAL_COLUMNS}}  # gen.core.quantities
_SESSIONS = "CREATE TABLE IF NOT EXISTS {table} (" + _PROBLEM_COLUMNS + """\
    strategy TEXT NOT NULL,
    started_at REAL NOT NULL
)"""
_TRACE = """CREATE TABLE IF NOT EXISTS trace (
    session INTEGER NOT NULL REFERENCES sessions (id),
    step INTEGER NOT NULL,
    variant TEXT NOT NULL,
    median_ms REAL,
    PRIMARY KEY (session, step)
)"""
_INDEX = ("CREATE INDEX IF NOT EXISTS by_problem ON measurements (gpu_name, gpu_cc, gpu_sm_count, gpu_memory_gib, "
          "family, dtype, shape, variant)")
# One statement each: a migration runs them inside its transaction (executescript would commit first).
_ADDED = "".join(f",\n    {name} {kind}" for name, kind in ADDED_COLUMNS["measurements"].items())
SCHEMA = (_MEASUREMENTS.format(table="measurements", added=_ADDED), _SESSIONS.format(table="sessions"), _TRACE, _INDEX)

# What tilegen 0.1 and 0.2 made: their columns, to recognise their databases (their views and
# index go in a migration).
LEGACY_TABLES = {
    "measurements": {"id", "gpu_model", "family", "dtype", "shape", "variant", "cache_config", "status", "median_ms",
                     "throughput", "cc", "driver", "nvcc", "measured_at", "row"},
    "sessions": {"id", "gpu_model", "family", "dtype", "shape", "strategy", "started_at"},
    "trace": {"session", "step", "variant", "median_ms"},
}
LEGACY_VIEWS = ("ranked", "latest")
# How 0.1 and 0.2 displayed a GPU model: a format of the past, kept to read their databases.
# A row's element type: its dtype, or for a row stored with '' (tilegen 0.2, a family without a
# dtype parameter) that family's one element type ('' where the family is not loaded here).
ELEMENT_TYPE = "CASE dtype WHEN '' THEN only_element_type(family) ELSE dtype END"


@dataclass(frozen=True)
class Layout:
    """How a database names the GPU model of its rows: the model's fields in MODEL_COLUMNS, or (a
    database of tilegen 0.1 or 0.2) its display text in `gpu_model`, each text standing for the model
    in `legacy`."""

    legacy: Mapping[str, GpuModel] | None = None

    @property
    def columns(self) -> str:
        """The columns that name the model, for SELECT and GROUP BY."""
        return "gpu_model" if self.legacy is not None else ", ".join(MODEL_COLUMNS)

    @property
    def width(self) -> int:
        return 1 if self.legacy is not None else len(MODEL_COLUMNS)

    def model(self, values: Sequence[Any]) -> GpuModel:
        """The model that the values of `columns` name."""
        return self.legacy[values[0]] if self.legacy is not None else GpuModel(*values)

    def where(self, model: GpuModel) -> tuple[str, tuple]:
        """An SQL condition (and its parameters) that holds for the rows of `model`."""
        if self.legacy is None:
            return " AND ".join(f"{column} = ?" for column in MODEL_COLUMNS), model_values(model)
        texts = tuple(text for text, found in self.legacy.items() if found == model)
        return f"gpu_model IN ({', '.join('?' * len(texts))})", texts


def model_values(model: GpuModel) -> tuple[str, str, int, int]:
    """A model's fields, in the order of MODEL_COLUMNS."""
    return (model.name, model.cc, model.sm_count, model.memory_gib)


def layout(connection: sqlite3.Connection) -> Layout:
    """How the database of `connection` names GPU models (read anew by each connection: a tune may
    migrate the file between two of them)."""
    if "gpu_model" not in _columns(connection, "measurements"):
        return Layout()
    texts = [text for (text,) in connection.execute("SELECT DISTINCT gpu_model FROM measurements")]
    return Layout({text: _legacy_model(connection, text) for text in texts})


def migrate(connection: sqlite3.Connection) -> None:
    """Make the database of `connection` this tilegen's, within the caller's transaction: tables it
    lacks are made; a database of tilegen 0.1 or 0.2 is rewritten with each display text replaced by
    the model's fields, keeping every row (the same ids: measurements are ordered by id, and the
    trace names its sessions by id)."""
    found = layout(connection)
    if found.legacy is not None:
        _migrate_legacy(connection, found.legacy)
    for statement in SCHEMA:
        connection.execute(statement)
    for table, columns in ADDED_COLUMNS.items():
        present = _columns(connection, table)
        for name, kind in columns.items():
            if name not in present:
                connection.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


def connect(path: Path, writer: bool) -> sqlite3.Connection:
    """A connection to the database file at `path`; a reader's never makes the file and cannot
    write (query_only). It is not opened read-only (mode=ro): such a connection leaves the -wal
    and -shm files of a WAL database behind, which a read-write one removes when it closes last. In
    a folder no one can write (a read-only disk), where SQLite could make no -shm file and no other
    process can change the file, a reader opens it as immutable."""
    mode, wait = ("rwc", WRITE_WAIT_S) if writer else ("rw", READ_WAIT_S)
    if not writer and not os.access(path.absolute().parent, os.W_OK):
        mode = "ro&immutable=1"
    connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode={mode}", uri=True, timeout=wait)
    if not writer:
        connection.execute("PRAGMA query_only = ON")
    connection.create_function("only_element_type", 1, _only_element_type, deterministic=True)
    return connection


@contextmanager
def database_errors(path: Path) -> Iterator[None]:
    """What SQLite reports about the file, as one line (errors of tilegen's own making pass)."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if not isinstance(error, sqlite3.OperationalError) and type(error) is not sqlite3.DatabaseError:
            raise  # an integrity or programming error: tilegen's, not the file's
        raise _database_failure(path, error) from None


def check_schema(connection: sqlite3.Connection, path: Path, create: bool) -> None:
    """Refuse a database whose tables are not tilegen's (this tilegen's, or 0.1's and 0.2's). A tune
    may add what is missing to a tilegen database; a reader needs it all."""
    found = _objects(connection)
    if not found:
        if create:
            return
        raise UsageError(f"{path} holds no tuning data; give the tuning database tune wrote")
    legacy = {name: ("table", columns) for name, columns in LEGACY_TABLES.items()}
    legacy.update({name: ("view", set()) for name in LEGACY_VIEWS})
    for expected in (_schema(), legacy):
        if "measurements" in found and all(_holds(found.get(name), kind, columns) for name, (kind, columns)
                                           in expected.items() if name in found or not create):
            return
    tables = sorted(name for name, (kind, _) in found.items() if kind == "table")
    raise UsageError(f"{path} is an SQLite database but not tilegen's (its tables: {', '.join(tables) or 'none'}); "
                     f"give another --db")


def _migrate_legacy(connection: sqlite3.Connection, models: Mapping[str, GpuModel]) -> None:
    """Rewrite measurements and sessions with the model's fields for the display text (see migrate)."""
    for view in LEGACY_VIEWS:
        connection.execute(f"DROP VIEW IF EXISTS {view}")
    connection.execute("DROP INDEX IF EXISTS by_problem")
    connection.execute("CREATE TEMP TABLE legacy_models (text TEXT PRIMARY KEY, gpu_name, gpu_cc, gpu_sm_count, "
                       "gpu_memory_gib)")
    connection.executemany("INSERT INTO temp.legacy_models VALUES (?, ?, ?, ?, ?)",
                           [(text, *model_values(model)) for text, model in models.items()])
    connection.executemany("INSERT OR IGNORE INTO temp.legacy_models VALUES (?, ?, ?, ?, ?)",
                           [(text, *model_values(_legacy_model(connection, text)))
                            for (text,) in connection.execute("SELECT DISTINCT gpu_model FROM sessions")])
    fields = ", ".join(f"g.{column}" for column in MODEL_COLUMNS)
    for table, make, kept in (("measurements", _MEASUREMENTS, LEGACY_TABLES["measurements"]),
                              ("sessions", _SESSIONS, LEGACY_TABLES["sessions"])):
        columns = ", ".join(sorted(kept - {"gpu_model"}))
        connection.execute(make.format(table=f"{table}_migrated", added=_ADDED))
        connection.execute(f"INSERT INTO {table}_migrated ({', '.join(MODEL_COLUMNS)}, {columns}) SELECT {fields}, "
                           f"{', '.join(f't.{c}' for c in sorted(kept - {'gpu_model'}))} FROM {table} AS t "
                           f"JOIN temp.legacy_models AS g ON g.text = t.gpu_model")
        connection.execute(f"DROP TABLE {table}")
        connection.execute(f"ALTER TABLE {table}_migrated RENAME TO {table}")
    connection.execute("DROP TABLE temp.legacy_models")


def _legacy_model(connection: sqlite3.Connection, text: str) -> GpuModel:
    """The model a display text of tilegen 0.1 or 0.2 stands for: the text read back, else the
    provenance of the newest of its rows that ran on a GPU, else the text as the model's name (so
    that no row is lost, though no GPU will ask for it)."""
    if found := GpuModel.from_display(text):
        return found
    query = "SELECT row FROM measurements WHERE gpu_model = ? AND cc IS NOT NULL ORDER BY id DESC"
    for (stored,) in connection.execute(query, (text,)):
        try:
            model = GpuModel.from_provenance(strict_json(stored).get("provenance", {}))
        except (ValueError, AttributeError):
            continue  # a damaged row: the readers of rows say so
        if model is not None:
            return model
    return GpuModel(text, "", 0, 0)


def _only_element_type(family: str) -> str:
    """The one element type of `family` ('' when it has several, or is not loaded here)."""
    found = registry().families.get(family)
    types = found.dtypes if found is not None else ()
    return types[0] if len(types) == 1 else ""


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


def _holds(found: tuple[str, set[str]] | None, kind: str, columns: set[str]) -> bool:
    return found is not None and found[0] == kind and columns <= found[1]


@functools.cache
def _schema() -> dict[str, tuple[str, set[str]]]:
    """The tables SCHEMA makes, with their columns, less ADDED_COLUMNS: what a tilegen database
    holds (one made before those columns too)."""
    connection = sqlite3.connect(":memory:")
    try:
        for statement in SCHEMA:
            connection.execute(statement)
        found = _objects(connection)
    finally:
        connection.close()
    return {name: (kind, columns - set(ADDED_COLUMNS.get(name, ()))) for name, (kind, columns) in found.items()}


def _objects(connection: sqlite3.Connection) -> dict[str, tuple[str, set[str]]]:
    """name -> (table or view, its columns) for every table and view of a database."""
    named = connection.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                               "AND name NOT LIKE 'sqlite_%'").fetchall()
    return {name: (kind, _columns(connection, name)) for name, kind in named}


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    quoted = table.replace('"', '""')
    return {column[1] for column in connection.execute(f'PRAGMA table_info("{quoted}")')}
