"""Result rows and where they go: an append-only JSONL file written as rows arrive, CSV at the end.

Each row is flushed the moment it is appended, so killing a run at any moment loses no finished
row; reopening a log with `resume` drops a half-written last line and remembers what is done.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterable

from .compiler import Compiled
from .errors import UsageError
from .variant import Variant

RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"


class Status(StrEnum):
    OK = "ok"
    WRONG = "wrong"
    RACY = "racy"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"
    COMPILED = "compiled"


@dataclass
class Row:
    """One variant on one problem (or, for compile-only runs, one variant)."""

    name: str
    family: str
    params: dict[str, Any]
    status: Status
    shape: str = ""
    cache_config: str = ""  # run-time cache preference ("" when not set)
    message: str = ""  # why skipped, the error, or the compile log of a failure
    # resources, from ptxas
    registers: int | None = None
    static_shared_bytes: int | None = None
    dynamic_shared_bytes: int | None = None
    spill_bytes: int | None = None
    stack_bytes: int | None = None
    compile_seconds: float | None = None
    measure_seconds: float | None = None  # checking and timing on the GPU
    # correctness
    error: float | None = None  # worst ||out - ref|| / ||ref|| over the checks
    tolerance: float | None = None
    checks: int | None = None
    hazards: dict[str, int] | None = None  # compute-sanitizer tool -> hazards found
    # timing, milliseconds per launch
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    stdev_ms: float | None = None
    samples: int | None = None
    l2_flushed: bool | None = None
    throughput: float | None = None
    unit: str = ""
    ceiling: float | None = None  # the measured ceiling throughput is compared with, same unit
    ceiling_share: float | None = None
    # provenance
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """What identifies the row in a run: variant, problem and cache preference."""
        return row_key(self.name, self.shape, self.cache_config)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Row":
        known = {f.name for f in dataclasses.fields(cls)}
        row = cls(**{k: v for k, v in data.items() if k in known})
        row.status = Status(row.status)
        return row

    def flat(self) -> dict[str, Any]:
        """One level of keys, for CSV: params become param_<name>, provenance its own keys."""
        data = dataclasses.asdict(self)
        params, provenance, hazards = data.pop("params"), data.pop("provenance"), data.pop("hazards")
        data.update({f"param_{k}": v for k, v in params.items()})
        data.update({f"hazards_{k}": v for k, v in (hazards or {}).items()})
        data.update(provenance)
        return data


def skipped_row(variant: Variant, reason: str, shape: str = "", **extra: Any) -> Row:
    return Row(variant.name, variant.family, variant.params(), Status.SKIPPED, shape=shape, message=reason, **extra)


def compiled_row(compiled: Compiled, shape: str = "", **extra: Any) -> Row:
    """A row with the compile outcome and resources; later stages fill in the rest."""
    variant = compiled.variant
    row = Row(variant.name, variant.family, variant.params(),
              Status.COMPILED if compiled.ok else Status.COMPILE_ERROR, shape=shape,
              message="" if compiled.ok else compiled.log.strip(), compile_seconds=compiled.seconds,
              dynamic_shared_bytes=variant.dynamic_shared_bytes, **extra)
    if compiled.resources:
        row.registers = compiled.resources.registers
        row.static_shared_bytes = compiled.resources.static_shared_bytes
        row.spill_bytes = compiled.resources.spill_bytes
        row.stack_bytes = compiled.resources.stack_bytes
    return row


def row_key(name: str, shape: str, cache_config: str = "") -> str:
    return "@".join(part for part in (name, shape, cache_config) if part)


class ResultLog:
    """DIR/results.jsonl, appended one flushed line per row."""

    def __init__(self, directory: Path, resume: bool = False):
        self.directory = Path(directory)
        self.path = self.directory / RESULTS_JSONL
        if self.path.exists() and self.path.stat().st_size and not resume:
            raise UsageError(f"{self.path} already holds results: pass --resume to continue that run, "
                             f"or choose another --out")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rows: list[Row] = read_rows(self.path, repair=True) if self.path.exists() else []
        self._file = open(self.path, "a", encoding="utf-8")

    @property
    def done(self) -> set[str]:
        return {row.key for row in self.rows}

    def append(self, row: Row) -> None:
        self._file.write(row.to_json() + "\n")
        self._file.flush()
        self.rows.append(row)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "ResultLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_csv(self) -> Path:
        path = self.directory / RESULTS_CSV
        write_csv(self.rows, path)
        return path


def read_rows(path: Path, repair: bool = False) -> list[Row]:
    """Every complete row of a JSONL file. A last line without its newline was cut short by a
    kill: it is dropped when it is not whole JSON, and `repair` mends the file so that the next
    append starts on a fresh line."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    last = lines.pop()  # empty when the file ends with a newline, as it should
    if last and _parses(last):
        lines.append(last)
    if last and repair:
        with open(path, "r+b") as handle:
            if _parses(last):
                handle.seek(0, os.SEEK_END)
                handle.write(b"\n")
            else:
                handle.truncate(len(data) - len(last))
    rows = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                rows.append(Row.from_dict(json.loads(line)))
            except (ValueError, TypeError) as error:
                raise UsageError(f"{path}:{number} is not a result row ({error}); fix or remove that line") from None
    return rows


def write_csv(rows: Iterable[Row], path: Path) -> None:
    flat = [row.flat() for row in rows]
    columns: list[str] = []
    for entry in flat:
        columns.extend(k for k in entry if k not in columns)
    temporary = path.with_suffix(".csv.tmp")
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
    os.replace(temporary, path)


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False
