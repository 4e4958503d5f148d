"""The `tilegen` command's entry point (and `python -m gen`'s): the stop signals are handled before
the command line is imported, which takes about half a second, so an interrupt, a SIGTERM or a
closed terminal at any moment ends as `tilegen: interrupted`, exit code 130, never a traceback.

This module imports nothing heavy (gen.core.signals, for the handlers): it is what runs first. A
sweep or a tune on this host's GPUs also starts their workers here (gen.evaluate.early), before the
command line is imported: each takes a second or more to start, and starts meanwhile.
"""

from __future__ import annotations

import sys
from typing import Sequence

from ..core.signals import EXIT_INTERRUPTED, install_stop_handlers, stop_came


def run() -> int:
    """Handle the stop signals, then import the command line and run it (which says itself what an
    interrupt kept)."""
    install_stop_handlers()
    gpus = early_gpus(sys.argv[1:])
    try:
        if gpus is not None:
            from ..evaluate import early

            early.start(gpus)
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
    finally:
        if gpus is not None:
            from ..evaluate import early

            early.stop()


EARLY_COMMANDS = ("sweep", "tune")  # the commands that run jobs on this host's GPUs
NOT_EARLY = ("--help", "--dry-run", "--cluster", "--family-path")  # options after which none is started early


def early_gpus(words: Sequence[str]) -> list[int] | None:
    """The GPUs whose workers a command line will ask for, read from its words before the parser is
    imported: `sweep` or `tune` with `--gpus` as a list of indices, or without (GPU 0). None for any
    other command line, or one that may ask for none (help, a dry run, a Dask cluster, a family
    path, which a worker must load) or for GPUs not read here (`--gpus all`): starting nothing early
    is always right, only later."""
    if not words or words[0] not in EARLY_COMMANDS:
        return None
    gpus = "0"
    for at, word in enumerate(words):
        name, equals, value = word.partition("=")
        if word == "-h" or (len(name) > 2 and any(option.startswith(name) for option in NOT_EARLY)):
            return None  # an option or its abbreviation, as argparse takes them
        if name == "--gpus":
            gpus = value if equals else (words[at + 1] if at + 1 < len(words) else "")
        elif len(name) > 2 and "--gpus".startswith(name):
            return None
    indices = [part.strip() for part in gpus.split(",")]
    if not all(part.isascii() and part.isdigit() for part in indices) or len(set(indices)) != len(indices):
        return None  # 'all', or a mistake the parser will name
    return [int(part) for part in indices]
