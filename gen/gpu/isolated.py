"""The coordinator's handle on one isolated GPU worker process (gen.gpu.worker_process), so that a
bad variant cannot stop a sweep.

A variant that hangs is killed after `silence_s` without a word from its worker (`timeout`); one
that crashes its process or loses its CUDA context is a `launch_error`. Either way the worker is
replaced by a fresh process with a fresh context and the next job runs.

A worker is `python -m gen.gpu.worker_process --serve ...` in a session of its own, talking over a
socket: it imports nothing of the caller's main module (a user's script needs no `__main__`
guard), a Ctrl-C at the terminal reaches only tilegen (which stops it), and what it prints on the
way to an early death becomes the reason given.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection

from ..core.processes import kill_session, python_environment
from ..core.results import DeviceInfo, Measurement, Status
from .executor import GpuUnavailable
from .jobs import Job
from .worker_process import MODULE, WORKER

START_TIMEOUT_S = 120.0  # importing pycuda and making a context can take a while on a cold machine


class IsolatedWorker:
    """One worker process for one GPU, restarted whenever a job kills or hangs it.
    `target` names the function the process runs, as "module:function". The process sees GPU
    `physical_index` alone, or what `visible_devices` names (its CUDA_VISIBLE_DEVICES, as it is)."""

    def __init__(self, physical_index: int = 0, silence_s: float = 30.0, target: str = WORKER,
                 visible_devices: str | None = None):
        self.physical_index, self.silence_s, self.target = physical_index, silence_s, target
        self.visible_devices = visible_devices
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self._stderr = None
        self.device: DeviceInfo | None = None
        self.starts = 0

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def gpu(self) -> str:
        """The GPU as its process is pinned to it: an index, or a UUID, MIG id or list."""
        return str(self.physical_index) if self.visible_devices is None else self.visible_devices

    def environment(self) -> dict[str, str]:
        """The environment of a process on this worker's GPU (its own, compute-sanitizer's)."""
        return python_environment(self.physical_index, self.visible_devices)

    def start(self) -> DeviceInfo:
        self.starts += 1
        ours, theirs = socket.socketpair()
        self._stderr = tempfile.TemporaryFile()
        environment = self.environment()
        self._process = subprocess.Popen(
            [sys.executable, "-m", MODULE, "--serve", str(theirs.fileno()), str(self.physical_index),
             self.target], pass_fds=(theirs.fileno(),), env=environment, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self._stderr, start_new_session=True)
        theirs.close()
        self._connection = Connection(ours.detach())
        if not self._connection.poll(START_TIMEOUT_S):
            self.kill()
            raise GpuUnavailable(f"worker for GPU {self.gpu} did not start within {START_TIMEOUT_S:.0f} s")
        try:
            kind, payload = self._connection.recv()
        except (EOFError, OSError):
            code = self._wait_for_exit()
            raise GpuUnavailable(f"worker for GPU {self.gpu} died while starting ({describe_exit(code)})"
                                 f"{self._last_words()}") from None
        if kind != "ready":
            self.stop()
            raise GpuUnavailable(payload)
        self.device = payload
        return payload

    def run(self, job: Job) -> Measurement:
        if not self.alive:
            self.start()
        assert self._connection is not None
        self._connection.send(job)
        phase = "start"
        while True:
            if not self._connection.poll(self.silence_s):
                self.kill()
                return Measurement(Status.TIMEOUT, f"no progress for {self.silence_s:.0f} s during {phase}; "
                                                   f"worker killed", device=self.device)
            try:
                kind, payload = self._connection.recv()
            except (EOFError, OSError):
                code = self._wait_for_exit()
                return Measurement(Status.LAUNCH_ERROR, f"worker process died during {phase} ({describe_exit(code)})"
                                   f"{self._last_words()}", device=self.device, context_lost=True)
            if kind == "phase":
                phase = payload
                continue
            if payload.context_lost:
                self._wait_for_exit()
            return payload

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Ask the worker to finish, then make sure it has."""
        if self._process is None:
            return
        if self.alive and self._connection is not None:
            try:
                self._connection.send(None)
                self._process.wait(1.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                kill_session(self._process.pid)
                self._process.wait(5.0)
            self._process = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _wait_for_exit(self) -> int | None:
        assert self._process is not None
        try:
            code = self._process.wait(10.0)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        return code

    def _last_words(self) -> str:
        """The last line the worker printed (a Python error, say), to say why it died."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().decode(errors="replace").splitlines() if line.strip()]
        return f": {lines[-1]}" if lines else ""


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"
