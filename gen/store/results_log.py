"""Result rows and where they go: an append-only JSONL file written as rows arrive, CSV at the end.

Each row is written whole the moment it is appended, so killing a run at any moment loses no
finished row; a row that cannot be written whole (a full disk) is taken back, and the run stops
with one line. Reopening a log with `resume` drops a half-written last line (and says so) and
keeps the rows already there (`latest`: the newest of each point); every row read is checked
field by field. Nothing is written before the first row: a run refused or failing before it
leaves the folder as it was. A run's settings are kept beside its rows (run.json), so that a
resumed run with other settings is refused, naming each difference.

Tilegen writes only in folders that are its own: a folder holding results.jsonl, results.csv or
run.json is written only when it carries tilegen's marker (.tilegen-run), written with the
folder's first row, or when its results.jsonl holds tilegen's rows (a run of tilegen 0.2, which
wrote no marker: it is given one). A folder is locked while a run writes it (FolderLock): a
second writer, or a resume of a live run, is refused, naming the process that holds it.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import io
import json
import os
import socket
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.version import __version__
from ..core.errors import RunFailed, TilegenError, UsageError
from ..core.paths import writable_folder
from ..core.results import Row, row_from_json, strict_json

RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"
RUN_JSON = "run.json"
RUN_FILES = (RESULTS_JSONL, RESULTS_CSV, RUN_JSON)  # what a run writes in its folder
RUN_MARKER = ".tilegen-run"  # says a folder is tilegen's: written with its first row
RUN_LOCK = ".tilegen-run.lock"  # there while a run writes the folder: the writer's pid and host
# A full disk, a file size limit, a failing disk: no other input would do better, so the run failed.
_NO_ROOM = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO}


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
        if self.path.exists() and not self.path.is_file():
            raise UsageError(f"{self.path} is a folder; choose another --out")
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
            _append_whole(self._fd, (row.to_json() + "\n").encode())
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
        self._size_seen = _size(self.path)
        _check_ours(self.directory, tilegen_rows=bool(self.rows))
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
                write_whole_file(settings_path, json.dumps(self.settings, indent=1) + "\n")
            if self._torn:
                _mend(self.path, self._torn)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
                if _size(self.path) != self._size_seen:
                    lock.release()  # its rows are not this run's to rewrite: results.csv stays theirs
                    raise UsageError(f"another tilegen run wrote {self.path} since this one began; run again (with "
                                     f"--resume to continue that run), or choose another --out")
                self._lock = lock
            marker = self.directory / RUN_MARKER
            if not marker.exists():
                write_whole_file(marker, f"This folder holds a run of tilegen {__version__}: tilegen writes only in "
                                          f"folders marked so.\n")
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


class FolderLock:
    """A run folder held by the run that writes it: DIR/.tilegen-run.lock, locked with flock and
    holding the writer's pid and host. Another writer is refused, naming the holder. The kernel
    drops the lock of a process that dies, so a dead run's lock is taken over; the file goes when
    the lock is released."""

    def __init__(self, directory: Path):
        self.path = directory / RUN_LOCK
        self._fd: int | None = _lock_file(self.path, directory)
        try:
            os.ftruncate(self._fd, 0)
            os.write(self._fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        except OSError:
            self.release()
            raise

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # while still locked: no one takes a file on its way out
        os.close(self._fd)
        self._fd = None


def write_failure(path: Path, error: OSError, kept: str, elsewhere: str) -> TilegenError:
    """A write that failed, in one line: a full disk (or a file size limit) is a failed run
    (RunFailed, saying what is `kept`); anything else (no permission) needs another place
    (UsageError, `elsewhere` says where)."""
    if error.errno in _NO_ROOM:
        return RunFailed(f"cannot write {path} ({error.strerror}); {kept}")
    return UsageError(f"cannot write {path} ({error.strerror}); {elsewhere}")


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


def _check_ours(directory: Path, tilegen_rows: bool) -> None:
    """Refuse a folder holding files a run writes that tilegen did not write: it has no marker,
    and no rows of tilegen's (a tilegen 0.2 run, from before the marker, is tilegen's)."""
    if tilegen_rows or (directory / RUN_MARKER).exists():
        return
    found = [name for name in RUN_FILES if (directory / name).exists()]
    if found:
        raise UsageError(f"--out {directory} holds {' and '.join(found)} that tilegen did not write (the folders "
                         f"it writes carry a {RUN_MARKER} file); choose another --out, or move them away")


def _lock_file(path: Path, directory: Path) -> int:
    """The lock file at `path`, open and locked; UsageError naming the holder when a live run holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UsageError(f"--out {directory} is being written by another tilegen run ({holder}); wait until it "
                             f"ends, or choose another --out") from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)  # its holder removed it as this run opened it: lock the file there now


def _holder(fd: int) -> str:
    """'pid 1234 on host', as the lock file's holder wrote it."""
    try:
        pid, host = os.pread(fd, 512, 0).decode(errors="replace").split()
    except (OSError, ValueError):
        return "its pid not written yet"
    return f"pid {pid} on {host}"


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _append_whole(fd: int, data: bytes) -> None:
    """Append `data` whole, or take back what was written of it: a file never ends in a torn row."""
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise


def write_whole_file(path: Path, text: str) -> None:
    """Write a file whole or leave what was there: through a temporary file moved into place."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "w", newline="", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _mend(path: Path, torn: bytes) -> None:
    """End a torn file on a newline: a whole last row gets one, a half-written one goes."""
    with open(path, "r+b") as handle:
        if _parses(torn):
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
        else:
            handle.truncate(handle.seek(0, os.SEEK_END) - len(torn))


def write_csv(rows: Iterable[Row], path: Path) -> None:
    """`path` with every row, written whole or not at all."""
    flat = [row.flat() for row in rows]
    columns: list[str] = []
    for entry in flat:
        columns.extend(k for k in entry if k not in columns)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(flat)
    write_whole_file(path, text.getvalue())


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False
