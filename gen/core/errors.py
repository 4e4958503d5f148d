"""Errors meant for people: each message is one line saying what is wrong and how to fix it."""


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
