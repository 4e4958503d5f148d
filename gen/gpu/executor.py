"""The executor: the one interface the pipeline sees of the GPUs (`devices`, `capacity`, `run`,
`close`, `kill`, `by_model`), whether they are this host's (gen.gpu.local) or a Dask cluster's
(gen.gpu.dask); and GpuUnavailable, what any of them raises when no kernel can run."""

from __future__ import annotations

from typing import Iterable, Iterator, Protocol

from ..core.errors import TilegenError
from ..core.results import DeviceInfo, GpuModel, Measurement
from .jobs import Job


class GpuUnavailable(TilegenError):
    """No kernel can run here; the message says why (no pycuda, no device, ...). Sweeps catch it and
    compile only; where a GPU is needed (tune, gen.kernel) it reaches the user as one line."""


class Executor(Protocol):
    def devices(self) -> list[DeviceInfo]:
        """Start the workers (if need be) and say which GPUs they hold; GpuUnavailable if none."""

    def capacity(self) -> int:
        """How many jobs it takes at once to keep its GPUs busy now (a few per GPU): the engine keeps
        as many again ready for it."""

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Yield each job with its measurement as it completes (in any order). `jobs` is the engine's
        JobFeed (gen.gpu.feed), consumed lazily, a job whenever a GPU can take one, until it is
        closed and empty; or a finite iterable, read whole at the start."""

    def close(self) -> None: ...

    def kill(self) -> None:
        """Stop at once (an interrupt): whatever runs is dropped."""

    def by_model(self) -> dict[GpuModel, "Executor"]:
        """Executors for each GPU model among this one's GPUs (models are tuned separately)."""
