"""The `tilegen` command's entry point (and `python -m gen`'s): the stop signals are handled before
the command line is imported, which takes about half a second, so an interrupt, a SIGTERM or a
closed terminal at any moment ends as `tilegen: interrupted`, exit code 130, never a traceback.

This module imports nothing heavy: it is what runs first.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

EXIT_INTERRUPTED = 130
# Ctrl-C, a kill, and a closed terminal: each stops a command the same way (even where SIGINT came
# in ignored, as in a background job of a script).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def run() -> int:
    """Handle the stop signals, then import the command line and run it (which says itself what an
    interrupt kept)."""
    install_stop_handlers()
    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:  # before the command line could take it
        try:
            print("tilegen: interrupted", file=sys.stderr)
        except OSError:  # a closed terminal
            pass
        return EXIT_INTERRUPTED


def install_stop_handlers() -> dict[int, Any]:
    """Each stop signal raises KeyboardInterrupt from here on; returns the handlers they had."""
    return {signum: signal.signal(signum, _stop) for signum in STOP_SIGNALS}


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt()
