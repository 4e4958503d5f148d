"""The search strategies' common ground: a strategy over a space's valid points, asked and told.
`ask(n)` returns up to n variants not yet told, `tell(variant, time_ms)` reports a measurement (None
when the variant failed; lower is better). Given a prior (other GPUs' measurements of the kernel,
gen.search.prior), a strategy proposes their fastest first. The strategies themselves are in
gen.search.strategies."""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod

from ..families.variant import Variant
from .prior import Prior
from .space import SearchSpace


class Strategy(ABC):
    name: str
    covers_space = False  # proposes the whole space in order: without a budget it evaluates all of it, at once
    uses_seed = True  # its proposals depend on its seed

    def __init__(self, space: SearchSpace, seed: int = 0, prior: Prior | None = None):
        self.space, self.rng, self.prior = space, random.Random(seed), prior  # prior: other GPUs' (gen.search.prior)
        self.results: dict[Variant, float | None] = {}
        self.pending: set[Variant] = set()
        self.seconds = 0.0  # its own time, in ask and tell: a model's fits and acquisitions

    def ask(self, count: int = 1) -> list[Variant]:
        started = time.perf_counter()
        try:
            return self._ask(count)
        finally:
            self.seconds += time.perf_counter() - started

    def _ask(self, count: int) -> list[Variant]:
        proposals: list[Variant] = []
        while len(proposals) < count and len(self.results) + len(self.pending) < len(self.space.variants):
            variant = (self.prior.pick(self._unseen) if self.prior else None) or self._propose()
            if variant is None:
                break
            if self._unseen(variant):
                self.pending.add(variant)
                proposals.append(variant)
        return proposals

    def tell(self, variant: Variant, time_ms: float | None) -> None:
        started = time.perf_counter()
        self.pending.discard(variant)
        self.results[variant] = time_ms
        self._learn(variant, time_ms)
        self.seconds += time.perf_counter() - started

    def likely_next(self, count: int) -> list[Variant]:
        """Up to `count` variants it expects to ask for next, most likely first, to compile ahead; its
        state and its proposals stay as they are. None unless the strategy can say cheaply."""
        return []

    def unseen(self) -> list[Variant]:
        return [v for v in self.space.variants if self._unseen(v)]

    def _unseen(self, variant: Variant) -> bool:
        return variant not in self.results and variant not in self.pending

    def random_unseen(self) -> Variant | None:
        unseen = self.unseen()
        return self.rng.choice(unseen) if unseen else None

    def random_draws(self, count: int) -> list[Variant]:
        """The next `count` draws of random_unseen, made on a copy of the generator: what it
        proposes next while drawing at random."""
        copy = random.Random()
        copy.setstate(self.rng.getstate())
        unseen, drawn = self.unseen(), []
        while unseen and len(drawn) < count:
            drawn.append(choice := copy.choice(unseen))
            unseen.remove(choice)
        return drawn

    @abstractmethod
    def _propose(self) -> Variant | None: ...

    def _learn(self, variant: Variant, time_ms: float | None) -> None:
        """Update the strategy's state with a new measurement."""
