"""Lines appended whole or taken back, and a failed write said in one line (a full disk is a failed
run; anything else needs another place). A whole file is written by gen.core.own_files.write_atomically."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..core.errors import TilegenError, path_failure


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
