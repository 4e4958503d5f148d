"""Autotune one problem per GPU model: a search strategy proposes variants, already-measured ones
come from the tuning database, the rest are compiled and run; the final top k are measured
again, interleaved, to tell whether the winner's lead is larger than the noise.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Mapping, Sequence

from .compiler import CompileOptions, compile_variants, compiled_row, provenance
from .errors import UsageError
from .families import get_family
from .family import Family, refused
from .jobs import job_for
from .progress import Progress
from .results import Row, TimingOptions, is_ok
from .space import Space
from .strategies import STRATEGIES, SearchSpace, make_strategy
from .tunedb import Problem, TuningDB
from .variant import Variant
from .worker import Executor, GpuUnavailable, LocalExecutor

INTERLEAVED_ROUNDS = 5
WARM_START = 10  # the nearest tuned shape's top variants, evaluated before the strategy's own picks


@dataclass(frozen=True)
class TuneOptions:
    family: str
    size: str
    params: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    filter: str | None = None
    strategy: str = "bayes"
    budget: int | None = 100  # evaluations; None: until `time_s` runs out or the space is exhausted
    time_s: float | None = None
    db: Path | None = None
    gpus: Sequence[int] = (0,)
    arch: str | None = None
    seed: int = 0
    top: int = 3
    timing: TimingOptions = field(default_factory=lambda: TimingOptions(budget_s=0.5))
    silence_s: float = 30.0
    progress: bool = True


@dataclass
class Standing:
    """A finalist after the interleaved rounds."""

    name: str
    medians_ms: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.medians_ms)

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


def tune(options: TuneOptions, executor: Executor | None = None) -> list[TuneResult]:
    """Tune on every GPU model among `options.gpus`; one result per model."""
    if options.strategy not in STRATEGIES:
        raise UsageError(f"strategy {options.strategy!r} is not one of: {', '.join(STRATEGIES)}")
    if options.budget is not None and options.budget < 1:
        raise UsageError(f"--budget must be at least 1 evaluation, got {options.budget}")
    family = get_family(options.family)
    shape = family.parse_shape(options.size)
    candidates = Space.default(family, options.params).select(options.filter).valid
    valid = [v for v in candidates if refused(family, v, shape) is None]
    if not valid:
        reason = refused(family, candidates[0], shape) if candidates else "no valid variant matches"
        raise UsageError(f"no {family.name} variant in this space can run {shape}: {reason}")
    db = TuningDB(options.db)
    executor = executor or LocalExecutor(options.gpus, options.silence_s)
    try:
        groups = executor.by_model()
    except GpuUnavailable as reason:
        executor.close()
        raise UsageError(f"tune needs a GPU: {reason}") from None
    try:
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            futures = [pool.submit(_tune_model, options, family, shape, valid,
                                   Problem(str(model), family.name, valid[0].dtype, str(shape)), group, db)
                       for model, group in groups.items()]
            return [future.result() for future in futures]
    finally:
        executor.close()


class Evaluator:
    """Measures variants of one problem: from the database when already measured on this GPU model,
    else compiled (cached) and run on the executor's GPUs; new rows go into the database."""

    def __init__(self, family: Family, shape: Any, problem: Problem, executor: Executor, db: TuningDB,
                 compile_options: CompileOptions, timing: TimingOptions, seed: int):
        self.family, self.shape, self.problem, self.executor, self.db = family, shape, problem, executor, db
        self.compile_options, self.timing, self.seed = compile_options, timing, seed
        self.known = db.measured(problem)
        self.gpu_evaluations = 0

    def evaluate(self, variants: Sequence[Variant], fresh: bool = False) -> dict[Variant, Row]:
        """Rows for `variants`; with `fresh`, measure again even what the database already has."""
        rows = {v: self.known[v.name] for v in variants if not fresh and v.name in self.known}
        to_run = [v for v in variants if v not in rows]
        made_by = provenance(self.compile_options, self.family)
        pending = {}
        for compiled in compile_variants(to_run, self.compile_options):
            row = compiled_row(compiled, str(self.shape), cache_config="none", provenance=dict(made_by))
            if compiled.ok:
                pending[job_for(compiled, self.shape, "none", self.seed, self.timing)] = row
            else:
                row.provenance["gpu_model"] = self.problem.gpu_model
                rows[compiled.variant] = row
        for job, measurement in self.executor.run(list(pending)):
            row = pending[job]
            measurement.apply_to(row)
            rows[self.family.variant_type.from_name(job.name)] = row
        self.gpu_evaluations += len(pending)
        new = [rows[v] for v in to_run]
        self.db.record(new)
        self.known.update({row.name: row for row in new})
        return rows


