"""Result rows and where they go: an append-only JSONL file written as rows arrive, CSV at the end.

Each row is written whole the moment it is appended, so killing a run at any moment loses no
finished row; a row that cannot be written whole (a full disk) is taken back, and the run stops
with one line. Reopening a log with `resume` drops a half-written last line (and says so) and
keeps the rows already there (`latest`: the newest of each point); every row read is checked
field by field. Nothing is written before the first row: a run refused or failing before it
leaves the folder as it was. A run's settings are kept beside its rows (run.json), so that a
resumed run with other settings is refused, naming each difference.

The folder itself (the names of its files, the marker that says it is tilegen's, the lock held
while a run writes it) is run_folder's; writing files whole is files'.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.errors import TilegenError, UsageError
from ..core.own_files import open_own, refuse_other_kind, size_of, write_atomically
from ..core.paths import writable_folder
from ..core.checks import strict_json
from ..core.results import Row, row_from_json
from .files import append_whole, write_failure
from .run_folder import RESULTS_CSV, RESULTS_JSONL, RUN_JSON, RUN_LOCK, RUN_MARKER, FolderLock, check_ours, mark

# The run folder's file names are importable from here too, as before the folder had its module.
__all__ = ["RESULTS_CSV", "RESULTS_JSONL", "RUN_JSON", "RUN_LOCK", "RUN_MARKER", "ResultLog", "latest", "read_rows",
           "stored_settings", "write_csv"]


class ResultLog:
    """DIR/results.jsonl, appended one whole line per row. `settings` (sweeps): what the run is,
    kept in DIR/run.json; a resumed run must have the same. `again`: how to go on after a run
    that stopped (a full disk). The folder is locked from the moment it is there to lock until
    `close`."""

    def __init__(self, directory: Path, resume: bool = False,
                 advice: str = "pass --resume to continue that run, or choose another --out",
                 settings: Mapping[str, Any] | None = None,
                 again: str = "run the same sweep with --resume to go on"):
        self.directory = writable_folder(directory, "--out")
        self.path = self.directory / RESULTS_JSONL
        self.settings = None if settings is None else json.loads(json.dumps(settings))
        self.again = again
        self.notes: list[str] = []  # what a resumed run should be told (a dropped half-written line)
        self._fd: int | None = None  # results.jsonl, open for appending once the first row comes
        self._claimed = False  # the folder is made, locked and marked: it may be written
        self._failed = False  # a write failed: nothing more is written
        self.rows: list[Row] = []
        self._torn = b""
        for name in (RESULTS_JSONL, RUN_JSON, RESULTS_CSV, RUN_MARKER, RUN_LOCK):  # the files a run writes
            refuse_other_kind(self.directory / name, "--out's")
        self._lock = self._locked() if self.directory.is_dir() else None  # before reading: no one writes
        try:
            self._read_folder(resume, advice)
        except BaseException:
            self.close()
            raise

    def append(self, row: Row) -> None:
        """Write the row whole, or not at all (RunFailed or UsageError when it cannot be written)."""
        if self._fd is None:
            self._open()
        try:
            append_whole(self._fd, (row.to_json() + "\n").encode())
        except OSError as error:
            raise self._failure(error) from None
        self.rows.append(row)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "ResultLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def finish(self) -> Path | None:
        """After the run (or when it stops): a torn last line that no row followed is dropped now,
        and results.csv is written. Nothing, after a failed write or where the run never wrote."""
        if self._failed or self._lock is None:
            return None
        if self._torn and self._fd is None:
            self._claim()
            try:
                _mend(self.path, self._torn)
            except OSError as error:
                raise self._failure(error) from None
            self._torn = b""
        return self.write_csv()

    def write_csv(self) -> Path | None:
        """DIR/results.csv with every row; None when there is no row to write."""
        if not self.rows:
            return None
        self._claim()
        path = self.directory / RESULTS_CSV
        try:
            write_csv(self.rows, path)
        except OSError as error:
            raise self._failure(error, path) from None
        return path

    def _read_folder(self, resume: bool, advice: str) -> None:
        """The rows a resumed run continues, each checked; a folder that is not tilegen's refused."""
        held = self.path.exists() and self.path.stat().st_size > 0
        if held and not resume:
            raise UsageError(f"{self.path} already holds results: {advice}")
        self.rows, self._torn = _read(self.path) if held else ([], b"")
        self._size_seen = size_of(self.path)
        check_ours(self.directory, tilegen_rows=bool(self.rows))
        if held and self.settings is not None:
            _check_same_run(self.directory, self.rows, self.settings)
        if self._torn and not _parses(self._torn):
            self.notes.append(f"the last line of {self.path} was cut short ({len(self._torn)} bytes, a killed run's): "
                              f"it is dropped, and its point runs again")
        self.done_before = len(self.rows)

    def _open(self) -> None:
        """Before the first row: the folder, the run's settings, and a mended last line."""
        self._claim()
        try:
            settings_path = self.directory / RUN_JSON
            if self.settings is not None and (not self.done_before or not settings_path.exists()):
                write_atomically(settings_path, (json.dumps(self.settings, indent=1) + "\n").encode())
            if self._torn:
                _mend(self.path, self._torn)
            self._fd = open_own(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "--out's")
        except OSError as error:
            raise self._failure(error) from None

    def _claim(self) -> None:
        """Make the folder tilegen's before writing in it: made, locked (if it was not there to
        lock before) and marked. A run that wrote here since this log was opened is refused."""
        if self._claimed:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if self._lock is None:
                lock = self._locked()
                if size_of(self.path) != self._size_seen:
                    lock.release()  # its rows are not this run's to rewrite: results.csv stays theirs
                    raise UsageError(f"another tilegen run wrote {self.path} since this one began; run again (with "
                                     f"--resume to continue that run), or choose another --out")
                self._lock = lock
            mark(self.directory)
        except OSError as error:
            raise self._failure(error) from None
        self._claimed = True

    def _locked(self) -> "FolderLock":
        try:
            return FolderLock(self.directory)
        except OSError as error:
            raise self._failure(error, self.directory / RUN_LOCK) from None

    def _failure(self, error: OSError, path: Path | None = None) -> TilegenError:
        """A write that failed, in one line; nothing more is written."""
        self._failed = True
        kept = f"the {len(self.rows)} rows before it are kept; make room, then {self.again}" if self.rows else \
            "nothing was recorded; make room, then run it again"
        return write_failure(path or self.path, error, kept, "choose another --out")


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
        settings = strict_json(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path} is not a run's settings ({error}); remove it, or choose another --out") from None
    if not isinstance(settings, dict):
        raise UsageError(f"{path} is not a run's settings (not a JSON object); remove it, or choose another --out")
    if "--cache" in settings:  # tilegen 0.2 named --cache-config so
        settings["--cache-config"] = settings.pop("--cache")
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
                rows.append(row_from_json(line))
            except ValueError as error:
                raise UsageError(f"{path}:{number} is not a result row ({error}); fix or remove that line") from None
    return rows, torn




def _mend(path: Path, torn: bytes) -> None:
    """End a torn file on a newline: a whole last row gets one, a half-written one goes."""
    with os.fdopen(open_own(path, os.O_RDWR, "--out's"), "r+b") as handle:
        if _parses(torn):
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
        else:
            handle.truncate(handle.seek(0, os.SEEK_END) - len(torn))


def write_csv(rows: Iterable[Row], path: Path) -> None:
    """`path` with every row, written whole or not at all."""
    flat = [row.flat() for row in rows]
    columns = list(dict.fromkeys(k for entry in flat for k in entry))  # each in the order it first comes
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(flat)
    write_atomically(path, text.getvalue().encode())


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False
