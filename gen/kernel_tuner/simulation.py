"""`gen.tune_kernel(..., simulation_mode=True, cache=FILE)`: Kernel Tuner's simulation mode. The
strategy is replayed over the measured space in the cache file (a Kernel Tuner cache file or a T4
file; gen.search.measured), no GPU and no compiler: each configuration it asks for is answered with
the file's measurement, and the simulated clock advances by the file's compile, framework and run
times. The strategy is tilegen's own, the same code a real tune runs (gen.search.replay)."""

from __future__ import annotations

import itertools
from typing import Any, Mapping

from ..core.errors import UsageError
from ..search.measured import read_measured
from ..search.replay import replay
from ..search.strategies import STRATEGY_TYPES
from ..commands.tune import DEFAULT_BUDGET


def simulated_tune(kernel_name: str, tune_params: Mapping, cache: Any, strategy: str, limits: Mapping[str, Any],
                   seed: int) -> tuple[list[dict], dict]:
    """Kernel Tuner's (results, env) of a replayed tune: one dict per configuration evaluated, in
    order, with its `time` (ms) or "RuntimeFailedConfig", and the simulated seconds at which it was
    known; `limits` are the checked strategy_options (max_fevals, time_limit in simulated seconds)."""
    if cache is None:
        raise UsageError("simulation_mode=True replays a measured space: give cache=FILE (a Kernel Tuner cache "
                         "file or a T4 file)")
    measured = read_measured(cache)
    names = [p.name for p in type(measured.space.variants[0]).parameters()]
    if not isinstance(tune_params, Mapping) or sorted(tune_params) != sorted(names):
        raise UsageError(f"tune_params must name the cache file's parameters ({', '.join(names)}) in simulation "
                         f"mode; got {', '.join(tune_params) if isinstance(tune_params, Mapping) else tune_params!r}")
    whole = STRATEGY_TYPES[strategy].covers_space
    budget = limits.get("max_fevals") or (len(measured) if whole else DEFAULT_BUDGET)
    asked = replay(strategy, measured.time_ms, measured.space, budget, seed)
    clock = list(itertools.accumulate(measured.cost_s[name] for name, _ in asked))
    if limits.get("time_limit") is not None:
        asked = [a for a, seconds in zip(asked, clock) if seconds <= limits["time_limit"]] or asked[:1]
    by_name = {v.name: v for v in measured.space.variants}
    results = [{**by_name[name].params(), "time": median if median is not None else "RuntimeFailedConfig",
                "simulated_seconds": seconds} for (name, median), seconds in zip(asked, clock)]
    ran = [r for r in results if not isinstance(r["time"], str)]
    best = min(ran, key=lambda r: r["time"]) if ran else None
    env = {"kernel_name": kernel_name, "simulation_mode": True, "cache": measured.source, "strategy": strategy,
           "evaluations": len(results), "simulated_time": 1000 * (results[-1]["simulated_seconds"] if results else 0),
           "best": {n: best[n] for n in names} if best else None, "best_time": best["time"] if best else None,
           "optimum_time": measured.optimum_ms}
    return results, env
