"""The `tilegen` command line: its parser, one function per command, and the argument types that
refuse what the Python API refuses (gen.core.checks)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from ..core import checks
from ..core.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
from ..core.progress import note
from ..core.limits import CACHE_CONFIGS
from ..core.timing import TUNE_TIMING, TimingOptions
from ..evaluate.options import COMPILE_LEVELS, COMPILER_ENV, COMPILERS, FULL, usable_cores
from ..core.version import __version__
from ..families.registry import FAMILY_PATH_ENV
from ..families.space import MAX_POINTS
from ..search.strategies import DEFAULT_STRATEGY, STRATEGIES
from ..store.export import EXPORTERS
from ..store.report import REPORT_STYLES
from ..commands.tune import DEFAULT_SCREEN
from ..store.tuning_db import DB_ENV
from ..core.errors import EXIT_USAGE
from . import commands as run


RENAMED_UNTIL = "0.4"  # old flag spellings are still taken, with a note, until this release

COMPILER_WORDS = "NVRTC where installed, else nvcc"  # what compiles, as help texts say it


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is reported in one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"tilegen: error: {message} (see '{self.prog} --help')\n")


class _Renamed(argparse.Action):
    """An old spelling of a flag, still taken until RENAMED_UNTIL: it sets what the new one sets
    and says the new name in a one-line note on stderr."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: Any):
        self.new = new
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        note(f"{parser.prog} {option_string} is now {self.new}; the old name is taken until tilegen {RENAMED_UNTIL}")
        setattr(namespace, self.dest, values)


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
    """Parallel compiles: a whole number, at least 1. More than the cores are capped (by
    CompileOptions), and that is said."""
    wanted = count(text)
    if wanted > (cores := usable_cores()):
        note(f"--jobs {wanted} is more than the {cores} cores tilegen can use here: {cores} compiles at a time")
    return wanted


def whole(text: str) -> int:
    """A whole number, at least 0."""
    if problem := checks.whole_problem(text):
        raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
    return int(text)


# ---- the parser ---------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tilegen", description="Jinja templates -> CUDA kernel variants: render, "
                     f"compile ({COMPILER_WORDS}), check, time and tune them.")
    parser.add_argument("--version", action="version", version=f"tilegen {__version__}")
    _add_family_path(parser, "family_path")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add_command in (_list_command, _render_command, _emit_command, _compile_command, _sweep_command,
                        _tune_command, _replay_command, _best_command, _export_command, _report_command, _worker_command,
                        _cache_command):
        add_command(commands)
    return parser


def _list_command(commands: Any) -> None:
    parser = _command(commands, "list", help="families, their parameters, allowed values and defaults",
                      example="tilegen list sgemm")
    parser.add_argument("family", nargs="?")


def _render_command(commands: Any) -> None:
    parser = _command(commands, "render", help="print one variant's CUDA source",
                      example="tilegen render transpose -p tile=32 -p bounds=guard")
    parser.add_argument("family")
    _add_params(parser, "name=value; left out: the family's default")


def _emit_command(commands: Any) -> None:
    parser = _command(commands, "emit", help="write each family's golden record (variants/) from scratch",
                      example="tilegen emit transpose --out variants")
    parser.add_argument("families", nargs="*", metavar="FAMILY", help="only these families (default: all)")
    parser.add_argument("--out", type=Path, default=Path("variants"), help="folder (default: variants)")


def _compile_command(commands: Any) -> None:
    parser = _command(commands, "compile",
                      help=f"compile a space to cubins ({COMPILER_WORDS}) and print their resources",
                      example="tilegen compile sgemm -p bm=128 --arch sm_90 --out runs/sgemm-cubins")
    _add_space_arguments(parser)
    _add_compile_arguments(parser)
    _add_compile_level(parser)
    parser.add_argument("--out", type=Path, help="write result rows to DIR/results.jsonl and .csv")


