"""Autotune one problem per GPU model: a search strategy proposes variants, already-measured ones
come from the tuning database, the rest go through the evaluation pipeline; the final top k are
measured again, interleaved, to tell whether the winner's lead is larger than the noise.

The strategy proposes in batches (`ask(n)`), enough to keep the GPUs fed while nvcc compiles what
they will need next; spaces of up to SPECULATE points are also compiled speculatively, at low
priority, so that later proposals are ready when they are made.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..core import checks
from ..core.errors import RunInterrupted, UsageError
from ..families import get_family
from ..families.family import Family, refused
from ..evaluate.engine import Pipeline, Point
from ..evaluate.options import RunOptions, make_executor
from ..core.progress import Progress
from ..core.results import Row, TimingOptions, is_ok
from ..families.space import MAX_POINTS, Space
from .strategies import STRATEGIES, SearchSpace, make_strategy
from ..store.tuning_db import FINALIST_KEY, Problem, TuningDB, checked_db_path
from ..families.variant import Variant
from ..gpu.executor import Executor, GpuUnavailable

INTERLEAVED_ROUNDS = 5
WARM_START = 10  # the nearest tuned shape's top variants, evaluated before the strategy's own picks
SPECULATE = 4000  # spaces up to this many valid points are compiled ahead of the strategy
QUEUED_PER_GPU = 2  # compiled points kept waiting per GPU, so it never idles between jobs
TUNE_TIMING = TimingOptions(budget_s=0.5)
DEFAULT_BUDGET = 100  # evaluations of a search strategy given neither a budget nor a time


@dataclass(frozen=True)
class TuneOptions:
    family: str
    size: str
    params: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    filter: str | None = None
    strategy: str = "bayes"
    budget: int | None = None  # evaluations; None: brute force takes the whole space, another strategy
    # DEFAULT_BUDGET, or with `time_s` as many as fit in that time
    time_s: float | None = None
    db: Path | None = None
    seed: int = 0  # of the strategy (the inputs' seed derives from it)
    top: int = 3
    run: RunOptions = field(default_factory=lambda: RunOptions(timing=TUNE_TIMING))
    progress: bool = True
    max_points: int = MAX_POINTS  # refuse a larger space before expanding it

    def __post_init__(self) -> None:
        """Options from Python are refused as the command line would refuse them (gen.core.checks)."""
        _check(self)


def _check(tune: TuneOptions) -> None:
    """The fields of a TuneOptions: what the command line refuses, refused here too; numbers kept
    as Python's own, as in RunOptions."""
    if not isinstance(tune.strategy, str) or tune.strategy not in STRATEGIES:
        raise UsageError(f"strategy {tune.strategy!r} is not one of: {', '.join(STRATEGIES)}")
    if tune.budget is not None:
        checks.keep(tune, "budget", checks.whole(tune.budget, "budget", 1))
    if tune.time_s is not None:
        checks.keep(tune, "time_s", checks.seconds(tune.time_s, "time_s"))
    checks.keep(tune, "seed", checks.whole(tune.seed, "seed"))
    checks.keep(tune, "top", checks.whole(tune.top, "top", 1))
    checks.keep(tune, "max_points", checks.whole(tune.max_points, "max_points", 1))
    checks.name_pattern(tune.filter)
    checks.flag(tune.progress, "progress")
    checks.instance(tune.run, RunOptions, "run")


@dataclass
class Standing:
    """A finalist after the interleaved rounds."""

    name: str
    medians_ms: list[float]

    @property
    def median_ms(self) -> float:
        """The median round's median (the lower of the middle two for an even count: a measured value)."""
        return statistics.median_low(self.medians_ms)

    @property
    def spread(self) -> float:
        """Relative spread of its round medians: (max - min) / median."""
        return (max(self.medians_ms) - min(self.medians_ms)) / self.median_ms


