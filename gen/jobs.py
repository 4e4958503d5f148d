"""What the sweep hands a GPU worker and what comes back: plain, picklable data, no pycuda."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from .store import Row, Status

# Run-time cache preferences (cuFuncSetCacheConfig), with the shared-memory carveout in percent
# that goes with each on GPUs that have one (-1 leaves the driver's default).
CACHE_CONFIGS = {"none": -1, "shared": 100, "l1": 0, "equal": 50}
RACY_CHECKS = 3  # deliberately racy variants are checked this many times, on different inputs


@dataclass(frozen=True)
class TimingOptions:
    budget_s: float = 1.0  # stop sampling when this is spent, even if the median is still noisy
    warm: bool = False  # True: keep the L2 warm between samples instead of flushing it
    min_samples: int = 10
    max_samples: int = 2000
    target_rsd: float = 0.005  # stop once the median's relative standard error is under this
    warmup: int = 3


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


def job_for(compiled: Any, shape: Any, cache_config: str, seed: int, timing: TimingOptions | None) -> Job:
    """The job that checks (and times) a compiled variant: deliberately racy ones on several inputs."""
    variant = compiled.variant
    checks = RACY_CHECKS if variant.deliberately_racy else 1
    return Job(variant.name, variant.family, str(compiled.cubin), str(shape), cache_config,
               tuple(seed + i for i in range(checks)), timing)


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    cc: str
    sm_count: int
    memory_bytes: int
    l2_bytes: int
    driver: str
    index: int = 0  # the physical GPU's index on its host

    @property
    def model(self) -> str:
        """A GPU model: name, compute capability, SMs and memory (two parts of one architecture differ)."""
        return f"{self.name} (cc {self.cc}, {self.sm_count} SMs, {self.memory_bytes // 2**30} GiB)"

    def provenance(self) -> dict[str, Any]:
        return {"gpu": self.name, "cc": self.cc, "sm_count": self.sm_count, "gpu_memory_bytes": self.memory_bytes,
                "driver": self.driver, "gpu_index": self.index, "gpu_model": self.model}


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float
    samples: int

    @classmethod
    def of(cls, samples_ms: list[float]) -> "Timing":
        stdev = statistics.stdev(samples_ms) if len(samples_ms) > 1 else 0.0
        return cls(statistics.median(samples_ms), min(samples_ms), max(samples_ms), stdev, len(samples_ms))


def median_relative_error(samples_ms: list[float]) -> float:
    """Relative standard error of the median: about 1.2533 · stdev / sqrt(n) for near-normal samples."""
    if len(samples_ms) < 2:
        return float("inf")
    return 1.2533 * statistics.stdev(samples_ms) / len(samples_ms) ** 0.5 / statistics.median(samples_ms)


@dataclass
class Measurement:
    """A worker's verdict on one job."""

    status: Status
    message: str = ""
    error: float | None = None
    tolerance: float | None = None
    checks: int = 0
    timing: Timing | None = None
    l2_flushed: bool | None = None
    throughput: float | None = None
    unit: str = ""
    ceiling: float | None = None
    check_seconds: float = 0.0
    time_seconds: float = 0.0
    device: DeviceInfo | None = None
    context_lost: bool = False  # the CUDA context is unusable: the worker must be replaced

    def apply_to(self, row: Row) -> None:
        """Copy the verdict, timing and device into a result row."""
        row.status, row.message = self.status, self.message
        row.error, row.tolerance, row.checks = self.error, self.tolerance, self.checks
        if self.timing:
            t = self.timing
            row.median_ms, row.min_ms, row.max_ms, row.stdev_ms, row.samples = (
                t.median_ms, t.min_ms, t.max_ms, t.stdev_ms, t.samples)
            row.l2_flushed = self.l2_flushed
        row.throughput, row.unit, row.ceiling = self.throughput, self.unit, self.ceiling
        row.measure_seconds = self.check_seconds + self.time_seconds
        if self.throughput is not None and self.ceiling:
            row.ceiling_share = self.throughput / self.ceiling
        if self.device:
            row.provenance.update(self.device.provenance())
