"""Files written whole or not at all: a file replaced through a temporary one, a line appended
whole or taken back, and a failed write said in one line (a full disk is a failed run; anything
else needs another place)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from ..core.errors import RunFailed, TilegenError, UsageError

# A full disk, a file size limit, a failing disk: no other input would do better, so the run failed.
_NO_ROOM = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO}


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
    """A write that failed, in one line: a full disk (or a file size limit) is a failed run
    (RunFailed, saying what is `kept`); anything else (no permission) needs another place
    (UsageError, `elsewhere` says where)."""
    if error.errno in _NO_ROOM:
        return RunFailed(f"cannot write {path} ({error.strerror}); {kept}")
    return UsageError(f"cannot write {path} ({error.strerror}); {elsewhere}")