@dataclass
class TuneResult:
    problem: Problem
    strategy: str
    winner: Row
    standings: list[Standing]
    default: Row | None
    evaluations: int
    gpu_evaluations: int
    seconds: float
    trace: list[float | None]
    trace_seconds: list[float]  # when each evaluation finished, from the start of the tune
    gpu_seconds: float  # the GPUs' busy time (checking and timing), summed
    space: int  # variants the strategy searched among

    @property
    def covered_space(self) -> bool:
        """Whether every variant of the space was evaluated: the winner is the space's best."""
        return self.evaluations >= self.space

    @property
    def lead(self) -> float | None:
        """How much slower the runner-up is than the winner, relatively."""
        if len(self.standings) < 2:
            return None
        return self.standings[1].median_ms / self.standings[0].median_ms - 1

    @property
    def noise(self) -> float:
        return max(s.spread for s in self.standings[:2])

    @property
    def speedup_over_default(self) -> float | None:
        if self.default is None or not is_ok(self.default):
            return None
        return self.default.median_ms / self.standings[0].median_ms


@dataclass(frozen=True)
class Candidates:
    """What a tune searches: the space's variants that can run the shape, those that cannot as they
    are replaced by their family's adaptations (bounds checks on, say), each once."""

    variants: list[Variant]
    points: int  # points of the space (valid ones, after the filter)
    adapted: int  # variants replaced by an adaptation
    changes: list[str]  # the parameter values the adaptations set, e.g. ['bounds=guard']
    budget: int  # evaluations the tune will make, at most

    def describe(self, family: Family, shape: Any, strategy: str) -> str:
        """What the tune will evaluate, in one or two lines."""
        lines = [f"{family.name} at {shape}: {len(self.variants):,} variants to search by {strategy}; the budget "
                 f"evaluates {min(self.budget, len(self.variants)):,} of them"]
        if self.adapted:
            lines.append(f"{self.adapted:,} of the space's {self.points:,} points cannot run {shape} as they are: "
                         f"their family's adaptations ({', '.join(self.changes)}) are tuned in their place")
        return "\n".join(lines)


def candidates(family: Family, shape: Any, options: TuneOptions) -> Candidates:
    """The variants a tune of `shape` searches (see Candidates); UsageError when none can run it."""
    valid = Space.default(family, options.params).select(options.filter, options.max_points).valid
    chosen: dict[Variant, None] = {}
    adapted, changes = 0, {}
    for variant in valid:
        runnable = family.runnable(variant, shape)
        if runnable is None:
            continue
        if runnable != variant:
            adapted += 1
            changes.update(dict.fromkeys(_changed(variant, runnable)))
        chosen[runnable] = None
    if not chosen:
        reason = refused(family, valid[0], shape) if valid else "no valid variant matches"
        raise UsageError(f"no {family.name} variant in this space can run {shape}, adapted or not: {reason}")
    element_types = sorted({v.dtype for v in chosen})
    if len(element_types) > 1:
        raise UsageError(f"a tune is for one element type; this space has {', '.join(element_types)}: choose one "
                         f"with -p dtype=...")
    variants = list(chosen)
    return Candidates(variants, len(valid), adapted, list(changes), _budget(options, len(variants)))


def _budget(options: TuneOptions, size: int) -> int:
    """Evaluations at most: the given budget; brute force's whole space; with a time limit, all
    that fit; else DEFAULT_BUDGET."""
    if options.budget is not None:
        return min(options.budget, size)
    if options.strategy == "brute" or options.time_s is not None:
        return size
    return min(DEFAULT_BUDGET, size)


def _changed(variant: Variant, adapted: Variant) -> list[str]:
    return [f"{name}={value}" for name, value in adapted.params().items() if variant.params()[name] != value]


def preview(options: TuneOptions) -> str:
    """What `tune(options)` would evaluate, without compiling or writing anything."""
    family = get_family(options.family)
    shape = family.parse_shape(options.size)
    return candidates(family, shape, options).describe(family, shape, options.strategy)


