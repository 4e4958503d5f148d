"""What runs INSIDE an isolated GPU worker process (`python -m gen.gpu.process.worker`): the only
process that makes a CUDA context for the pipeline's jobs.

    python -m gen.gpu.process.worker --serve FD GPU MODULE:FUNCTION   # one per GPU (gen.gpu.isolated)
    python -m gen.gpu.process.worker --once JOB_JSON                  # one job (compute-sanitizer, ncu)

With --serve, the process runs MODULE:FUNCTION (`WORKER`, or a stand-in a test names) on the socket
it inherited, as descriptor FD; it ignores Ctrl-C, which only tilegen, its parent, acts on, and ends
the moment tilegen does (gen.core.processes.child_connection).
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
import traceback
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Callable

from ...core.processes import child_connection
from ...core.results import Measurement, Status

from ...core.timing import TimingOptions
from .jobs import Job

MODULE = "gen.gpu.process.worker"  # what `python -m` runs (this module's __name__ is "__main__" then)
WORKER = f"{MODULE}:worker_main"
PHASE_HOLD_S = 0.1  # a job's phase is told the coordinator once it has lasted this long


def worker_main(connection: Connection, physical_index: int) -> None:
    """The worker process: make a context on one GPU, then run jobs until told to stop."""
    try:
        from .runner import Runner

        runner = Runner(physical_index)
    except ImportError as error:
        connection.send(("unavailable", f"pycuda is not installed ({error}); pip install 'tilegen[cuda]' on a "
                                        f"machine with a CUDA driver"))
        return
    except Exception as error:  # pycuda raises its own errors when there is no usable device
        connection.send(("unavailable", f"no usable CUDA GPU {physical_index}: {type(error).__name__}: {error}"))
        return
    connection.send(("ready", runner.device))
    phases = HeldPhases(connection)
    while (job := connection.recv()) is not None:
        try:
            measurement = runner.run(job, report=phases)
        except Exception:
            measurement = Measurement(Status.LAUNCH_ERROR, traceback.format_exc(limit=3), device=runner.device,
                                      context_lost=True)
        phases.send(("done", measurement))
        if measurement.context_lost:
            return


class HeldPhases:
    """A worker's report of its job's phases, told the coordinator only once a phase has lasted
    PHASE_HOLD_S: a job of a few milliseconds sends none (its phases cost the coordinator more than
    the rest of its row), while a job that hangs always has its phase named, at most PHASE_HOLD_S
    late. `send` sends the worker's own messages (a measurement) on the same connection."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._changed = threading.Condition()
        self._phase: str | None = None  # the phase not yet told, if any
        self._since = 0.0
        threading.Thread(target=self._tell, name="tilegen-phases", daemon=True).start()

    def __call__(self, phase: str) -> None:
        """A new phase; one held back already keeps its time, so that phases that follow each other
        fast are still told, the latest of them, every PHASE_HOLD_S."""
        with self._changed:
            if self._phase is None:
                self._since = time.monotonic()
            self._phase = phase
            self._changed.notify()

    def send(self, message: tuple) -> None:
        """A message of the worker's: the phase held back is dropped, its job being over."""
        with self._changed:
            self._phase = None
            self._connection.send(message)

    def _tell(self) -> None:
        with self._changed:
            while True:
                if self._phase is None:
                    self._changed.wait()
                elif (due := self._since + PHASE_HOLD_S - time.monotonic()) > 0:
                    self._changed.wait(due)
                else:
                    self._connection.send(("phase", self._phase))
                    self._phase = None


def once_command(job: Job) -> list[str]:
    """The command that runs one job in a process of its own (under compute-sanitizer or ncu)."""
    return [sys.executable, "-m", MODULE, "--once", json.dumps(asdict(job))]


def job_from_json(text: str) -> Job:
    data = json.loads(text)
    data["seeds"] = tuple(data["seeds"])
    data["timing"] = TimingOptions(**data["timing"]) if data["timing"] else None
    return Job(**data)


def run_once(text: str) -> int:
    """Run one job in this process; print its measurement as JSON."""
    from .runner import Runner

    measurement = Runner().run(job_from_json(text))
    print(json.dumps({"status": str(measurement.status), "message": measurement.message}))
    return 0


def _serve(descriptor: str, physical_index: str, target: str) -> int:
    """The worker process's entry: the socket it was given, its GPU, and the function to run."""
    module, _, function = target.partition(":")
    serve: Callable[[Connection, int], None] = getattr(importlib.import_module(module), function)
    connection = child_connection(int(descriptor))
    serve(connection, int(physical_index))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        sys.exit(_serve(*sys.argv[2:]))
    if len(sys.argv) == 3 and sys.argv[1] == "--once":
        sys.exit(run_once(sys.argv[2]))
    print(f"usage: python -m {MODULE} --once JOB_JSON | --serve FD GPU MODULE:FUNCTION", file=sys.stderr)
    sys.exit(2)
