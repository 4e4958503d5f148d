"""Variants to cubins: rendered, compiled, judged and cached, many at once; the public face of compiling/.

Needs no GPU. A variant's compile is cached under a hash of its source, the options, and the
compiler's name and version, so a repeated run compiles nothing (cache.py proves each entry before
trusting it); and it is found without rendering the variant again, by a key of what determines its
source (its parameters, the family's templates and code: `variant_keys`), so a warm sweep renders
nothing. The compiler is the options' (`CompileOptions.compiler`: NVRTC where installed, else nvcc,
unless told otherwise; compilers.Compiler says what one must do). Variants of families that allow it
(`Family.compile_together`) are compiled several to one run where the compiler batches (each in a
namespace of its own, which halves nvcc's cost per variant); a batch that fails is compiled again one
by one, so each error lands on its variant.

Each run is judged before anything of it is kept (verdict.judge): a cubin with ptxas's report is
cached; a diagnostic of the source is a compile error, a result (`Compiled.ok` is False, with the
log) and not an exception, and cached; a run past its deadline is a compile error that says so,
never cached; anything else says nothing about the source, is never cached, and is compiled once
more before the run stops (RunFailed). A compile stopped by an interrupt raises Interrupted and
leaves nothing in the cache.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from ..core.errors import TilegenError, UsageError
from ..core import checks
from ..core.processes import ProcessGroup
from ..core.results import Row, Status
from ..core.version import __version__
from ..families import get_family
from ..families.family import Family, family_arch
from ..families.variant import Variant
from .compilers import COMPILERS, compiler_named
from .levels import level_flags
from .cache import CACHE_FORMAT, CacheEntry, CompileCache, cache_summary, clear_cache, cubin_cache, purge_failed
from .nvcc import nvcc_path, nvcc_version, require_nvcc
from .options import DEFAULT_ARCH, CompileOptions, check_arch, usable_cores
from .ptxas import Resources, kernel_logs, parse_ptxas
from .render import render, rendering_hash, require_variant, template_hash
from .verdict import Attempt, Outcome, judge, judged

# Names others import from here, wherever they are defined.
__all__ = ["CompileOptions", "Compiled", "Resources", "compile_batch", "compile_variant",
           "compiled_row", "provenance", "batch_size", "cache_key", "parse_ptxas", "kernel_logs", "nvcc_path",
           "require_nvcc", "nvcc_version", "cache_summary", "purge_failed", "clear_cache", "cubin_cache",
           "usable_cores", "DEFAULT_ARCH"]

MAX_BATCH = 8  # variants per run: enough to halve nvcc's cost per variant, few enough to keep cores busy


@dataclass(frozen=True)
class Compiled:
    """The outcome of compiling one variant."""

    variant: Variant
    cubin: Path | None  # None when the compile failed; a batch's cubin holds its other kernels too
    resources: Resources | None
    seconds: float  # the compiler's wall time for this variant (its share of a batch), kept in the cache
    log: str
    cached: bool
    compiler: str  # what made it (or would have): the compiler's name and version, 'nvcc 13.0.88'
    level: str  # the compile level (gen.compiling.levels): 'full', or a fast one

    @property
    def ok(self) -> bool:
        return self.cubin is not None


def batch_size(waiting: int, jobs: int) -> int:
    """Variants per compiler run: one while there are no more than cores, up to MAX_BATCH beyond."""
    return max(1, min(MAX_BATCH, math.ceil(waiting / max(1, jobs))))


def compile_variant(variant: Variant, options: CompileOptions) -> Compiled:
    """Render and compile one variant, or take it from the cache."""
    children = ProcessGroup()
    try:
        return compile_batch([variant], options, children)[0]
    finally:
        children.kill_all()  # a compiler's worker process, if it keeps one


def compile_batch(variants: Sequence[Variant], options: CompileOptions, children: ProcessGroup) -> list[Compiled]:
    """Take what the cache proves, found by each variant's key (`variant_keys`: nothing rendered), render
    the rest, take what the cache proves of them, and compile what is left: together in one run where
    their family and the compiler allow it, else one by one. Results in the order of `variants`."""
    checks.instance(options, CompileOptions, "options")
    check_arch(options.arch, options.compiler)
    by_arch: dict[str, list[Variant]] = {}
    for variant in variants:
        require_variant(variant)
        by_arch.setdefault(family_arch(get_family(variant.family), options.arch), []).append(variant)
    if set(by_arch) != {options.arch} and variants:  # a family of its own architecture: compile each part for its own
        results = {v: c for arch, part in by_arch.items() for v, c in
                   zip(part, compile_batch(part, replace(options, arch=arch), children))}
        return [results[v] for v in variants]
    options = with_level_flags(with_family_flags(options, variants))
    cache = CompileCache(options.cache)
    by_variant = variant_keys(variants, options)
    results = _known(by_variant, options, cache)  # found without rendering
    sources = {v: render(v) for v in variants if v not in results}
    keys = {v: cache_key(source, options) for v, source in sources.items()}
    for variant in sources:
        entry = cache.load(keys[variant], variant.name, options.level)
        if entry is not None:
            results[variant] = _compiled(variant, options, cache, entry, cached=True)
    missing = [v for v in sources if v not in results]
    together = [v for v in missing if options.compiler.batches and get_family(v.family).compile_together]
    if len(together) > 1:
        results.update(_compile_together(together, sources, keys, options, cache, children))
    for variant in (v for v in missing if v not in results):
        results[variant] = _compile_alone(variant, sources[variant], keys[variant], options, cache, children)
    _remember({v: by_variant[v] for v in sources}, keys, options, cache)
    return [results[v] for v in variants]


def with_family_flags(options: CompileOptions, variants: Sequence[Variant]) -> CompileOptions:
    """The options with the flags of the variants' families (Family.compile_flags) after the run's own."""
    extra = [f for family in dict.fromkeys(v.family for v in variants) for f in get_family(family).compile_flags]
    return replace(options, flags=(*options.flags, *extra)) if extra else options


def with_level_flags(options: CompileOptions) -> CompileOptions:
    """The options with their level's flags for their compiler last (none at `full`, so that the
    cache keys of `full` are those of tilegen before levels)."""
    extra = level_flags(options.level, options.compiler.name)
    return replace(options, flags=(*options.flags, *extra)) if extra else options


def provenance(options: CompileOptions, family: Family) -> dict[str, str]:
    """What made a compiled row: architecture, the compiler (its name, and its version under its
    name: 'nvcc': '13.0.88'), the template's hash and tilegen's version."""
    compiler = options.compiler
    return {"arch": family_arch(family, options.arch), "compiler": compiler.name, compiler.name: compiler.version(),
            "template_hash": template_hash(family), "tilegen": __version__}


def compiled_row(compiled: Compiled, shape: str = "", **extra: object) -> Row:
    """A row with the compile outcome and resources; later stages fill in the rest."""
    variant = compiled.variant
    row = Row(variant.name, variant.family, variant.params(),
              Status.COMPILED if compiled.ok else Status.COMPILE_ERROR, shape=shape,
              message="" if compiled.ok else compiled.log.strip(), compile_seconds=compiled.seconds,
              dynamic_shared_bytes=variant.dynamic_shared_bytes, compile_level=compiled.level, **extra)
    if compiled.resources:
        row.registers = compiled.resources.registers
        row.static_shared_bytes = compiled.resources.static_shared_bytes
        row.spill_bytes = compiled.resources.spill_bytes
        row.stack_bytes = compiled.resources.stack_bytes
    return row


def cache_key(source: str, options: CompileOptions) -> str:
    """The cache's key of a compile: the source, the architecture and flags, the compiler and its version."""
    return hashlib.sha256("\0".join([source, *_compile_terms(options)]).encode()).hexdigest()[:32]


