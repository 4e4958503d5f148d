"""Replaying strategies over measured spaces, without a GPU (`tilegen replay`, `gen.replay`): the
files read, the simulated clock, the random-search baseline and the figures, their seeds."""

from __future__ import annotations

import gzip
import json
import math
import statistics
from collections import deque
from pathlib import Path

import numpy as np
import pytest

import gen
from gen.cli.main import main
from gen.search.measured import read_measured
from gen.core.results import Row, Status
from gen.evaluate.loop import ListSink, evaluate
from gen.search.prior import Prior
from gen.search.proposers import Search
from gen.search.replay import Baseline, Run, measured_prior, replay, replay_measured, score_runs, time_to_optimum
from gen.search.strategies import make_strategy
from gen.search.surrogates import forest, quadratic_trend

from .conftest import REPO
from .test_bad_inputs import assert_one_line_error, run_main

T4 = REPO / "tests" / "data" / "convolution-a100-slice_T4.json.gz"
CACHE = REPO / "tests" / "data" / "convolution-a100-slice.json.gz"


def _t4(path: Path, entries: list[tuple[dict, float | str, float]]) -> Path:
    """A T4 file of (configuration, time or failure, compile ms) entries, each run once for 1 ms."""
    results = [{"configuration": params, "invalidity": "correct" if isinstance(time, float) else "runtime",
                "times": {"compilation": compile_ms, "framework": 0, "runtimes": [1.0]},
                "measurements": [{"name": "time", "value": time, "unit": "ms"}]} for params, time, compile_ms in entries]
    path.write_text(json.dumps({"schema_version": "1.0.0", "results": results}))
    return path


def test_the_t4_file_and_the_kernel_tuner_cache_hold_the_same_space() -> None:
    t4, cache = read_measured(T4), read_measured(CACHE)
    assert len(t4) == len(cache) == 304
    assert t4.time_ms == cache.time_ms
    assert sum(t is None for t in t4.time_ms.values()) == 6
    assert t4.optimum_ms == pytest.approx(min(t for t in cache.time_ms.values() if t is not None))


def test_failed_configurations_are_answered_as_failures_and_cost_their_time(tmp_path: Path) -> None:
    measured = read_measured(_t4(tmp_path / "space.json", [
        ({"a": 1, "b": 1}, 3.0, 1000.0), ({"a": 1, "b": 2}, "RuntimeFailedConfig", 2000.0),
        ({"a": 2, "b": 1}, 2.0, 3000.0), ({"a": 2, "b": 2}, 1.0, 4000.0)]))
    run = replay_measured("brute", measured, 4, seed=0)
    assert run.times == [3.0, None, 2.0, 1.0]
    assert run.clock_s == pytest.approx([1.001, 3.002, 6.003, 10.004])
    scored = score_runs([run], Baseline(measured, 4), 4)
    assert scored["fraction"]["mean"] == 1.0 and scored["evaluations_to_1pc"]["mean"] == 4
    assert scored["seconds_to_1pc"]["mean"] == pytest.approx(10.004)


def test_a_run_until_the_optimum_stops_there_and_the_runs_that_never_get_there_are_counted(tmp_path: Path) -> None:
    """A run made until within 1% of the optimum is the capped run's prefix up to there; the median
    over runs counts one that never got there as longer than any, the mean is over those that did."""
    measured = read_measured(T4)
    capped = replay_measured("random", measured, 304, seed=4)
    stopped = replay_measured("random", measured, 304, seed=4, until_optimum=True)
    assert stopped.times[-1] <= measured.optimum_ms * 1.01 and capped.times[:len(stopped.times)] == stopped.times
    assert len(stopped.times) < len(capped.times) and all(t is None or t > measured.optimum_ms * 1.01
                                                          for t in stopped.times[:-1])
    never, soon, late = (Run([2.0, 3.0], [1.0, 2.0]), Run([2.0, 1.0], [1.0, 5.0]),
                         Run([2.0] * 200 + [1.005], [float(s) for s in range(1, 202)]))
    figures = time_to_optimum([never, soon, late], 1.0)
    assert (figures["reached"], figures["of"], figures["reached_by"]) == (2, 3, 1)
    assert figures["median_s"] == 201.0 and figures["mean_s"] == pytest.approx(103.0)
    assert figures["median_evaluations"] == 201 and figures["mean_evaluations"] == pytest.approx(101.5)
    assert time_to_optimum([never, never, soon], 1.0)["median_s"] is None
    assert time_to_optimum([never, soon], [2.0, 1.0])["reached"] == 2  # an optimum per run: runs of two spaces


