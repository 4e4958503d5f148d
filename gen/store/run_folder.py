"""A run's folder: the files a run writes there, the marker that says the folder is tilegen's, and
the lock held while a run writes it.

Tilegen writes only in folders that are its own: a folder holding results.jsonl, results.csv or
run.json is written only when it carries tilegen's marker (.tilegen-run), written with the
folder's first row, or when its results.jsonl holds tilegen's rows (a run of tilegen 0.2, which
wrote no marker: it is given one). A folder is locked while a run writes it (FolderLock): a
second writer, or a resume of a live run, is refused, naming the process that holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from ..core.errors import UsageError
from ..core.own_files import open_own, write_atomically
from ..core.version import __version__

RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"
RUN_JSON = "run.json"
RUN_FILES = (RESULTS_JSONL, RESULTS_CSV, RUN_JSON)  # what a run writes in its folder
RUN_MARKER = ".tilegen-run"  # says a folder is tilegen's: written with its first row
RUN_LOCK = ".tilegen-run.lock"  # there while a run writes the folder: the writer's pid and host


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


def check_ours(directory: Path, tilegen_rows: bool) -> None:
    """Refuse a folder holding files a run writes that tilegen did not write: it has no marker,
    and no rows of tilegen's (a tilegen 0.2 run, from before the marker, is tilegen's)."""
    if tilegen_rows or (directory / RUN_MARKER).exists():
        return
    found = [name for name in RUN_FILES if (directory / name).exists()]
    if found:
        raise UsageError(f"--out {directory} holds {' and '.join(found)} that tilegen did not write (the folders "
                         f"it writes carry a {RUN_MARKER} file); choose another --out, or move them away")


def mark(directory: Path) -> None:
    """Mark the folder as tilegen's (OSError when the marker cannot be written)."""
    marker = directory / RUN_MARKER
    if not marker.exists():
        write_atomically(marker, f"This folder holds a run of tilegen {__version__}: tilegen writes only in "
                                 f"folders marked so.\n".encode())


def _lock_file(path: Path, directory: Path) -> int:
    """The lock file at `path`, open and locked; UsageError naming the holder when a live run holds it."""
    while True:
        fd = open_own(path, os.O_RDWR | os.O_CREAT, "the run folder's lock")
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
