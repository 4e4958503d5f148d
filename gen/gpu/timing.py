"""The one CUDA-event timing loop (variants, ceilings, scripts/bench_vs_vendor.py), in the process
whose context is current."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import pycuda.driver as cuda

from ..core.results import EARLY_STOP_SAMPLES, TimingOptions, median_relative_error, slower_than_cutoff

WARM_SAMPLE_MS = 1.0  # a warm sample times back-to-back launches for about this long
ROUND_SAMPLES = EARLY_STOP_SAMPLES  # samples queued before the host waits and reads them


def event_samples(call: Callable[[], Any], options: TimingOptions,
                  before_each: Callable[[int], None] | None = None) -> list[float]:
    """The one CUDA-event timing loop: warm up, then time `call` between two events per sample
    until the median is steady (or the budget or sample cap is reached, or the samples are clearly
    slower than `options.stop_above_ms`); milliseconds per call.

    Samples are queued in rounds of up to ROUND_SAMPLES, each between its own pair of events, and
    the host waits once a round: the GPU never idles between the samples of a round. The stopping
    rules are read after each round.

    With `before_each` (an asynchronous L2 flush), the GPU is still busy with it while the host
    records the start event and enqueues the call, so launch latency stays out of the interval.
    Without it (warm), each sample times a batch of back-to-back calls long enough to hide that.
    """
    for _ in range(options.warmup):
        call()
    batch = 1 if before_each else _warm_batch(call)
    events = [(cuda.Event(), cuda.Event()) for _ in range(min(ROUND_SAMPLES, options.max_samples))]
    samples: list[float] = []
    deadline = time.monotonic() + options.budget_s
    while len(samples) < options.max_samples:
        pairs = events[:min(len(events), options.max_samples - len(samples))]
        for i, (start, end) in enumerate(pairs):
            if before_each:
                before_each(len(samples) + i)
            start.record()
            for _ in range(batch):
                call()
            end.record()
        pairs[-1][1].synchronize()
        samples += [end.time_since(start) / batch for start, end in pairs]
        if slower_than_cutoff(samples, options):
            break
        if len(samples) >= options.min_samples and (
                median_relative_error(samples) < options.target_rsd or time.monotonic() > deadline):
            break
    return samples


def _warm_batch(call: Callable[[], Any]) -> int:
    """Calls per warm sample: enough for about a millisecond of work."""
    start, end = cuda.Event(), cuda.Event()
    start.record()
    call()
    end.record()
    end.synchronize()
    return max(1, min(1000, math.ceil(WARM_SAMPLE_MS / max(end.time_since(start), 1e-3))))
