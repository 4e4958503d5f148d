"""The `tilegen` command's entry point (and `python -m gen`'s): the stop signals are handled before
the command line is imported, which takes about half a second, so an interrupt, a SIGTERM or a
closed terminal at any moment ends as `tilegen: interrupted`, exit code 130, never a traceback.

This module imports nothing heavy (gen.core.signals, for the handlers): it is what runs first.
"""

from __future__ import annotations

import sys

from ..core.signals import EXIT_INTERRUPTED, install_stop_handlers, stop_came


def run() -> int:
    """Handle the stop signals, then import the command line and run it (which says itself what an
    interrupt kept)."""
    install_stop_handlers()
    try:
        from .main import main

        return main()
    except BaseException as error:  # before the command line could take it
        if not isinstance(error, KeyboardInterrupt) and not stop_came():
            raise
        try:
            print("tilegen: interrupted", file=sys.stderr)
        except OSError:  # a closed terminal
            pass
        return EXIT_INTERRUPTED
