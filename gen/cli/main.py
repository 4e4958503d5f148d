"""The `tilegen` command. Bad input ends with one line on stderr and exit code 2, no traceback; a
run that cannot finish (a tool that fails twice, a full disk) with one line and exit code 1;
Ctrl-C, SIGTERM or a closed terminal (SIGHUP) stops any command within seconds, keeps what finished
and says so (exit 130). The entry point, gen.cli.entry, handles those signals before this module loads."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn, Sequence

from ..core.version import __version__
from ..core import checks
from ..build.compiler import CompileOptions, cache_summary, clear_cache, cubin_cache, purge_failed, usable_cores
from ..build.emit import emit
from ..core.errors import RunFailed, TilegenError, UsageError
from ..store.export import checked_t4_path, write_t4
from ..families import all_families, get_family
from ..gpu.jobs import CACHE_CONFIGS
from ..search.lookup import tuned_with_reason
from ..core.paths import as_path, writable_file
from ..evaluate.engine import Pipeline
from ..evaluate.options import RunOptions
from ..families.registry import FAMILY_PATH_ENV, add_family_path, is_plugin_code, one_line, registry
from ..core.processes import EXIT_INTERRUPTED, install_stop_handlers
from ..core.progress import Progress
from ..build.render import render, template_problems
from ..store.report import load_rows, report
from ..core.results import GpuModel, Row, Status, TimingOptions
from ..families.space import MAX_POINTS, Space, parse_options
from ..store.results_log import ResultLog
from ..search.strategies import STRATEGIES
from ..search.sweep import (ANNOUNCE_POINTS, Plan, SweepOptions, make_plan, preview, space_line, status_counts,
                            summary, sweep)
from ..core.table import text_table
from ..search.tune import TUNE_TIMING, TuneOptions, describe, revalidate, tune
from ..search.tune import preview as tune_preview
from ..store.tuning_db import DB_ENV, TuningDB
from ..core.nvidia_smi import parse_gpus

EXIT_USAGE = 2
DEBUG_ENV = "TILEGEN_DEBUG"  # set: an unexpected error shows its traceback


def main(argv: Sequence[str] | None = None) -> int:
    _printable_streams()
    previous: dict[int, Any] = {}
    try:
        if _main_thread():
            previous = install_stop_handlers()
        args = build_parser().parse_args(argv)
        for folder in [*args.family_path, *args.family_path_after]:
            add_family_path(folder)
        return args.handler(args) or 0
    except TilegenError as error:
        _say(f"tilegen: error: {error}")
        return error.exit_code
    except KeyboardInterrupt as stop:
        _say(f"tilegen: interrupted{f': {stop}' if str(stop) else ''}")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tilegen compile ... | head`: the reader has gone, and that is fine
        sys.stdout = None  # nothing more can be written there, not even at exit
        return 0
    except Exception as error:  # noqa: BLE001 - what no part of tilegen expected still ends in one line
        if os.environ.get(DEBUG_ENV):
            raise
        message, code = unexpected(error)
        _say(f"tilegen: {message}")
        return code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def unexpected(error: BaseException) -> tuple[str, int]:
    """One line and an exit code for an error no part of tilegen expected: raised in a family's own
    code (a plugin's module or a helper beside it: exit 2, the user can fix it) or in tilegen's
    (exit 1: a bug to report)."""
    text = one_line(error)
    frames = traceback.extract_tb(error.__traceback__)
    culprit = next((frame for frame in reversed(frames) if is_plugin_code(frame.filename)), None)
    if culprit is not None:
        return f"error: {culprit.filename}:{culprit.lineno}: {text} (in a family's own code; fix it there)", EXIT_USAGE
    return f"internal error: {text}; please report it (set {DEBUG_ENV}=1 to see where it happened)", 1

def _say(line: str) -> None:
    """The command's last word, on stderr; after a closed terminal (SIGHUP) there may be none to say it on."""
    try:
        print(line, file=sys.stderr)
    except OSError:
        pass


def _printable_streams() -> None:
    """Messages and tables name the user's paths and values, which the terminal's encoding may
    not hold (PYTHONIOENCODING=ascii, a non-ASCII --out): such characters print as escapes
    (\\xe9) instead of ending the command with a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")



def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is reported in one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"tilegen: error: {message} (see '{self.prog} --help')\n")


# ---- argument types: numbers the command line refuses are refused here ------------------------------

def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    if problem := checks.seconds_problem(text):
        raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
    return float(text)


def count(text: str) -> int:
    """A whole number, at least 1."""
    if problem := checks.whole_problem(text, 1):
        raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
    return int(text)


def jobs(text: str) -> int:
    """Parallel nvcc runs: a whole number, at least 1. More than the cores are capped (by
    CompileOptions), and that is said."""
    wanted = count(text)
    if wanted > (cores := usable_cores()):
        print(f"tilegen: note: --jobs {wanted} is more than the {cores} cores tilegen can use here: {cores} nvcc "
              f"runs at a time", file=sys.stderr)
    return wanted


def whole(text: str) -> int:
    """A whole number, at least 0."""
    if problem := checks.whole_problem(text):
        raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
    return int(text)


# ---- the parser ---------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tilegen", description="Jinja templates -> CUDA kernel variants: render, "
                     "compile, check, time and tune them.")
    parser.add_argument("--version", action="version", version=f"tilegen {__version__}")
    _add_family_path(parser, "family_path")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = _command(commands, "list", help="families, their parameters, allowed values and defaults")
    listing.add_argument("family", nargs="?")
    listing.set_defaults(handler=cmd_list)

    rendering = _command(commands, "render", help="print one variant's CUDA source")
    rendering.add_argument("family")
    _add_params(rendering, "name=value; left out: the family's default")
    rendering.set_defaults(handler=cmd_render)

    emitting = _command(commands, "emit", help="write each family's golden record (variants/) from scratch")
    emitting.add_argument("families", nargs="*", metavar="FAMILY", help="only these families (default: all)")
    emitting.add_argument("--out", type=Path, default=Path("variants"), help="folder (default: variants)")
    emitting.set_defaults(handler=cmd_emit)

    compiling = _command(commands, "compile", help="compile a space with nvcc and print its resources")
    _add_space_arguments(compiling)
    compiling.add_argument("--arch", help="GPU architecture, e.g. sm_90 (default: the local GPU's, else sm_90)")
    compiling.add_argument("--jobs", type=jobs, help="parallel nvcc runs, at most one per core (default: one per core)")
    compiling.add_argument("--out", type=Path, help="write result rows to DIR/results.jsonl and .csv")
    compiling.set_defaults(handler=cmd_compile)

    sweeping = _command(commands, "sweep", help="compile, check and time a space on the GPU, row by row")
    _add_space_arguments(sweeping)
    sweeping.add_argument("--size", dest="sizes", action="append", default=[], metavar="SIZE",
                          help="problem size, e.g. 4096x4096x4096 (repeatable; default: the family's)")
    sweeping.add_argument("--out", type=Path, help="folder for results.jsonl and results.csv (needed unless --dry-run)")
    sweeping.add_argument("--resume", action="store_true", help="continue a killed or interrupted sweep in --out")
    sweeping.add_argument("--sanitize", action="store_true",
                          help="also run compute-sanitizer (racecheck, synccheck, memcheck) at a small size")
    sweeping.add_argument("--warm", action="store_true", help="do not flush the L2 between timed launches")
    sweeping.add_argument("--cache", default="none", metavar="LIST",
                          help=f"cache preferences to run, from {','.join(CACHE_CONFIGS)} (default: none)")
    sweeping.add_argument("--seed", type=whole, help="seed of the random inputs (default: a fresh one)")
    sweeping.add_argument("--top", type=count, default=10, help="rows in the summary table (default: 10)")
    sweeping.add_argument("--dry-run", action="store_true", help="print the points' count and a sample; run nothing")
    sweeping.add_argument("--budget", type=_moved_budget, help=argparse.SUPPRESS)
    _add_run_arguments(sweeping, TimingOptions().budget_s)
    sweeping.set_defaults(handler=cmd_sweep)

    tuning = _command(commands, "tune", help="search a space for the fastest variant on this GPU, into the DB")
    tuning.add_argument("family", nargs="?")
    _add_params(tuning, "name=v1,v2,... (repeatable); a parameter left out takes the default space")
    tuning.add_argument("--size", help="problem size, e.g. 2048x2048x2048")
    tuning.add_argument("--filter", metavar="PATTERN", help="keep variants whose name contains PATTERN (or a glob)")
    _add_max_points(tuning)
    tuning.add_argument("--strategy", default="bayes", choices=STRATEGIES, help="search strategy (default: bayes)")
    limit = tuning.add_mutually_exclusive_group()
    limit.add_argument("--budget", type=count,
                       help="evaluations, at most (default: the whole space for brute, else 100)")
    limit.add_argument("--time", type=seconds, metavar="SECONDS", help="stop proposing after this long")
    tuning.add_argument("--db", type=Path, help=f"tuning database (default: ${DB_ENV}, else tilegen's cache folder)")
    tuning.add_argument("--seed", type=whole, default=0, help="seed of the strategy (default: 0)")
    tuning.add_argument("--top", type=count, default=3, help="finalists measured again, interleaved (default: 3)")
    tuning.add_argument("--revalidate", action="store_true",
                        help="time the stored winners for this GPU again and flag those that moved")
    tuning.add_argument("--dry-run", action="store_true", help="print the space's count and a sample; run nothing")
    _add_run_arguments(tuning, TUNE_TIMING.budget_s)
    tuning.set_defaults(handler=cmd_tune)

    finding = _command(commands, "best", help="the stored winner for a shape and GPU")
    finding.add_argument("family")
    finding.add_argument("--size", required=True, help="problem size, e.g. 2048x2048x2048")
    finding.add_argument("--dtype", help="element type (default: the family's default variant's)")
    finding.add_argument("--gpu", help="a GPU model, or part of its name (default: this machine's GPU)")
    finding.add_argument("--db", type=Path, help="tuning database")
    finding.set_defaults(handler=cmd_best)

    exporting = _command(commands, "export", help="the tuning database in another format")
    exporting.add_argument("--t4", type=Path, required=True, metavar="FILE",
                           help="write T4 JSON (the Open Autotuning Results Schema)")
    exporting.add_argument("--db", type=Path, help="tuning database")
    exporting.add_argument("--family", help="only this family")
    exporting.add_argument("--gpu", help="only GPU models whose name contains this")
    exporting.add_argument("--force", action="store_true",
                           help="replace FILE even if it is not a T4 file tilegen wrote (never a database or a "
                                "run's results)")
    exporting.set_defaults(handler=cmd_export)

    reporting = _command(commands, "report", help="tables (and PNG plots) from sweep results or the tuning DB")
    reporting.add_argument("dirs", nargs="*", type=Path, metavar="DIR", help="folders holding results.jsonl")
    reporting.add_argument("--db", type=Path, help="report on a tuning database instead")
    reporting.add_argument("--family", help="only this family")
    reporting.add_argument("--top", type=count, default=10, help="rows in the top table (default: 10)")
    reporting.add_argument("--markdown", action="store_true", help="Markdown tables instead of plain text")
    reporting.add_argument("--plot", type=Path, metavar="OUT.png",
                           help="also draw throughput heatmaps and strategy convergence (needs matplotlib)")
    reporting.set_defaults(handler=cmd_report)

    serving = _command(commands, "worker", help="serve this host's GPUs to a Dask scheduler (for --cluster)")
    serving.add_argument("address", help="the scheduler, e.g. tcp://HOST:8786")
    serving.add_argument("--gpus", default="all", help="GPU indices, e.g. 0,1, or 'all' (default: all)")
    serving.set_defaults(handler=cmd_worker)

    caching = _command(commands, "cache", help="the compile cache: what it holds; clear it or purge failures")
    action = caching.add_mutually_exclusive_group()
    action.add_argument("--clear", action="store_true", help="remove every cached compile (tilegen's files only)")
    action.add_argument("--purge-failed", action="store_true",
                        help="remove the cached compile errors and damaged entries, so those variants compile again")
    caching.set_defaults(handler=cmd_cache)
    return parser


def _command(commands: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand's parser. The global options are taken after the command too, into their own
    field: argparse would let the command's default replace what was given before it."""
    return _add_family_path(commands.add_parser(name, help=help), "family_path_after")


def _add_family_path(parser: argparse.ArgumentParser, dest: str) -> argparse.ArgumentParser:
    parser.add_argument("--family-path", dest=dest, action="append", default=[], metavar="DIR",
                        help=f"also load the families (modules and templates) in DIR; repeatable (also "
                             f"${FAMILY_PATH_ENV})")
    return parser


def _add_params(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("-p", "--param", dest="params", action="append", default=[], metavar="NAME=VALUE",
                        help=help_text)


def _add_space_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("family")
    _add_params(parser, "name=v1,v2,... (repeatable); a parameter left out takes the default space")
    parser.add_argument("--filter", metavar="PATTERN",
                        help="keep variants whose name contains PATTERN (a glob when it has * ? [)")
    _add_max_points(parser)
    parser.add_argument("--keep-skipped", action="store_true",
                        help="a row for every point not run (default: one per reason and size, with its count)")


def _add_max_points(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-points", type=count, default=MAX_POINTS, metavar="N",
                        help=f"refuse more points than this (default: {MAX_POINTS:,})")


def _add_run_arguments(parser: argparse.ArgumentParser, timing_budget: float) -> None:
    """How evaluations run: the same options, with the same meaning, on sweep and tune."""
    parser.add_argument("--arch", help="GPU architecture, e.g. sm_90 (default: the local GPU's, else sm_90)")
    parser.add_argument("--jobs", type=jobs, help="parallel nvcc runs, at most one per core (default: one per core)")
    parser.add_argument("--gpus", default="0", help="GPU indices, e.g. 0,1, or 'all' (default: 0)")
    parser.add_argument("--timing-budget", type=seconds, default=timing_budget, metavar="SECONDS",
                        help=f"time spent timing each variant at each size, at most (default: {timing_budget})")
    parser.add_argument("--timeout", type=seconds, default=30.0, metavar="SECONDS",
                        help="a worker silent this long is hung and killed (default: 30)")
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help="run on a Dask cluster: 'local' (a worker per GPU in --gpus) or a scheduler's "
                             "tcp://HOST:PORT (needs the extra: pip install 'tilegen[cluster]')")


def _moved_budget(text: str) -> float:
    raise argparse.ArgumentTypeError("on sweep, the timing budget per variant is --timing-budget SECONDS (tune's "
                                     "--budget counts evaluations)")


def _run_options(args: argparse.Namespace, **extra: Any) -> RunOptions:
    if args.cluster and args.cluster != "local":
        from ..gpu.dask_cluster import check_reachable

        check_reachable(args.cluster)  # before anything is written
    timing = TimingOptions(budget_s=args.timing_budget, warm=getattr(args, "warm", False))
    return RunOptions(arch=args.arch, compile_jobs=args.jobs, gpus=parse_gpus(args.gpus), timing=timing,
                      silence_s=args.timeout, cluster=args.cluster, **extra)


# ---- commands -------------------------------------------------------------------------------------

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
    pipeline = Pipeline(family, RunOptions(arch=args.arch, compile_jobs=args.jobs, run_kernels=False))
    with (ResultLog(args.out, advice="choose another --out, or remove its results.jsonl",
                    again="compile again into another --out") if args.out else contextlib.nullcontext()) as log:
        if len(space) >= ANNOUNCE_POINTS:
            print(f"compile: {space_line(space, 1)}; checking them", file=sys.stderr)
        plan = make_plan(family, space, [None], [""], args.filter, args.keep_skipped)
        print(f"compile: {plan.describe()}", file=sys.stderr)
        rows = _compiled_rows(pipeline, plan, log, args.keep_skipped)
    print(resource_table(rows))
    counts = status_counts(rows)
    cached = pipeline.stats.cached
    print(f"{counts[Status.COMPILED]} compiled ({cached} from cache), {counts[Status.COMPILE_ERROR]} failed, "
          f"{counts[Status.SKIPPED]} skipped as invalid")
    if log:
        print(f"rows written to {log.path} and {args.out / 'results.csv'}")
    return 1 if counts[Status.COMPILE_ERROR] and not counts[Status.COMPILED] else 0


def _compiled_rows(pipeline: Pipeline, plan: Plan, log: ResultLog | None, keep_skipped: bool) -> list[Row]:
    """Every row of the plan, each kept in `log` (if any) the moment it is known."""
    rows: list[Row] = plan.skipped_rows(pipeline.provenance, keep_skipped)
    progress = Progress(len(plan.runnable), "compile")
    try:
        for row in rows:
            if log:
                log.append(row)
        with pipeline:
            pipeline.submit(plan.runnable)
            for row in pipeline.rows():  # each row is kept the moment its compile finishes
                rows.append(row)
                if log:
                    log.append(row)
                progress.advance(row.name)
    except KeyboardInterrupt:
        kept = f"; {len(rows)} rows kept in {log.path}" if log else ""
        raise KeyboardInterrupt(f"{progress.done} of {len(plan.runnable)} variants compiled{kept}") from None
    except RunFailed as failed:
        kept = f"; {len(rows)} rows kept in {log.path}" if log else ""
        raise RunFailed(f"{failed}{kept}") from None
    finally:
        progress.close()
        if log:
            log.finish()
    return rows


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
    statuses = Counter(row.status for row in result.rows)
    return 1 if statuses[Status.COMPILE_ERROR] and not set(statuses) - {Status.COMPILE_ERROR, Status.SKIPPED} else 0


def cmd_tune(args: argparse.Namespace) -> None:
    if args.revalidate:
        return cmd_revalidate(args)
    if not args.family or not args.size:
        raise UsageError("tune needs FAMILY and --size (or --revalidate)")
    family = get_family(args.family)
    options = TuneOptions(
        family=args.family, size=args.size, params=parse_options(family, args.params), filter=args.filter,
        strategy=args.strategy, budget=args.budget, time_s=args.time, db=args.db, seed=args.seed, top=args.top,
        max_points=args.max_points, run=RunOptions(timing=TUNE_TIMING) if args.dry_run else _run_options(args))
    if args.dry_run:
        space = Space.from_options(family, args.params)
        space.check_size(args.max_points)
        print(make_plan(family, space, [family.parse_shape(args.size)], [""], args.filter).preview())
        print(tune_preview(options))
        return None
    CompileOptions.local(args.arch, args.jobs)  # --arch, --jobs and the compile cache, before the database is made
    for result in tune(options):
        print(describe(result))
    print(f"stored in {TuningDB(args.db).path}")


def cmd_revalidate(args: argparse.Namespace) -> None:
    db = TuningDB(args.db)
    checked = revalidate(db, _run_options(args))
    body = [[p.family, p.shape, stored.name, round(stored.median_ms, 4), round(new.median_ms, 4) if new.median_ms
             else str(new.status), f"{change:+.1%}", f"{noise:.1%}", "MOVED" if abs(change) > noise else "",
             _versions(stored, new)] for p, stored, new, change, noise in checked]
    print(text_table(["family", "shape", "winner", "stored ms", "now ms", "change", "noise", "", "versions"], body))
    print(f"{sum(abs(c[3]) > c[4] for c in checked)} of {len(checked)} stored winners moved more than the noise")


def cmd_best(args: argparse.Namespace) -> None:
    family = get_family(args.family)
    shape = family.parse_shape(args.size)
    family.check_dtype(args.dtype)
    model = _pick_model(TuningDB(args.db, create=False), args.gpu) if args.gpu else None
    variant, reason = tuned_with_reason(family.name, str(shape), dtype=args.dtype, db=args.db, gpu_model=model)
    print(variant.name)
    print(f"from {reason}", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> None:
    db = TuningDB(args.db, create=False)
    checked_t4_path(args.t4, args.force)
    model = _pick_model(db, args.gpu) if args.gpu else None
    rows = db.rows(args.family, str(model) if model else None)
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

def resource_table(rows: list[Row]) -> str:
    body = [[r.name, r.status, r.registers, r.static_shared_bytes, r.dynamic_shared_bytes, r.spill_bytes,
             r.stack_bytes, r.compile_seconds, _note(r)] for r in rows]
    return text_table(["variant", "status", "regs", "static smem", "dyn smem", "spill", "stack", "seconds",
                       "note"], body)


def _pick_model(db: TuningDB, name: str) -> GpuModel:
    """The one GPU model in the database whose name contains `name`."""
    found = [m for m in db.models() if name.lower() in str(m).lower()]
    if len(found) != 1:
        known = "; ".join(str(m) for m in db.models()) or "none"
        raise UsageError(f"--gpu {name!r} matches {len(found)} GPU models in {db.path} (known: {known})")
    return found[0]


def _traces(db: TuningDB, family: str | None) -> dict[str, list[list[float | None]]]:
    """Strategy -> traces of the problem (of `family`, or any) with the most tuning sessions."""
    sessions = max((db.traces(p) for p in db.problems(family)), key=len, default={})
    grouped: dict[str, list[list[float | None]]] = {}
    for strategy, trace in sessions.values():
        grouped.setdefault(strategy, []).append(trace)
    return grouped


def _versions(stored: Row, new: Row) -> str:
    changes = [f"{key} {stored.provenance.get(key)} -> {new.provenance.get(key)}" for key in ("driver", "nvcc")
               if stored.provenance.get(key) != new.provenance.get(key)]
    return "; ".join(changes)


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _note(row: Row) -> str:
    """The first line of a row's message; a summary of skipped points says how many it stands for."""
    counted = f"{row.skipped_count} points like this: " if row.skipped_count and row.skipped_count > 1 else ""
    return counted + _first_line(row.message)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:100] if text.strip() else ""


if __name__ == "__main__":
    sys.exit(main())
