"""Other GPUs' measurements of the same kernel, as a search's prior. A user who tuned a kernel on one
GPU tunes it again on the next: the tuning database holds what the other GPUs measured (a tune gives
it to its strategy), and a replay is given other measured spaces of the kernel (`--prior FILE`).

A strategy given a prior first proposes the other spaces' fastest points (`pick`: one space's fastest,
the next space's, ..., then each one's second, FIRST_PICKS in all), and goes on from what they measure
here: its models and walks start from them in place of random points (docs/results/search-replay.md)."""

from __future__ import annotations

import itertools
from typing import Callable, Mapping, Sequence

from ..families.variant import Variant
from .space import SearchSpace

FIRST_PICKS = 3  # the other spaces' fastest points a strategy proposes before its own


class Prior:
    """The other spaces' (`others`: each a variant's time in ms, None where it failed) fastest points
    of `space`, in turn (`picks`); a variant is matched to the space's point by its parameters' values."""

    def __init__(self, space: SearchSpace, others: Sequence[Mapping[Variant, float | None]]):
        self.spaces, fastest = len(others), []
        for measured in others:
            ran = [(t, space.row[point]) for v, t in measured.items() if t is not None
                   and (point := _point(space, v)) is not None]
            fastest.append([row for _, row in sorted(ran)])
        self.picks = [space.variants[row] for row in dict.fromkeys(
            row for turn in itertools.zip_longest(*fastest) for row in turn if row is not None)]

    def pick(self, unseen: Callable[[Variant], bool]) -> Variant | None:
        """The first of the other spaces' FIRST_PICKS fastest points not yet seen; None once all are."""
        return next((v for v in self.picks[:FIRST_PICKS] if unseen(v)), None)


def _point(space: SearchSpace, variant: Variant) -> Variant | None:
    """The space's point with the variant's parameters' values (a point of another space's type), if any."""
    params = variant.params()
    return space.index.get(tuple(params.get(n) for n in space.names))
