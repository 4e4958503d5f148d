"""Files written whole or not at all: a file replaced through a temporary one, a line appended
whole or taken back, and a failed write said in one line (a full disk is a failed run; anything
else needs another place)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..core.errors import TilegenError, path_failure
from ..core.own_files import write_atomically


def write_whole_file(path: Path, text: str) -> None:
    """Write a file whole or leave what was there (core.own_files.write_atomically)."""
    write_atomically(path, text.encode("utf-8"))


def append_whole(fd: int, data: bytes) -> None:
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


def write_failure(path: Path, error: OSError, kept: str, elsewhere: str) -> TilegenError:
    """A write that failed, in one line (core.errors.path_failure): a full disk is a failed run
    that says what is `kept`; a place that cannot be written needs another (`elsewhere`)."""
    return path_failure(error, path, "write", kept, elsewhere)