def _tune_model(options: TuneOptions, family: Family, shape: Any, valid: list[Variant], problem: Problem,
                executor: Executor, db: TuningDB) -> TuneResult:
    started = time.monotonic()
    compile_options = CompileOptions.local(options.arch)
    evaluator = Evaluator(family, shape, problem, executor, db, compile_options, options.timing,
                          seed=random.Random(options.seed).randrange(1, 2**31))
    strategy = make_strategy(options.strategy, SearchSpace(valid), options.seed)
    session = db.start_session(problem, options.strategy)
    limit = min(options.budget or len(valid), len(valid))
    progress = Progress(limit, f"tune {problem.gpu_model.split(' (')[0]}", enabled=options.progress)
    trace: list[float | None] = []
    warm = [v for v in warm_start(db, problem, family, shape, valid) if options.budget is None or
            options.budget >= 2 * WARM_START][: limit]
    while len(trace) < limit and not _out_of_time(started, options.time_s):
        width = min(len(executor.devices()), limit - len(trace))
        batch = [warm.pop(0) for _ in range(min(width, len(warm)))] or strategy.ask(width)
        if not batch:
            break
        for variant, row in evaluator.evaluate(batch).items():
            median = row.median_ms if is_ok(row) else None
            strategy.tell(variant, median)
            db.trace(session, len(trace), variant.name, median)
            trace.append(median)
            progress.advance(f"{variant.name} {_ms(median)}")
    progress.close()
    finalists = sorted((v for v, t in strategy.results.items() if t is not None), key=lambda v: strategy.results[v])
    if not finalists:
        raise UsageError(f"no variant of {family.name} ran correctly on {problem.gpu_model} at {shape}")
    standings, rows = _interleaved(evaluator, finalists[: options.top])
    winner = rows[standings[0].name]
    default = _default_row(evaluator, family, shape, valid)
    return TuneResult(problem, options.strategy, winner, standings, default, len(trace),
                      evaluator.gpu_evaluations, time.monotonic() - started, trace)


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
    """Measure the finalists again in rounds, A B C A B C ..., so drift hits them alike."""
    medians: dict[str, list[float]] = {v.name: [] for v in finalists}
    latest: dict[str, Row] = {}
    for _ in range(INTERLEAVED_ROUNDS):
        for variant, row in evaluator.evaluate(finalists, fresh=True).items():
            if is_ok(row):
                medians[variant.name].append(row.median_ms)
                latest[variant.name] = row
    standings = sorted((Standing(name, times) for name, times in medians.items() if times),
                       key=lambda s: s.median_ms)
    if not standings:
        raise UsageError("the finalists failed when measured again; the GPU or its driver may be unstable")
    return standings, latest


def _default_row(evaluator: Evaluator, family: Family, shape: Any, valid: list[Variant]) -> Row | None:
    default = family.safe_variant(shape, valid[0].dtype)
    if refused(family, default, shape) is not None:
        return None
    return evaluator.evaluate([default])[default]


def revalidate(db: TuningDB, executor: Executor, arch: str | None = None,
               timing: TimingOptions | None = None) -> list[tuple[Problem, Row, Row, float, float]]:
    """Time every stored winner on this machine's GPU models again: (problem, stored, new, change,
    noise) for each; a change larger than the noise means the winner moved (driver, nvcc, clocks)."""
    models = {str(d.model) for d in executor.devices()}
    compile_options = CompileOptions.local(arch)
    checked = []
    for problem in (p for p in db.problems() if p.gpu_model in models):
        stored = db.best(problem)
        family = get_family(problem.family)
        evaluator = Evaluator(family, family.parse_shape(problem.shape), problem, executor, db, compile_options,
                              timing or TimingOptions(), seed=1)
        variant = family.variant_type.from_name(stored.name)
        new = evaluator.evaluate([variant], fresh=True)[variant]
        if not is_ok(new):
            checked.append((problem, stored, new, float("inf"), 0.0))
            continue
        change = new.median_ms / stored.median_ms - 1
        noise = max(0.02, 3 * max(stored.stdev_ms / stored.median_ms, new.stdev_ms / new.median_ms))
        checked.append((problem, stored, new, change, noise))
    return checked


def replay(strategy: str, recorded: Mapping[str, float | None], space: SearchSpace, budget: int,
           seed: int = 0) -> list[tuple[str, float | None]]:
    """Run a strategy against recorded measurements (name -> median ms, None for failures), no GPU:
    what it asked for and the median it would have seen, in order."""
    search = make_strategy(strategy, space, seed)
    seen: list[tuple[str, float | None]] = []
    while len(seen) < min(budget, len(space.variants)):
        batch = search.ask(1)
        if not batch:
            break
        for variant in batch:
            median = recorded.get(variant.name)
            search.tell(variant, median)
            seen.append((variant.name, median))
    return seen


def best_so_far(trace: Iterable[float | None]) -> list[float | None]:
    best: float | None = None
    curve = []
    for median in trace:
        if median is not None and (best is None or median < best):
            best = median
        curve.append(best)
    return curve


def _out_of_time(started: float, limit: float | None) -> bool:
    return limit is not None and time.monotonic() - started > limit


def _ms(median: float | None) -> str:
    return f"{median:.4g} ms" if median is not None else "failed"


def describe(result: TuneResult) -> str:
    """The report a tuning run prints."""
    winner, first = result.winner, result.standings[0]
    lines = [f"{result.problem.gpu_model}, {result.problem.family} {result.problem.dtype} {result.problem.shape}: "
             f"{result.evaluations} evaluations ({result.gpu_evaluations} on the GPU) by {result.strategy} "
             f"in {result.seconds:.1f} s",
             f"winner: {first.name}  {first.median_ms:.4g} ms, {winner.throughput:.2f} {winner.unit}"]
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