def tune(options: TuneOptions, executor: Executor | None = None) -> list[TuneResult]:
    """Tune on every GPU model among the executor's GPUs; one result per model."""
    family = get_family(options.family)
    shape = family.parse_shape(options.size)
    chosen = candidates(family, shape, options)
    valid = chosen.variants
    db_path = checked_db_path(options.db, create=True)  # a bad --db is refused now; made once a GPU answers
    run = replace(options.run, seed=random.Random(options.seed).randrange(1, 2**31))
    executor = executor or make_executor(run)
    started = time.monotonic()
    try:
        with Pipeline(family, run, gpus_later=True) as first:  # compiling starts while the workers start
            if len(valid) <= SPECULATE:
                first.prefetch(valid)
            try:
                groups = executor.by_model()
            except GpuUnavailable as reason:
                raise UsageError(f"tune needs a GPU: {reason}") from None
            db = TuningDB(db_path)  # only now: a tune that cannot run leaves no database behind
            results, first_taken = [], False
            for model, group in groups.items():
                problem = Problem(str(model), family.name, chosen.variants[0].dtype, str(shape))
                model_run = run if run.arch else replace(run, arch=model.arch)  # each model its own cubins
                if not first_taken and first.compile_options.arch == model_run.arch:
                    first_taken = True
                    first.use_gpus(group)
                    results.append(_tune_model(options, family, shape, chosen, problem, first, db, started))
                    continue
                with Pipeline(family, model_run, group) as pipeline:
                    results.append(_tune_model(options, family, shape, chosen, problem, pipeline, db,
                                                   time.monotonic()))
            return results
    except KeyboardInterrupt:
        raise RunInterrupted(f"evaluations so far are kept in the tuning database {db_path}; tune again to go on "
                             f"(what is measured is not measured again)") from None
    finally:
        executor.close()


class Evaluator:
    """Measures variants of one problem: from the database when already measured on this GPU model,
    else through the pipeline; new rows go into the database as they arrive."""

    def __init__(self, pipeline: Pipeline, shape: Any, problem: Problem, db: TuningDB):
        self.pipeline, self.shape, self.problem, self.db = pipeline, shape, problem, db
        self.known = db.measured(problem)
        self.gpu_evaluations = 0

    def submit(self, variants: Iterable[Variant], fresh: bool = False) -> list[Row]:
        """Rows the database already holds (unless `fresh`); the other variants go to the pipeline."""
        known, queued = [], []
        for variant in variants:
            if not fresh and variant.name in self.known:
                known.append(self.known[variant.name])
            else:
                queued.append(Point(variant, self.shape, "none"))
        self.gpu_evaluations += self.pipeline.submit(queued)
        return known

    def finished(self) -> list[Row]:
        """Rows the pipeline finished since the last call, recorded in the database."""
        rows = self.pipeline.take()
        for row in rows:
            row.provenance.setdefault("gpu_model", self.problem.gpu_model)  # compile errors: which GPU's tune
        if rows:
            self.db.record(rows)
            self.known.update({row.name: row for row in rows})
        return rows

    def evaluate(self, variants: Sequence[Variant], fresh: bool = False) -> dict[str, Row]:
        """Rows for every variant, waiting for the pipeline (by name)."""
        rows = {row.name: row for row in self.submit(variants, fresh)}
        while len(rows) < len(set(variants)):
            rows.update((row.name, row) for row in self.finished())
        return rows


def _tune_model(options: TuneOptions, family: Family, shape: Any, chosen: Candidates, problem: Problem,
                pipeline: Pipeline, db: TuningDB, started: float) -> TuneResult:
    """Tune one GPU model through a running pipeline that holds that model's GPUs; times count from
    `started`, when the tune began (compiling starts before the GPUs are known)."""
    valid, limit = chosen.variants, chosen.budget
    strategy = make_strategy(options.strategy, SearchSpace(valid), options.seed)
    progress = Progress(limit, f"tune {family.name} {shape}", enabled=options.progress)
    trace: list[float | None] = []
    trace_seconds: list[float] = []
    try:
        evaluator = Evaluator(pipeline, shape, problem, db)
        session = db.start_session(problem, options.strategy)

        def told(rows: list[Row]) -> None:
            for row in rows:
                median = row.median_ms if is_ok(row) else None
                strategy.tell(family.variant_type.from_name(row.name), median)
                db.trace(session, len(trace), row.name, median)
                trace.append(median)
                trace_seconds.append(time.monotonic() - started)
                progress.advance(f"{row.name} {_ms(median)}")

        warmed = options.budget is None or options.budget >= 2 * WARM_START  # a budget worth a warm start
        warm = warm_start(db, problem, family, shape, valid)[:limit] if warmed else []
        gpus = max(1, len(pipeline.devices()))
        while len(trace) < limit and not _out_of_time(started, options.time_s):
            room = limit - len(trace) - pipeline.outstanding
            wanted = min(room, _proposals_wanted(pipeline, gpus, options.strategy, limit))
            if wanted > 0:
                batch = [warm.pop(0) for _ in range(min(wanted, len(warm)))] or strategy.ask(wanted)
                told(evaluator.submit(batch))
                if not batch and not pipeline.outstanding:
                    break  # the space is exhausted
            told(evaluator.finished())
        finalists = sorted((v for v, t in strategy.results.items() if t is not None),
                           key=lambda v: strategy.results[v])
        if not finalists and not trace and _out_of_time(started, options.time_s):
            raise UsageError(f"the time limit (--time {options.time_s:g} s) ran out before any variant of "
                             f"{family.name} was measured; give a longer --time (a variant takes about "
                             f"{options.run.timing.budget_s:g} s to time, more to compile), or --budget N to count "
                             f"evaluations instead")
        if not finalists:
            raise UsageError(f"no variant of {family.name} ran correctly on {problem.gpu_model} at {shape}")
        while pipeline.outstanding:  # proposals still running when the budget ran out
            evaluator.finished()
        standings, rows = _interleaved(evaluator, finalists[: options.top])
        default = _default_row(evaluator, family, shape, valid)
    except KeyboardInterrupt:
        raise RunInterrupted(f"{len(trace)} evaluations kept in the tuning database {db.path}; tune again to go "
                             f"on (what is measured is not measured again)") from None
    finally:
        progress.close()
    return TuneResult(problem, options.strategy, rows[standings[0].name], standings, default, len(trace),
                      evaluator.gpu_evaluations, time.monotonic() - started, trace, trace_seconds,
                      pipeline.stats.gpu_seconds, len(valid))


