"""`gen.tune_kernel`: Kernel Tuner's `tune_kernel`, with its signature and meaning for the options
its users use most, over an ordinary tilegen family made on the fly (gen.kernel_tuner.tune.family), so
that isolation, L2-flushed timing, checks, the compile cache and the tuning database all hold.
Options tilegen does not support are refused in one line that names the option.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import UsageError, path_failure
from ..core.limits import MAX_THREADS_PER_BLOCK
from ..core.own_files import write_atomically
from ..core.results import Status
from ..core.timing import TUNE_TIMING, TimingOptions
from ..evaluate.options import RunOptions, make_executor
from ..evaluate.session import Executor, GpuUnavailable
from ..families.registry import add_family_path, get_family
from ..families.space import MAX_POINTS
from ..families.sourced import OUTPUT_DTYPES, rules_of
from .family import (Made, clean_tune_params, constants, describe, describe_arguments, first_valid, include_flags,
                     read_source, tags, write_family)
from .simulation import simulated_tune
from ..commands.tune import DEFAULT_SCREEN, TuneOptions, tune, tuned_rows
from ..commands.tune_result import TuneResult
from ..store.tuning_db import TuningDB

KERNEL_TUNER_STRATEGIES = {"brute_force": "brute", "random_sample": "random", "simulated_annealing": "anneal",
                           "greedy_ils": "local", "genetic_algorithm": "genetic",
                           "bayes_opt": "bayes"}  # Kernel Tuner's name: tilegen's
STRATEGY_OPTIONS = ("max_fevals", "time_limit")  # tilegen's budget and time_s
# Kernel Tuner's options tilegen does not take, with the value that means "not used".
UNSUPPORTED = {"platform": 0, "smem_args": None, "texmem_args": None, "compiler": None, "log": None,
               "metrics": None, "simulation_mode": (None, False), "parallel": None, "observers": None,
               "objective": (None, "time"), "objective_higher_is_better": (None, False), "objectives": None}


# Kernel Tuner's names for CUDA and its CUDA backends: one language to tilegen, which compiles and runs
# every CUDA kernel its own way.
CUDA_LANGS = ("CUDA", "PYCUDA", "NVCUDA", "CUPY")


def tune_kernel(kernel_name: str, kernel_source: Any, problem_size: Any, arguments: list, tune_params: Mapping,
                grid_div_x: Any = None, grid_div_y: Any = None, grid_div_z: Any = None, restrictions: Any = None,
                answer: Any = None, atol: float = 1e-6, verify: Any = None, verbose: bool = False, lang: Any = None,
                device: int = 0, platform: int = 0, smem_args: Any = None, cmem_args: Any = None,
                texmem_args: Any = None, compiler: Any = None, compiler_options: Any = None, defines: Any = None,
                log: Any = None, iterations: int = 7, block_size_names: Any = None, quiet: bool = False,
                strategy: Any = None, strategy_options: Any = None, cache: Any = None, metrics: Any = None,
                simulation_mode: Any = None, parallel: Any = None, observers: Any = None, objective: Any = None,
                objective_higher_is_better: Any = None, objectives: Any = None, seed: Any = None, *,
                db: Path | None = None, executor: Executor | None = None,
                screen: str | None = DEFAULT_SCREEN) -> tuple[list[dict], dict]:
    """Tune `kernel_name` of `kernel_source` over `tune_params` as Kernel Tuner does, and return
    `(results, env)` shaped like Kernel Tuner's. The measurements go into tilegen's tuning database
    (`db`, else the default), so `tilegen best`, `gen.tuned` and `gen.kernel` find the winner under
    the family named in `env["family"]`. `executor` replaces the local GPU workers (tests, clusters).
    `screen`: a compile level (gen.compiling.levels) to search at, the finalists confirmed at full."""
    if simulation_mode:
        limits = strategy_limits(strategy, strategy_options)
        return simulated_tune(kernel_name, tune_params, cache, KERNEL_TUNER_STRATEGIES[strategy or "brute_force"], limits,
                              0 if seed is None else seed)
    given = dict(platform=platform, smem_args=smem_args, texmem_args=texmem_args, compiler=compiler,
                 log=log, metrics=metrics, simulation_mode=simulation_mode, parallel=parallel, observers=observers,
                 objective=objective, objective_higher_is_better=objective_higher_is_better, objectives=objectives)
    refuse_unsupported(given)
    if lang is not None and str(lang).upper() not in CUDA_LANGS:
        raise UsageError(f"lang={lang!r}: tilegen tunes CUDA kernels only (lang='CUDA', or Kernel Tuner's CUDA "
                         f"backends' names: {', '.join(repr(n) for n in CUDA_LANGS[1:])})")
    started = time.monotonic()
    made = make_family(kernel_name, kernel_source, problem_size, arguments, tune_params,
                       (grid_div_x, grid_div_y, grid_div_z), restrictions, (answer, atol, verify), cmem_args,
                       compiler_options, defines, block_size_names, resumable=cache is not None)
    options = replace(tune_options(made.family, made.spec, strategy, strategy_options, iterations, device, quiet, seed,
                                   db), screen=screen)
    cached = _cache_file(cache, kernel_name, made.spec)
    check_gpu(options.run, executor)  # every argument checked, nothing enumerated or written yet
    load_family(made)
    result = run_tune(options, executor)
    results = kernel_tuner_results(result, made.spec, get_family(made.family).variant_type, options.db)
    env = environment(result, made, options, time.monotonic() - started)
    if verbose:
        print(verbose_report(results, env))
    if cached:
        _write_cache(cached, {"kernel_name": kernel_name, "tune_params": made.spec["tune_params"], "results": results,
                              "env": env})
    return results, env


def check_gpu(run: RunOptions, executor: Executor | None) -> None:
    """UsageError where no GPU answers: the given executor's, else this host's (started to ask, then
    stopped: the tune's own GPU workers start once the family folder is on the family path)."""
    asked = executor or make_executor(run)
    try:
        asked.devices()
    except GpuUnavailable as reason:
        raise UsageError(f"tune_kernel needs a GPU: {reason}") from None
    finally:
        if executor is None:
            asked.close()


def run_tune(options: TuneOptions, executor: Executor | None) -> TuneResult:
    """The one place tune_kernel drives tilegen's tuner (the search layer, as `tilegen tune` does)."""
    results = tune(options, executor)
    if len(results) != 1:
        raise UsageError(f"tune_kernel tunes one GPU model; these GPUs are {len(results)} models: choose one with "
                         f"device=")
    return results[0]


def refuse_unsupported(given: Mapping[str, Any]) -> None:
    for name, value in given.items():
        unused = UNSUPPORTED[name]
        if value is not None and value not in (unused if isinstance(unused, tuple) else (unused,)):
            raise UsageError(f"tune_kernel: tilegen does not support the option {name}= (docs/kernel-tuner.md "
                             f"lists what it supports)")


def make_family(kernel_name: str, kernel_source: Any, problem_size: Any, arguments: list, tune_params: Mapping,
                grid_div: tuple, restrictions: Any, checking: tuple, cmem_args: Any, compiler_options: Any,
                defines: Any, block_size_names: Any, resumable: bool = False) -> Made:
    """The family of this call, checked and named; nothing is written (`load_family` does).
    `checking` is (answer, atol, verify); `resumable`: the family's name does not depend on the
    arrays' values (Kernel Tuner's `cache=`)."""
    answer, atol, verify = checking
    if verify is not None and not callable(verify):
        raise UsageError(f"verify must be a function verify(answer, result, atol=None) -> bool; got {verify!r}")
    if not isinstance(kernel_name, str) or not kernel_name.isidentifier():
        raise UsageError(f"kernel_name must be the kernel's C identifier (tilegen takes no template arguments in it); "
                         f"got {kernel_name!r}")
    params = clean_tune_params(tune_params)
    names = _block_size_names(block_size_names)
    strings, callables = _restrictions(restrictions)
    described, arrays, output = describe_arguments(arguments, answer)
    cmem = constants(cmem_args)
    source = read_source(kernel_source)
    answer_array = arrays.get("answer")
    spec = dict(kernel_name=kernel_name, problem_size=_problem_size(problem_size), tune_params=params,
                tags=tags(list(params)), default=first_valid(params, rules_of(strings, callables), strings, names),
                grid_div=[_grid_div(d, axis) for axis, d in zip("xyz", grid_div)], block_size_names=names,
                restrictions=strings, arguments=described, output=output,
                dtype=OUTPUT_DTYPES[described[output]["dtype"]], atol=_atol(atol),
                answer_norm=float(math.sqrt((answer_array ** 2).sum())) if answer_array is not None else 0.0,
                answer_size=int(answer_array.size) if answer_array is not None else 0,
                constants=[name.removeprefix("cmem_") for name in cmem], defines=_defines(defines),
                flags=[*_compiler_options(compiler_options), *include_flags(source)])
    return describe(spec, source, {**arrays, **cmem}, {"restrictions": callables, "verify": verify}, resumable)


def load_family(made: Made) -> None:
    """The family's folder written, on the family path of this process and the workers started from now on."""
    write_family(made)
    add_family_path(made.folder)
    get_family(made.family)  # loaded and checked here, where its problem is one line


def _problem_size(problem_size: Any) -> list[int]:
    sizes = list(problem_size) if isinstance(problem_size, (list, tuple)) else [problem_size]
    if not 1 <= len(sizes) <= 3 or not all(isinstance(s, int) or hasattr(s, "__index__") for s in sizes) \
            or min(int(s) for s in sizes) < 1:
        raise UsageError(f"problem_size must be 1 to 3 positive whole numbers; got {problem_size!r} (tilegen takes "
                         f"no parameter names or functions there)")
    return [int(s) for s in sizes]


def _grid_div(divisors: Any, axis: str) -> list | None:
    if divisors is None:
        return None
    divisors = list(divisors) if isinstance(divisors, (list, tuple)) else [divisors]
    if not all(isinstance(d, (str, int)) for d in divisors):
        raise UsageError(f"grid_div_{axis}: give parameter names, expressions of them, or whole numbers (no functions)")
    return divisors


def _block_size_names(names: Any) -> list[str]:
    if names is None:
        return ["block_size_x", "block_size_y", "block_size_z"]
    if not isinstance(names, (list, tuple)) or not 1 <= len(names) <= 3 or not all(isinstance(n, str) for n in names):
        raise UsageError(f"block_size_names must be 1 to 3 parameter names; got {names!r}")
    return list(names) + ["block_size_y", "block_size_z"][len(names) - 1:]


def _restrictions(restrictions: Any) -> tuple[list[str], list[Callable[[dict], bool]]]:
    items = restrictions if isinstance(restrictions, (list, tuple)) else [] if restrictions is None else [restrictions]
    strings = [r for r in items if isinstance(r, str)]
    callables = [r for r in items if callable(r) and not isinstance(r, str)]
    if len(strings) + len(callables) != len(items):
        raise UsageError("restrictions must be expressions of the parameters (strings) or functions of a dict of them")
    for text in strings:
        try:
            compile(text, "restriction", "eval")
        except SyntaxError:
            raise UsageError(f"restrictions: {text!r} is not a Python expression of the parameters") from None
    return strings, callables


def _atol(atol: Any) -> float:
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol >= 0:
        raise UsageError(f"atol must be a number >= 0; got {atol!r}")
    return float(atol)


def _defines(defines: Any) -> dict[str, str] | None:
    if defines is None:
        return None
    if not isinstance(defines, Mapping) or not all(isinstance(k, str) and k.isidentifier() and isinstance(v, (str, int))
                                                   for k, v in defines.items()):
        raise UsageError("defines must be a dict of macro names and values (text or numbers; no functions)")
    return {k: str(v) for k, v in defines.items()}


def _compiler_options(options: Any) -> list[str]:
    if options is None:
        return []
    if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
        raise UsageError(f"compiler_options must be a list of nvcc flags; got {options!r}")
    return list(options)


def tune_options(family: str, spec: Mapping[str, Any], strategy: Any, strategy_options: Any, iterations: Any,
                 device: Any, quiet: bool, seed: Any, db: Path | None) -> TuneOptions:
    limits = strategy_limits(strategy, strategy_options)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise UsageError(f"iterations must be a whole number >= 1; got {iterations!r}")
    timing: TimingOptions = replace(TUNE_TIMING, min_samples=iterations)
    run = RunOptions(gpus=(device,), timing=timing)
    whole_space = math.prod(len(values) for values in spec["tune_params"].values())  # Kernel Tuner's: no limit
    return TuneOptions(family=family, size="x".join(str(s) for s in spec["problem_size"]),
                       strategy=KERNEL_TUNER_STRATEGIES[strategy or "brute_force"], budget=limits.get("max_fevals"),
                       time_s=limits.get("time_limit"), db=db, seed=0 if seed is None else seed, run=run,
                       progress=not quiet, max_points=max(MAX_POINTS, whole_space))


def strategy_limits(strategy: Any, strategy_options: Any) -> dict[str, Any]:
    """Kernel Tuner's strategy (one tilegen has) and its strategy_options, checked: the limits."""
    if strategy is not None and strategy not in KERNEL_TUNER_STRATEGIES:
        raise UsageError(f"strategy={strategy!r}: tilegen has {', '.join(KERNEL_TUNER_STRATEGIES)}")
    if strategy_options is not None and not isinstance(strategy_options, Mapping):
        raise UsageError(f"strategy_options must be a dict like {{'max_fevals': 100}}; got {strategy_options!r}")
    limits = dict(strategy_options or {})
    unknown = [k for k in limits if k not in STRATEGY_OPTIONS]
    if unknown:
        raise UsageError(f"strategy_options: tilegen does not support {unknown[0]!r}; it takes max_fevals and "
                         f"time_limit")
    return limits


def _cache_file(cache: Any, kernel_name: str, spec: Mapping[str, Any]) -> Path | None:
    """Kernel Tuner's `cache`: a results file. tilegen resumes from its tuning database (what is
    measured is recalled, not measured again) and writes the results here; a file of another kernel
    or space is refused."""
    if cache is None:
        return None
    if not isinstance(cache, (str, os.PathLike)) or not str(cache).strip():
        raise UsageError(f"cache must be a file name, like 'vector_add.json'; got {cache!r}")
    path = Path(cache).expanduser()
    path = path if path.suffix else path.with_suffix(".json")
    if not path.parent.is_dir() or path.is_dir():
        what = "is a folder" if path.is_dir() else f"is in {path.parent}, which is no folder"
        raise UsageError(f"cache={str(path)!r} {what}; give a file in a folder that exists")
    if not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"cache={str(path)!r} cannot be written (no permission, or a read-only disk); give a file "
                         f"you can write")
    if path.exists():
        try:
            held = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise UsageError(f"cache={str(path)!r} cannot be read as a results file ({error}); give another file") \
                from None
        if not isinstance(held, dict) or (held.get("kernel_name"), held.get("tune_params")) != (kernel_name,
                                                                                                 spec["tune_params"]):
            raise UsageError(f"cache={str(path)!r} holds results of another kernel or other tune_params; give "
                             f"another file")
    return path


