"""Autotune one problem per GPU model, through the evaluation loop: a search strategy proposes
variants (measurements the tuning database already holds are recalled, not measured again), the
finalists are measured again in interleaved rounds, to tell whether the winner's lead is larger
than the noise, and the family's default variant is measured for comparison.

Brute force proposes the whole budget at once; a model-guided strategy proposes only what keeps
the engine busy, so that each proposal knows of as many measurements as it can. Spaces of up to
SPECULATE points are compiled speculatively, from the start, while the GPU workers start.

Screening (`screen`, a compile level of gen.compiling.levels): the search compiles and times its
candidates at that fast level; the finalists are compiled at full and timed head to head in the
interleaved rounds, which name the winner. The screening rows are kept in the database, where only
full-level rows are winners. DEFAULT_SCREEN says whether a tune screens unless told.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core import checks
from ..core.errors import RunInterrupted, UsageError
from ..core.objectives import DEFAULT_OBJECTIVE, NO_ENERGY, check_objective
from ..core.progress import Progress
from ..core.results import Row, is_ok
from ..core.timing import EARLY_STOP_MARGIN, TUNE_TIMING
from ..evaluate.engine import Engine
from ..evaluate.loop import Outcome, Sink, evaluate
from ..evaluate.options import FULL, RunOptions, check_level
from ..evaluate.plan import Plan, Point, make_plan
from ..evaluate.session import Executor, Session
from ..families import get_family
from ..families.family import Family, refused
from ..families.space import MAX_POINTS, Space
from ..families.variant import Variant
from ..store.tuning_db import FINALIST_KEY, TuningKey, TuningDB, checked_db_path
from ..call.lookup import shape_distance
from ..search.proposers import PointList, Rounds, Search
from ..search.prior import Prior
from ..search.strategies import DEFAULT_STRATEGY, STRATEGIES, STRATEGY_TYPES, SearchSpace, make_strategy
from .tune_result import TuneResult

INTERLEAVED_ROUNDS = 5
WARM_START = 10  # the family's candidates and the nearest tuned shape's top, evaluated before the strategy's picks
SPECULATE = 4000  # spaces up to this many valid points are compiled ahead of the strategy
DEFAULT_BUDGET = 100  # evaluations of a search strategy given neither a budget nor a time
RESUME_HINT = "tune again to go on (what is measured is not measured again)"
DEFAULT_SCREEN: str | None = None  # the compile level a tune screens at unless told (None: no screening)


@dataclass(frozen=True)
class TuneOptions:
    family: str
    size: str
    params: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    filter: str | None = None
    strategy: str = DEFAULT_STRATEGY
    budget: int | None = None  # evaluations; None: brute force takes the whole space, another strategy
    # DEFAULT_BUDGET, or with `time_s` as many as fit in that time
    time_s: float | None = None
    db: Path | None = None
    seed: int = 0  # of the strategy (the inputs' seed derives from it)
    top: int = 3
    run: RunOptions = field(default_factory=lambda: RunOptions(timing=TUNE_TIMING))
    progress: bool = True
    max_points: int = MAX_POINTS  # refuse a larger space before expanding it
    early_stop: bool = True  # stop timing a variant clearly slower than the best so far (never a finalist's)
    objective: str = DEFAULT_OBJECTIVE  # what ranks the finalists: time, energy or edp (gen.core.objectives)
    screen: str | None = DEFAULT_SCREEN  # search at this compile level, confirm the finalists at full; None: don't

    @property
    def screening(self) -> str | None:
        """The compile level the search runs at, where it is not full."""
        return self.screen if self.screen not in (None, FULL) else None

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
    checks.flag(tune.early_stop, "early_stop")
    checks.instance(tune.run, RunOptions, "run")
    check_objective(tune.objective)
    if tune.screen is not None:
        check_level(tune.screen, "screen")
    if tune.run.compile_level != FULL:
        raise UsageError(f"a tune compiles its finalists at {FULL}, not {tune.run.compile_level}; to search at a fast "
                         f"level, screen at it (--screen {tune.run.compile_level}, screen={tune.run.compile_level!r})")


@dataclass(frozen=True)
class Candidates:
    """What a tune searches: the plan of the space at the shape, where a variant that cannot run it
    as it is runs as its family's adaptation (bounds checks on, say), and its variants, each once."""

    plan: Plan
    variants: list[Variant]
    budget: int  # evaluations the tune will make, at most

    def describe(self, shape: Any, strategy: str) -> str:
        """The plan's account, then what the tune will evaluate."""
        return (f"{self.plan.preview()}\n{self.plan.family.name} at {shape}: {len(self.variants):,} variants to "
                f"search by {strategy}; the budget evaluates {min(self.budget, len(self.variants)):,} of them")


