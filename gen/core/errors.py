"""Errors meant for people: each message is one line saying what is wrong and how to fix it."""

import errno


EXIT_USAGE = 2  # bad input: the user can fix it


class TilegenError(Exception):
    """Base of every error the command line reports as one line: exit code 2 (bad input), or
    `exit_code` where a subclass says otherwise."""

    exit_code = EXIT_USAGE


class UsageError(TilegenError, ValueError):
    """Bad input: an unknown parameter, a malformed value or size, a missing file."""


class InvalidVariant(TilegenError, ValueError):
    """A variant that breaks a rule or a CUDA limit; the message names parameter, value and limit."""


class ToolMissing(TilegenError):
    """A program tilegen needs (nvcc, compute-sanitizer) is not installed or not on PATH."""


class TemplateProblem(TilegenError):
    """A template failed to load or render; the message names the template file and line."""


class RunFailed(TilegenError):
    """A run that could not finish through no fault of its input (a tool crashed or hung, the disk
    is full): one line, exit code 1. What was recorded before it stays."""

    exit_code = 1


class Interrupted(Exception):
    """The run is stopping (Ctrl-C, SIGTERM): work in progress is dropped, never recorded."""


class RunInterrupted(KeyboardInterrupt):
    """A long command stopped by Ctrl-C or SIGTERM; the message says what was kept and how to go on."""


# A path that cannot serve as given (read-only, not permitted, a file where a folder must be, a link
# loop, a name too long): the user gives another.
WRONG_PLACE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ELOOP,
                         errno.ENAMETOOLONG, errno.EEXIST, errno.ENOENT, errno.ENOTEMPTY, errno.EXDEV})


def path_failure(error: OSError, path: object = None, doing: str = "use", kept: str = "",
                 elsewhere: str = "") -> TilegenError:
    """The one line for a file-system error on a path: what failed (`doing` the path, the error in
    words) and what to do. A full disk or a failing one is a failed run (RunFailed, exit 1, saying
    what is `kept`); a path that cannot serve is bad input (UsageError, exit 2, `elsewhere` says where
    to go instead); any other error is a fault of the machine (RunFailed)."""
    path = path if path is not None else error.filename
    said = f"cannot {doing} {path} ({error.strerror or error})"
    if error.errno in WRONG_PLACE:
        return UsageError(f"{said}; {elsewhere or 'check that path, or give another'}")
    return RunFailed(f"{said}; {kept or 'make room there, or fix what the error names, then run again'}")