def test_the_baseline_scores_random_search_0_and_the_optimum_found_at_once_1() -> None:
    """Random search, replayed from many seeds, scores about 0 against the baseline (its expectation
    on the same clock); a run that has the optimum from the start scores 1."""
    measured = read_measured(T4)
    baseline = Baseline(measured, 20)
    random_runs = [replay_measured("random", measured, 20, seed) for seed in range(200)]
    assert abs(score_runs(random_runs, baseline, 20)["score"]["mean"]) < 0.1
    at_once = Run([measured.optimum_ms] * 20, [0.0] * 20)
    assert score_runs([at_once], baseline, 20)["score"]["mean"] == pytest.approx(1.0)


def test_a_replay_is_the_same_for_the_same_seeds_and_differs_for_others() -> None:
    first = gen.replay(T4, strategies=["anneal", "genetic"], budgets=[10, 30], repeats=3, seed=5)
    assert gen.replay(T4, strategies=["anneal", "genetic"], budgets=[10, 30], repeats=3, seed=5) == first
    assert gen.replay(T4, strategies=["anneal", "genetic"], budgets=[10, 30], repeats=3, seed=6) != first
    assert set(first["strategies"]) == {"anneal", "genetic"} and set(first["strategies"]["anneal"]) == {"10", "30"}


def test_the_whole_space_searched_reaches_the_optimum() -> None:
    study = gen.replay(CACHE, strategies=["brute", "random"], budgets=[304], repeats=2)["strategies"]
    assert study["brute"]["304"]["fraction"]["mean"] == 1.0
    assert study["random"]["304"]["evaluations_to_1pc"]["runs"] == 2