def candidates(family: Family, shape: Any, options: TuneOptions) -> Candidates:
    """The variants a tune of `shape` searches (see Candidates); UsageError when none can run it."""
    space = Space.default(family, options.params)
    space.check_size(options.max_points)
    plan = make_plan(family, space, [shape], [""], options.filter, adapt=True, arch=options.run.compile_arch)
    variants = [point.variant for point in plan.runnable]
    if not variants:
        valid = space.expand(options.filter).valid
        reason = refused(family, valid[0], shape) if valid else "no valid variant matches"
        raise UsageError(f"no {family.name} variant in this space can run {shape}, adapted or not: {reason}")
    element_types = sorted({v.dtype for v in variants})
    if len(element_types) > 1:
        raise UsageError(f"a tune is for one element type; this space has {', '.join(element_types)}: choose one "
                         f"with -p dtype=...")
    epilogues = sorted({family.epilogue_of(v) or "none" for v in variants})
    if len(epilogues) > 1:
        raise UsageError(f"a tune is for one epilogue; this space has {'; '.join(epilogues)}: give each of its "
                         f"parameters one value with -p")
    return Candidates(plan, variants, _budget(options, len(variants)))


def _budget(options: TuneOptions, size: int) -> int:
    """Evaluations at most: the given budget; brute force's whole space; with a time limit, all
    that fit; else DEFAULT_BUDGET."""
    if options.budget is not None:
        return min(options.budget, size)
    if STRATEGY_TYPES[options.strategy].covers_space or options.time_s is not None:
        return size
    return min(DEFAULT_BUDGET, size)


def preview(options: TuneOptions) -> str:
    """What `tune(options)` would evaluate, without compiling or writing anything."""
    family = get_family(options.family)
    shape = family.parse_shape(options.size)
    screened = f" at {options.screening}, the finalists compiled again at full" if options.screening else ""
    return candidates(family, shape, options).describe(shape, options.strategy) + screened


def tune(options: TuneOptions, executor: Executor | None = None) -> list[TuneResult]:
    """Tune on every GPU model among the executor's GPUs; one result per model. The GPU workers start
    first, and compiling at once, while they start."""
    family = get_family(options.family)
    shape = family.parse_shape(options.size)
    started = time.monotonic()
    with Session(replace(options.run, seed=random.Random(options.seed).randrange(1, 2**31)), executor) as session:
        chosen = candidates(family, shape, options)  # planned while the workers start
        db_path = checked_db_path(options.db, create=True)  # a bad --db is refused now; made once a GPU answers
        if len(chosen.variants) <= SPECULATE:  # the family's likely best first: a tune measures them first
            head = likely_seeds(family, shape, chosen.variants[0].dtype, family.epilogue_of(chosen.variants[0]),
                                chosen.variants)
            session.pool.prefetch(list(dict.fromkeys(head + chosen.variants)), options.screening)
        try:
            results, db = [], None
            for model, engine in session.per_model("tune"):
                db = db if db is not None else TuningDB(db_path)  # made only once a GPU answers
                problem = TuningKey(model, family.name, chosen.variants[0].dtype, str(shape),
                                    family.epilogue_of(chosen.variants[0]))
                results.append(_tune_model(options, family, shape, chosen, problem, engine, db, started))
                started = time.monotonic()
            return results
        except RunInterrupted:
            raise
        except KeyboardInterrupt:  # while the workers start
            raise RunInterrupted(f"evaluations so far are kept in the tuning database {db_path}; {RESUME_HINT}") \
                from None


def record_measured(db: TuningDB, rows: list[Row], problem: TuningKey) -> None:
    """Rows of a problem into the database; a compile error (no GPU in its provenance) is kept as
    the tuned GPU model's."""
    for row in rows:
        row.provenance.setdefault("gpu_model", str(problem.gpu_model))
    db.record(rows, problem.gpu_model)


