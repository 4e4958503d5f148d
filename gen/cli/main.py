"""The `tilegen` command. Bad input ends with one line on stderr and exit code 2, no traceback; a
run that cannot finish (a tool that fails twice, a full disk) with one line and exit code 1;
Ctrl-C, SIGTERM or a closed terminal (SIGHUP) stops any command within seconds, keeps what finished
and says so (exit 130). The entry point, gen.cli.entry, handles those signals before this module loads."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from typing import Any, Sequence

from ..core.errors import EXIT_USAGE, TilegenError, path_failure
from ..core.signals import EXIT_INTERRUPTED, install_stop_handlers, stop_came
from ..families.plugin_checks import one_line
from ..families.registry import add_family_path, is_plugin_code
from .parser import build_parser

DEBUG_ENV = "TILEGEN_DEBUG"  # set: an unexpected error shows its traceback


def main(argv: Sequence[str] | None = None) -> int:
    _printable_streams()
    previous: dict[int, Any] = {}
    try:
        if _main_thread():
            previous = install_stop_handlers()
        args = build_parser().parse_args(argv)
        for folder in [*args.family_path, *args.family_path_after]:
            add_family_path(folder)
        return args.handler(args) or 0
    except TilegenError as error:
        _say(f"tilegen: error: {error}")
        return error.exit_code
    except KeyboardInterrupt as stop:
        _say(f"tilegen: interrupted{f': {stop}' if str(stop) else ''}")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tilegen compile ... | head`: the reader has gone, and that is fine
        sys.stdout = None  # nothing more can be written there, not even at exit
        return 0
    except OSError as error:  # a file-system fault on a path no other part of tilegen said in words
        if error.filename is None or os.environ.get(DEBUG_ENV):
            return _unexpected_error(error)
        failure = path_failure(error)
        _say(f"tilegen: error: {failure}")
        return failure.exit_code
    except Exception as error:  # noqa: BLE001 - what no part of tilegen expected still ends in one line
        if stop_came():  # a library that took the interrupt for a failure of its own (numpy's import)
            _say("tilegen: interrupted")
            return EXIT_INTERRUPTED
        return _unexpected_error(error)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _unexpected_error(error: Exception) -> int:
    if os.environ.get(DEBUG_ENV):
        raise error
    message, code = unexpected(error)
    _say(f"tilegen: {message}")
    return code


def unexpected(error: BaseException) -> tuple[str, int]:
    """One line and an exit code for an error no part of tilegen expected: raised in a family's own
    code (a plugin's module or a helper beside it: exit 2, the user can fix it) or in tilegen's
    (exit 1: a bug to report)."""
    text = one_line(error)
    frames = traceback.extract_tb(error.__traceback__)
    culprit = next((frame for frame in reversed(frames) if is_plugin_code(frame.filename)), None)
    if culprit is not None:
        return f"error: {culprit.filename}:{culprit.lineno}: {text} (in a family's own code; fix it there)", EXIT_USAGE
    return f"internal error: {text}; please report it (set {DEBUG_ENV}=1 to see where it happened)", 1


def _say(line: str) -> None:
    """The command's last word, on stderr; after a closed terminal (SIGHUP) there may be none to say it on."""
    try:
        print(line, file=sys.stderr)
    except OSError:
        pass


def _printable_streams() -> None:
    """Messages and tables name the user's paths and values, which the terminal's encoding may
    not hold (PYTHONIOENCODING=ascii, a non-ASCII --out): such characters print as escapes
    (\\xe9) instead of ending the command with a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    sys.exit(main())
