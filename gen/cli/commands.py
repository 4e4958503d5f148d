"""What each `tilegen` command does with its parsed arguments (gen.cli.parser names them). A command
that evaluates something builds its options and hands them to its driver in gen.search; the
evaluation loop handles interrupts and failures for all of them."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ..core.errors import TemplateProblem, UsageError
from ..core.nvidia_smi import parse_gpus
from ..core.paths import as_path, writable_file
from ..core.progress import log_every_s, note
from ..core.results import GpuModel, Row, Status
from ..core.timing import TUNE_TIMING, TimingOptions
from ..core.table import text_table
from ..evaluate.loop import exit_code
from ..evaluate.options import RunOptions
from ..evaluate.services import (cache_summary, cached_by_another, check_reachable, clear_cache, cubin_cache, emit,
                                 made_by, purge_failed, render, serve_gpus, template_problems)
from ..evaluate.session import Session
from ..families import all_families, get_family
from ..families.registry import registry
from ..families.space import Space, parse_options
from ..commands.compile import compile_space, resource_table
from ..call.lookup import gpu_model_named, tuned_with_reason
from ..search.replay import STUDY_HEADERS, replay_file, study_rows
from ..commands.revalidate import revalidate
from ..commands.sweep import SweepOptions, preview, summary, sweep
from ..commands.tune import TuneOptions, tune
from ..commands.tune import preview as tune_preview
from ..commands.tune_result import describe
from ..families.sourced import clear_store, store_folder, store_summary
from ..store.export import EXPORTERS
from ..store.report import compiled_by, load_rows, report, report_data, status_counts
from ..store.results_log import ResultLog
from ..store.tuning_db import TuningDB, checked_db_path


def cmd_list(args: argparse.Namespace) -> None:
    found = registry()
    for problem in found.problems:
        note(problem, "warning")
    for conflict in found.conflicts.values():
        note(f"{conflict}; neither is listed until one is renamed (its name attribute)", "warning")
    broken = {name: problems for name, family in found.families.items() if (problems := template_problems(family))}
    if args.family in broken:  # left out, as a family that fails its checks is (docs/families.md)
        raise TemplateProblem(broken[args.family][0])
    for problem in (problem for problems in broken.values() for problem in problems):
        note(problem, "warning")
    if args.family is None:
        print(text_table(["family", "size", "what"], [[f.name, f.shape_format, f.summary]
                                                      for f in all_families().values() if f.name not in broken]))
        return
    family = get_family(args.family)
    space = Space.default(family)
    valid = len(space.expand().valid)
    print(f"{family.name}: {family.summary}\nsize: {family.shape_format}, e.g. {family.problem.shape_example}\n"
          f"defined in: {family.source}\n")
    rows = []
    for p in family.variant_type.parameters():
        allowed = ", ".join(map(str, p.choices)) if p.choices else f"integer >= {p.minimum}"
        rows.append([p.name, allowed, p.default, ",".join(map(str, p.space)), p.help])
    print(text_table(["parameter", "allowed", "default", "default space", "meaning"], rows))
    print(f"\ndefault variant: {family.default_variant().name}")
    print(f"names: {family.variant_type.name_format()}")
    print(f"default space: {valid} valid points of {len(space)}")


def cmd_render(args: argparse.Namespace) -> None:
    family = get_family(args.family)
    values = parse_options(family, args.params)
    for name, chosen in values.items():
        if len(chosen) != 1:
            raise UsageError(f"render takes one value per parameter, like -p {name}={chosen[0]} "
                             f"(got {','.join(chosen)}); use compile for a space")
    sys.stdout.write(render(family.variant({name: chosen[0] for name, chosen in values.items()})))


def cmd_emit(args: argparse.Namespace) -> None:
    families = [get_family(name) for name in args.families] or list(all_families().values())
    count = emit(args.out, families)
    print(f"wrote {count} files under {args.out}/")


def cmd_compile(args: argparse.Namespace) -> int:
    family = get_family(args.family)
    space = Space.from_options(family, args.params)
    space.check_size(args.max_points)
    run_options = RunOptions(arch=args.arch, compile_jobs=args.jobs, compiler=args.compiler,
                             compile_level=args.compile_level)
    with Session(run_options, gpus=False) as session:
        progress = _progress(args)
        with (ResultLog(args.out, advice="choose another --out, or remove its results.jsonl",
                        again="compile again into another --out") if args.out else contextlib.nullcontext()) as log:
            result = compile_space(space, args.filter, args.keep_skipped, session, log, progress)
    print(resource_table(result.rows))
    counts = status_counts(result.rows)
    filtered = f", {result.filtered} left out by --filter" if result.filtered else ""
    print(f"{counts[Status.COMPILED]} compiled ({result.stats.cached} from cache), {counts[Status.COMPILE_ERROR]} "
          f"failed, {counts[Status.SKIPPED]} skipped as invalid{filtered}; by {session.compiled_by}")
    if log:
        print(f"rows written to {log.path} and {args.out / 'results.csv'}")
    if not result.stats.cached:
        _say_another_compiler(result.rows, session.compiling)
    return 1 if counts[Status.COMPILE_ERROR] else 0  # every variant that was not skipped must compile


def cmd_sweep(args: argparse.Namespace) -> int:
    family = get_family(args.family)
    options = SweepOptions(
        family=args.family, out=args.out, params=parse_options(family, args.params), sizes=args.sizes,
        filter=args.filter, resume=args.resume, cache_configs=_list(args.cache_configs), keep_skipped=args.keep_skipped,
        max_points=args.max_points,
        run=_run_options(args, sanitize=args.sanitize, seed=args.seed, compile_level=args.compile_level),
        progress=_progress(args))
    if args.dry_run:
        print(preview(options).preview())
        return 0
    result = sweep(options)
    for line in result.notes:
        note(line)
    print(summary(result, args.top))
    print(f"\n{result.new_rows} new rows in {args.out}/results.jsonl and results.csv ({result.time_line()})")
    if result.stats.compiled and not result.stats.cached:
        _say_another_compiler(result.rows, options.run.compile_options())
    return exit_code(result.rows)


def cmd_tune(args: argparse.Namespace) -> None:
    if args.revalidate:
        return cmd_revalidate(args)
    if not args.family or not args.size:
        raise UsageError("tune needs FAMILY and --size (or --revalidate)")
    family = get_family(args.family)
    options = TuneOptions(
        family=args.family, size=args.size, params=parse_options(family, args.params), filter=args.filter,
        strategy=args.strategy, budget=args.budget, time_s=args.time, db=args.db, seed=args.seed,
        top=args.finalists, max_points=args.max_points, early_stop=not args.full_timing, progress=_progress(args),
        objective=args.objective, screen=args.screen,
        run=RunOptions(arch=args.arch, timing=TUNE_TIMING) if args.dry_run else _run_options(args))
    if args.dry_run:  # planned for --arch, asking no cluster
        print(tune_preview(options))
        return None
    options.run.compile_options()  # --arch, --jobs, --compiler and the compile cache, before the database is made
    for result in tune(options):
        print(describe(result))
    print(f"stored in {TuningDB(args.db).path}")


def cmd_replay(args: argparse.Namespace) -> None:
    result = replay_file(args.file, args.strategies, args.budgets, args.repeats, args.seed, args.priors)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    prior = f"; other GPUs' spaces as prior: {result['prior_spaces']}" if result["prior_spaces"] else ""
    print(f"{result['source']}: {result['configurations']:,} configurations, {result['failed']:,} failed; optimum "
          f"{result['optimum_ms']:.4g} ms; {result['repeats']} runs per strategy from seed {result['seed']}{prior}")
    print(text_table(STUDY_HEADERS, study_rows(result)))


def cmd_revalidate(args: argparse.Namespace) -> None:
    checked_db_path(args.db, create=False)  # there must be winners to time again: a missing file is not made
    db = TuningDB(args.db)
    checked = revalidate(db, _run_options(args))
    body = [[c.problem.family, c.problem.shape, c.stored.name, round(c.stored.median_ms, 4),
             round(c.new.median_ms, 4) if c.new.median_ms else str(c.new.status), f"{c.change:+.1%}", f"{c.noise:.1%}",
             "MOVED" if c.moved else "", _versions(c.stored, c.new)] for c in checked]
    print(text_table(["family", "shape", "winner", "stored ms", "now ms", "change", "noise", "", "versions"], body))
    print(f"{sum(c.moved for c in checked)} of {len(checked)} stored winners moved more than the noise")
    if checked:
        print("timed again with cubins made by " + ", ".join(sorted({compiled_by(c.new) for c in checked})))


def cmd_best(args: argparse.Namespace) -> None:
    family = get_family(args.family)
    shape = family.parse_shape(args.size)
    family.check_dtype(args.dtype)
    model = _pick_model(TuningDB(args.db, create=False), args.gpu_model) if args.gpu_model else None
    variant, reason = tuned_with_reason(family.name, str(shape), dtype=args.dtype, db=args.db, gpu_model=model,
                                        objective=args.objective)
    if args.json:
        print(json.dumps({"family": family.name, "size": str(shape), "dtype": variant.dtype, "variant": variant.name,
                          "from": reason}))
    else:
        print(variant.name)
        print(f"from {reason}", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> None:
    family = _one_family(args.family, args.family_option)
    ((name, path),) = [(name, getattr(args, name)) for name in EXPORTERS if getattr(args, name)]
    EXPORTERS[name].check(path, args.force)  # before the database opens: SQLite may remove a journal it finds beside it
    db = TuningDB(args.db, create=False)
    model = _pick_model(db, args.gpu_model) if args.gpu_model else None
    rows = db.rows(family, model)
    if not rows:
        asked = " and ".join(part for part in (f"of family {family}" if family else "",
                                                f"on {model}" if model else "") if part)
        raise UsageError(f"{db.path} holds no measurements{' ' + asked if asked else ''}; "
                         f"tilegen tune stores them there")
    print(f"wrote {EXPORTERS[name].write(rows, path, args.force)} results to {path}")


def cmd_report(args: argparse.Namespace) -> None:
    family, dirs = _report_subjects(args.words, args.family_option)
    if bool(dirs) == bool(args.db):
        raise UsageError("report takes result folders or --db FILE (one of the two)")
    if args.plot:
        from ..store.plots import check_plot_path

        writable_file(args.plot, "--plot")
        check_plot_path(args.plot)
    db = TuningDB(args.db, create=False) if args.db else None
    rows = db.latest_rows(family) if db else [r for r in load_rows(dirs) if not family or r.family == family]
    traces = _traces(db, family) if db and args.plot else {}
    if args.plot:
        from ..store.plots import check_something_to_plot

        check_something_to_plot(rows, traces)
    print(json.dumps(report_data(rows, args.top), indent=1) if args.json else report(rows, args.top, args.style))
    if args.plot:
        from ..store.plots import plot

        for written in plot(rows, traces, args.plot):
            print(f"plot written to {written}", file=sys.stderr if args.json else sys.stdout)


def cmd_worker(args: argparse.Namespace) -> int:
    return serve_gpus(args.address, parse_gpus(args.gpus))


def cmd_cache(args: argparse.Namespace) -> None:
    folder = cubin_cache()
    if args.clear:
        entries, others = clear_cache(folder)
        kept = f"; kept the {others} files there that tilegen did not write" if others else ""
        print(f"removed {entries} cached compiles from {folder}{kept}")
        families, arrays = clear_store()
        print(f"removed {families} tune_kernel families and {arrays} arrays from {store_folder()}")
    elif args.purge_failed:
        errors, damaged = purge_failed(folder)
        print(f"removed {errors} cached compile errors and {damaged} damaged entries or stray files from {folder}")
    else:
        found = cache_summary(folder)
        print(f"{found.folder}: {found.entries} compiled variants ({found.failed} compile errors), {found.damaged} "
              f"damaged entries or stray files, {found.bytes / 2**20:.1f} MiB")
        if found.failed or found.damaged:
            print("tilegen cache --purge-failed removes the compile errors and the damaged entries")
        made = store_summary()
        print(f"{made.folder}: {made.families} tune_kernel families, {made.arrays} arrays, "
              f"{made.bytes / 2**20:.1f} MiB (tilegen cache --clear removes them)")


# ---- helpers shared by the commands ---------------------------------------------------------------

def _run_options(args: argparse.Namespace, **extra: Any) -> RunOptions:
    if args.cluster and args.cluster != "local":
        check_reachable(args.cluster)  # before anything is written
    timing = TimingOptions(budget_s=args.timing_budget, warm=getattr(args, "warm", False),
                           energy=getattr(args, "energy", False))
    return RunOptions(arch=args.arch, compile_jobs=args.jobs, compiler=args.compiler, gpus=parse_gpus(args.gpus),
                      timing=timing, silence_s=args.timeout, cluster=args.cluster, **extra)


def _say_another_compiler(rows: list[Row], compiling: Any) -> None:
    """A run that found nothing in the compile cache says so when the cache holds its variants made
    by another compiler (installing NVRTC changes the compiler, and so every cache key)."""
    made = next((r for r in rows if r.status not in (Status.SKIPPED, Status.COMPILE_ERROR)), None)
    other = made and cached_by_another(get_family(made.family).variant_type.from_name(made.name), compiling)
    if other:
        note(f"nothing came from the compile cache, which holds these variants made by {other}: this run compiled "
             f"with {made_by(compiling)} (NVRTC where installed, else nvcc); --compiler {other.split()[0]} would use them")


def _progress(args: argparse.Namespace) -> bool:
    """Whether to show progress (not with --quiet); a bad $TILEGEN_PROGRESS_S is refused first, before
    anything is written."""
    log_every_s()
    return not args.quiet


def _pick_model(db: TuningDB, name: str) -> GpuModel:
    return gpu_model_named(db, name, "--gpu-model")


def _report_subjects(words: list[str], family_option: str | None) -> tuple[str | None, list[Path]]:
    """report's words: result folders, the first of them the family when it names one and no folder."""
    family = family_option
    if words and not _exists(words[0]) and words[0] in all_families():
        family, words = _one_family(words[0], family_option), words[1:]
    return family, [as_path(word, "report DIR") for word in words]