class TuneSink(Sink):
    """A tune's rows, recorded in the tuning database as they come; with a `tuning_session` (the
    database's, not the evaluate/ Session), every evaluation (recalled ones too) also goes into its trace."""

    def __init__(self, db: TuningDB, problem: TuningKey, tuning_session: int | None = None):
        self.db, self.problem, self.tuning_session = db, problem, tuning_session
        self.steps = 0

    def record(self, rows: list[Row]) -> None:
        record_measured(self.db, rows, self.problem)
        self.recall(rows)

    def recall(self, rows: list[Row]) -> None:
        for row in rows if self.tuning_session is not None else ():
            self.db.trace(self.tuning_session, self.steps, row.name, row.median_ms if is_ok(row) else None)
            self.steps += 1

    def kept(self) -> str:
        return f"{self.steps} evaluations kept in the tuning database {self.db.path}"



def _tune_model(options: TuneOptions, family: Family, shape: Any, chosen: Candidates, problem: TuningKey,
                engine: Engine, db: TuningDB, started: float) -> TuneResult:
    """Tune one GPU model on an engine that holds that model's GPUs: the search, the finalists'
    interleaved rounds, and the family's default variant for comparison. Times count from
    `started` (the first model's compiles start before the GPUs are known)."""
    search = _search(options, family, shape, chosen, problem, db, started)
    default = _default_point(family, shape, problem)
    if default is not None:  # compiled when a compile thread is free, not after the search (a cache hit if known)
        engine.speculate([default])
    progress = Progress(chosen.budget, f"tune {family.name} {shape}", enabled=options.progress)
    searched = evaluate(search, engine, TuneSink(db, problem, db.start_session(problem, options.strategy)), progress,
                        RESUME_HINT)
    finalists = search.finalists(options.top)
    if not finalists:
        raise UsageError(_nothing_ran(options, family, problem, shape, search))
    rounds = Rounds(finalists, shape, INTERLEAVED_ROUNDS, options.objective)
    finals = evaluate(rounds, engine, TuneSink(db, problem), resume_hint=RESUME_HINT)
    standings = rounds.standings()
    if not standings:
        raise UsageError("the finalists failed when measured again; the GPU or its driver may be unstable")
    # Each finalist's median round recorded once more, as its latest: best and gen.tuned agree with the standings.
    chosen_rows = {s.name: _marked(rounds.median_round(s), len(s.medians_ms)) for s in standings}
    db.record(list(chosen_rows.values()), problem.gpu_model)
    default = _default_row(engine, default, problem, db)
    on_gpu = searched.fresh + finals.fresh + (default.fresh if default else 0)
    return TuneResult(problem, options.strategy, chosen_rows[standings[0].name], standings,
                      default.rows[0] if default else None, len(search.trace), on_gpu, time.monotonic() - started,
                      search.trace, [t - started for t in search.trace_times], engine.stats.gpu_seconds,
                      len(chosen.variants), options.objective, _energy_note(finals.rows), options.screening,
                      search.strategy.seconds)


def _search(options: TuneOptions, family: Family, shape: Any, chosen: Candidates, problem: TuningKey, db: TuningDB,
            started: float) -> Search:
    space = SearchSpace(chosen.variants)
    others = other_gpus(db, problem, family, shape, chosen.variants)
    strategy = make_strategy(options.strategy, space, options.seed, Prior(space, others) if others else None)
    warmed = options.budget is None or options.budget >= 2 * WARM_START  # a budget worth a warm start
    # a search of the whole space, in any order, starts with the nearest shape's ranking of all of it
    whole = STRATEGY_TYPES[options.strategy].covers_space and chosen.budget >= len(chosen.variants)
    count = len(chosen.variants) if whole else WARM_START
    warm = first_picks(db, problem, family, shape, chosen.variants, count)[:chosen.budget] if warmed else []
    deadline = started + options.time_s if options.time_s is not None else None
    level = options.screening
    return Search(strategy, shape, chosen.budget, warm, db.measured(problem, level or FULL), deadline,
                  all_at_once=STRATEGY_TYPES[options.strategy].covers_space,
                  early_stop=EARLY_STOP_MARGIN if options.early_stop else None, level=level, confirm=options.top)


def _energy_note(rows: list[Row]) -> str:
    """Why the finalists have no energy, from their rows (the worker says so in the message); '' when
    one of them has it."""
    if any(row.energy_j is not None for row in rows):
        return ""
    notes = [part for row in rows for part in row.message.split("; ") if part.startswith(NO_ENERGY)]
    return notes[0] if notes else ""


def _nothing_ran(options: TuneOptions, family: Family, problem: TuningKey, shape: Any, search: Search) -> str:
    if not search.trace and options.time_s is not None:
        return (f"the time limit (--time, time_s: {options.time_s:g} s) ran out before any variant of {family.name} "
                f"was measured; give a longer one (a variant takes about {options.run.timing.budget_s:g} s to time, "
                f"more to compile), or a budget (--budget N, budget=N) to count evaluations instead")
    return f"no variant of {family.name} ran correctly on {problem.gpu_model} at {shape}"


