"""Result rows and where they go: an append-only JSONL file written as rows arrive, CSV at the end.

Each row is flushed the moment it is appended, so killing a run at any moment loses no finished
row; reopening a log with `resume` drops a half-written last line and remembers what is done.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Iterable

from .errors import UsageError
from .results import Row

RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"


class ResultLog:
    """DIR/results.jsonl, appended one flushed line per row."""

    def __init__(self, directory: Path, resume: bool = False,
                 advice: str = "pass --resume to continue that run, or choose another --out"):
        self.directory = Path(directory)
        self.path = self.directory / RESULTS_JSONL
        if self.path.exists() and self.path.stat().st_size and not resume:
            raise UsageError(f"{self.path} already holds results: {advice}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rows: list[Row] = read_rows(self.path, repair=True) if self.path.exists() else []
        self.done_before = len(self.rows)
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
