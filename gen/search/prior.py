"""Other GPUs' measurements of the same kernel, as a search's prior. A user who tuned a kernel on one
GPU tunes it again on the next: the tuning database holds what the other GPUs measured (a tune gives
them to its strategy), and a replay is given other measured spaces of the kernel (`--prior FILE`).

Each other space ranks the points it measured, its fastest 0 and its slowest or failed 1 (ranks, so
that GPUs of any speed weigh alike). A strategy given a prior first proposes the other spaces'
fastest points (`pick`, one space's then the next's, FIRST_PICKS in all), and the trend fits each
point's ranks beside its positions, so it learns from what it measures how far each other GPU's
order holds here."""

from __future__ import annotations

import itertools
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from ..families.variant import Variant
from .space import SearchSpace

FIRST_PICKS = 3  # the other spaces' fastest points a strategy proposes before its own
UNKNOWN = 0.5  # the rank of a point another space did not measure: its middle


class Prior:
    """Per point of `space`, its rank in each other space (`others`: each a variant's time in ms, None
    where it failed; a variant is matched to the space's point by its parameters' values), and the
    other spaces' fastest points in turn (`picks`)."""

    def __init__(self, space: SearchSpace, others: Sequence[Mapping[Variant, float | None]]):
        self.space = space
        self.ranks = np.full((len(space.variants), len(others)), UNKNOWN)
        fastest = []
        for column, measured in enumerate(others):
            found = sorted((math.inf if t is None else t, row) for v, t in measured.items()
                           if (row := _row(space, v)) is not None)
            for rank, (_, row) in enumerate(found):
                self.ranks[row, column] = rank / max(len(found) - 1, 1)
            self.ranks[[row for t, row in found if t == math.inf], column] = 1.0
            fastest.append([space.variants[row] for t, row in found if t < math.inf])
        self.picks = list(dict.fromkeys(v for turn in itertools.zip_longest(*fastest) for v in turn if v is not None))

    def pick(self, unseen: Callable[[Variant], bool]) -> Variant | None:
        """The first of the other spaces' FIRST_PICKS fastest points not yet seen; None once all are."""
        return next((v for v in self.picks[:FIRST_PICKS] if unseen(v)), None)

    def features(self, variants: Sequence[Variant]) -> np.ndarray:
        """The variants' scaled positions (SearchSpace.encoded), then their rank in each other space."""
        return np.hstack([self.space.encoded(variants), self.ranks[[self.space.row[v] for v in variants]]])


def _row(space: SearchSpace, variant: Variant) -> int | None:
    """The space's point with the variant's parameters' values (a point of another space's type), if any."""
    params = variant.params()
    point = space.index.get(tuple(params.get(n) for n in space.names))
    return None if point is None else space.row[point]
