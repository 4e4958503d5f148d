"""Results in the auto-tuning community's T4 format (the Open Autotuning Results Schema used by
Kernel Tuner: https://github.com/odgaard/TuningSchema, results-schema.json, version 1.0.0).
The schema names no energy fields; a row's measured quantities (gen.core.quantities: its energy in
joules per launch, its average power, its SM clock) are measurements named as Kernel Tuner's observers
name them; one Kernel Tuner has no name for (the throttle reasons) is left out.

An export writes over a T4 file tilegen wrote; another existing file only with `force`, and
never an SQLite database or a run's results, even then. The file is written whole or not at all.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..core.own_files import write_atomically
from ..core.version import __version__
from ..core.errors import UsageError
from ..core.paths import writable_file
from ..core.quantities import OPTIONAL_COLUMNS, TIME, Column
from ..core.results import FULL_LEVEL, Row, Status
from .files import write_failure
from .run_folder import RUN_FILES, RUN_MARKER

T4_VERSION = "1.0.0"
SQLITE_HEADER = b"SQLite format 3\0"
# How every T4 file tilegen writes begins (t4_document's first keys, json.dumps' layout).
_TILEGEN_T4 = re.compile(rb'\A\{\s*"schema_version":\s*"[^"]*",\s*"metadata":\s*\{\s*"tool":\s*"tilegen ')
# tilegen's statuses as T4 invalidity kinds; "correct" marks a valid, correct measurement.
INVALIDITY = {Status.OK: "correct", Status.WRONG: "correctness", Status.RACY: "correctness",
              Status.COMPILE_ERROR: "compile", Status.LAUNCH_ERROR: "runtime", Status.TIMEOUT: "timeout",
              Status.SKIPPED: "constraints", Status.COMPILED: "runtime"}
_SQLITE_COMPANION = re.compile(r"-(?:wal|shm|journal)$")  # what SQLite keeps beside a database


def t4_document(rows: Iterable[Row]) -> dict[str, Any]:
    rows = list(rows)
    problems = sorted({(r.family, r.shape, r.provenance.get("gpu_model", "")) for r in rows})
    return {
        "schema_version": T4_VERSION,
        "metadata": {"tool": f"tilegen {__version__}",
                     "problems": [{"family": f, "shape": s, "gpu": g} for f, s, g in problems]},
        "results": [t4_result(row, several=len(problems) > 1) for row in rows],
    }


def t4_result(row: Row, several: bool = False) -> dict[str, Any]:
    configuration = dict(row.params)
    if several:  # one file holding several problems: say which each result belongs to
        configuration.update(family=row.family, shape=row.shape, gpu=row.provenance.get("gpu_model", ""))
    if row.level != FULL_LEVEL:  # a tune's screening row: not the same measurement as the full one
        configuration.update(compile_level=row.level)
    result: dict[str, Any] = {
        "timestamp": row.provenance.get("measured_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
        "configuration": configuration,
        "objectives": ["time"],
        "times": {"compilation_time": row.compile_seconds or 0.0, "runtimes": _runtimes(row)},
        "invalidity": INVALIDITY[row.status],
        "correctness": 1 if row.status == Status.OK else 0,
        "measurements": [],
    }
    if row.median_ms is not None:
        result["measurements"] = [_measurement(TIME, row.median_ms)]
        if row.throughput is not None:
            result["measurements"].append({"name": row.unit, "value": row.throughput, "unit": row.unit})
    result["measurements"] += [_measurement(column, value) for column in OPTIONAL_COLUMNS
                               if column.observer and (value := getattr(row, column.field)) is not None]
    return result


def _measurement(column: Column, value: float) -> dict[str, Any]:
    return {"name": column.observer, "value": value, "unit": column.unit}


def write_t4(rows: Iterable[Row], path: Path, force: bool = False) -> int:
    """Write the rows to `path` as T4 (see checked_t4_path for what may be written over); how many."""
    path = checked_t4_path(path, force)
    document = t4_document(rows)
    try:
        write_atomically(path, json.dumps(document, indent=1).encode())
    except OSError as error:
        raise write_failure(path, error, f"{path} is as it was; make room, then export again",
                            "give another file") from None
    return len(document["results"])


def checked_t4_path(path: Path, force: bool = False) -> Path:
    """`path` if an export may write it: a new file, a T4 file tilegen wrote, or with `force` any
    other file but an SQLite database or a run's results. UsageError otherwise; writes nothing."""
    path = writable_file(path, "--t4")
    if not path.exists():
        return path
    if (kept := _never_overwritten(path)) is not None:
        raise UsageError(f"--t4 {path} is {kept}; tilegen never writes over it, even with --force: give another file")
    if not force and not _TILEGEN_T4.match(_head(path)):
        raise UsageError(f"--t4 {path} exists and is not a T4 file tilegen wrote; give another file, or pass --force "
                         f"to replace it")
    return path


def _never_overwritten(path: Path) -> str | None:
    """What the file at `path` is, when an export must never write over it."""
    if path.name in RUN_FILES or (path.parent / RUN_MARKER).exists():
        return "a file of a tilegen run"
    if _head(path).startswith(SQLITE_HEADER):
        return "an SQLite database"
    database = path.with_name(_SQLITE_COMPANION.sub("", path.name))
    if database != path and database.is_file() and _head(database).startswith(SQLITE_HEADER):
        return f"the journal of the SQLite database {database}"
    return None


def _head(path: Path, size: int = 4096) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError as error:
        raise UsageError(f"cannot read --t4 {path} ({error.strerror}); give another file") from None


def _runtimes(row: Row) -> list[float]:
    return [row.median_ms] if row.median_ms is not None else []


@dataclass(frozen=True)
class Exporter:
    """A format `tilegen export --NAME FILE` writes the tuning database's rows in (see EXPORTERS)."""

    help: str  # what FILE holds
    check: Callable[[Path, bool], Path]  # FILE, if it may be written (over another file with --force); else UsageError
    write: Callable[[Iterable[Row], Path, bool], int]  # FILE written whole or not at all; how many results it holds


# The one table of export formats: `tilegen export` offers one --NAME FILE per entry, and nothing
# else names a format.
EXPORTERS = {"t4": Exporter("write T4 JSON (the Open Autotuning Results Schema)", checked_t4_path, write_t4)}
