"""Checks of what tilegen takes, the one place that says what a count or a number of seconds may
be: the command line's argument types check text as typed (`*_problem`); the Python API's options
check numbers (`seconds`, `whole`) and their other fields (`run_options`, `tune_options`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from .errors import UsageError
from .strategies import STRATEGIES

_WHOLE = re.compile(r"[0-9]+")  # digits as typed: no sign, no '_', no other scripts' digits


def seconds_problem(value: Any) -> str | None:
    """What is wrong with `value` as a number of seconds, or None."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return "must be a number of seconds"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return "must be a positive, finite number of seconds"
    return None


def whole_problem(value: Any, minimum: int = 0) -> str | None:
    """What is wrong with `value` as a whole number of at least `minimum`, or None."""
    if isinstance(value, str):
        value = int(value) if _WHOLE.fullmatch(value.strip()) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return f"must be a whole number{f' of at least {minimum}' if minimum else ''}"
    return None


def seconds(value: Any, what: str) -> float:
    """A number of seconds given from Python: text is refused, as a number is what the API takes."""
    if problem := seconds_problem(None if isinstance(value, str) else value):
        raise UsageError(f"{what} {problem}, got {value!r}")
    return float(value)


def whole(value: Any, what: str, minimum: int = 0) -> int:
    """A whole number given from Python: text is refused, as a number is what the API takes."""
    if problem := whole_problem(None if isinstance(value, str) else value, minimum):
        raise UsageError(f"{what} {problem}, got {value!r}")
    return int(value)


def name_pattern(value: Any) -> None:
    """A filter of variant names (SweepOptions, TuneOptions): text, or None for every variant."""
    if value is not None and not isinstance(value, str):
        raise UsageError(f"filter must be a name pattern like '*_guard_*', got {value!r}")


def run_given(run: Any) -> None:
    """The `run` of a SweepOptions or TuneOptions."""
    from .pipeline import RunOptions  # pipeline imports this module

    if not isinstance(run, RunOptions):
        raise UsageError(f"run must be a gen.pipeline.RunOptions, got {run!r}")


def run_options(run: Any) -> None:
    """The numbers of a RunOptions (gen.pipeline): what the command line refuses, refused here too."""
    seconds(run.timing.budget_s, "the timing budget (timing.budget_s)")
    seconds(run.silence_s, "the worker timeout (silence_s)")
    if run.compile_jobs is not None:
        whole(run.compile_jobs, "compile_jobs", 1)
    if run.seed is not None:
        whole(run.seed, "seed")
    gpus = list(run.gpus) if isinstance(run.gpus, Iterable) and not isinstance(run.gpus, str) else None
    if not gpus or len(set(gpus)) != len(gpus) or any(whole_problem(g) or isinstance(g, str) for g in gpus):
        raise UsageError(f"gpus must list distinct GPU indices like [0, 1], got {run.gpus!r}")


def tune_options(tune: Any) -> None:
    """The fields of a TuneOptions (gen.tune): what the command line refuses, refused here too."""
    if tune.strategy not in STRATEGIES:
        raise UsageError(f"strategy {tune.strategy!r} is not one of: {', '.join(STRATEGIES)}")
    if tune.budget is not None:
        whole(tune.budget, "budget", 1)
    if tune.time_s is not None:
        seconds(tune.time_s, "time_s")
    whole(tune.seed, "seed")
    whole(tune.top, "top", 1)
    whole(tune.max_points, "max_points", 1)
    name_pattern(tune.filter)
    run_given(tune.run)
