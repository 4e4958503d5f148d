"""How long a compiler may take: a compile, $TILEGEN_COMPILE_TIMEOUT seconds (DEFAULT_TIMEOUT_S
unless set); a question to the compiler (its version, its architectures), QUERY_TIMEOUT_S and
never more than a compile. The same for every compiler."""

from __future__ import annotations

from ..core.checks import env_seconds

TIMEOUT_ENV = "TILEGEN_COMPILE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0  # the largest sgemm variants compile in seconds: ten minutes is a hang
QUERY_TIMEOUT_S = 30.0  # `nvcc --version` answers at once; at most the compile deadline


def compile_timeout() -> float:
    """The deadline of one compile: $TILEGEN_COMPILE_TIMEOUT seconds, else DEFAULT_TIMEOUT_S."""
    return env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def query_timeout() -> float:
    """The deadline of a question to a compiler."""
    return min(QUERY_TIMEOUT_S, compile_timeout())
