"""The timing rules, one place for each: how long and how many samples (`TimingOptions`, a sweep's
defaults and a tune's `TUNE_TIMING`), the warm-up, when timing a loser may stop early, and the
statistics of the samples. The loop that applies them runs in the GPU worker (gen.gpu.process.timing)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from . import checks
from .errors import UsageError


@dataclass(frozen=True)
class TimingOptions:
    budget_s: float = 1.0  # stop sampling when this is spent, even if the median is still noisy
    warm: bool = False  # True: keep the L2 warm between samples instead of flushing it
    min_samples: int = 10
    max_samples: int = 2000
    target_rsd: float = 0.005  # stop once the median's relative standard error is under this
    warmup: int = 3  # launches before timing; one is enough for a kernel that runs 1 ms or more (gen.gpu.process.timing)
    stop_above_ms: float | None = None  # stop once EARLY_STOP_SAMPLES samples are all slower than this
    energy: bool = False  # also joules per launch and the SM clock, from NVML (gen.gpu.process.energy)


TUNE_TIMING = TimingOptions(budget_s=0.5)  # a tune's: many variants, each timed for less
CEILING_SAMPLES = TimingOptions(min_samples=10, max_samples=20, target_rsd=0.0, warmup=3, budget_s=30.0)  # a ceiling's
WARMUP_MS = 1.0  # a first warm-up launch this long is warm-up enough (gen.gpu.process.timing)

EARLY_STOP_MARGIN = 0.1  # a search stops timing a point whose samples are all 10% slower than its best so far
EARLY_STOP_SAMPLES = 5  # all of them slower than the cutoff: by the sign test, p = 0.5**5 ≈ 3% that the
# variant's median is not


def slower_than_cutoff(samples_ms: list[float], options: TimingOptions) -> bool:
    """Whether timing may stop early: EARLY_STOP_SAMPLES samples or more, every one slower than
    `options.stop_above_ms` (a tune's best so far, with a margin)."""
    return (options.stop_above_ms is not None and len(samples_ms) >= EARLY_STOP_SAMPLES
            and min(samples_ms) > options.stop_above_ms)


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float
    samples: int

    @classmethod
    def of(cls, samples_ms: list[float]) -> "Timing":
        stdev = sample_stdev(samples_ms) if len(samples_ms) > 1 else 0.0
        return cls(statistics.median(samples_ms), min(samples_ms), max(samples_ms), stdev, len(samples_ms))


def median_relative_error(samples_ms: list[float]) -> float:
    """Relative standard error of the median: about 1.2533 · stdev / sqrt(n) for near-normal samples."""
    if len(samples_ms) < 2:
        return float("inf")
    return 1.2533 * sample_stdev(samples_ms) / len(samples_ms) ** 0.5 / statistics.median(samples_ms)


def sample_stdev(values: list[float]) -> float:
    """The sample standard deviation in floating point (statistics.stdev works in exact fractions:
    it cost a GPU worker 0.4 ms a job)."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def checked_timing(timing: TimingOptions) -> TimingOptions:
    """Every field of the timing options checked, as Python's own numbers (gen.core.checks)."""
    checks.flag(timing.warm, "timing.warm")
    fewest = checks.whole(timing.min_samples, "timing.min_samples", 1)
    return replace(timing, budget_s=checks.seconds(timing.budget_s, "the timing budget (timing.budget_s)"),
                   min_samples=fewest, max_samples=checks.whole(timing.max_samples, "timing.max_samples", fewest),
                   target_rsd=_positive(timing.target_rsd, "timing.target_rsd"),
                   warmup=checks.whole(timing.warmup, "timing.warmup"),
                   stop_above_ms=None if timing.stop_above_ms is None else _positive(timing.stop_above_ms,
                                                                                     "timing.stop_above_ms"))


def _positive(value: object, what: str) -> float:
    if not checks.is_real(value) or not math.isfinite(value) or value <= 0:  # type: ignore[arg-type]
        raise UsageError(f"{what} must be a positive, finite number, got {value!r}")
    return float(value)  # type: ignore[arg-type]
