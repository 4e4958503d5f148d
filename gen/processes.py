"""Child processes (nvcc, compute-sanitizer) that an interrupt must stop at once.

They run in a session of their own, so a Ctrl-C at the terminal reaches tilegen alone: nvcc's own
reaction to SIGINT (an exit code that looks like a compile error) can then never be taken for a
result. tilegen kills them itself when it stops (`stop_all`), and a run started after that is
refused with `Interrupted`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Sequence

from .errors import Interrupted

_lock = threading.Lock()
_running: set[subprocess.Popen] = set()
_stopping = threading.Event()


def run(command: Sequence[str], timeout: float | None = None, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    """subprocess.run with output captured, killable by `stop_all`; Interrupted if it was killed
    (or tilegen is stopping), subprocess.TimeoutExpired after `timeout` seconds."""
    with _lock:
        if _stopping.is_set():
            raise Interrupted("stopping")
        process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                   start_new_session=True)
        _running.add(process)
    try:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process)
            process.communicate()
            raise
    finally:
        with _lock:
            _running.discard(process)
    if _stopping.is_set():
        raise Interrupted("stopped while running")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def stop_all() -> None:
    """Kill every running child and refuse new ones, until `resume` (the next command)."""
    with _lock:
        _stopping.set()
        for process in list(_running):
            _kill(process)


def resume() -> None:
    _stopping.clear()


def stopping() -> bool:
    return _stopping.is_set()


def _kill(process: subprocess.Popen) -> None:
    """The child and everything it started (nvcc runs cicc and ptxas): the whole session."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