def _write_cache(path: Path, held: Mapping[str, Any]) -> None:
    try:
        write_atomically(path, json.dumps(held, indent=1, default=str).encode())
    except OSError as error:
        raise path_failure(error, path, "write", kept="the measurements are kept in the tuning database",
                           elsewhere="give another cache= file; the measurements are kept in the tuning database") \
            from None


def kernel_tuner_results(result: TuneResult, spec: Mapping[str, Any], variant_type: type, db: Path | None) -> list[dict]:
    """One dict per configuration evaluated: its parameters, `time` (the median, in ms) or the
    failure's name as Kernel Tuner writes it (a screened one's, at the screening level, unless a
    finalist), and tilegen's own fields."""
    rows = tuned_rows(result, db)
    failures = {Status.COMPILE_ERROR: "CompilationFailedConfig", Status.SKIPPED: "InvalidConfig"}
    results = []
    for name, row in sorted(rows.items()):
        params = variant_type.from_name(name).params()
        ok = row.status is Status.OK and row.median_ms is not None
        results.append({**params, "time": row.median_ms if ok else failures.get(row.status, "RuntimeFailedConfig"),
                        "times_min": row.min_ms, "times_max": row.max_ms, "samples": row.samples,
                        "status": str(row.status), "message": row.message, "variant": name})
    return results


