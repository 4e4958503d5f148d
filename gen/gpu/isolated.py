"""The coordinator's handle on one isolated GPU worker process (gen.gpu.process.worker), so that a
bad variant cannot stop a sweep.

A variant that hangs is killed after `silence_s` without a word from its worker (`timeout`); one
that crashes its process or loses its CUDA context is a `launch_error`. Either way the worker is
replaced by a fresh process with a fresh context and the next job runs.

A worker is `python -m gen.gpu.process.worker --serve ...` in a session of its own, talking over a
socket: it imports nothing of the caller's main module (a user's script needs no `__main__`
guard), a Ctrl-C at the terminal reaches only tilegen (which stops it), and what it prints on the
way to an early death becomes the reason given.

`run` waits for one job; a coordinator of many workers (gen.gpu.local) takes the same steps itself,
waiting on all of them at once: `send`, `receive` whenever the worker's socket is readable,
`time_out` once its `deadline` passed.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import sys
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from ..core.errors import Interrupted
from ..core.processes import Child, python_environment
from ..core.results import DeviceInfo, Measurement, Status
from .executor import GpuUnavailable
from .process.jobs import Job
from .process.worker import MODULE, WORKER

START_TIMEOUT_S = 120.0  # importing pycuda and making a context can take a while on a cold machine


class IsolatedWorker:
    """One worker process for one GPU, restarted whenever a job kills or hangs it.
    `target` names the function the process runs, as "module:function". The process sees GPU
    `physical_index` alone, or what `visible_devices` names (its CUDA_VISIBLE_DEVICES, as it is)."""

    def __init__(self, physical_index: int = 0, silence_s: float = 30.0, target: str = WORKER,
                 visible_devices: str | None = None):
        self.physical_index, self.silence_s, self.target = physical_index, silence_s, target
        self.visible_devices = visible_devices
        self._child: Child | None = None
        self._connection: Connection | None = None
        self._messages: Messages | None = None  # what the worker sends once it is ready
        self._pending: deque[tuple[str, Any]] = deque()  # messages read and not yet taken
        self._phase = "start"
        self.died_unstarted = False  # its process died before the job it ran told any phase
        self.deadline = 0.0  # time.monotonic() past which the job under way counts as hung
        self.device: DeviceInfo | None = None
        self._last_child: Child | None = None  # the process started last (its stderr says why it died)
        self.starts = 0
        self._finishing = False  # asked to finish (`finish`)

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
        """Start the worker's process and wait until its GPU is ready: what it holds."""
        self.spawn()
        return self.ready()

    def spawn(self) -> None:
        """Start the worker's process, without waiting for it: `ready` waits. Several workers spawned
        first, then waited for, start together (each takes a second or two: python, pycuda, a context)."""
        self.starts += 1
        self.died_unstarted = self._finishing = False
        gpu, target = str(self.physical_index), self.target
        self._child = self._last_child = Child(
            lambda fd: [sys.executable, "-m", MODULE, "--serve", str(fd), gpu, target], self.environment())
        self._connection = self._child.connection

    def ready(self) -> DeviceInfo:
        """Wait until the spawned worker's GPU is ready (GpuUnavailable if it cannot be): what it holds."""
        assert self._connection is not None, "spawn() first"
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
        self.device, self._messages = payload, Messages(self._connection.fileno())
        self._pending.clear()
        return payload

    def run(self, job: Job) -> Measurement:
        """Run one job and wait for its measurement (a row for a hang or a death too)."""
        if not self.alive:
            self.start()
        self.send(job)
        waiting = select.poll()
        waiting.register(self.fileno(), select.POLLIN)
        while True:
            if not waiting.poll(max(0.0, self.deadline - time.monotonic()) * 1000):
                return self.time_out()
            if (measurement := self.receive()) is not None:
                return measurement

    def send(self, job: Job, queued_behind: bool = False) -> None:
        """Hand a job to the started worker; its silence is timed from now, or, `queued_behind` the
        job it runs, from that one's end. Interrupted when the worker was stopped (killed with its run)."""
        if self._connection is None or self._messages is None:
            raise Interrupted(f"the worker of GPU {self.physical_index} was stopped")
        self._connection.send(job)
        if not queued_behind:
            self._phase, self.deadline = "start", time.monotonic() + self.silence_s

    def fileno(self) -> int:
        """The worker's socket; Interrupted when the worker was stopped."""
        if self._connection is None:
            raise Interrupted(f"the worker of GPU {self.physical_index} was stopped")
        return self._connection.fileno()

    def receive(self) -> Measurement | None:
        """Read what the worker sent (call when readable): the running job's measurement once it is
        done or the worker died; None while it is under way (each phase it reports restarts the
        timer). Messages after a measurement wait for `receive_pending`."""
        assert self._messages is not None
        try:
            self._pending.extend(self._messages.read())
        except (EOFError, OSError):
            self._pending.append(("died", None))
        return self.receive_pending()

    def receive_pending(self) -> Measurement | None:
        """The next measurement among the messages already read, if there is one: a worker that
        holds a job queued behind the one it runs may send both measurements, or one and its death,
        at once."""
        while self._pending:
            kind, payload = self._pending.popleft()
            self.deadline = time.monotonic() + self.silence_s  # for the phase, or the job queued next
            if kind == "phase":
                self._phase = payload
                continue
            phase, self._phase = self._phase, "start"
            if kind == "died":
                self.died_unstarted = phase == "start"
                code = self._wait_for_exit()
                return Measurement(Status.LAUNCH_ERROR, f"worker process died during {phase} ({describe_exit(code)})"
                                   f"{self._last_words()}", device=self.device, context_lost=True)
            if payload.context_lost:
                self._wait_for_exit()
            return payload
        return None

    @property
    def stopped(self) -> bool:
        """Whether the worker was stopped (killed, or found dead): what it held will never run."""
        return self._connection is None

    def time_out(self) -> Measurement:
        """The job's row once its worker was silent for `silence_s`: the worker is killed."""
        self.kill()
        return Measurement(Status.TIMEOUT, f"no progress for {self.silence_s:.0f} s during {self._phase}; "
                                           f"worker killed", device=self.device)

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.alive

    def finish(self) -> None:
        """Ask the worker to finish, without waiting for it (`stop` waits): several asked first,
        then stopped, end together (each takes a while: its modules, its context)."""
        child = self._child  # a kill from another thread may clear it
        if child is not None and child.alive and self._messages is not None and not self._finishing:
            self._finishing = True
            try:
                child.connection.send(None)
            except OSError:
                pass

    def stop(self) -> None:
        """Ask the worker to finish (unless `finish` did), then make sure it has; one still starting
        has nothing to finish, and is stopped at once."""
        if self._messages is None:
            self.kill()
            return
        self.finish()
        self._end(1.0)

    def kill(self) -> None:
        """Stop the process now; safe to call from two threads at once (an interrupt while the
        coordinator finds the worker dead): each takes what is left to stop."""
        self._end()

    def _end(self, grace_s: float = 0.0) -> int | None:
        """Reap the worker (gen.core.processes.Child.end): its exit code, None if it was killed or is gone."""
        child, self._child = self._child, None
        self._connection, self._messages = None, None
        self._pending.clear()
        return child.end(grace_s) if child is not None else None

    def _wait_for_exit(self) -> int | None:
        return self._end(10.0)

    def _last_words(self) -> str:
        """The last line the worker printed (a Python error, say), to say why it died."""
        child = self._last_child
        lines = [line.strip() for line in child.stderr_text().splitlines() if line.strip()] if child else []
        return f": {lines[-1]}" if lines else ""


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


class Messages:
    """What a worker sends over its connection (multiprocessing's framing: a 4-byte big-endian
    length, or -1 and an 8-byte one, then the pickle), read as it comes: one read takes every
    message there is, where Connection.recv takes two reads for each."""

    def __init__(self, descriptor: int):
        self.descriptor, self.buffer = descriptor, bytearray()

    def read(self) -> list[Any]:
        """The messages complete after one read (call when readable); EOFError once the worker closed it."""
        chunk = os.read(self.descriptor, 1 << 16)
        if not chunk:
            raise EOFError
        self.buffer += chunk
        messages = []
        while (frame := self._frame()) is not None:
            messages.append(pickle.loads(frame))
        return messages

    def _frame(self) -> bytes | None:
        """The first whole message's bytes, taken out of the buffer; None while it is not all there."""
        if len(self.buffer) < 4:
            return None
        (size,), start = struct.unpack_from("!i", self.buffer), 4
        if size == -1:
            if len(self.buffer) < 12:
                return None
            (size,), start = struct.unpack_from("!Q", self.buffer, 4), 12
        if len(self.buffer) < start + size:
            return None
        frame = bytes(self.buffer[start:start + size])
        del self.buffer[:start + size]
        return frame
