"""A strategy replayed against recorded measurements, without a GPU: how the tuning study and the
tests compare strategies on spaces measured once in full."""

from __future__ import annotations

from typing import Mapping

from .strategies import SearchSpace, make_strategy


def replay(strategy: str, recorded: Mapping[str, float | None], space: SearchSpace, budget: int,
           seed: int = 0, batch: int = 1) -> list[tuple[str, float | None]]:
    """Run a strategy against recorded measurements (name -> median ms, None for failures), no GPU:
    what it asked for and the median it would have seen, in order. With `batch`, it proposes that
    many at a time, each batch told before the next is asked for (as while the GPU is busy)."""
    search = make_strategy(strategy, space, seed)
    seen: list[tuple[str, float | None]] = []
    while len(seen) < min(budget, len(space.variants)):
        proposed = search.ask(min(batch, budget - len(seen)))
        if not proposed:
            break
        for variant in proposed:
            median = recorded.get(variant.name)
            search.tell(variant, median)
            seen.append((variant.name, median))
    return seen
