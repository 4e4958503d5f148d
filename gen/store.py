"""Result rows and where they go: an append-only JSONL file written as rows arrive, CSV at the end.

Each row is flushed the moment it is appended, so killing a run at any moment loses no finished
row; reopening a log with `resume` drops a half-written last line (and says so) and keeps the
rows already there (`latest`: the newest of each point). Nothing is written before the first
row: a run refused or failing before it leaves the folder as it was. A run's settings are kept
beside its rows (run.json), so that a resumed run with other settings is refused, naming each
difference.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import UsageError
from .paths import writable_folder
from .results import Row

RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"
RUN_JSON = "run.json"


class ResultLog:
    """DIR/results.jsonl, appended one flushed line per row. `settings` (sweeps): what the run is,
    kept in DIR/run.json; a resumed run must have the same."""

    def __init__(self, directory: Path, resume: bool = False,
                 advice: str = "pass --resume to continue that run, or choose another --out",
                 settings: Mapping[str, Any] | None = None):
        self.directory = writable_folder(directory, "--out")
        self.path = self.directory / RESULTS_JSONL
        self.settings = None if settings is None else json.loads(json.dumps(settings))
        self.notes: list[str] = []  # what a resumed run should be told (a dropped half-written line)
        if self.path.exists() and not self.path.is_file():
            raise UsageError(f"{self.path} is a folder; choose another --out")
        held = self.path.exists() and self.path.stat().st_size > 0
        if held and not resume:
            raise UsageError(f"{self.path} already holds results: {advice}")
        self.rows, self._torn = _read(self.path) if held else ([], b"")
        if held and self.settings is not None:
            _check_same_run(self.directory, self.rows, self.settings)
        if self._torn and not _parses(self._torn):
            self.notes.append(f"the last line of {self.path} was cut short ({len(self._torn)} bytes, a killed run's): "
                              f"it is dropped, and its point runs again")
        self.done_before = len(self.rows)
        self._file: Any = None

    def append(self, row: Row) -> None:
        if self._file is None:
            self._open()
        self._file.write(row.to_json() + "\n")
        self._file.flush()
        self.rows.append(row)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> "ResultLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def finish(self) -> Path | None:
        """After the run (or when it stops): a torn last line that no row followed is dropped now,
        and results.csv is written."""
        if self._torn and self._file is None:
            try:
                _mend(self.path, self._torn)
            except OSError as error:
                raise UsageError(f"cannot write {self.path} ({error.strerror}); choose another --out") from None
            self._torn = b""
        return self.write_csv()

    def write_csv(self) -> Path | None:
        """DIR/results.csv with every row; None when there is no row to write."""
        if self._file is None and not self.rows:
            return None
        path = self.directory / RESULTS_CSV
        try:
            write_csv(self.rows, path)
        except OSError as error:
            raise UsageError(f"cannot write {path} ({error.strerror}); choose another --out") from None
        return path

    def _open(self) -> None:
        """Before the first row: the folder, the run's settings, and a mended last line."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            settings_path = self.directory / RUN_JSON
            if self.settings is not None and (not self.done_before or not settings_path.exists()):
                settings_path.write_text(json.dumps(self.settings, indent=1) + "\n")
            if self._torn:
                _mend(self.path, self._torn)
            self._file = open(self.path, "a", encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write {self.path} ({error.strerror}); choose another --out") from None


def read_rows(path: Path) -> list[Row]:
    """Every complete row of a JSONL file. A last line without its newline was cut short by a
    kill: it is dropped when it is not whole JSON (ResultLog mends the file before appending)."""
    return _read(Path(path))[0]


def latest(rows: Iterable[Row]) -> list[Row]:
    """The newest row of each point (its key), in the order the points first appear: a resumed
    sweep appends a second row for a point that had only compiled."""
    newest: dict[str, Row] = {}
    for row in rows:
        newest[row.key] = row
    return list(newest.values())


def stored_settings(directory: Path) -> dict[str, Any] | None:
    """The settings a run in `directory` was made with (None: none kept, an older tilegen's run)."""
    path = Path(directory) / RUN_JSON
    if not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path} is not a run's settings ({error}); remove it, or choose another --out") from None
    if not isinstance(settings, dict):
        raise UsageError(f"{path} is not a run's settings (not a JSON object); remove it, or choose another --out")
    return settings


def _check_same_run(directory: Path, rows: list[Row], settings: dict[str, Any]) -> None:
    """Refuse to resume a run made with other settings, naming each difference."""
    stored = stored_settings(directory)
    if stored is None:  # an older tilegen kept no settings: the rows still say which family
        families = sorted({row.family for row in rows})
        stored = {"family": families[0]} if len(families) == 1 else {}
    differences = [f"{key} {_shown(settings.get(key))} (the run has {_shown(value)})"
                   for key, value in stored.items() if settings.get(key) != value]
    if differences:
        raise UsageError(f"--resume with other settings than the run in {directory}: {'; '.join(differences)}; "
                         f"resume with the run's own settings, or choose another --out")


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "(none)" if value is None else str(value)


def _read(path: Path) -> tuple[list[Row], bytes]:
    """The rows of a JSONL file, and its last line when that has no newline (b'' when it has)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path} ({error.strerror})") from None
    lines = data.split(b"\n")
    torn = lines.pop()  # empty when the file ends with a newline, as it should
    if torn and _parses(torn):
        lines.append(torn)
    rows = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                rows.append(Row.from_dict(json.loads(line)))
            except (ValueError, TypeError) as error:
                raise UsageError(f"{path}:{number} is not a result row ({error}); fix or remove that line") from None
    return rows, torn


def _mend(path: Path, torn: bytes) -> None:
    """End a torn file on a newline: a whole last row gets one, a half-written one goes."""
    with open(path, "r+b") as handle:
        if _parses(torn):
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
        else:
            handle.truncate(handle.seek(0, os.SEEK_END) - len(torn))


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
