"""Progress on long work: a bar with ETA on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

BAR_WIDTH = 24


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None, enabled: bool = True):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.interactive = self.stream.isatty()
        self.started = time.monotonic()

    def advance(self, text: str = "") -> None:
        """One item finished; `text` says which and how it went."""
        self.done += 1
        if not self.enabled:
            return
        if self.interactive:
            line = f"{self.label} {self._bar()} {self.done}/{self.total} ETA {self._eta()} {text}"
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + line[:width].ljust(width))
        else:
            self.stream.write(f"{self.label} {self.done}/{self.total} {text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.interactive:
            elapsed = time.monotonic() - self.started
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + f"{self.label} {self.done}/{self.total} in {elapsed:.1f} s".ljust(width) + "\n")
            self.stream.flush()

    def _bar(self) -> str:
        filled = BAR_WIDTH * self.done // self.total
        return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"

    def _eta(self) -> str:
        elapsed = time.monotonic() - self.started
        seconds = int(elapsed / self.done * (self.total - self.done))
        return f"{seconds // 60}:{seconds % 60:02d}"
