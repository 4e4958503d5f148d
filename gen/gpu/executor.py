"""The executor: the one interface the pipeline sees of the GPUs, whether they are this host's
(gen.gpu.local) or a Dask cluster's (gen.gpu.dask); and GpuUnavailable, what any of them raises when
no kernel can run. Its duties are written here, once; tests/test_executors.py holds every executor
(local, Dask, the test fakes) to them.

A **job** (gen.gpu.process.jobs.Job) is plain, picklable data: a compiled variant's cubin (a path on the
coordinator), a shape, a cache preference, the seeds of its checks, its timing rules (None: check
only) and the engine's `ticket`. A job either checks (and times) the variant, on a GPU that runs
no other job meanwhile; or, as a **sanitizer job** (`sanitizer`), runs it under compute-sanitizer's
tools (gen.gpu.sanitize) in a process of its own on a GPU that runs
nothing else meanwhile. The engine decides which jobs to send and what their results mean: an
executor runs each job it is given, once, and nothing else.

A **result** is the job, as it was given, with its `Measurement`: the verdict, timing and device;
for a sanitizer job, `hazards` (each tool's count) and `hazard_note`, or `hazards` None with a
status and message that say why the tools could not run. A job that cannot run (its worker died or
hung, its Dask worker left) still gives exactly one result, whose status says so.

The **feed** (gen.gpu.feed.JobFeed) is how jobs reach `run`: the engine puts each job there as its
variant compiles (or in answer to a result: a variant's job after its sanitizer job), and `run`
takes them as its GPUs can hold them, until the feed is closed and empty. `capacity` says how many
jobs that is at once.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Protocol

from ..core.errors import TilegenError
from ..core.results import DeviceInfo, GpuModel, Measurement
from .process.jobs import Job


class GpuUnavailable(TilegenError):
    """No kernel can run here; the message says why (no pycuda, no device, ...). Sweeps catch it and
    compile only; where a GPU is needed (tune, gen.kernel) it reaches the user as one line."""


class Executor(Protocol):
    def start(self) -> None:
        """Begin starting the workers without waiting for them (`devices` waits): a command starts
        them as soon as it knows its GPUs, so that they start while it plans. Again: nothing more."""

    def devices(self) -> list[DeviceInfo]:
        """Start the workers (if need be) and say which GPUs they hold; GpuUnavailable if none."""

    def capacity(self) -> int:
        """How many jobs it takes at once to keep its GPUs busy now (a few per GPU): the engine keeps
        as many again ready for it."""

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Yield each job with its measurement as it completes (in any order). `jobs` is the engine's
        JobFeed (gen.gpu.feed), consumed lazily, a job whenever a GPU can take one, until it is
        closed and empty; or a finite iterable, read whole at the start."""

    def close(self) -> None:
        """Stop the workers once the run is over; closing again is harmless."""

    def kill(self) -> None:
        """Stop at once (an interrupt): whatever runs is dropped."""

    def by_model(self) -> dict[GpuModel, "Executor"]:
        """Executors for each GPU model among this one's GPUs (models are tuned separately)."""
