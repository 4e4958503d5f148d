"""Search strategies over a space's valid points (gen.search.strategy's `Strategy`, asked and told): brute
force, random, annealing, local search, a genetic algorithm, a trend model's screen, Bayesian
optimisation (a Gaussian process) and a portfolio. Every strategy proposes only valid variants
(neighbourhoods, crossover and mutation are repaired onto them)."""

from __future__ import annotations

import math
import random

import numpy as np

from ..families.variant import Variant
from .gaussian_process import Posterior, expected_improvement
from .prior import Prior
from .space import SearchSpace
from .strategy import Strategy
from .surrogates import nearest_mean, quadratic_trend, ranks_of, trend_and_forest


class BruteForce(Strategy):
    name, covers_space, uses_seed = "brute", True, False

    def _propose(self) -> Variant | None:
        unseen = self.unseen()
        return unseen[0] if unseen else None


class RandomSampling(Strategy):
    name = "random"

    def _propose(self) -> Variant | None:
        return self.random_unseen()

    def likely_next(self, count: int) -> list[Variant]:
        return self.random_draws(count)


class SimulatedAnnealing(Strategy):
    """A walk whose every step moves each parameter by at most one position (first setting each to a
    random value with probability HOP), as Kernel Tuner's annealing steps; a slower point is taken
    with probability exp(-Δ/T), Δ its relative slow-down, T cooling with each evaluation, and a failed
    one never. Each step is the best guess of POOL drawn: the one whose NEAREST measured points
    (by their positions) are fastest on average, a k-nearest-neighbour screen after Kernel Tuner's
    hybrid_vndx. A walk whose TRIES draws all land on points seen or not valid jumps to a random
    unseen point."""

    name = "anneal"
    START_TEMPERATURE, COOLING, HOP, TRIES = 0.1, 0.93, 0.2, 30
    POOL, NEAREST = 4, 3

    def __init__(self, space: SearchSpace, seed: int = 0, prior: Prior | None = None):
        super().__init__(space, seed, prior)
        self.current: Variant | None = None
        self.current_time = math.inf
        self.temperature = self.START_TEMPERATURE

    def _propose(self) -> Variant | None:
        return self._step(self.rng) if self.current is not None else self.random_unseen()

    def likely_next(self, count: int) -> list[Variant]:
        """Its next steps from the current point, drawn on a copy of its generator."""
        if self.current is None:
            return self.random_draws(count)
        copy = random.Random()
        copy.setstate(self.rng.getstate())
        return list(dict.fromkeys(v for _ in range(count) if (v := self._step(copy)) is not None))

    def _step(self, rng: random.Random) -> Variant | None:
        drawn = list(dict.fromkeys(v for _ in range(self.POOL) if (v := self._draw(rng)) is not None))
        measured = [(v, t) for v, t in self.results.items() if t is not None]
        if len(drawn) < 2 or len(measured) < self.NEAREST:
            return drawn[0] if drawn else None
        guesses = nearest_mean(self.space.encoded([v for v, _ in measured]), np.log([t for _, t in measured]),
                               self.space.encoded(drawn), self.NEAREST)
        return drawn[int(np.argmin(guesses))]

    def _draw(self, rng: random.Random) -> Variant | None:
        assert self.current is not None
        sizes = [len(self.space.values[n]) for n in self.space.varying]
        for _ in range(self.TRIES):
            position = [rng.randrange(size) if rng.random() < self.HOP else at
                        for size, at in zip(sizes, self.space.position(self.current))]
            candidate = self.space.at([min(max(at + rng.choice((-1, 0, 1)), 0), size - 1)
                                       for size, at in zip(sizes, position)])
            if candidate is not None and self._unseen(candidate):
                return candidate
        unseen = self.unseen()
        return rng.choice(unseen) if unseen else None

    def _learn(self, variant: Variant, time_ms: float | None) -> None:
        self.temperature *= self.COOLING
        if time_ms is None:
            return
        if self.current is None or time_ms < self.current_time:
            self.current, self.current_time = variant, time_ms
            return
        slow_down = (time_ms - self.current_time) / self.current_time
        if self.rng.random() < math.exp(-slow_down / max(self.temperature, 1e-9)):
            self.current, self.current_time = variant, time_ms


