"""Files tilegen writes or locks, opened only as tilegen made them: never through a symbolic link it
did not make, and never a folder, device or pipe where a file should be. `open_own` is the one way
in; `write_atomically` writes a file whole, through a temporary file of its own moved into place
(a reader never sees half a file, and a link at the path is replaced, not followed)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from .errors import UsageError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a pipe"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def open_own(path: Path, flags: int, what: str, mode: int = 0o644) -> int:
    """`path` opened with `flags` (os.O_*), not following a link: UsageError naming `what` (the file's
    role: 'the run folder's lock') when it is a link, a folder, a device or a pipe; OSError otherwise."""
    refuse_other_kind(path, what)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # made between the check and the open
            refuse_other_kind(path, what)
        raise
    try:
        kind = other_kind(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if kind:
        os.close(fd)
        raise UsageError(_refusal(path, what, kind))
    os.set_blocking(fd, True)
    return fd


def refuse_other_kind(path: Path, what: str) -> None:
    """UsageError when `path` is there and is not a plain file (a link is not followed)."""
    try:
        found = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if kind := other_kind(found):
        raise UsageError(_refusal(path, what, kind))


def other_kind(mode: int) -> str | None:
    """What a file of this mode is, in words, when it is not a plain file; None when it is."""
    return next((kind for test, kind in _KINDS if test(mode)), None)


def _umask() -> int:
    """The process's umask, read once at import (reading it sets it, which threads must not race)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()


def size_of(path: Path) -> int:
    """A file's size in bytes; 0 when it is not there (yet, or any more)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def write_atomically(path: Path, data: bytes) -> None:
    """Write `path` whole or leave what was there: a temporary file beside it (created anew, so never
    through a link) moved into place; the temporary is removed when the write fails."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        os.fchmod(handle, 0o666 & ~UMASK)  # mkstemp's 0600 would hide results a plain open() shares
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _refusal(path: Path, what: str, kind: str) -> str:
    return (f"{what} {path} is {kind}, not a file tilegen made; tilegen writes no file through it: remove it, or "
            f"choose another place")
