"""Checks of the numbers tilegen takes, the one place that says what a count or a number of
seconds may be: the command line's argument types and the Python API's options both use them."""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import UsageError

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
    if problem := seconds_problem(value):
        raise UsageError(f"{what} {problem}, got {value!r}")
    return float(value)


def whole(value: Any, what: str, minimum: int = 0) -> int:
    if problem := whole_problem(value, minimum):
        raise UsageError(f"{what} {problem}, got {value!r}")
    return int(value)


def run_options(run: Any) -> None:
    """The numbers of a RunOptions (gen.pipeline): what the command line refuses, refused here too."""
    seconds(run.timing.budget_s, "the timing budget (timing.budget_s)")
    seconds(run.silence_s, "the worker timeout (silence_s)")
    if run.compile_jobs is not None:
        whole(run.compile_jobs, "compile_jobs", 1)
    if run.seed is not None:
        whole(run.seed, "seed")
    gpus = None if isinstance(run.gpus, (str, int)) else list(run.gpus)
    if not gpus or len(set(gpus)) != len(gpus) or any(whole_problem(g) or isinstance(g, str) for g in gpus):
        raise UsageError(f"gpus must list distinct GPU indices like [0, 1], got {run.gpus!r}")
