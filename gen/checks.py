"""Checks of what tilegen takes, the one place that says what a count or a number of seconds may
be: text typed by people is read by `whole_text` (parameter values, sizes, counts); the command
line's argument types check text as typed (`*_problem`); the Python API's options check numbers
(`seconds`, `whole`, numpy's included) and their other fields (`run_options`, `tune_options`)."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .errors import UsageError
from .results import TimingOptions

_WHOLE = re.compile(r"[0-9]+")  # digits as typed: no sign, no '_', no other scripts' digits


def whole_text(text: str, negative: bool = False) -> int | None:
    """The whole number `text` spells, or None: the one rule for every count and size typed (a
    parameter's value, a dimension, --budget). ASCII digits only: no '+', no '_' and no other
    scripts' digits, which int() would all take. A leading '-' only where `negative` allows it,
    and never '-0', which is refused like '+16'."""
    sign, digits = ("-", text[1:]) if negative and text.startswith("-") else ("", text)
    if not _WHOLE.fullmatch(digits) or (sign and not digits.strip("0")):
        return None
    return int(sign + digits)


def whole_rule(negative: bool = False) -> str:
    """What whole_text takes, said in a message."""
    sign = "'-' only before a negative value" if negative else "no sign"
    return f"ASCII digits, {sign}, no '_'"


def is_whole(value: Any) -> bool:
    """An integer of any kind, numpy's too (numpy integers are integers), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number of any kind, numpy's too, but not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def flag(value: Any, what: str) -> None:
    """A yes/no option from Python: True or False, so that resume='no' is not taken for yes."""
    if not isinstance(value, bool):
        raise UsageError(f"{what} must be True or False, got {value!r}")


def seconds_problem(value: Any) -> str | None:
    """What is wrong with `value` as a number of seconds, or None."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return "must be a number of seconds"
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        return "must be a positive, finite number of seconds"
    return None


def whole_problem(value: Any, minimum: int = 0) -> str | None:
    """What is wrong with `value` as a whole number of at least `minimum`, or None."""
    if isinstance(value, str):
        value = whole_text(value.strip())
    if not is_whole(value) or value < minimum:
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
    """The fields of a RunOptions (gen.pipeline): what the command line refuses, refused here too.
    Numbers are kept as Python's own (numpy's are accepted, but JSON, SQLite and random take only
    Python's)."""
    if not isinstance(run.timing, TimingOptions):
        raise UsageError(f"timing must be a gen.results.TimingOptions, got {run.timing!r}")
    flag(run.sanitize, "sanitize")
    flag(run.run_kernels, "run_kernels")
    if run.cluster is not None and not isinstance(run.cluster, str):
        raise UsageError(f"cluster must be 'local' or a scheduler's address like 'tcp://HOST:8786', got "
                         f"{run.cluster!r}")
    budget = seconds(run.timing.budget_s, "the timing budget (timing.budget_s)")
    _keep(run, "timing", replace(run.timing, budget_s=budget))
    _keep(run, "silence_s", seconds(run.silence_s, "the worker timeout (silence_s)"))
    if run.compile_jobs is not None:
        _keep(run, "compile_jobs", whole(run.compile_jobs, "compile_jobs", 1))
    if run.seed is not None:
        _keep(run, "seed", whole(run.seed, "seed"))
    gpus = list(run.gpus) if isinstance(run.gpus, Iterable) and not isinstance(run.gpus, str) else None
    if not gpus or any(isinstance(g, str) or whole_problem(g) for g in gpus) or len(set(gpus)) != len(gpus):
        raise UsageError(f"gpus must list distinct GPU indices like [0, 1], got {run.gpus!r}")
    _keep(run, "gpus", tuple(int(g) for g in gpus))


def tune_options(tune: Any) -> None:
    """The fields of a TuneOptions (gen.tune): what the command line refuses, refused here too;
    numbers kept as Python's own, as in run_options."""
    from .strategies import STRATEGIES  # strategies imports variant, which reads numbers with this module

    if not isinstance(tune.strategy, str) or tune.strategy not in STRATEGIES:
        raise UsageError(f"strategy {tune.strategy!r} is not one of: {', '.join(STRATEGIES)}")
    if tune.budget is not None:
        _keep(tune, "budget", whole(tune.budget, "budget", 1))
    if tune.time_s is not None:
        _keep(tune, "time_s", seconds(tune.time_s, "time_s"))
    _keep(tune, "seed", whole(tune.seed, "seed"))
    _keep(tune, "top", whole(tune.top, "top", 1))
    _keep(tune, "max_points", whole(tune.max_points, "max_points", 1))
    name_pattern(tune.filter)
    flag(tune.progress, "progress")
    run_given(tune.run)


def _keep(options: Any, name: str, value: Any) -> None:
    """Set a field of a frozen options dataclass, as its __post_init__ may."""
    object.__setattr__(options, name, value)
