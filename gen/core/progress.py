"""Progress on long work: a bar with ETA on a terminal; without one (logs, CI) a line every few
seconds ($TILEGEN_PROGRESS_S; 0: a line per item, naming it) with the counts so far and the ETA;
nothing at all when it is turned off (--quiet)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections import Counter
from typing import Callable, TextIO

from .checks import env_seconds

BAR_WIDTH = 24
LOG_EVERY_S = 5.0  # without a terminal: a line at most this often, and one at the end
EVERY_ENV = "TILEGEN_PROGRESS_S"  # sets that period


def note(text: str, kind: str = "note") -> None:
    """One line on stderr that the user should know while the run goes on (`kind`: note or
    warning): every such line tilegen writes is written here."""
    try:
        sys.stderr.write(f"tilegen: {kind}: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # no terminal left to say it on
        pass


def log_every_s() -> float:
    """Seconds between progress lines without a terminal: $TILEGEN_PROGRESS_S, else LOG_EVERY_S."""
    if os.environ.get(EVERY_ENV, "").strip() == "0":
        return 0.0
    return env_seconds(EVERY_ENV, LOG_EVERY_S, " (0: a line per item)")


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic, every_s: float | None = None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.interactive = self.stream.isatty()
        self.clock, self.every_s = clock, log_every_s() if every_s is None else every_s
        self.started = self.last_line = clock()
        self.statuses: Counter[str] = Counter()
        self.reported = 0  # items done at the last line written (without a terminal)

    def advance(self, text: str = "", status: str = "") -> None:
        """One item finished; `text` says which and how it went, `status` is counted."""
        self.done += 1
        if status:
            self.statuses[status] += 1
        if not self.enabled:
            return
        if self.interactive:
            line = f"{self.label} {self._bar()} {self.done}/{self.total} ETA {self._eta()} {text}"
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + line[:width].ljust(width))
        elif self.every_s == 0:
            self.stream.write(f"{self.label} {self.done}/{self.total} {text}\n")
            self.reported = self.done
        elif self.clock() - self.last_line >= self.every_s:
            self._log_line(f"ETA {self._eta()}")
        self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.interactive:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + f"{self.label} {self.done}/{self.total} in {self._elapsed():.1f} s".ljust(width)
                              + "\n")
        elif self.done != self.reported or self.done == 0:
            self._log_line("done" if self.done == self.total else "stopped")
        self.stream.flush()

    def _log_line(self, state: str) -> None:
        counts = ", ".join(f"{status} {count:,}" for status, count in sorted(self.statuses.items()))
        self.stream.write(f"{self.label}: {self.done:,}/{self.total:,}{f' ({counts})' if counts else ''}, "
                          f"{self._elapsed():.0f} s, {state}\n")
        self.last_line, self.reported = self.clock(), self.done

    def _elapsed(self) -> float:
        return self.clock() - self.started

    def _bar(self) -> str:
        filled = BAR_WIDTH * self.done // self.total
        return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"

    def _eta(self) -> str:
        seconds = int(self._elapsed() / self.done * (self.total - self.done))
        return f"{seconds // 60}:{seconds % 60:02d}"
