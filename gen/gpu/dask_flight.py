"""What the Dask coordinator (gen.gpu.dask) keeps of the jobs it has in flight: several jobs per
Dask task, how often a task was sent again, and the `launch_error` row of a job that never finished.

Dask's own cost per task (the graph update, the transitions, a message to the worker and back,
a gather) is 2-7 ms of the coordinator's CPU: about what the job itself costs on a GPU. So up to
JOBS_PER_TASK jobs that wait together go in one task, run one after another on its worker's GPU.
A task's results come back together, so a task that fails or is lost runs all its jobs again,
those that had finished too, one task per job: a job that kills its workers is soon alone, and
only its own row says so. A task lost with its workers counts as a loss for each of its jobs
(`lost_verdict`); a task of several that failed does not, since which job failed is not known.
"""

from __future__ import annotations

import math
import queue
from dataclasses import dataclass
from typing import Any

from ..core.results import Measurement, Status
from .process.jobs import Job

JOBS_PER_TASK = 16  # at most, in one Dask task (4 cost 3 ms of coordinator CPU a row, 16: 1.3-1.6; bench_scale.py)
MAX_RESENDS = 3  # a job whose workers all left is sent again this often (then it is a launch_error)


def task_size(waiting: int, gpus: int, room: int) -> int:
    """Jobs in the next task, with `waiting` more in line, `gpus` accepted GPUs and room for `room`
    more jobs in flight: up to JOBS_PER_TASK, and no more than each GPU's share of those waiting,
    so that no GPU idles while another has several."""
    share = math.ceil((1 + waiting) / max(1, gpus))
    return max(1, min(JOBS_PER_TASK, room, share))


def lost_verdict(resends: int) -> str:
    """Why a job whose result or workers were lost while it was in flight, after being sent again
    `resends` times, is a launch_error now; '' while it may be sent again."""
    return "" if resends < MAX_RESENDS else f"its Dask workers were lost {resends + 1} times while it was in flight"


@dataclass
class Sent:
    """A task in flight: its jobs, the workers it may run on, the queue its future goes to when it
    finishes, how often its jobs were sent again (their workers all lost), and why it failed
    without running, if so."""

    jobs: tuple[Job, ...]
    workers: frozenset[str]
    finished: queue.Queue
    resends: int = 0
    failure: str = ""


def failure(future: Any, sent: Sent) -> Measurement:
    """The `launch_error` row of a job that did not finish: lost too often, cancelled, or raising."""
    if sent.failure or future.status == "cancelled":
        reason = sent.failure or "cancelled"
    else:
        error = future.exception()
        reason = f"{type(error).__name__}: {error}"
    return Measurement(Status.LAUNCH_ERROR, f"on the Dask cluster: {reason}", context_lost=True)


def drain(items: queue.Queue) -> list[Any]:
    """Everything in the queue now, without waiting (its one reader calls)."""
    drained = []
    while not items.empty():
        drained.append(items.get_nowait())
    return drained
