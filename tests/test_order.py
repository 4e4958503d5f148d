"""Compiling in the order the search will time: a strategy says what it will likely ask for next
(without changing what it asks), the pool compiles that ahead of other speculation, and a search
of the whole space starts with the nearest tuned shape's ranking of it."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from gen.compiling.compiler import CompileOptions
from gen.compiling.pool import CompilePool
from gen.evaluate.options import RunOptions
from gen.families import MatmulVariant, get_family
from gen.families.space import Space
from gen.search.proposers import Search
from gen.search.strategies import STRATEGIES, SearchSpace, make_strategy
from gen.commands.tune import TuneOptions, candidates, tune, warm_start
from gen.store.tuning_db import TuningDB

from . import fakes
from .waits import patient


def _space() -> SearchSpace:
    return SearchSpace(Space.default(get_family("sgemm")).expand().valid[:400])


def _time(variant) -> float | None:
    return None if hash(variant.name) % 11 == 0 else 1.0 + (hash(variant.name) % 97) / 10


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_asking_what_is_likely_next_changes_no_proposal(strategy: str) -> None:
    space = _space()
    plain, asked = make_strategy(strategy, space, seed=5), make_strategy(strategy, space, seed=5)
    for _ in range(20):
        likely = asked.likely_next(6)
        assert all(v not in asked.results and v not in asked.pending for v in likely)
        proposals = plain.ask(2)
        assert asked.ask(2) == proposals
        for variant in proposals:
            plain.tell(variant, _time(variant))
            asked.tell(variant, _time(variant))


def test_random_sampling_knows_its_next_draws() -> None:
    strategy = make_strategy("random", _space(), seed=2)
    for _ in range(5):
        likely = strategy.likely_next(4)
        assert strategy.ask(4) == likely
        for variant in likely:
            strategy.tell(variant, _time(variant))


def test_bayes_names_its_next_candidates_by_its_last_acquisition() -> None:
    strategy = make_strategy("bayes", _space(), seed=1)
    while len(strategy.results) < strategy.INITIAL + 3:
        for variant in strategy.ask(1):
            strategy.tell(variant, _time(variant))
    strategy.ask(1)
    likely = strategy.likely_next(8)
    assert len(likely) == 8 and not set(likely) & (set(strategy.results) | strategy.pending)
    search = Search(make_strategy("bayes", _space(), seed=1), None, budget=30)
    proposal = search.propose(4)
    assert len(proposal.likely) == 16 and not {p.variant for p in proposal.likely} & {p.variant for p in proposal.points}


class _HeldCompiler(fakes.OtherCompiler):
    """nvcc that holds its first run until `release` is set, noting every run's kernels; `compiled`
    is set once `expected` kernels were compiled."""

    def __init__(self, expected: int) -> None:
        super().__init__()
        self.started, self.release, self.compiled = threading.Event(), threading.Event(), threading.Event()
        self.expected = expected

    def compile(self, sources, arch, flags, deadline_s, children):
        self.started.set()
        self.release.wait(patient(60))
        try:
            return super().compile(sources, arch, flags, deadline_s, children)
        finally:
            if sum(map(len, self.runs)) >= self.expected:
                self.compiled.set()


def test_the_likely_ones_compile_ahead_of_other_speculation(compile_options, tmp_path: Path) -> None:
    first, *others = [MatmulVariant(tile=tile, padding=padding) for tile in (8, 16) for padding in (0, 1, 2)]
    compiler = _HeldCompiler(expected=1 + len(others))
    pool = CompilePool(CompileOptions(arch="sm_90", cache=tmp_path, jobs=1, compiler=compiler))
    try:
        pool.prefetch([first])
        assert compiler.started.wait(patient(60))  # the one thread is busy with `first`
        pool.prefetch(others)
        pool.prefetch(others[-2:], first=True)
        compiler.release.set()
        assert compiler.compiled.wait(patient(120))
        assert compiler.runs[0] == [first.name]
        assert [name for run in compiler.runs[1:] for name in run][:2] == [v.name for v in others[-2:]]
    finally:
        pool.kill()


def test_a_whole_space_search_starts_with_the_nearest_shapes_ranking_of_it(tmp_path: Path, compile_options) -> None:
    db = tmp_path / "t.sqlite"
    one_compile_thread = RunOptions(compile_jobs=1)
    tune(TuneOptions("matmul", "64x64x64", strategy="brute", db=db, progress=False, top=1, run=one_compile_thread),
         fakes.FakeExecutor())
    (tuned,) = TuningDB(db).problems()
    family = get_family("matmul")
    shape = family.parse_shape("128x128x128")
    valid = Space.default(family).expand().valid
    ranking = warm_start(TuningDB(db), replace(tuned, shape=str(shape)), family, shape, valid, len(valid))
    assert [v.name for v in ranking] == [row.name for row in TuningDB(db).top(tuned, len(valid))]
    assert len(ranking) > 10
    executor = fakes.FakeExecutor()
    tune(TuneOptions("matmul", "128x128x128", strategy="brute", db=db, progress=False, top=1, run=one_compile_thread),
         executor)
    # A point compiled speculatively may overtake one still compiling, by at most the points in flight.
    assert set(v.name for v in ranking[:10]) <= {job.name for job in executor.ran[:15]}


def test_a_whole_space_search_started_warm_proposes_every_variant_once() -> None:
    family = get_family("sgemm")
    shape = family.parse_shape("512x512x512")
    variants = candidates(family, shape, TuneOptions(family="sgemm", size="512x512x512", strategy="brute")).variants[:40]
    search = Search(make_strategy("brute", SearchSpace(variants), 0), shape, len(variants),
                    warm=list(reversed(variants[:20])), all_at_once=True)  # the nearest shape's ranking of half
    names = [p.variant.name for room in (4, 4) for p in search.propose(room).points]
    assert sorted(names) == sorted(v.name for v in variants)  # each once: the warm ones are not asked for again