def verbose_report(results: list[dict], env: Mapping[str, Any]) -> str:
    """What verbose=True prints, as Kernel Tuner's does: each configuration's parameters and time (or
    failure), then the best."""
    lines = []
    for result in results:
        measured = f"{result['time']:.4g} ms" if isinstance(result["time"], float) else result["time"]
        lines.append(", ".join(f"{name}={result[name]}" for name in env["tune_params"]) + f", time={measured}")
    return "\n".join([*lines, f"best performing configuration: {env['best']}, time={env['best_time']:.4g} ms"])


def environment(result: TuneResult, made: Any, options: TuneOptions, seconds: float) -> dict[str, Any]:
    model = result.problem.gpu_model
    return {"device_name": model.name, "compute_capability": model.cc, "kernel_name": made.spec["kernel_name"],
            "problem_size": made.spec["problem_size"], "tune_params": made.spec["tune_params"],
            "strategy": options.strategy, "iterations": options.run.timing.min_samples, "family": made.family,
            "family_folder": str(made.folder), "best": result.winner.name, "best_time": result.standings[0].median_ms,
            "evaluations": result.evaluations, "tune_seconds": seconds, "gpu_seconds": result.gpu_seconds,
            "search_seconds": result.search_seconds, "screen": result.screen, "max_threads": MAX_THREADS_PER_BLOCK,
            "db": str(TuningDB(options.db, create=False).path)}
