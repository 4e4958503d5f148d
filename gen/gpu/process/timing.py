"""The one CUDA-event timing loop (variants, ceilings, scripts/bench_vs_vendor.py), in the process
whose context is current."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from ...core.timing import (EARLY_STOP_SAMPLES, WARMUP_MS, TimingOptions, median_relative_error,
                           slower_than_cutoff)
from ..runtime.device import event

WARM_SAMPLE_MS = 1.0  # a warm sample times back-to-back launches for about this long
ROUND_SAMPLES = EARLY_STOP_SAMPLES  # samples queued before the host waits and reads them


def event_samples(call: Callable[[], Any], options: TimingOptions, before_each: Callable[[int], None] | None = None,
                  during_round: Callable[[], None] | None = None) -> list[float]:
    """The one CUDA-event timing loop: warm up (`options.warmup` launches, or one that runs for
    WARMUP_MS or more), then time `call` between two events per sample until the median is steady
    (or the budget or sample cap is reached, or the samples are clearly slower than
    `options.stop_above_ms`); milliseconds per call.

    Samples are queued in rounds of up to ROUND_SAMPLES, each between its own pair of events, and
    the host waits once a round: the GPU never idles between the samples of a round. The stopping
    rules are read after each round.

    With `before_each` (an asynchronous L2 flush), the GPU is still busy with it while the host
    records the start event and enqueues the call, so launch latency stays out of the interval.
    Without it (warm), each sample times a batch of back-to-back calls long enough to hide that.
    `during_round` is called while each round runs (the SM clock is read then).
    """
    first_ms = _warm_up(call, options.warmup)
    batch = 1 if before_each else _warm_batch(call, first_ms)
    events = [(event(), event()) for _ in range(min(ROUND_SAMPLES, options.max_samples))]
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
        if during_round:
            during_round()
        pairs[-1][1].synchronize()
        samples += [end.time_since(start) / batch for start, end in pairs]
        if slower_than_cutoff(samples, options):
            break
        if len(samples) >= options.min_samples and (
                median_relative_error(samples) < options.target_rsd or time.monotonic() > deadline):
            break
    return samples


def _warm_up(call: Callable[[], Any], launches: int) -> float | None:
    """Up to `launches` calls before timing: the first, timed, and the others only if it kept the GPU
    busy for less than WARMUP_MS (a kernel that runs for milliseconds is warm after one launch).
    The first call's milliseconds; None without a warm-up."""
    if launches <= 0:
        return None
    first_ms = _timed_call(call)
    if first_ms < WARMUP_MS:
        for _ in range(launches - 1):
            call()
    return first_ms


def _warm_batch(call: Callable[[], Any], first_ms: float | None) -> int:
    """Calls per warm sample: enough for about a millisecond of work."""
    one_ms = first_ms if first_ms is not None else _timed_call(call)
    return max(1, min(1000, math.ceil(WARM_SAMPLE_MS / max(one_ms, 1e-3))))


def _timed_call(call: Callable[[], Any]) -> float:
    start, end = event(), event()
    start.record()
    call()
    end.record()
    end.synchronize()
    return end.time_since(start)