def _sweep_command(commands: Any) -> None:
    parser = _command(commands, "sweep", help="compile, check and time a space on the GPU, row by row",
                      example="tilegen sweep transpose --size 8192x8192 --out runs/transpose")
    _add_space_arguments(parser)
    parser.add_argument("--size", dest="sizes", action="append", default=[], metavar="SIZE",
                          help="problem size, e.g. 4096x4096x4096 (repeatable; default: the family's)")
    parser.add_argument("--out", type=Path, help="folder for results.jsonl and results.csv (needed unless --dry-run)")
    parser.add_argument("--resume", action="store_true", help="continue a killed or interrupted sweep in --out")
    parser.add_argument("--sanitize", action="store_true",
                          help="also run compute-sanitizer (racecheck, synccheck, memcheck) at a small size: "
                               "three more processes per variant, a few seconds each")
    parser.add_argument("--warm", action="store_true", help="do not flush the L2 between timed launches")
    parser.add_argument("--energy", action="store_true",
                        help="also measure each variant's joules per launch, average power and SM clock, "
                             "timed once the clock is steady (NVML; about 0.6 s more per variant)")
    parser.add_argument("--cache-config", dest="cache_configs", default="none", metavar="LIST",
                        help=f"L1/shared-memory preferences to run, from {','.join(CACHE_CONFIGS)} (default: none)")
    parser.add_argument("--cache", dest="cache_configs", action=_Renamed, new="--cache-config")
    _add_seed(parser)
    _add_top(parser, "rows per problem in the summary")
    parser.add_argument("--dry-run", action="store_true", help="print the points' count and a sample; run nothing")
    parser.add_argument("--budget", type=_moved_budget, help=argparse.SUPPRESS)
    _add_run_arguments(parser, TimingOptions().budget_s)
    _add_compile_level(parser)


def _tune_command(commands: Any) -> None:
    parser = _command(commands, "tune", help="search a space for the fastest variant on this GPU, into the DB",
                      example="tilegen tune sgemm --size 2048x2048x2048 --strategy bayes --budget 50")
    parser.add_argument("family", nargs="?")
    _add_params(parser, "name=v1,v2,... (repeatable); a parameter left out takes the default space")
    parser.add_argument("--size", help="problem size, e.g. 2048x2048x2048")
    parser.add_argument("--filter", metavar="PATTERN", help="keep variants whose name contains PATTERN (or a glob)")
    _add_max_points(parser)
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=STRATEGIES,
                        help=f"search strategy (default: {DEFAULT_STRATEGY})")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--budget", type=count,
                       help="evaluations, at most (default: the whole space for brute, else 100)")
    limit.add_argument("--time", type=seconds, metavar="SECONDS", help="stop proposing after this long")
    parser.add_argument("--db", type=Path, help=f"tuning database (default: ${DB_ENV}, else tilegen's cache folder)")
    _add_seed(parser)
    parser.add_argument("--finalists", type=count, default=3, metavar="N",
                        help="the best N of the search, timed again in interleaved rounds (default: 3)")
    parser.add_argument("--top", dest="finalists", type=count, action=_Renamed, new="--finalists")
    _add_objective(parser, "what ranks the finalists (their energy is measured; the search itself goes by time)")
    parser.add_argument("--full-timing", action="store_true",
                        help="time every variant in full (by default, timing stops early once a variant's samples "
                             "are all 10%% slower than the best so far; the finalists are always timed in full)")
    parser.add_argument("--warm", action="store_true", help="do not flush the L2 between timed launches")
    screen = parser.add_mutually_exclusive_group()
    screen.add_argument("--screen", default=DEFAULT_SCREEN, choices=COMPILE_LEVELS, metavar="LEVEL",
                        help=f"search at this compile level ({', '.join(COMPILE_LEVELS[1:])}: faster compiles, maybe "
                             f"slower kernels), then compile the finalists at {FULL} and time them again to name the "
                             f"winner (default: {DEFAULT_SCREEN or 'no screening'})")
    screen.add_argument("--no-screen", dest="screen", action="store_const", const=None,
                        help=f"search at {FULL}: no screening")
    parser.add_argument("--revalidate", action="store_true",
                        help="time the stored winners for this GPU again and flag those that moved")
    parser.add_argument("--dry-run", action="store_true", help="print the space's count and a sample; run nothing")
    _add_run_arguments(parser, TUNE_TIMING.budget_s)