def _compile_terms(options: CompileOptions) -> list[str]:
    """What besides the source determines a compile: the architecture, the flags, the compiler and its
    version, the cache's format."""
    compiler = options.compiler
    return [options.arch, *options.flags, f"compiler {compiler.name} {compiler.version()}",
            f"cache format {CACHE_FORMAT}"]


def variant_keys(variants: Sequence[Variant], options: CompileOptions) -> dict[Variant, str]:
    """Each variant's key by what determines its source (render.rendering_hash, its parameters) and
    what else determines its compile (as `cache_key`): how the cache finds its compile without rendering."""
    common = [*_compile_terms(options), options.level]
    rendered = {name: rendering_hash(get_family(name)) for name in {v.family for v in variants}}
    return {v: hashlib.sha256("\0".join([rendered[v.family], type(v).__qualname__, v.name,
                                          repr(sorted(v.params().items())), *common]).encode()).hexdigest()[:32]
            for v in variants}


def _known(by_variant: dict[Variant, str], options: CompileOptions, cache: CompileCache) -> dict[Variant, Compiled]:
    """The variants whose compiles the cache proves, found by their variant keys: none rendered."""
    found = {}
    for variant, variant_key in by_variant.items():
        key = cache.key_for(variant_key)
        entry = cache.load(key, variant.name, options.level) if key else None
        if entry is not None:
            found[variant] = _compiled(variant, options, cache, entry, cached=True)
    return found


