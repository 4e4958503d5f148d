"""Child processes (nvcc, compute-sanitizer) that an interrupt must stop at once (the signals that
interrupt tilegen are gen.core.signals').

They run in a session of their own, so a Ctrl-C at the terminal reaches tilegen alone: nvcc's own
reaction to SIGINT (an exit code that looks like a compile error) can then never be taken for a
result. Whoever starts them (a pipeline, an executor) owns a ProcessGroup and kills it when it
stops; a run cut short that way raises Interrupted and its output is never used. An interrupt
that comes while the main thread starts a child waits until the child is known, so that it is
killed with the rest: a child is never left running on its own.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import suppress
from multiprocessing.connection import Connection
from typing import Any, Callable, Sequence

from .errors import Interrupted
from .signals import interrupts_held

POLL_S = 0.1  # the longest a wait (for rows, for workers) lasts before it looks for a stop or a kill


class ProcessGroup:
    """Child processes started for one piece of work, killed together by `kill_all`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopped = threading.Event()

    def run(self, command: Sequence[str], timeout: float | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
        """subprocess.run with output captured; Interrupted if the group was killed before or
        during it, subprocess.TimeoutExpired after `timeout` seconds (the child's session killed)."""
        process: subprocess.Popen | None = None
        try:
            process = self._spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(process.pid)
            process.communicate()
            raise
        except BaseException:  # an interrupt in this thread: the child's session goes with it
            if process is not None:
                kill_session(process.pid)
                process.wait()
            raise
        finally:
            if process is not None:
                with self._lock:
                    self._running.discard(process)
        if self._stopped.is_set():
            raise Interrupted("stopped while running")
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def _spawn(self, command: Sequence[str], **popen: Any) -> subprocess.Popen:
        """A child in a session of its own, counted in the group; Interrupted once the group was killed.
        An interrupt held while it started is raised once it is known, and kills it: the caller never
        got it to kill (a group of one query, which no one else kills)."""
        process: subprocess.Popen | None = None
        try:
            with interrupts_held(), self._lock:
                if self._stopped.is_set():
                    raise Interrupted("stopping")
                process = subprocess.Popen(list(command), start_new_session=True, **popen)
                self._running.add(process)
        except KeyboardInterrupt:
            if process is not None:
                kill_session(process.pid)
                process.wait()
                self.forget(process)
            raise
        return process

    def forget(self, process: subprocess.Popen) -> None:
        """A `Child` in the group that has ended, or was killed by its user."""
        with self._lock:
            self._running.discard(process)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def kill_all(self) -> None:
        """Kill every running child and refuse new ones."""
        with self._lock:
            self._stopped.set()
            for process in self._running:
                kill_session(process.pid)


class Child:
    """A long-lived child process that talks over a socket: the command `command(FD)` names, FD its
    end (the GPU worker, gen.gpu.isolated; the NVRTC compile worker, gen.compiling.nvrtc). It runs in a
    session of its own (in `group` when given: killed with it, and Interrupted once it was killed),
    its stderr kept for `stderr_text`; `end` reaps it, killing its session if it does not exit."""

    def __init__(self, command: Callable[[int], Sequence[str]], env: dict[str, str],
                 group: ProcessGroup | None = None):
        ours, theirs = socket.socketpair()
        self.group, self.stderr = group, tempfile.TemporaryFile()
        popen: dict[str, Any] = dict(pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.stderr)
        try:
            arguments = list(command(theirs.fileno()))
            self.process = group._spawn(arguments, **popen) if group is not None else \
                subprocess.Popen(arguments, start_new_session=True, **popen)
        finally:
            theirs.close()
        self.connection = Connection(ours.detach())

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def end(self, grace_s: float = 0.0) -> int | None:
        """Reap the child, given `grace_s` to exit on its own (one that closed its socket is on its way
        out), else killed with its session: its exit code, None when it had to be killed."""
        try:
            code: int | None = self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            code = None
            kill_session(self.process.pid)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(5.0)
        if self.group is not None:
            self.group.forget(self.process)
        self.connection.close()
        return code

    def stderr_text(self) -> str:
        """All the child printed on stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")


def child_connection(descriptor: int) -> Connection:
    """What a `Child` runs first: its end of the socket, descriptor `descriptor`. It ignores Ctrl-C,
    which only tilegen acts on, and exits the moment the socket hangs up, even in the middle of its
    work (a compile, a kernel): tilegen has ended, perhaps killed with no time to end its children."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_hung_up, args=(descriptor,), name="exit when tilegen ends", daemon=True).start()
    return Connection(descriptor)


def _exit_when_hung_up(descriptor: int) -> None:
    hang_up = select.poll()
    hang_up.register(descriptor, 0)  # no event asked for: poll still says when the other end is gone
    hang_up.poll()
    os._exit(0)


def kill_session(pid: int) -> None:
    """A child and everything it started (nvcc runs cicc and ptxas): its whole session."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def visible_devices_for(gpu: int) -> str:
    """CUDA_VISIBLE_DEVICES for a child on GPU `gpu` (an nvidia-smi index). A parent that hid
    every GPU (CUDA_VISIBLE_DEVICES="") keeps them hidden: its children see none either."""
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    return inherited if inherited is not None and not inherited.strip() else str(gpu)


def python_environment(gpu: int, visible_devices: str | None = None) -> dict[str, str]:
    """The environment of a tilegen child process on one GPU: it imports what this process
    imports (its sys.path, plugins included) and sees only that GPU, or what `visible_devices`
    names instead (a CUDA_VISIBLE_DEVICES value, passed on as it is: a UUID, a MIG id, a list)."""
    visible = visible_devices_for(gpu) if visible_devices is None else visible_devices
    return dict(os.environ, CUDA_VISIBLE_DEVICES=visible, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