def _marked(row: Row, rounds: int) -> Row:
    """A finalist's median-round row, marked as chosen from `rounds` interleaved rounds."""
    return replace(row, provenance={**row.provenance, FINALIST_KEY: rounds})


def _default_point(family: Family, shape: Any, problem: TuningKey) -> Point | None:
    """The family's default variant at this shape (with the tune's epilogue), to say the speed-up; None
    where it cannot run it."""
    default = family.with_epilogue(family.safe_variant(shape, problem.dtype), problem.epilogue)
    return None if refused(family, default, shape) is not None else Point(default, shape, "none")


def _default_row(engine: Engine, default: Point | None, problem: TuningKey, db: TuningDB) -> Outcome | None:
    """The default variant's row: measured before (the database's), or now."""
    if default is None:
        return None
    return evaluate(PointList([default], known=db.measured(problem)), engine, TuneSink(db, problem),
                    resume_hint=RESUME_HINT)


def tuned_rows(result: TuneResult, db: Path | None) -> dict[str, Row]:
    """The latest row of each variant a tune's problem has measured: at full, else (a variant only
    screened) at the tune's screening level."""
    stored = TuningDB(db, create=False)
    screened = stored.measured(result.problem, result.screen) if result.screen else {}
    return {**screened, **stored.measured(result.problem)}


def first_picks(db: TuningDB, problem: TuningKey, family: Family, shape: Any, valid: list[Variant],
                count: int = WARM_START) -> list[Variant]:
    """What a tune measures before its strategy picks: the family's own candidates for the shape, then
    the nearest tuned shape's best, `count` in all."""
    seeds = likely_seeds(family, shape, problem.dtype, problem.epilogue, valid)
    return list(dict.fromkeys(seeds + warm_start(db, problem, family, shape, valid, count)))[:count]


def likely_seeds(family: Family, shape: Any, dtype: str, epilogue: str, valid: list[Variant]) -> list[Variant]:
    """The family's likely best variants for the shape, with the tune's epilogue, that `valid` holds."""
    allowed = set(valid)
    seeds = [family.with_epilogue(v, epilogue) for v in family.likely_best(shape, dtype)]
    return [v for v in seeds if v in allowed]


def warm_start(db: TuningDB, problem: TuningKey, family: Family, shape: Any, valid: list[Variant],
               count: int = WARM_START) -> list[Variant]:
    """The top `count` variants of the nearest shape tuned on this GPU model, adapted to run this shape."""
    tuned_here = [p for p in db.problems(problem.family) if (p.gpu_model, p.dtype, p.epilogue) == (
        problem.gpu_model, problem.dtype, problem.epilogue) and p.shape != problem.shape]
    if not tuned_here:
        return []
    allowed, chosen = set(valid), []
    for row in db.top(_nearest(tuned_here, family, shape), 3 * count):
        variant = family.runnable(family.variant_type.from_name(row.name), shape)
        if variant in allowed and variant not in chosen:
            chosen.append(variant)
    return chosen[:count]


def other_gpus(db: TuningDB, problem: TuningKey, family: Family, shape: Any, valid: list[Variant]
               ) -> list[dict[Variant, float | None]]:
    """What each other GPU model measured of this kernel (its nearest tuned shape, the same element type
    and epilogue), adapted to run this shape: each variant's median, None where it failed. The search's
    prior (gen.search.prior): a kernel tuned on one GPU is tuned on the next from its fastest."""
    by_model: dict[Any, list[TuningKey]] = {}
    for tuned in db.problems(problem.family):
        if (tuned.dtype, tuned.epilogue) == (problem.dtype, problem.epilogue) and tuned.gpu_model != problem.gpu_model:
            by_model.setdefault(tuned.gpu_model, []).append(tuned)
    allowed, others = set(valid), []
    for tuned in by_model.values():
        measured = {}
        for row in db.measured(_nearest(tuned, family, shape)).values():
            variant = family.runnable(family.variant_type.from_name(row.name), shape)
            if variant in allowed:
                measured.setdefault(variant, row.median_ms if is_ok(row) else None)
        others.append(measured)
    return others


def _nearest(problems: list[TuningKey], family: Family, shape: Any) -> TuningKey:
    """The problem whose shape is nearest to `shape`."""
    return min(problems, key=lambda p: shape_distance(family.parse_shape(p.shape).dims, shape.dims))
