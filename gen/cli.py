"""The `tilegen` command. Bad input ends with one line on stderr and exit code 2, no traceback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from . import __version__
from .compiler import CompileOptions, Compiled, compile_variants, compiled_row, provenance
from .emit import emit
from .errors import TilegenError, UsageError
from .families import all_families, get_family
from .plugins import FAMILY_PATH_ENV, add_family_path, registry
from .progress import Progress
from .render import render
from .export import write_t4
from .lookup import tuned_with_reason
from .plots import plot
from .report import load_rows, report
from .strategies import STRATEGIES
from .tune import TuneOptions, describe, revalidate, tune
from .tunedb import DB_ENV, TuningDB, problem_of
from .space import Space, parse_options
from .jobs import CACHE_CONFIGS
from .results import GpuModel, Row, TimingOptions, skipped_row
from .store import ResultLog
from .sweep import SweepOptions, summary, sweep
from .worker import GpuUnavailable, LocalExecutor, parse_gpus
from .table import text_table

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        for folder in args.family_path:
            add_family_path(folder)
        return args.handler(args) or 0
    except TilegenError as error:
        print(f"tilegen: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tilegen: interrupted", file=sys.stderr)
        return 130


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is reported in one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"tilegen: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tilegen", description="Jinja templates -> CUDA kernel variants: render, "
                     "compile, check, time and tune them.")
    parser.add_argument("--version", action="version", version=f"tilegen {__version__}")
    parser.add_argument("--family-path", action="append", default=[], metavar="DIR",
                        help=f"also load the families (modules and templates) in DIR; repeatable (also "
                             f"${FAMILY_PATH_ENV})")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = commands.add_parser("list", help="families, their parameters, allowed values and defaults")
    listing.add_argument("family", nargs="?")
    listing.set_defaults(handler=cmd_list)

    rendering = commands.add_parser("render", help="print one variant's CUDA source")
    rendering.add_argument("family")
    _add_params(rendering, "name=value; left out: the family's default")
    rendering.set_defaults(handler=cmd_render)

    emitting = commands.add_parser("emit", help="write variants/ from scratch (the golden record)")
    emitting.add_argument("families", nargs="*", metavar="FAMILY", help="only these families (default: all)")
    emitting.add_argument("--out", type=Path, default=Path("variants"), help="folder (default: variants)")
    emitting.set_defaults(handler=cmd_emit)

    compiling = commands.add_parser("compile", help="compile a space with nvcc and print its resources")
    _add_space_arguments(compiling)
    compiling.add_argument("--out", type=Path, help="write result rows to DIR/results.jsonl and .csv")
    compiling.set_defaults(handler=cmd_compile)

    sweeping = commands.add_parser("sweep", help="compile, check and time a space on the GPU, row by row")
    _add_space_arguments(sweeping)
    sweeping.add_argument("--size", dest="sizes", action="append", default=[], metavar="SIZE",
                          help="problem size, e.g. 4096x4096x4096 (repeatable; default: the family's)")
    sweeping.add_argument("--out", type=Path, required=True, help="folder for results.jsonl and results.csv")
    sweeping.add_argument("--resume", action="store_true", help="continue a killed sweep in --out")
    sweeping.add_argument("--sanitize", action="store_true",
                          help="also run compute-sanitizer (racecheck, synccheck, memcheck) at a small size")
    sweeping.add_argument("--warm", action="store_true", help="do not flush the L2 between timed launches")
    sweeping.add_argument("--cache", default="none", metavar="LIST",
                          help=f"cache preferences to run, from {','.join(CACHE_CONFIGS)} (default: none)")
    sweeping.add_argument("--budget", type=float, default=TimingOptions.budget_s, metavar="SECONDS",
                          help="timing budget per variant and size (default: %(default)s)")
    sweeping.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                          help="a worker silent this long is hung and killed (default: %(default)s)")
    sweeping.add_argument("--seed", type=int, help="seed of the random inputs (default: a fresh one)")
    sweeping.add_argument("--gpus", default="0", help="GPU indices, e.g. 0,1, or 'all' (default: 0)")
    sweeping.add_argument("--top", type=int, default=10, help="rows in the summary table (default: 10)")
    sweeping.set_defaults(handler=cmd_sweep)

    tuning = commands.add_parser("tune", help="search a space for the fastest variant on this GPU, into the DB")
    tuning.add_argument("family", nargs="?")
    _add_params(tuning, "name=v1,v2,... (repeatable); a parameter left out takes the default space")
    tuning.add_argument("--size", help="problem size, e.g. 2048x2048x2048")
    tuning.add_argument("--filter", metavar="PATTERN", help="keep variants whose name contains PATTERN (or a glob)")
    tuning.add_argument("--strategy", default="bayes", choices=STRATEGIES, help="search strategy (default: bayes)")
    limit = tuning.add_mutually_exclusive_group()
    limit.add_argument("--budget", type=int, help="evaluations (default: 100)")
    limit.add_argument("--time", type=float, metavar="SECONDS", help="stop proposing after this long")
    tuning.add_argument("--db", type=Path, help=f"tuning database (default: ${DB_ENV}, else tilegen's cache folder)")
    tuning.add_argument("--gpus", default="0", help="GPU indices, e.g. 0,1, or 'all' (default: 0)")
    tuning.add_argument("--arch", help="GPU architecture (default: the local GPU's)")
    tuning.add_argument("--seed", type=int, default=0, help="seed of the strategy (default: 0)")
    tuning.add_argument("--top", type=int, default=3, help="finalists measured again, interleaved (default: 3)")
    tuning.add_argument("--timing-budget", type=float, default=0.5, metavar="SECONDS",
                        help="timing budget per evaluation (default: 0.5)")
    tuning.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="a worker silent this long is hung and killed (default: 30)")
    tuning.add_argument("--revalidate", action="store_true",
                        help="time the stored winners for this GPU again and flag those that moved")
    tuning.set_defaults(handler=cmd_tune)

    finding = commands.add_parser("best", help="the stored winner for a shape and GPU")
    finding.add_argument("family")
    finding.add_argument("--size", required=True, help="problem size, e.g. 2048x2048x2048")
    finding.add_argument("--dtype", default="f32")
    finding.add_argument("--gpu", help="a GPU model, or part of its name (default: this machine's GPU)")
    finding.add_argument("--db", type=Path, help="tuning database")
    finding.set_defaults(handler=cmd_best)

    exporting = commands.add_parser("export", help="the tuning database in another format")
    exporting.add_argument("--t4", type=Path, required=True, metavar="FILE",
                           help="write T4 JSON (the Open Autotuning Results Schema)")
    exporting.add_argument("--db", type=Path, help="tuning database")
    exporting.add_argument("--family", help="only this family")
    exporting.add_argument("--gpu", help="only GPU models whose name contains this")
    exporting.set_defaults(handler=cmd_export)

    reporting = commands.add_parser("report", help="tables (and PNG plots) from sweep results or the tuning DB")
    reporting.add_argument("dirs", nargs="*", type=Path, metavar="DIR", help="folders holding results.jsonl")
    reporting.add_argument("--db", type=Path, help="report on a tuning database instead")
    reporting.add_argument("--family", help="only this family")
    reporting.add_argument("--top", type=int, default=10, help="rows in the top table (default: 10)")
    reporting.add_argument("--markdown", action="store_true", help="Markdown tables instead of plain text")
    reporting.add_argument("--plot", type=Path, metavar="OUT.png",
                           help="also draw throughput heatmaps and strategy convergence (needs matplotlib)")
    reporting.set_defaults(handler=cmd_report)
    return parser


def _add_params(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("-p", "--param", dest="params", action="append", default=[], metavar="NAME=VALUE",
                        help=help_text)


def _add_space_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("family")
    _add_params(parser, "name=v1,v2,... (repeatable); a parameter left out takes the default space")
    parser.add_argument("--filter", metavar="PATTERN",
                        help="keep variants whose name contains PATTERN (a glob when it has * ? [)")
    parser.add_argument("--arch", help="GPU architecture, e.g. sm_90 (default: the local GPU's, else sm_90)")
    parser.add_argument("--jobs", type=int, help="parallel compiles (default: one per core)")


# ---- commands -------------------------------------------------------------------------------------

def cmd_list(args: argparse.Namespace) -> None:
    for problem in registry().problems:
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


def cmd_compile(args: argparse.Namespace) -> None:
    family = get_family(args.family)
    expansion = Space.from_options(family, args.params).select(args.filter)
    options = CompileOptions.local(args.arch, args.jobs)
    made_by = provenance(options, family)
    rows = [skipped_row(s.variant, s.reason, provenance=dict(made_by)) for s in expansion.skipped]
    log = ResultLog(args.out) if args.out else None
    for row in rows if log else []:
        log.append(row)
    progress = Progress(len(expansion.valid), "compile")

    def record(compiled: Compiled) -> None:
        """Each row is kept the moment its compile finishes: a crash loses none of the earlier ones."""
        progress.advance(compiled.variant.name)
        rows.append(compiled_row(compiled, provenance=dict(made_by)))
        if log:
            log.append(rows[-1])

    try:
        compiled = compile_variants(expansion.valid, options, on_done=record)
    finally:
        progress.close()
        if log:
            log.write_csv()
            log.close()
    print(resource_table(rows))
    print(compile_summary(compiled, len(expansion.skipped)))
    if log:
        print(f"rows written to {log.path} and {args.out / 'results.csv'}")


def cmd_sweep(args: argparse.Namespace) -> None:
    options = SweepOptions(
        family=args.family, out=args.out, params=parse_options(get_family(args.family), args.params),
        sizes=args.sizes, filter=args.filter, resume=args.resume, sanitize=args.sanitize,
        cache_configs=_list(args.cache), arch=args.arch, compile_jobs=args.jobs,
        timing=TimingOptions(budget_s=_positive(args.budget, "--budget"), warm=args.warm),
        silence_s=_positive(args.timeout, "--timeout"), gpus=parse_gpus(args.gpus), seed=args.seed)
    report = sweep(options)
    print(summary(report, args.top))
    split = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in report.seconds.items())
    print(f"\n{report.new_rows} new rows in {args.out}/results.jsonl and results.csv ({split})")


def cmd_tune(args: argparse.Namespace) -> None:
    if args.revalidate:
        return cmd_revalidate(args)
    if not args.family or not args.size:
        raise UsageError("tune needs FAMILY and --size (or --revalidate)")
    options = TuneOptions(
        family=args.family, size=args.size, params=parse_options(get_family(args.family), args.params),
        filter=args.filter, strategy=args.strategy, budget=args.budget if args.budget or args.time else 100,
        time_s=args.time, db=args.db, gpus=parse_gpus(args.gpus), arch=args.arch, seed=args.seed, top=args.top,
        timing=TimingOptions(budget_s=_positive(args.timing_budget, "--timing-budget")),
        silence_s=_positive(args.timeout, "--timeout"))
    for result in tune(options):
        print(describe(result))
    print(f"stored in {TuningDB(args.db).path}")


def cmd_revalidate(args: argparse.Namespace) -> None:
    db = TuningDB(args.db)
    executor = LocalExecutor(parse_gpus(args.gpus), args.timeout)
    try:
        checked = revalidate(db, executor, args.arch)
    except GpuUnavailable as reason:
        raise UsageError(f"revalidate needs a GPU: {reason}") from None
    finally:
        executor.close()
    body = [[p.family, p.shape, stored.name, round(stored.median_ms, 4), round(new.median_ms, 4) if new.median_ms
             else str(new.status), f"{change:+.1%}", f"{noise:.1%}", "MOVED" if abs(change) > noise else "",
             _versions(stored, new)] for p, stored, new, change, noise in checked]
    print(text_table(["family", "shape", "winner", "stored ms", "now ms", "change", "noise", "", "versions"], body))
    print(f"{sum(abs(c[3]) > c[4] for c in checked)} of {len(checked)} stored winners moved more than the noise")


def cmd_best(args: argparse.Namespace) -> None:
    family = get_family(args.family)
    shape = family.parse_shape(args.size)
    db = TuningDB(args.db)
    model = _pick_model(db, args.gpu) if args.gpu else None
    variant, reason = tuned_with_reason(family.name, *shape.dims, dtype=args.dtype, db=args.db, gpu_model=model)
    print(variant.name)
    print(f"from {reason}", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> None:
    db = TuningDB(args.db)
    model = _pick_model(db, args.gpu) if args.gpu else None
    rows = db.rows(args.family, str(model) if model else None)
    if not rows:
        raise UsageError(f"{db.path} holds no measurements for that family and GPU")
    print(f"wrote {write_t4(rows, args.t4)} results to {args.t4}")


def cmd_report(args: argparse.Namespace) -> None:
    if bool(args.dirs) == bool(args.db):
        raise UsageError("report takes result folders or --db FILE (one of the two)")
    db = TuningDB(args.db) if args.db else None
    rows = db.latest_rows(args.family) if db else [r for r in load_rows(args.dirs)
                                                   if not args.family or r.family == args.family]
    print(report(rows, args.top, args.markdown))
    if args.plot:
        traces = _traces(db, rows) if db else {}
        print(f"plot written to {plot(rows, traces, args.plot, f'tilegen report: {args.db or args.dirs[0]}')}")


# ---- helpers shared by the commands ---------------------------------------------------------------

def resource_table(rows: list[Row]) -> str:
    body = [[r.name, r.status, r.registers, r.static_shared_bytes, r.dynamic_shared_bytes, r.spill_bytes,
             r.stack_bytes, r.compile_seconds, _first_line(r.message)] for r in rows]
    return text_table(["variant", "status", "regs", "static smem", "dyn smem", "spill", "stack", "seconds",
                       "note"], body)


def compile_summary(compiled: list[Compiled], skipped: int) -> str:
    failed = sum(not c.ok for c in compiled)
    cached = sum(c.cached for c in compiled)
    return (f"{len(compiled) - failed} compiled ({cached} from cache), {failed} failed, {skipped} skipped "
            f"as invalid")


def _pick_model(db: TuningDB, name: str) -> GpuModel:
    """The one GPU model in the database whose name contains `name`."""
    found = [m for m in db.models() if name.lower() in str(m).lower()]
    if len(found) != 1:
        known = "; ".join(str(m) for m in db.models()) or "none"
        raise UsageError(f"--gpu {name!r} matches {len(found)} GPU models in {db.path} (known: {known})")
    return found[0]


def _traces(db: TuningDB, rows: list[Row]) -> dict[str, list[list[float | None]]]:
    """Strategy -> traces of the problem with the most tuning sessions among `rows`' problems."""
    problems = {problem_of(r) for r in rows if r.provenance.get("gpu_model")}
    sessions = max((db.traces(p) for p in problems), key=len, default={})
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


def _positive(value: float, option: str) -> float:
    if value <= 0:
        raise UsageError(f"{option} must be a positive number of seconds, got {value}")
    return value


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:100] if text.strip() else ""


if __name__ == "__main__":
    sys.exit(main())
