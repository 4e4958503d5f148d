"""How long a compiler may take: a compile, $TILEGEN_COMPILE_TIMEOUT seconds (DEFAULT_TIMEOUT_S
unless set); a question to the compiler (its version, its architectures), QUERY_TIMEOUT_S and
never more than a compile. The same for every compiler."""

from __future__ import annotations

import math
import os
from typing import Any

from ..core.checks import seconds_problem
from ..core.errors import UsageError

TIMEOUT_ENV = "TILEGEN_COMPILE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0  # the largest sgemm variants compile in seconds: ten minutes is a hang
QUERY_TIMEOUT_S = 30.0  # `nvcc --version` answers at once; at most the compile deadline


def compile_timeout() -> float:
    """The deadline of one compile: $TILEGEN_COMPILE_TIMEOUT seconds, else DEFAULT_TIMEOUT_S."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    return seconds(text, f"${TIMEOUT_ENV}") if text else DEFAULT_TIMEOUT_S


def query_timeout() -> float:
    """The deadline of a question to a compiler."""
    return min(QUERY_TIMEOUT_S, compile_timeout())


def seconds(value: Any, what: str) -> float:
    """A positive, finite number of seconds, from a number or its text; UsageError otherwise."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if problem := seconds_problem(number):
        raise UsageError(f"{what} {problem}, got {value!r}")
    return number
