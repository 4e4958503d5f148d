"""Checks of what tilegen takes, the one place that says what a count or a number of seconds may
be: text typed by people is read by `whole_text` (parameter values, sizes, counts); the command
line's argument types check text as typed (`*_problem`); the Python API's options check numbers
(`seconds`, `whole`, numpy's included); each options class checks its own fields with these."""

from __future__ import annotations

import json
import math
import numbers
import os
import re
from typing import Any

from .errors import UsageError

# The longest wait the operating system takes: poll() counts milliseconds in a signed 32-bit int.
LONGEST_WAIT_S = (2**31 - 1) // 1000  # 24.8 days
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
    if value > LONGEST_WAIT_S:
        return f"must be at most {LONGEST_WAIT_S} seconds (24.8 days, the longest wait the operating system takes)"
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


def text_seconds(value: Any, what: str, hint: str = "") -> float:
    """A positive, finite number of seconds, from a number or its text (an environment variable's);
    UsageError naming `what` otherwise, with `hint` after the problem."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if problem := seconds_problem(number):
        raise UsageError(f"{what} {problem}{hint}, got {value!r}")
    return number


def env_seconds(name: str, default: float, hint: str = "") -> float:
    """Seconds from the environment variable `name` (text_seconds), else `default` where it is unset or empty."""
    text = os.environ.get(name, "").strip()
    return text_seconds(text, f"${name}", hint) if text else default


def whole(value: Any, what: str, minimum: int = 0) -> int:
    """A whole number given from Python: text is refused, as a number is what the API takes."""
    if problem := whole_problem(None if isinstance(value, str) else value, minimum):
        raise UsageError(f"{what} {problem}, got {value!r}")
    return int(value)


def name_pattern(value: Any) -> None:
    """A filter of variant names (SweepOptions, TuneOptions): text, or None for every variant."""
    if value is not None and not isinstance(value, str):
        raise UsageError(f"filter must be a name pattern like '*_guard_*', got {value!r}")


def instance(value: Any, kind: type, what: str) -> None:
    """An option from Python that must be an instance of `kind` (a TimingOptions, a RunOptions)."""
    if not isinstance(value, kind):
        raise UsageError(f"{what} must be a {kind.__module__}.{kind.__qualname__}, got {value!r}")


def keep(options: Any, name: str, value: Any) -> None:
    """Set a field of a frozen options dataclass, as its __post_init__ may."""
    object.__setattr__(options, name, value)


def strict_json(text: str | bytes) -> Any:
    """JSON whose objects name each key once; ValueError otherwise."""
    return json.loads(text, object_pairs_hook=_distinct_keys)


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} is given twice")
        found[key] = value
    return found
