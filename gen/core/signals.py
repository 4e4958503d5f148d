"""The signals that stop tilegen (Ctrl-C, SIGTERM, a closed terminal's SIGHUP) and how it takes them.

This module imports nothing but the standard library's signal and threading, so the command's entry
point installs the handlers before it imports anything else: an interrupt at any moment after that
ends as one line, `tilegen: interrupted`, exit code 130. Ctrl-C and SIGTERM stop it however it
started: a script's `tilegen ... &` job starts with SIGINT ignored, set by the shell, not asked for
by anyone, and an interrupt sent to the script's process group must still stop it within seconds.
Only SIGHUP stays ignored where it was (`nohup tilegen ...`: whoever started tilegen asked for that).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

# Ctrl-C, a kill, and a closed terminal: each stops a command the same way.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
KEPT_IF_IGNORED = tuple(getattr(signal, name) for name in ("SIGHUP",) if hasattr(signal, name))  # nohup's

EXIT_INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C, SIGTERM or SIGHUP


def install_stop_handlers() -> dict[int, Any]:
    """From here on each stop signal raises StopSignal in the main thread (call it there), but a SIGHUP
    that was ignored (nohup); returns the handlers they had."""
    _Held.came = False
    return {signum: signal.signal(signum, _stop) for signum in STOP_SIGNALS
            if not (signum in KEPT_IF_IGNORED and signal.getsignal(signum) is signal.SIG_IGN)}


def stop_handlers_installed() -> bool:
    return any(signal.getsignal(signum) is _stop for signum in STOP_SIGNALS)


def stop_came() -> bool:
    """Whether a stop signal reached tilegen's handlers: a failure that follows (a library that turned
    the interrupt into an error of its own, as numpy's import does) is the interrupt's."""
    return _Held.came


class StopSignal(KeyboardInterrupt):
    """What a stop signal raises while tilegen's handlers are installed: a KeyboardInterrupt that
    no signal raised (a plugin's own code raising it) is then that code's failure, not a stop."""


class _Held:
    """Interrupts the main thread holds back while it starts a child (see `interrupts_held`)."""

    depth = 0
    pending = False
    came = False


def _stop(signum: int, frame: Any) -> None:
    _Held.came = True
    if _Held.depth:
        _Held.pending = True
        return
    raise StopSignal()


@contextmanager
def interrupts_held() -> Iterator[None]:
    """In the main thread, a stop signal that comes inside raises its KeyboardInterrupt at the end:
    by then the child started inside is known, so the interrupt can kill it. Elsewhere, nothing:
    only the main thread gets signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if not _Held.depth and _Held.pending:
            _Held.pending = False
            raise StopSignal()