def _replay_command(commands: Any) -> None:
    parser = _command(commands, "replay", help="replay search strategies over a measured space (T4 or Kernel Tuner "
                                               "cache file), no GPU",
                      example="tilegen replay convolution_A100_T4.json.gz --strategy portfolio bayes --budget 50 "
                              "--repeats 20")
    parser.add_argument("file", type=Path, help="a T4 results file or a Kernel Tuner cache file (.json or .json.gz)")
    parser.add_argument("--strategy", dest="strategies", nargs="+", default=[DEFAULT_STRATEGY], choices=STRATEGIES,
                        help=f"strategies to replay (default: {DEFAULT_STRATEGY})")
    parser.add_argument("--budget", dest="budgets", nargs="+", type=count, default=[100],
                        help="evaluations each run may make; several give the figures at each (default: 100)")
    parser.add_argument("--repeats", type=count, default=10, help="runs per strategy, seeds SEED, SEED+1, ... "
                                                                  "(default: 10)")
    parser.add_argument("--seed", type=whole, default=0, help="the first run's seed (default: 0)")
    parser.add_argument("--prior", dest="priors", nargs="+", type=Path, default=[], metavar="FILE",
                        help="the same kernel's spaces measured on other GPUs: the strategies' prior, as a tune "
                             "takes it from the tuning database (default: none)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def _best_command(commands: Any) -> None:
    parser = _command(commands, "best", help="the stored winner for a shape and GPU",
                      example="tilegen best sgemm --size 2048x2048x2048")
    parser.add_argument("family")
    parser.add_argument("--size", required=True, help="problem size, e.g. 2048x2048x2048")
    parser.add_argument("--dtype", help="element type (default: the family's default variant's)")
    _add_gpu_model(parser, "a GPU model, or part of its name (default: this machine's GPU)")
    parser.add_argument("--db", type=Path, help="tuning database")
    _add_objective(parser, "what 'best' means (energy and edp: among variants measured with energy)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON line: family, size, dtype, variant and where the answer came from")


def _export_command(commands: Any) -> None:
    parser = _command(commands, "export", help="the tuning database in another format",
                      example="tilegen export sgemm --t4 sgemm-t4.json")
    parser.add_argument("family", nargs="?", help="only this family (default: every family)")
    formats = parser.add_mutually_exclusive_group(required=True)
    for name, exporter in EXPORTERS.items():
        formats.add_argument(f"--{name}", dest=name, type=Path, metavar="FILE", help=exporter.help)
    parser.add_argument("--db", type=Path, help="tuning database")
    parser.add_argument("--family", dest="family_option", action=_Renamed, new="FAMILY (before the options)")
    _add_gpu_model(parser, "only the GPU model whose name contains this")
    parser.add_argument("--force", action="store_true",
                           help="replace FILE even if it is not a file of that format tilegen wrote (never a "
                                "database or a run's results)")


def _report_command(commands: Any) -> None:
    parser = _command(commands, "report", help="tables (and PNG plots) from sweep results or the tuning DB",
                      example="tilegen report runs/transpose --markdown")
    parser.add_argument("words", nargs="*", metavar="[FAMILY] DIR",
                        help="folders holding results.jsonl; a first word that names a family and no folder keeps "
                             "only that family")
    parser.add_argument("--db", type=Path, help="report on a tuning database instead")
    parser.add_argument("--family", dest="family_option", action=_Renamed, new="FAMILY (the first word)")
    _add_top(parser, "rows per problem in the top tables")
    styles = parser.add_mutually_exclusive_group()
    for name, style in list(REPORT_STYLES.items())[1:]:
        styles.add_argument(f"--{name}", dest="style", action="store_const", const=name, help=style.help)
    styles.add_argument("--json", action="store_true",
                        help="one JSON document instead of tables: statuses, compilers, each problem's best rows")
    parser.set_defaults(style=next(iter(REPORT_STYLES)))
    parser.add_argument("--plot", type=Path, metavar="OUT.png",
                           help="also draw throughput heatmaps, one file per family, shape and GPU, and strategy "
                                "convergence (needs matplotlib)")


def _worker_command(commands: Any) -> None:
    parser = _command(commands, "worker", help="serve this host's GPUs to a Dask scheduler (for --cluster)",
                      example="tilegen worker tcp://scheduler:8786 --gpus 0,1")
    parser.add_argument("address", help="the scheduler, e.g. tcp://HOST:8786")
    parser.add_argument("--gpus", default="all", help="GPU numbers, e.g. 0,1, or 'all' (default: all)")


def _cache_command(commands: Any) -> None:
    parser = _command(commands, "cache", help="the compile cache and tune_kernel's families: what they hold; clear "
                                              "them or purge failures",
                      example="tilegen cache --purge-failed")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--clear", action="store_true", help="remove every cached compile and tune_kernel's families "
                        "and arrays (tilegen's files only)")
    action.add_argument("--purge-failed", action="store_true",
                        help="remove the cached compile errors and damaged entries, so those variants compile again")


