"""A space's valid points as the search strategies see them: each parameter's ordered values, the
points one or two parameters away, positions, and distances between points."""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from ..families.variant import Variant


class SearchSpace:
    """Valid variants, each parameter's ordered values, and distances between points."""

    def __init__(self, variants: Sequence[Variant]):
        if not variants:
            raise ValueError("the space has no valid variant")
        self.variants = list(variants)
        self.names = [p.name for p in type(variants[0]).parameters()]
        self.values = {n: sorted({getattr(v, n) for v in variants}, key=_order) for n in self.names}
        self.varying = [n for n in self.names if len(self.values[n]) > 1]
        self.index = {self.key(v): v for v in self.variants}
        self.features = np.array([self.encode(v) for v in self.variants])
        self.row = {v: i for i, v in enumerate(self.variants)}

    def encoded(self, variants: Sequence[Variant]) -> np.ndarray:
        """The variants' rows of `features` (what `encode` gives, computed once per space)."""
        return self.features[[self.row[v] for v in variants]]

    def key(self, variant: Variant) -> tuple:
        return tuple(getattr(variant, n) for n in self.names)

    def encode(self, variant: Variant) -> list[float]:
        """Each varying parameter as its position in its value list, scaled to [0, 1]."""
        return [self.values[n].index(getattr(variant, n)) / (len(self.values[n]) - 1) for n in self.varying]

    def neighbours(self, variant: Variant) -> list[Variant]:
        """Valid points one step away in one parameter (the next value up or down)."""
        found = []
        for name in self.varying:
            values = self.values[name]
            position = values.index(getattr(variant, name))
            for step in (-1, 1):
                if 0 <= position + step < len(values):
                    candidate = self.index.get(self._moved(variant, name, values[position + step]))
                    if candidate is not None:
                        found.append(candidate)
        return found

    def pair_steps(self, variant: Variant) -> list[Variant]:
        """Valid points one step away in each of two parameters at once (what a one-parameter step
        cannot reach where the step in either alone is invalid or slower)."""
        position, found = self.position(variant), []
        for first, second in itertools.combinations(range(len(position)), 2):
            for step_first, step_second in itertools.product((-1, 1), repeat=2):
                moved = list(position)
                moved[first] += step_first
                moved[second] += step_second
                if (candidate := self.at(moved)) is not None:
                    found.append(candidate)
        return found

    def other_values(self, variant: Variant) -> list[Variant]:
        """Valid points that differ from `variant` in one parameter, by any value (Hamming distance 1)."""
        return [candidate for name in self.varying for value in self.values[name] if value != getattr(variant, name)
                if (candidate := self.index.get(self._moved(variant, name, value))) is not None]

    def farthest(self, taken: Sequence[Variant]) -> list[Variant]:
        """The valid points not taken farthest from those taken: the largest L1 distance over the scaled
        positions to the nearest taken point (a maximin design's next point is one of them; every
        point when none is taken)."""
        distance = np.full(len(self.variants), np.inf)
        for row in self.encoded(taken):
            np.minimum(distance, np.abs(self.features - row).sum(axis=1), out=distance)
        distance[[self.row[v] for v in taken]] = -1
        return [self.variants[i] for i in np.flatnonzero(distance == distance.max()) if distance[i] >= 0]

    def position(self, variant: Variant) -> list[int]:
        """Each varying parameter's position in its ordered values."""
        return [self.values[n].index(getattr(variant, n)) for n in self.varying]

    def at(self, position: Sequence[int]) -> Variant | None:
        """The valid point at these positions of the varying parameters, if it is one."""
        if any(not 0 <= at < len(self.values[n]) for n, at in zip(self.varying, position)):
            return None
        chosen = dict(zip(self.varying, position))
        return self.index.get(tuple(self.values[n][chosen.get(n, 0)] for n in self.names))

    def nearest(self, params: dict[str, Any], exclude: set[Variant]) -> Variant | None:
        """The valid point closest to a possibly invalid combination (for repairing offspring)."""
        target = np.array([self.values[n].index(params[n]) / (len(self.values[n]) - 1) for n in self.varying])
        order = np.argsort(np.abs(self.features - target).sum(axis=1), kind="stable")
        return next((self.variants[i] for i in order if self.variants[i] not in exclude), None)

    def _moved(self, variant: Variant, name: str, value: Any) -> tuple:
        return tuple(value if n == name else getattr(variant, n) for n in self.names)


def _order(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))