def _proposals_wanted(pipeline: Pipeline, gpus: int, strategy: str, limit: int) -> int:
    """How many new proposals to ask for now: brute force takes everything at once; a model-guided
    search keeps QUEUED_PER_GPU compiled points waiting per GPU, plus one per compile thread while
    its proposals still need compiling (fewer in flight = better informed proposals)."""
    if strategy == "brute":
        return limit
    ready = pipeline.outstanding - pipeline.uncompiled
    compiling = pipeline.uncompiled
    return max(0, QUEUED_PER_GPU * gpus - ready) if compiling >= pipeline.compile_options.jobs else \
        max(0, QUEUED_PER_GPU * gpus + pipeline.compile_options.jobs - pipeline.outstanding)


def warm_start(db: TuningDB, problem: Problem, family: Family, shape: Any, valid: list[Variant]) -> list[Variant]:
    """The top variants of the nearest shape tuned on this GPU model, adapted to run this shape."""
    tuned_here = [p for p in db.problems(problem.family)
                  if (p.gpu_model, p.dtype) == (problem.gpu_model, problem.dtype) and p.shape != problem.shape]
    if not tuned_here:
        return []
    dims = shape.dims
    nearest = min(tuned_here, key=lambda p: sum(abs(math.log2(a / b)) for a, b in
                                                 zip(family.parse_shape(p.shape).dims, dims)))
    allowed, chosen = set(valid), []
    for row in db.top(nearest, 3 * WARM_START):
        variant = family.runnable(family.variant_type.from_name(row.name), shape)
        if variant in allowed and variant not in chosen:
            chosen.append(variant)
    return chosen[:WARM_START]


def _interleaved(evaluator: Evaluator, finalists: list[Variant]) -> tuple[list[Standing], dict[str, Row]]:
    """Measure the finalists again in rounds, A B C A B C ..., so drift hits them alike. Each
    finalist's row of its median round is recorded once more, as its latest: `best`, `gen.tuned`
    and the database's ranking then agree with the standings."""
    rounds: dict[str, list[Row]] = {v.name: [] for v in finalists}
    for _ in range(INTERLEAVED_ROUNDS):
        for name, row in evaluator.evaluate(finalists, fresh=True).items():
            if is_ok(row):
                rounds[name].append(row)
    standings = sorted((Standing(name, [row.median_ms for row in rows]) for name, rows in rounds.items() if rows),
                       key=lambda s: s.median_ms)
    if not standings:
        raise UsageError("the finalists failed when measured again; the GPU or its driver may be unstable")
    chosen = {s.name: _median_round(rounds[s.name], s) for s in standings}
    evaluator.db.record(chosen.values())
    return standings, chosen


def _median_round(rows: list[Row], standing: Standing) -> Row:
    """The row of the round whose median is the standing's median, marked as chosen from the rounds."""
    row = next(row for row in rows if row.median_ms == standing.median_ms)
    return replace(row, provenance={**row.provenance, FINALIST_KEY: len(rows)})