class LocalSearch(Strategy):
    """Iterated local search with a variable-neighbourhood descent: from the best of a few random
    points, first improvement over three neighbourhoods in turn (the next value up or down of one
    parameter, then any value of one parameter, then the next values of two parameters at once),
    moving as soon as one is faster; where none is, it jumps a few random steps from the best point
    found and climbs again. The two-parameter steps cross what one-parameter steps cannot (a basin
    whose way out changes two parameters together: dedispersion's tile size and stride, sgemm's tile
    shapes), but come last: at a trap they are the most points, and on the public convolution spaces
    another value of one parameter (the block width) is the way on (docs/results/search-replay.md,
    the neighbourhoods' round)."""

    name = "local"
    INITIAL, JUMP = 3, 3

    def __init__(self, space: SearchSpace, seed: int = 0, prior: Prior | None = None):
        super().__init__(space, seed, prior)
        self.current: Variant | None = None

    def _propose(self) -> Variant | None:
        if len(self.results) < self.INITIAL or self.current is None:
            return self.random_unseen()
        fresh = self._fresh(self.current)
        if not fresh:
            self.current = self._jump()
            fresh = self._fresh(self.current) if self.current is not None else []
        return fresh[0] if fresh else self.random_unseen()

    def likely_next(self, count: int) -> list[Variant]:
        """The current point's unseen neighbours, next values first: the climb's next step is one of them."""
        if self.current is None:
            return self.random_draws(count) if len(self.results) < self.INITIAL else []
        near = [v for neighbourhood in self._neighbourhoods(self.current) for v in neighbourhood]
        return [v for v in dict.fromkeys(near) if self._unseen(v)][:count]

    def _fresh(self, variant: Variant) -> list[Variant]:
        """Its unseen neighbours, each neighbourhood in random order, the nearer first."""
        near = []
        for neighbourhood in self._neighbourhoods(variant):
            self.rng.shuffle(neighbourhood)
            near += neighbourhood
        return [v for v in dict.fromkeys(near) if self._unseen(v)]

    def _neighbourhoods(self, variant: Variant) -> list[list[Variant]]:
        return [self.space.neighbours(variant), self.space.other_values(variant), self.space.pair_steps(variant)]

    def _jump(self) -> Variant | None:
        measured = [(time_ms, i, v) for i, (v, time_ms) in enumerate(self.results.items()) if time_ms is not None]
        walker = min(measured)[2] if measured else None  # the fastest so far (the first of equals)
        for _ in range(self.JUMP):
            steps = self.space.other_values(walker) if walker is not None else []
            walker = self.rng.choice(steps) if steps else walker
        return walker

    def _learn(self, variant: Variant, time_ms: float | None) -> None:
        if time_ms is None:
            return
        current = self.results.get(self.current) if self.current is not None else None
        if current is None or time_ms < current:
            self.current = variant


class GeneticAlgorithm(Strategy):
    """A population of the fittest points; children by uniform crossover of two tournament winners
    and mutation of one parameter to a random value, repaired onto the nearest valid unseen point."""

    name = "genetic"
    POPULATION, MUTATION = 10, 0.4

    def _propose(self) -> Variant | None:
        population = sorted((v for v, t in self.results.items() if t is not None), key=lambda v: self.results[v])
        if len(population) < self.POPULATION:
            return self.random_unseen()
        population = population[: self.POPULATION]
        mother, father = self._tournament(population), self._tournament(population)
        child = {n: getattr(self.rng.choice((mother, father)), n) for n in self.space.names}
        if self.rng.random() < self.MUTATION:
            name = self.rng.choice(self.space.varying)
            child[name] = self.rng.choice(self.space.values[name])
        repaired = self.space.index.get(tuple(child[n] for n in self.space.names))
        if repaired is None or repaired in self.results or repaired in self.pending:
            repaired = self.space.nearest(child, set(self.results) | self.pending)
        return repaired

    def _tournament(self, population: list[Variant]) -> Variant:
        contenders = self.rng.sample(population, min(3, len(population)))
        return min(contenders, key=lambda v: self.results[v])


