"""What the sweep hands a GPU worker and what comes back: plain, picklable data, no pycuda."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ...core.timing import TimingOptions

RACY_CHECKS = 3  # deliberately racy variants are checked this many times, on different inputs


@dataclass(frozen=True)
class Job:
    """Check (and, with `timing`, time) one compiled variant on one shape."""

    name: str
    family: str
    cubin: str
    shape: str
    cache_config: str = "none"
    seeds: tuple[int, ...] = (1,)  # one check per seed, each on fresh random inputs
    timing: TimingOptions | None = field(default_factory=TimingOptions)
    sanitizer: bool = False  # run under compute-sanitizer's tools instead (see gen.gpu.executor)
    ticket: int = field(default=0, compare=False)  # the engine's number for it: not part of the work


def job_for(compiled: Any, shape: Any, cache_config: str, seed: int, timing: TimingOptions | None,
            ticket: int = 0) -> Job:
    """The job that checks (and times) a compiled variant: deliberately racy ones on several inputs."""
    variant = compiled.variant
    checks = RACY_CHECKS if variant.deliberately_racy else 1
    return Job(variant.name, variant.family, str(compiled.cubin), str(shape), cache_config,
               tuple(seed + i for i in range(checks)), timing, ticket=ticket)


def sanitizer_job(job: Job, small_shape: str, ticket: int) -> Job:
    """The job that runs `job`'s variant under compute-sanitizer at a small shape, checked once, untimed."""
    return replace(job, shape=small_shape, timing=None, seeds=job.seeds[:1], sanitizer=True, ticket=ticket)