def _command(commands: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    """A subcommand's parser, run by gen.cli.commands.cmd_<name>, its help ending with an example. The
    global options are taken after the command too, into their own field: argparse would let the
    command's default replace what was given before it."""
    parser = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                                 epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(handler=getattr(run, f"cmd_{name}"))
    return _add_family_path(parser, "family_path_after")


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


def _add_objective(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--objective", default=DEFAULT_OBJECTIVE, choices=OBJECTIVES,
                        help=f"{help_text}: time, energy (joules per launch) or edp (energy x time); default: time")


def _add_max_points(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-points", type=count, default=MAX_POINTS, metavar="N",
                        help=f"refuse more points than this (default: {MAX_POINTS:,})")


def _add_compile_arguments(parser: argparse.ArgumentParser) -> None:
    """How variants compile, and how much is said meanwhile: the same options on compile, sweep and tune."""
    parser.add_argument("--arch", help="GPU architecture, e.g. sm_90 (default: the local GPU's, else sm_90)")
    parser.add_argument("--jobs", type=jobs, help="parallel compiles, at most one per core (default: one per core)")
    parser.add_argument("--compiler", choices=COMPILERS,
                        help=f"nvrtc (in process) or nvcc (default: ${COMPILER_ENV}, else nvrtc where installed)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress on stderr (without a terminal, progress is a line every few seconds)")


def _add_compile_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compile-level", default=FULL, choices=COMPILE_LEVELS, metavar="LEVEL",
                        help=f"how hard the compiler optimises: {', '.join(COMPILE_LEVELS)} (default: {FULL}; the "
                             f"others compile faster and may make slower kernels)")


def _add_seed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=whole, default=0,
                        help="seed of the run's random choices: the inputs (and tune's search); the same seed "
                             "gives the same inputs (default: 0)")


def _add_top(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--top", type=count, default=10, metavar="N", help=f"{what} (default: 10)")


def _add_gpu_model(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--gpu-model", metavar="NAME", help=help_text + " (--gpus takes GPU numbers)")
    parser.add_argument("--gpu", dest="gpu_model", action=_Renamed, new="--gpu-model")


def _add_run_arguments(parser: argparse.ArgumentParser, timing_budget: float) -> None:
    """How evaluations run: the same options, with the same meaning, on sweep and tune."""
    _add_compile_arguments(parser)
    parser.add_argument("--gpus", default="0", help="GPU numbers, e.g. 0,1, or 'all' (default: 0)")
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