class Trend(Strategy):
    """A model's screen after INITIAL random points: each proposal is the fastest guess, by a quadratic
    trend over the parameters' positions (gen.search.surrogates) of every told point's rank (a failure
    last: ranks, so a few very slow points do not outweigh the rest), of up to NEAR unseen points one or
    two steps from the best found and DRAWN random unseen ones: a few points say which way is faster."""

    name, INITIAL, NEAR, DRAWN, RIDGE = "trend", 2, 8, 256, 0.1

    def _propose(self) -> Variant | None:
        measured = [v for v, t in self.results.items() if t is not None]
        if len(self.results) < self.INITIAL or not measured:
            return self.random_unseen()
        best = min(measured, key=lambda v: self.results[v])
        near = [v for v in self.space.neighbours(best) + self.space.pair_steps(best) if self._unseen(v)]
        self.rng.shuffle(near)
        drawn = (self.space.variants[self.rng.randrange(len(self.space.variants))] for _ in range(2 * self.DRAWN))
        pool = list(dict.fromkeys(near[:self.NEAR] + [v for v in drawn if self._unseen(v)][:self.DRAWN]))
        if not pool:
            return self.random_unseen()
        told = list(self.results)
        ranks = ranks_of([self.results[v] for v in told])
        return pool[int(np.argmin(self._guesses(self.space.encoded(told), ranks, self.space.encoded(pool))))]

    def _guesses(self, positions: np.ndarray, ranks: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """Each candidate's guess from the told points' positions and ranks: the lowest is proposed."""
        return quadratic_trend(positions, ranks, candidates, self.RIDGE)


class Forest(Trend):
    """The trend's screen by the trend plus a random forest of its residuals (TREES trees, LEAF points a
    leaf, SHARE of the parameters a split): the highest expected improvement, from the trees' spread."""

    name, INITIAL, TREES, LEAF, SHARE = "forest", 5, 10, 3, 0.8

    def _guesses(self, positions: np.ndarray, ranks: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        guess, spread = trend_and_forest(positions, ranks, candidates, self.RIDGE, self.TREES, self.LEAF, self.SHARE,
                                         np.random.default_rng(self.rng.getrandbits(32)))
        return -expected_improvement(guess, spread, float(ranks.min()))


class BayesianOptimisation(Strategy):
    """A Gaussian process on log time (RBF kernel over the scaled parameter positions, length scale
    chosen by marginal likelihood) proposes the unseen point of highest expected improvement; every
    LOCAL_EVERY-th proposal instead refines the incumbent: its unseen neighbour with the lowest
    predicted time. Failed points count as the worst time seen, so the model learns to avoid them.

    Several proposals at once (ask(q), while earlier ones are still being measured): each point
    proposed but not yet told enters the model as if it had measured the best time so far (the
    constant liar, CL-min), so the next proposal looks elsewhere instead of next to it."""

    name, INITIAL, LOCAL_EVERY, LENGTH_SCALES, NOISE = "bayes", 10, 4, (0.15, 0.25, 0.4, 0.7), 1e-3

    def __init__(self, space: SearchSpace, seed: int = 0, prior: Prior | None = None):
        super().__init__(space, seed, prior)
        self._ranked: list[Variant] | None = None  # the unseen points by its last acquisition, best first

    def _propose(self) -> Variant | None:
        measured = [v for v, t in self.results.items() if t is not None]
        if len(self.results) < self.INITIAL or not measured:
            return self.random_unseen()
        unseen = self.unseen()
        if not unseen:
            return None
        predict = self._model()
        if (len(self.results) + len(self.pending)) % self.LOCAL_EVERY == 0:
            incumbent = min(measured, key=lambda v: self.results[v])
            local = [v for v in self.space.neighbours(incumbent) if self._unseen(v)]
            if local:
                mu, _ = predict(local)
                return local[int(np.argmin(mu))]
        improvement = expected_improvement(*predict(unseen), predict.best)
        self._ranked = [unseen[i] for i in np.argsort(-improvement, kind="stable")]
        return self._ranked[0]

    def likely_next(self, count: int) -> list[Variant]:
        """While it samples at random, its next draws; then the unseen points its last acquisition
        ranked highest after the one it proposed (no model is fitted for this)."""
        if self._ranked is None:
            return self.random_draws(count)
        return [v for v in self._ranked if self._unseen(v)][:count]

    def _model(self) -> Posterior:
        told, pending = list(self.results), list(self.pending)
        measured = [t for t in self.results.values() if t is not None]
        times = [self.results[v] if self.results[v] is not None else max(measured) for v in told]
        return Posterior.fitted(self.space, self.space.encoded(told + pending),
                                np.log(times + [min(measured)] * len(pending)), self.LENGTH_SCALES, self.NOISE)


class Portfolio(Strategy):
    """Several strategies sharing one budget by their progress, after a space-filling start: the first
    INITIAL points are a maximin design (a random point, then each the point farthest from all taken,
    by the L1 distance over the parameters' scaled positions: the space's corners and extremes, which
    also give the trend a wide base; given a prior, its fastest points are the start instead). Then
    each proposal comes from the member whose proposals have lately most often improved the best time
    (Thompson sampling of a Beta(1 + improved, 1 + not) per member, from the strategy's seed, the
    counts multiplied by FORGET at every result told, so that the last ten or so weigh most: the
    member that leads changes as the search moves from sampling to refining). Every member is told
    every result, failures included, so each climbs from what the others found, and none proposes a
    point another has measured or is measuring.

    The local search (the first member) proposes with probability LOCAL_FLOOR before any draw, so it
    makes about half of the proposals, not a third: new bests are too rare for the draws to tell the
    members apart, and its climb, which gets three of the four public convolution spaces within 1% of
    the optimum soonest, needs the proposals (docs/results/search-replay.md, the neighbourhoods' round)."""

    name, MEMBERS, FORGET, INITIAL, LOCAL_FLOOR = "portfolio", ("local", "trend", "anneal"), 0.9, 6, 0.4

    def __init__(self, space: SearchSpace, seed: int = 0, prior: Prior | None = None):
        super().__init__(space, seed, prior)
        self.members = [STRATEGY_TYPES[name](space, seed + number) for number, name in enumerate(self.MEMBERS)]
        self.record = [[0.0, 0.0] for _ in self.members]  # per member: proposals that improved the best, and not
        self.proposer: dict[Variant, int] = {}

    def _propose(self) -> Variant | None:
        taken = [*self.results, *self.pending]
        if self._starting(taken):
            return self._shared(self.rng.choice(self.space.farthest(taken)))
        if self.rng.random() < self.LOCAL_FLOOR and (proposed := self._member_proposes(0)):
            return proposed
        draws = [self.rng.betavariate(1 + improved, 1 + not_improved) for improved, not_improved in self.record]
        for number in sorted(range(len(self.members)), key=lambda m: -draws[m]):
            if proposed := self._member_proposes(number):
                return proposed
        return None

    def _member_proposes(self, number: int) -> Variant | None:
        """The member's next proposal, credited to it and pending for all; None where it has none."""
        proposed = self.members[number].ask(1)
        if not proposed:
            return None
        self.proposer[proposed[0]] = number
        return self._shared(proposed[0])

    def _starting(self, taken: list[Variant]) -> bool:
        """Still in the space-filling start: fewer than INITIAL taken (a tune's warm picks, a family's
        likely best, count among them: they take the corners' place), and no prior's picks (the other
        GPUs' fastest points start a search better than the space's corners)."""
        return (self.prior is None or not self.prior.picks) and len(taken) < self.INITIAL

    def _shared(self, variant: Variant) -> Variant:
        """The proposal, pending for every member: none proposes it again."""
        for member in self.members:
            member.pending.add(variant)
        return variant

    def likely_next(self, count: int) -> list[Variant]:
        """In the start, its next point's candidates; then what its members expect to propose next, the
        local search's first."""
        taken = [*self.results, *self.pending]
        if self._starting(taken):
            return self.space.farthest(taken)[:count] if taken else self.random_draws(count)
        return list(dict.fromkeys(v for member in self.members for v in member.likely_next(count)))[:count]

    def _learn(self, variant: Variant, time_ms: float | None) -> None:
        before = min((t for v, t in self.results.items() if t is not None and v != variant), default=math.inf)
        self.record = [[count * self.FORGET for count in counts] for counts in self.record]
        if variant in self.proposer:
            self.record[self.proposer.pop(variant)][0 if time_ms is not None and time_ms < before else 1] += 1
        for member in self.members:
            member.tell(variant, time_ms)


STRATEGY_TYPES: dict[str, type[Strategy]] = {c.name: c for c in (BruteForce, RandomSampling, SimulatedAnnealing,
    LocalSearch, GeneticAlgorithm, Trend, Forest, BayesianOptimisation, Portfolio)}  # --strategy's choices, in order
STRATEGIES = tuple(STRATEGY_TYPES)
DEFAULT_STRATEGY = "portfolio"  # the best replayed, on public spaces and sgemm: docs/results/search-replay.md


def make_strategy(name: str, space: SearchSpace, seed: int = 0, prior: Prior | None = None) -> Strategy:
    if name not in STRATEGY_TYPES:
        raise ValueError(f"strategy {name!r} is not one of: {', '.join(STRATEGIES)}")
    return STRATEGY_TYPES[name](space, seed, prior)