def test_tilegen_replay_prints_the_figures_and_json(capsys) -> None:
    assert main(["replay", str(T4), "--strategy", "random", "genetic", "--budget", "20", "--repeats", "2"]) == 0
    printed = capsys.readouterr().out
    assert "304 configurations, 6 failed" in printed and "genetic" in printed and "fraction of optimum" in printed
    assert main(["replay", str(T4), "--strategy", "random", "--budget", "20", "--repeats", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == gen.replay(T4, strategies="random", budgets=20, repeats=2)


@pytest.mark.parametrize("arguments, said", [
    (["missing.json"], "cannot be read"),
    ([str(T4), "--strategy", "hill"], "invalid choice"),
    ([str(T4), "--budget", "0"], "at least 1"),
    ([str(REPO / "pyproject.toml")], "cannot be read"),
])
def test_tilegen_replay_refuses_bad_input_in_one_line(arguments: list[str], said: str, capsys) -> None:
    code, out, err = run_main(capsys, ["replay", *arguments])
    assert_one_line_error(code, out, err, said)
    assert said in err


def test_gen_replay_refuses_bad_arguments_before_reading_the_file(tmp_path: Path) -> None:
    for arguments, said in [(dict(strategies=["hill"]), "'hill' is not one of"), (dict(budgets=[0]), "at least 1"),
                            (dict(repeats="3"), "repeats must be a whole number")]:
        with pytest.raises(gen.UsageError, match=said):
            gen.replay(tmp_path / "never-read.json", **arguments)
    (tmp_path / "other.json.gz").write_bytes(gzip.compress(b'{"rows": []}'))
    with pytest.raises(gen.UsageError, match="neither a T4 results file"):
        gen.replay(tmp_path / "other.json.gz")



def _slice_params() -> dict:
    return json.loads(gzip.decompress(CACHE.read_bytes()))["tune_params"]


def test_tune_kernel_replays_a_cache_file_in_simulation_mode() -> None:
    """Kernel Tuner's simulation mode: no GPU, the strategy answered from the file, its clock the file's."""
    results, env = gen.tune_kernel("convolution_kernel", "unused", (4096, 4096), [], _slice_params(),
                                   strategy="genetic_algorithm", strategy_options={"max_fevals": 40},
                                   simulation_mode=True, cache=str(CACHE), seed=3)
    measured = read_measured(CACHE)
    run = replay_measured("genetic", measured, 40, seed=3)
    assert [r["time"] if not isinstance(r["time"], str) else None for r in results] == run.times
    assert [r["simulated_seconds"] for r in results] == pytest.approx(run.clock_s)
    assert env["simulated_time"] == pytest.approx(1000 * run.clock_s[-1])
    assert env["best_time"] == min(t for t in run.times if t is not None)
    brute, _ = gen.tune_kernel("convolution_kernel", "unused", (4096, 4096), [], _slice_params(),
                               simulation_mode=True, cache=str(CACHE))
    assert len(brute) == len(measured) and min(r["time"] for r in brute if not isinstance(r["time"], str)) \
        == measured.optimum_ms


@pytest.mark.parametrize("change, said", [
    (dict(cache=None), "give cache=FILE"),
    (dict(strategy="pso"), "strategy='pso': tilegen has"),
    (dict(tune_params={"block_size_x": [16]}), "tune_params must name the cache file's parameters"),
])
def test_tune_kernel_s_simulation_mode_refuses_what_it_cannot_replay(change: dict, said: str) -> None:
    call = dict(tune_params=_slice_params(), strategy="random_sample", cache=str(CACHE)) | change
    with pytest.raises(gen.UsageError, match=said):
        gen.tune_kernel("convolution_kernel", "unused", (4096, 4096), [], simulation_mode=True, **call)


def test_the_portfolio_tells_every_member_every_result_and_proposes_each_point_once() -> None:
    measured = read_measured(T4)
    portfolio = make_strategy("portfolio", measured.space, seed=4)
    seen = []
    while len(seen) < 60:
        for variant in portfolio.ask(3):
            portfolio.tell(variant, measured.time_ms[variant.name])
            seen.append(variant)
    assert len(set(seen)) == 60
    assert all(member.results == portfolio.results for member in portfolio.members)
    # each result after the start credited once to its proposer, the older ones forgotten a little at every result
    assert sum(improved + not_improved for improved, not_improved in portfolio.record) \
        == pytest.approx(sum(portfolio.FORGET ** age for age in range(60 - portfolio.INITIAL)))


def test_the_portfolio_starts_with_the_points_farthest_apart(tmp_path: Path) -> None:
    """On a 5 x 5 grid its first points are a maximin design: after the first, each is the point
    farthest (L1 over the positions) from all before it, so the second is a corner as far as any
    point from the first and none is next to another; no member proposed them."""
    grid = [({"a": a, "b": b}, 1.0 + a + b, 1.0) for a in range(5) for b in range(5)]
    measured = read_measured(_t4(tmp_path / "grid.json", grid))
    for seed in range(5):
        portfolio = make_strategy("portfolio", measured.space, seed=seed)
        start = [measured.space.position(v) for v in portfolio.ask(portfolio.INITIAL)]
        assert len({tuple(p) for p in start}) == portfolio.INITIAL and not portfolio.proposer
        (a, b), (c, d) = start[0], start[1]
        assert abs(a - c) + abs(b - d) == max(a, 4 - a) + max(b, 4 - b)  # an opposite corner
        assert min(abs(p[0] - q[0]) + abs(p[1] - q[1]) for i, p in enumerate(start) for q in start[:i]) >= 2


def test_the_portfolio_follows_the_member_that_improves_lately() -> None:
    """A member whose proposals improved the best early but no longer does loses the lead to one that
    improves now: the counts of long ago are forgotten (the draws alone, without the local search's floor)."""
    measured = read_measured(T4)
    portfolio = make_strategy("portfolio", measured.space, seed=1)
    portfolio.LOCAL_FLOOR = 0.0
    for variant in portfolio.ask(portfolio.INITIAL):  # the start: no member's
        portfolio.tell(variant, 1000.0)
    chosen = []
    for step in range(40):
        (variant,) = portfolio.ask(1)
        chosen.append(member := portfolio.proposer[variant])
        improves = (member == 0) == (step < 20)  # the first member improves for 20 steps, the others after
        portfolio.tell(variant, 100.0 - step if improves else 1000.0)
    assert chosen[10:20].count(0) >= 7 and chosen[30:].count(0) <= 1


def test_the_local_search_makes_most_of_the_portfolio_s_proposals_where_no_member_improves() -> None:
    """Its floor: the local search proposes with probability LOCAL_FLOOR before any draw, so where no
    member improves it makes more of the proposals than either other member (about half), not a third."""
    measured = read_measured(T4)
    portfolio = make_strategy("portfolio", measured.space, seed=2)
    for variant in portfolio.ask(portfolio.INITIAL):
        portfolio.tell(variant, 1.0)
    chosen = []
    for _ in range(150):
        (variant,) = portfolio.ask(1)
        chosen.append(portfolio.proposer[variant])
        portfolio.tell(variant, 1000.0)
    assert portfolio.LOCAL_FLOOR <= chosen.count(0) / len(chosen) <= 0.7
    assert 25 <= min(chosen.count(1), chosen.count(2)) and max(chosen.count(1), chosen.count(2)) < chosen.count(0)


def test_local_search_tries_every_value_of_one_parameter_then_two_parameters_at_once(tmp_path: Path) -> None:
    """A 5 x 5 grid whose point (2, 2) is faster than every point one parameter away from it: once its
    steps up and down are measured, the climb tries the other values of one parameter (two positions
    away), and only then the points one position away in both parameters."""
    grid = [({"a": a, "b": b}, 1.0 + abs(a - 2) + abs(b - 2) + 10 * ((a == 2) != (b == 2)), 1.0)
            for a in range(5) for b in range(5)]
    measured = read_measured(_t4(tmp_path / "grid.json", [(p, float(t), c) for p, t, c in grid]))
    by_key = {measured.space.key(v): v for v in measured.space.variants}
    farther = {by_key[key] for key in [(0, 2), (4, 2), (2, 0), (2, 4)]}
    diagonal = {by_key[(a, b)] for a in (1, 3) for b in (1, 3)}
    assert set(measured.space.pair_steps(by_key[(2, 2)])) == diagonal
    for seed in range(5):
        climb = make_strategy("local", measured.space, seed)
        for key in [(2, 2), (1, 2), (3, 2), (2, 1), (2, 3)]:  # the best and its steps up and down
            climb.tell(by_key[key], measured.time_ms[by_key[key].name])
        proposed = [climb.ask(1)[0] for _ in range(4)]
        assert set(proposed) == farther
        for variant in proposed:
            climb.tell(variant, measured.time_ms[variant.name])
        assert {climb.ask(1)[0] for _ in range(4)} == diagonal


def test_two_parameter_steps_on_the_measured_slice_move_two_parameters_one_position_each() -> None:
    space = read_measured(T4).space
    found = 0
    for variant in space.variants[::10]:
        steps = space.pair_steps(variant)
        assert len(set(steps)) == len(steps)
        found += len(steps)
        for step in steps:
            moved = [abs(a - b) for a, b in zip(space.position(step), space.position(variant))]
            assert sorted(moved)[-2:] == [1, 1] and sum(moved) == 2
    assert found > len(space.variants[::10])  # more than one per point on average


def test_a_space_names_each_point_by_its_positions_and_nothing_outside_it() -> None:
    space = read_measured(T4).space
    assert all(space.at(space.position(variant)) is variant for variant in space.variants)
    first = space.position(space.variants[0])
    assert space.at([-1, *first[1:]]) is None
    assert space.at([len(space.values[space.varying[0]]), *first[1:]]) is None


class _StepsOnly(type(make_strategy("anneal", read_measured(T4).space))):
    """Annealing without its random hops: every step moves each parameter by at most one position."""

    HOP = 0.0


def test_annealing_steps_move_every_parameter_at_most_one_position_from_where_it_walks() -> None:
    measured = read_measured(T4)
    walk = _StepsOnly(measured.space, seed=2)
    far = 0
    for _ in range(60):
        (variant,) = walk.ask(1)
        if walk.current is not None:
            moved = [abs(a - b) for a, b in zip(measured.space.position(variant), measured.space.position(walk.current))]
            far += max(moved) > 1
        walk.tell(variant, measured.time_ms[variant.name])
    assert far == 0


def test_annealing_steps_towards_the_fast_side_of_what_it_measured(tmp_path: Path) -> None:
    """A 10 x 10 grid walked from (5, 5): every point with a = 7 measured slow, with a = 3 ten times
    slower still. Of its drawn steps the walk takes the one whose nearest measured points are fastest,
    so its next step is to a = 6 far more often than a third of the time (a step drawn at random)."""
    grid = [({"a": a, "b": b}, 1.0, 1.0) for a in range(10) for b in range(10)]
    measured = read_measured(_t4(tmp_path / "grid.json", grid))
    by_key = {measured.space.key(v): v for v in measured.space.variants}
    towards = []
    for seed in range(20):
        walk = _StepsOnly(measured.space, seed)
        walk.tell(by_key[(5, 5)], 1.0)
        for b in range(10):
            walk.tell(by_key[(7, b)], 2.0)
            walk.tell(by_key[(3, b)], 20.0)
        assert walk.current is by_key[(5, 5)]
        (step,) = walk.ask(1)
        towards.append(measured.space.key(step)[0])
    assert towards.count(6) >= 15 and towards.count(4) <= 2


def test_annealing_never_walks_to_a_failed_point_and_names_its_next_step() -> None:
    measured = read_measured(T4)
    walk = make_strategy("anneal", measured.space, seed=3)
    (start,) = walk.ask(1)
    walk.tell(start, 1.0)
    for _ in range(20):
        expected = walk.likely_next(1)
        assert walk.ask(1) == expected
        walk.tell(expected[0], None)  # every step fails: the walk stays where it started
        assert walk.current is start


def test_the_trend_fits_a_quadratic_of_the_positions_and_guesses_between_the_points() -> None:
    """Log times that are a quadratic in each position are fitted exactly without a penalty, so the
    guess at an unmeasured point is its true log time; a penalty shrinks the trend towards the mean."""
    rng = np.random.default_rng(0)
    positions, candidates = rng.random((12, 3)), rng.random((5, 3))

    def truth(x: np.ndarray) -> np.ndarray:
        return 2.0 + x @ [1.0, -3.0, 0.5] + (x ** 2) @ [4.0, 2.0, 0.0]
    assert np.allclose(quadratic_trend(positions, truth(positions), candidates, 0.0), truth(candidates))
    shrunk = quadratic_trend(positions, truth(positions), candidates, 100.0)
    assert np.ptp(shrunk) < 0.5 * np.ptp(truth(candidates))


def test_the_forest_fits_a_step_of_two_parameters_together_and_is_the_same_for_the_same_seed() -> None:
    """Values that step up only where two parameters are both high (a conjunction no sum of
    per-parameter trends holds), measured on 60 points of a 5 x 5 x 5 grid: the forest's guess puts
    every point of the grid on its side of the step, where the trend does not, and the same seed gives
    the same guesses, another seed others."""
    grid = np.array([(a, b, c) for a in range(5) for b in range(5) for c in range(5)]) / 4.0

    def step(x: np.ndarray) -> np.ndarray:
        return ((x[:, 0] > 0.6) & (x[:, 1] > 0.3)).astype(float)
    measured = grid[np.random.default_rng(0).permutation(len(grid))[:60]]
    mean, spread = forest(measured, step(measured), grid, 10, 2, 0.8, np.random.default_rng(1))
    assert np.array_equal(mean > 0.5, step(grid) > 0.5) and np.abs(mean - step(grid)).mean() < 0.1
    assert not np.array_equal(quadratic_trend(measured, step(measured), grid, 0.0) > 0.5, step(grid) > 0.5)
    again, _ = forest(measured, step(measured), grid, 10, 2, 0.8, np.random.default_rng(1))
    other, _ = forest(measured, step(measured), grid, 10, 2, 0.8, np.random.default_rng(2))
    assert np.array_equal(mean, again) and not np.array_equal(mean, other)


def test_the_trend_proposes_where_its_model_of_five_points_says_time_falls_beyond_them(tmp_path: Path) -> None:
    """A 10 x 10 grid whose time falls towards a = 9, b = 0, five points told in its middle, none
    among its ten fastest: the next proposal is one of those ten for nearly every seed, several steps
    beyond the best told; a random draw would be one time in ten."""
    told = [(2, 5), (4, 7), (3, 3), (5, 6), (2, 8)]
    assert _trend_proposals_among_fastest(tmp_path, 10, (0.3, 0.2), told, 10) >= 9


def test_the_trend_proposes_faster_points_than_random_draws_on_the_measured_slice() -> None:
    """On the measured A100 slice, from the same two random starting points, the trend's next 20
    proposals run faster than random search's (the median over 10 seeds), failures counted as slowest."""
    measured = read_measured(T4)

    def proposed(strategy: str, seed: int) -> list[float]:
        asked = replay_measured(strategy, measured, 22, seed).times[2:]
        return [t if t is not None else math.inf for t in asked]
    trend = [statistics.median(proposed("trend", seed)) for seed in range(10)]
    drawn = [statistics.median(proposed("random", seed)) for seed in range(10)]
    assert sum(t < d for t, d in zip(trend, drawn)) >= 8


def test_the_trend_screens_enough_draws_to_propose_from_a_narrow_fast_corner(tmp_path: Path) -> None:
    """A 40 x 40 grid whose time falls towards a = 39, b = 0, five points told in its middle: the next
    proposal is among the grid's fastest 1% (16 points, far from any told point's neighbours) for
    most seeds, since the screen draws enough random points to hold one of them nearly always (32
    draws would, about one time in four)."""
    told = [(15, 20), (20, 25), (18, 12), (25, 22), (14, 28)]
    assert _trend_proposals_among_fastest(tmp_path, 40, (0.1, 0.08), told, 16) >= 7


def _trend_proposals_among_fastest(tmp_path: Path, side: int, slopes: tuple[float, float],
                                   told: list[tuple[int, int]], fastest_count: int) -> int:
    """Of 10 seeds, how often the trend's first proposal is among the `fastest_count` fastest points of a
    side x side grid whose time falls towards a = side - 1, b = 0 (exp of `slopes`), once told the
    points `told`."""
    grid = [({"a": a, "b": b}, float(np.exp(slopes[0] * (side - 1 - a) + slopes[1] * b)), 1.0)
            for a in range(side) for b in range(side)]
    measured = read_measured(_t4(tmp_path / "grid.json", grid))
    by_key = {measured.space.key(v): v for v in measured.space.variants}
    fastest = sorted(measured.space.variants, key=lambda v: measured.time_ms[v.name])[:fastest_count]
    among_fastest = 0
    for seed in range(10):
        trend = make_strategy("trend", measured.space, seed)
        for key in told:
            trend.tell(by_key[key], measured.time_ms[by_key[key].name])
        among_fastest += trend.ask(1)[0] in fastest
    return among_fastest


class InOrderEngine:
    """An engine that holds `in_flight` points at once and finishes them in the order submitted, each
    with the measured space's time: the tune's loop as the replay models it."""

    def __init__(self, measured, in_flight: int):
        self.measured, self.in_flight, self.points = measured, in_flight, deque()

    def stop_timing_above(self, cutoff_ms) -> None:
        pass

    def room(self) -> int:
        return self.in_flight - len(self.points)

    def submit(self, points) -> None:
        self.points.extend(points)

    def compile_ahead(self, points) -> None:
        pass

    def speculate(self, points) -> None:
        pass

    @property
    def idle(self) -> bool:
        return not self.points

    def finished(self) -> list[Row]:
        point = self.points.popleft()
        median = self.measured.time_ms[point.variant.name]
        return [Row(point.variant.name, "measured", point.variant.params(), Status.OK if median else Status.WRONG,
                    median_ms=median)]


@pytest.mark.parametrize("in_flight", [1, 6])
def test_the_replay_asks_a_strategy_as_a_tune_s_loop_does(in_flight: int) -> None:
    """With as many points in flight as the tune's engine holds, the replay proposes what the tune's
    loop (Search, evaluate) proposes, in the same order: the replay's figures are a tune's."""
    measured = read_measured(T4)
    search = Search(make_strategy("portfolio", measured.space, 3), None, 40, early_stop=None)
    evaluate(search, InOrderEngine(measured, in_flight), ListSink())
    tuned = [v.name for v in search.strategy.results]  # in the order told
    assert tuned == [name for name, _ in replay("portfolio", measured.time_ms, measured.space, 40, 3, in_flight)]
    if in_flight > 1:  # the window changes what is proposed: the strategy knows less when it asks
        assert tuned != [name for name, _ in replay("portfolio", measured.time_ms, measured.space, 40, 3)]



def _other_gpus(tmp_path: Path, times: dict[str, np.ndarray]) -> dict[str, Path]:
    """T4 files of one 10 x 10 grid of (a, b), one per GPU: point i is (a, b) = divmod(i, 10), its time
    `times[gpu][i]`."""
    return {gpu: _t4(tmp_path / f"{gpu}.json", [({"a": i // 10, "b": i % 10}, float(t), 1.0) for i, t in enumerate(ts)])
            for gpu, ts in times.items()}


def _keys(measured, asked: list[tuple[str, float | None]]) -> list[tuple[int, int]]:
    by_name = {v.name: v for v in measured.space.variants}
    return [measured.space.key(by_name[name]) for name, _ in asked]


def test_a_prior_proposes_the_other_gpus_fastest_first_one_gpu_then_the_next(tmp_path: Path) -> None:
    """Given two other GPUs' spaces, a strategy's first proposals are their fastest points in turn, the
    first GPU's, the second's, the first's next, whatever its seed; then its own."""
    rng = np.random.default_rng(7)
    times = {gpu: 1.0 + rng.permutation(100) for gpu in ("here", "first", "second")}
    files = _other_gpus(tmp_path, times)
    measured = read_measured(files["here"])
    prior = measured_prior(measured, [read_measured(files["first"]), read_measured(files["second"])])
    first, second = np.argsort(times["first"]), np.argsort(times["second"])
    picks = [divmod(int(i), 10) for i in (first[0], second[0], first[1])]
    for seed in range(3):
        asked = _keys(measured, replay("random", measured.time_ms, measured.space, 10, seed, prior=prior))
        assert asked[:3] == picks and len(set(asked)) == 10
        assert _keys(measured, replay("random", measured.time_ms, measured.space, 10, seed))[:3] != picks


def test_given_a_prior_the_portfolio_starts_from_its_picks_not_from_the_corners(tmp_path: Path) -> None:
    """The prior's three picks are the start: its members propose the next points, where without a
    prior, or with one that picks nothing here, the first INITIAL points are its space-filling start,
    no member's."""
    rng = np.random.default_rng(7)
    files = _other_gpus(tmp_path, {gpu: 1.0 + rng.permutation(100) for gpu in ("here", "other")})
    measured = read_measured(files["here"])
    nothing_here = Prior(measured.space, [{}])  # another GPU's points, none of them in this space: no picks
    for prior, by_members in ((measured_prior(measured, [read_measured(files["other"])]), [False] * 3 + [True] * 3),
                              (None, [False] * 6), (nothing_here, [False] * 6)):
        portfolio = make_strategy("portfolio", measured.space, seed=2, prior=prior)
        members = []
        for _ in range(portfolio.INITIAL):
            (variant,) = portfolio.ask(1)
            members.append(variant in portfolio.proposer)
            portfolio.tell(variant, measured.time_ms[variant.name])
        assert members == by_members


def test_tilegen_replay_takes_other_gpus_spaces_as_prior_and_refuses_another_kernel_s(tmp_path: Path,
                                                                                         capsys) -> None:
    rng = np.random.default_rng(5)
    files = _other_gpus(tmp_path, {"here": 1.0 + rng.permutation(100), "other": 1.0 + rng.permutation(100)})
    assert main(["replay", str(files["here"]), "--strategy", "random", "--budget", "5", "--repeats", "2",
                 "--prior", str(files["other"])]) == 0
    assert "other GPUs' spaces as prior: 1" in capsys.readouterr().out
    fed = gen.replay(files["here"], strategies="random", budgets=5, repeats=2, prior=files["other"])
    assert fed["prior_spaces"] == 1 and fed != gen.replay(files["here"], strategies="random", budgets=5, repeats=2)
    another = _t4(tmp_path / "another.json", [({"c": c}, float(c + 1), 1.0) for c in range(4)])
    code, out, err = run_main(capsys, ["replay", str(files["here"]), "--prior", str(another)])
    assert_one_line_error(code, out, err, "has the parameters c, not a, b")
