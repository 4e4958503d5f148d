"""What each `tilegen` command does with its parsed arguments (gen.cli.parser names them). A command
that evaluates something builds its options and hands them to its driver in gen.search; the
evaluation loop handles interrupts and failures for all of them."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from ..build.compiler import CompileOptions, cache_summary, clear_cache, cubin_cache, made_by, purge_failed
from ..build.emit import emit
from ..build.render import render, template_problems
from ..core.errors import UsageError
from ..core.nvidia_smi import parse_gpus
from ..core.paths import as_path, writable_file
from ..core.results import GpuModel, Row, Status, TimingOptions
from ..core.table import text_table
from ..evaluate.loop import exit_code
from ..evaluate.options import RunOptions
from ..evaluate.plan import make_plan
from ..families import all_families, get_family
from ..families.registry import registry
from ..families.space import Space, parse_options
from ..search.compiling import compile_space, resource_table
from ..search.lookup import gpu_model_named, tuned_with_reason
from ..search.revalidate import revalidate
from ..search.sweep import SweepOptions, preview, status_counts, summary, sweep
from ..search.tune import TUNE_TIMING, TuneOptions, tune
from ..search.tune import preview as tune_preview
from ..search.tune_result import describe
from ..store.export import checked_t4_path, write_t4
from ..store.report import load_rows, report
from ..store.results_log import ResultLog
from ..store.tuning_db import TuningDB


def cmd_list(args: argparse.Namespace) -> None:
    found = registry()
    for problem in found.problems:
        print(f"tilegen: warning: {problem}", file=sys.stderr)
    for conflict in found.conflicts.values():
        print(f"tilegen: warning: {conflict}; neither is listed until one is renamed (its name attribute)",
              file=sys.stderr)
    for family in found.families.values():
        for problem in template_problems(family):
            print(f"tilegen: warning: {problem}", file=sys.stderr)
    if args.family is None:
        print(text_table(["family", "size", "what"],
                         [[f.name, f.shape_format, f.summary] for f in all_families().values()]))
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
    compiling = CompileOptions.local(args.arch, args.jobs, args.compiler)
    with (ResultLog(args.out, advice="choose another --out, or remove its results.jsonl",
                    again="compile again into another --out") if args.out else contextlib.nullcontext()) as log:
        result = compile_space(space, args.filter, args.keep_skipped, compiling, log)
    print(resource_table(result.rows))
    counts = status_counts(result.rows)
    print(f"{counts[Status.COMPILED]} compiled ({result.stats.cached} from cache), {counts[Status.COMPILE_ERROR]} "
          f"failed, {counts[Status.SKIPPED]} skipped as invalid; by {made_by(compiling)} for {compiling.arch}")
    if log:
        print(f"rows written to {log.path} and {args.out / 'results.csv'}")
    return exit_code(result.rows)


def cmd_sweep(args: argparse.Namespace) -> int:
    family = get_family(args.family)
    options = SweepOptions(
        family=args.family, out=args.out, params=parse_options(family, args.params), sizes=args.sizes,
        filter=args.filter, resume=args.resume, cache_configs=_list(args.cache), keep_skipped=args.keep_skipped,
        max_points=args.max_points, run=_run_options(args, sanitize=args.sanitize, seed=args.seed))
    if args.dry_run:
        print(preview(options).preview())
        return 0
    result = sweep(options)
    for note in result.notes:
        print(f"tilegen: note: {note}", file=sys.stderr)
    print(summary(result, args.top))
    split = ", ".join(f"{stage} {value:.1f} s" for stage, value in result.seconds.items())
    print(f"\n{result.new_rows} new rows in {args.out}/results.jsonl and results.csv ({split})")
    return exit_code(result.rows)


def cmd_tune(args: argparse.Namespace) -> None:
    if args.revalidate:
        return cmd_revalidate(args)
    if not args.family or not args.size:
        raise UsageError("tune needs FAMILY and --size (or --revalidate)")
    family = get_family(args.family)
    options = TuneOptions(
        family=args.family, size=args.size, params=parse_options(family, args.params), filter=args.filter,
        strategy=args.strategy, budget=args.budget, time_s=args.time, db=args.db, seed=args.seed, top=args.top,
        max_points=args.max_points, early_stop=not args.full_timing, objective=args.objective,
        run=RunOptions(timing=TUNE_TIMING) if args.dry_run else _run_options(args))
    if args.dry_run:
        space = Space.from_options(family, args.params)
        space.check_size(args.max_points)
        print(make_plan(family, space, [family.parse_shape(args.size)], [""], args.filter).preview())
        print(tune_preview(options))
        return None
    options.run.compile_options()  # --arch, --jobs, --compiler and the compile cache, before the database is made
    for result in tune(options):
        print(describe(result))
    print(f"stored in {TuningDB(args.db).path}")


def cmd_revalidate(args: argparse.Namespace) -> None:
    db = TuningDB(args.db)
    checked = revalidate(db, _run_options(args))
    body = [[c.problem.family, c.problem.shape, c.stored.name, round(c.stored.median_ms, 4),
             round(c.new.median_ms, 4) if c.new.median_ms else str(c.new.status), f"{c.change:+.1%}", f"{c.noise:.1%}",
             "MOVED" if c.moved else "", _versions(c.stored, c.new)] for c in checked]
    print(text_table(["family", "shape", "winner", "stored ms", "now ms", "change", "noise", "", "versions"], body))
    print(f"{sum(c.moved for c in checked)} of {len(checked)} stored winners moved more than the noise")


def cmd_best(args: argparse.Namespace) -> None:
    family = get_family(args.family)
    shape = family.parse_shape(args.size)
    family.check_dtype(args.dtype)
    model = _pick_model(TuningDB(args.db, create=False), args.gpu) if args.gpu else None
    variant, reason = tuned_with_reason(family.name, str(shape), dtype=args.dtype, db=args.db, gpu_model=model,
                                        objective=args.objective)
    print(variant.name)
    print(f"from {reason}", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> None:
    db = TuningDB(args.db, create=False)
    checked_t4_path(args.t4, args.force)
    model = _pick_model(db, args.gpu) if args.gpu else None
    rows = db.rows(args.family, model)
    if not rows:
        raise UsageError(f"{db.path} holds no measurements for that family and GPU")
    print(f"wrote {write_t4(rows, args.t4, args.force)} results to {args.t4}")


def cmd_report(args: argparse.Namespace) -> None:
    if bool(args.dirs) == bool(args.db):
        raise UsageError("report takes result folders or --db FILE (one of the two)")
    if args.plot:
        from ..store.plots import check_plot_path

        writable_file(args.plot, "--plot")
        check_plot_path(args.plot)
    for directory in args.dirs:
        as_path(directory, "report DIR")
    db = TuningDB(args.db, create=False) if args.db else None
    rows = db.latest_rows(args.family) if db else [r for r in load_rows(args.dirs)
                                                   if not args.family or r.family == args.family]
    print(report(rows, args.top, args.markdown))
    if args.plot:
        from ..store.plots import plot

        traces = _traces(db, args.family) if db else {}
        print(f"plot written to {plot(rows, traces, args.plot, f'tilegen report: {args.db or args.dirs[0]}')}")


def cmd_worker(args: argparse.Namespace) -> int:
    from ..gpu.dask_worker import serve_gpus

    return serve_gpus(args.address, parse_gpus(args.gpus))


def cmd_cache(args: argparse.Namespace) -> None:
    folder = cubin_cache()
    if args.clear:
        entries, others = clear_cache(folder)
        kept = f"; kept the {others} files there that tilegen did not write" if others else ""
        print(f"removed {entries} cached compiles from {folder}{kept}")
    elif args.purge_failed:
        errors, damaged = purge_failed(folder)
        print(f"removed {errors} cached compile errors and {damaged} damaged entries or stray files from {folder}")
    else:
        found = cache_summary(folder)
        print(f"{found.folder}: {found.entries} compiled variants ({found.failed} compile errors), {found.damaged} "
              f"damaged entries or stray files, {found.bytes / 2**20:.1f} MiB")
        if found.failed or found.damaged:
            print("tilegen cache --purge-failed removes the compile errors and the damaged entries")


# ---- helpers shared by the commands ---------------------------------------------------------------

def _run_options(args: argparse.Namespace, **extra: Any) -> RunOptions:
    if args.cluster and args.cluster != "local":
        from ..gpu.dask_cluster import check_reachable

        check_reachable(args.cluster)  # before anything is written
    timing = TimingOptions(budget_s=args.timing_budget, warm=getattr(args, "warm", False),
                           energy=getattr(args, "energy", False))
    return RunOptions(arch=args.arch, compile_jobs=args.jobs, compiler=args.compiler, gpus=parse_gpus(args.gpus),
                      timing=timing, silence_s=args.timeout, cluster=args.cluster, **extra)


def _pick_model(db: TuningDB, name: str) -> GpuModel:
    return gpu_model_named(db, name, "--gpu")


def _traces(db: TuningDB, family: str | None) -> dict[str, list[list[float | None]]]:
    """Strategy -> traces of the problem (of `family`, or any) with the most tuning sessions."""
    sessions = max((db.traces(p) for p in db.problems(family)), key=len, default={})
    grouped: dict[str, list[list[float | None]]] = {}
    for strategy, trace in sessions.values():
        grouped.setdefault(strategy, []).append(trace)
    return grouped


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