def _default_row(evaluator: Evaluator, family: Family, shape: Any, valid: list[Variant]) -> Row | None:
    default = family.safe_variant(shape, valid[0].dtype)
    if refused(family, default, shape) is not None:
        return None
    return evaluator.evaluate([default])[default.name]


def revalidate(db: TuningDB, run: RunOptions, executor: Executor | None = None
               ) -> list[tuple[Problem, Row, Row, float, float]]:
    """Time every stored winner on this machine's GPU models again, each model's on that model's
    GPUs with cubins for its architecture: (problem, stored, new, change, noise) for each; a change
    larger than the noise means the winner moved (driver, nvcc, clocks)."""
    executor = executor or make_executor(run)
    try:
        groups = executor.by_model()
    except GpuUnavailable as reason:
        executor.close()
        raise UsageError(f"revalidate needs a GPU: {reason}") from None
    checked: list[tuple[Problem, Row, Row, float, float]] = []
    try:
        for model, group in groups.items():
            model_run = replace(run, seed=1, arch=run.arch or model.arch)
            problems = [p for p in db.problems() if p.gpu_model == str(model)]
            for family_name in sorted({p.family for p in problems}):
                family = get_family(family_name)
                with Pipeline(family, model_run, group) as pipeline:
                    checked.extend(_retimed(db, pipeline, family, p) for p in problems if p.family == family_name)
    except KeyboardInterrupt:
        raise RunInterrupted(f"{len(checked)} stored winners re-timed and kept in {db.path}") from None
    finally:
        executor.close()
    return checked


def _retimed(db: TuningDB, pipeline: Pipeline, family: Family, problem: Problem
             ) -> tuple[Problem, Row, Row, float, float]:
    """A problem's stored winner timed again: (problem, stored, new, change, noise)."""
    stored = db.best(problem)
    evaluator = Evaluator(pipeline, family.parse_shape(problem.shape), problem, db)
    new = evaluator.evaluate([family.variant_type.from_name(stored.name)], fresh=True)[stored.name]
    if not is_ok(new):
        return problem, stored, new, float("inf"), 0.0
    change = new.median_ms / stored.median_ms - 1
    noise = max(0.02, 3 * max(stored.stdev_ms / stored.median_ms, new.stdev_ms / new.median_ms))
    return problem, stored, new, change, noise


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


def _out_of_time(started: float, limit: float | None) -> bool:
    return limit is not None and time.monotonic() - started > limit


def _ms(median: float | None) -> str:
    return f"{median:.4g} ms" if median is not None else "failed"


def describe(result: TuneResult) -> str:
    """The report a tuning run prints."""
    winner, first = result.winner, result.standings[0]
    busy = result.gpu_seconds / result.seconds if result.seconds else 0.0
    lines = [f"{result.problem.gpu_model}, {result.problem.family} {result.problem.dtype} {result.problem.shape}: "
             f"{result.evaluations} evaluations ({result.gpu_evaluations} on the GPU) by {result.strategy} "
             f"in {result.seconds:.1f} s (GPU busy {busy:.0%})",
             f"winner: {first.name}  {first.median_ms:.4g} ms, {winner.throughput:.2f} {winner.unit}",
             f"  {_coverage(result)}"]
    for standing in result.standings:
        lines.append(f"  {standing.name:<70} median {standing.median_ms:.4g} ms over {len(standing.medians_ms)} "
                     f"interleaved rounds, spread {standing.spread:.1%}")
    if result.lead is not None:
        verdict = "larger than the noise" if result.lead > result.noise else "within the noise: a tie"
        lines.append(f"lead over the runner-up: {result.lead:.1%}; noise {result.noise:.1%}: {verdict}")
    speedup = result.speedup_over_default
    if speedup is not None:
        lines.append(f"against the family's default variant {result.default.name}: {speedup:.2f}x faster")
    return "\n".join(lines)


def _coverage(result: TuneResult) -> str:
    """Whether the winner is the best of the whole space or of the part evaluated."""
    if result.covered_space:
        return f"the best of the whole space: all {result.space:,} variants evaluated"
    hint = " (brute force without --budget covers the whole space)" if result.strategy == "brute" else ""
    return f"the best of the {result.evaluations:,} evaluated, a subset of the {result.space:,} variants{hint}"