def _exists(word: str) -> bool:
    try:
        return Path(word).exists()
    except OSError:  # a name too long for a path, say: no folder has it
        return False


def _one_family(given: str | None, option: str | None) -> str | None:
    """The family named first on the command line, or by the old --family; not two different ones."""
    if given and option and given != option:
        raise UsageError(f"two families named, {given} and --family {option}: give one, as FAMILY")
    return given or option


def _traces(db: TuningDB, family: str | None) -> dict[tuple[str, str, str], dict[str, list[list[float | None]]]]:
    """(family, shape, GPU name) -> strategy -> one trace per tuning session, for every problem (of `family`)."""
    traced: dict[tuple[str, str, str], dict[str, list[list[float | None]]]] = {}
    for problem in db.problems(family):
        grouped = traced.setdefault((problem.family, problem.shape, problem.gpu_model.name), {})
        for strategy, trace in db.traces(problem).values():
            grouped.setdefault(strategy, []).append(trace)
    return {key: grouped for key, grouped in traced.items() if grouped}


def _versions(stored: Row, new: Row) -> str:
    """What changed in the driver and the compiler between a stored row and its new timing."""
    made_by = [row.provenance.get("compiler", "nvcc") for row in (stored, new)]  # rows of 0.2 name none: nvcc
    changes = [f"compiler {made_by[0]} -> {made_by[1]}"] if made_by[0] != made_by[1] else []
    keys = ("driver", made_by[0]) if made_by[0] == made_by[1] else ("driver",)
    changes += [f"{key} {stored.provenance.get(key)} -> {new.provenance.get(key)}" for key in keys
                if stored.provenance.get(key) != new.provenance.get(key)]
    return "; ".join(changes)


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