def _remember(by_variant: dict[Variant, str], keys: dict[Variant, str], options: CompileOptions,
              cache: CompileCache) -> None:
    """Each variant's key, for `_known`, beside the entry the cache now proves for it: none for a
    compile cut short, which left nothing in the cache."""
    for variant, variant_key in by_variant.items():
        if cache.load(keys[variant], variant.name, options.level) is not None:
            cache.remember(variant_key, keys[variant])


def _compile_alone(variant: Variant, source: str, key: str, options: CompileOptions, cache: CompileCache,
                   children: ProcessGroup) -> Compiled:
    attempt, verdict = judged(lambda: _run(options, {variant.name: source}, children), [variant.name], variant.name)
    if verdict.outcome in (Outcome.TIMED_OUT, Outcome.CRASHED):
        return Compiled(variant, None, None, attempt.seconds,
                        f"{verdict.reason}; not cached ({verdict.fix})", cached=False, compiler=made_by(options),
                        level=options.level)
    if verdict.outcome is Outcome.SOURCE_ERROR:
        entry = CacheEntry(attempt.log, attempt.seconds)
    else:
        entry = CacheEntry(attempt.log, attempt.seconds, cache.put_cubin(attempt.cubin),
                           parse_ptxas(verdict.reports[variant.name]))
    cache.put(key, variant.name, options.level, entry)
    return _compiled(variant, options, cache, entry, cached=False)


def _compile_together(variants: list[Variant], sources: dict[Variant, str], keys: dict[Variant, str],
                      options: CompileOptions, cache: CompileCache, children: ProcessGroup) -> dict[Variant, Compiled]:
    """One run for several variants. Empty unless the batch compiled: the caller compiles them one
    by one, to say whose error it is."""
    attempt = _run(options, {v.name: sources[v] for v in variants}, children)
    verdict = judge(attempt, [v.name for v in variants])
    if verdict.outcome is not Outcome.COMPILED:
        return {}
    cubin = cache.put_cubin(attempt.cubin)
    results = {}
    for variant in variants:
        report = verdict.reports[variant.name]
        entry = CacheEntry(report, round(attempt.seconds / len(variants), 3), cubin, parse_ptxas(report))
        cache.put(keys[variant], variant.name, options.level, entry)
        results[variant] = _compiled(variant, options, cache, entry, cached=False)
    return results


def _run(options: CompileOptions, sources: Mapping[str, str], children: ProcessGroup) -> Attempt:
    """One run of the options' compiler on these kernels (name -> source)."""
    return options.compiler.compile(sources, options.arch, options.flags, options.timeout_s, children)


def _compiled(variant: Variant, options: CompileOptions, cache: CompileCache, entry: CacheEntry,
              cached: bool) -> Compiled:
    cubin = cache.folder / entry.cubin.name if entry.cubin else None
    return Compiled(variant, cubin, entry.resources, entry.seconds, entry.log, cached,
                    made_by(options), options.level)


def made_by(options: CompileOptions) -> str:
    """'nvrtc 13.0.88': the compiler and its version, as rows and summaries name them."""
    return f"{options.compiler.name} {options.compiler.version()}"


def cached_by_another(variant: Variant, options: CompileOptions) -> str | None:
    """'nvcc 13.0.88' when the cache holds `variant` made by a compiler other than the options' (its
    cubin is not used: the compiler is part of the key), else None. For a compile that found
    nothing in the cache to say why."""
    source = render(variant)
    for name in COMPILERS:
        if name == options.compiler.name:
            continue
        try:
            other = replace(options, compiler=compiler_named(name))
            key = cache_key(source, other)
        except (TilegenError, OSError):  # that compiler is not installed here
            continue
        if CompileCache(options.cache).load(key, variant.name, options.level) is not None:
            return made_by(other)
    return None
