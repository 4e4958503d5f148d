"""The registry: every family tilegen can use now, by name (the built-ins and the plugins found
where gen.families.loading looks), and the family path that says where users' families are.

A plugin module defines its variant type, its Problem and its Family with `gen.api`, and keeps its
template beside it. Each family is checked when it is loaded (gen.families.plugin_checks); one
that fails is left out with a one-line problem naming its file and the fix, and every other
family keeps working.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path

import numpy as np

from ..core.errors import UsageError
from ..core.paths import as_path
from .builtin import BUILTIN_FAMILIES
from .family import Family
from .loading import Registry, load_registry
from .problem import element_type_of, numpy_dtype
from .variant import Variant

FAMILY_PATH_ENV = "TILEGEN_FAMILY_PATH"


def add_family_path(folder: Path | str, given_as: str = "--family-path") -> None:
    """Load the families in `folder` too, here and in every worker process started from now on.
    `given_as` names the option or argument the folder came from, for the error."""
    given = as_path(folder, given_as).expanduser()
    try:
        folder = given.resolve()  # '' would be the current folder
    except (OSError, RuntimeError):  # a loop of symbolic links
        raise UsageError(f"{given_as} {given} is a loop of symbolic links; give the folder itself") from None
    if not folder.is_dir():
        raise UsageError(f"{given_as} {folder}: no such folder (give the folder holding your family's .py and "
                         f"template)")
    if not os.access(folder, os.R_OK | os.X_OK):
        raise UsageError(f"--family-path {folder}: cannot read that folder (permission denied); fix its permissions")
    paths = family_paths()
    if folder not in paths:
        os.environ[FAMILY_PATH_ENV] = os.pathsep.join(str(p) for p in [folder, *paths])
    registry.cache_clear()


def family_paths() -> list[Path]:
    return _paths_in(os.environ.get(FAMILY_PATH_ENV, ""))


def _paths_in(family_path: str) -> list[Path]:
    return [Path(p).expanduser() for p in family_path.split(os.pathsep) if p]  # '~/kernels', as a shell would


def family_path_of(family: Family) -> Path | None:
    """The family-path folder `family` was loaded from; None for built-ins and installed plugins."""
    return _folder_on_path(family.source, os.environ.get(FAMILY_PATH_ENV, ""))


@functools.lru_cache(maxsize=256)
def _folder_on_path(source: str, family_path: str) -> Path | None:
    """Resolving paths costs a system call a component: once per family and family path."""
    folder = Path(source).parent.resolve()
    return folder if folder in {path.resolve() for path in _paths_in(family_path)} else None


@functools.cache
def registry() -> Registry:
    """Every family: the built-ins, then entry-point plugins, then the family path's modules."""
    return load_registry(family_paths(), FAMILY_PATH_ENV)


def is_plugin_code(filename: str) -> bool:
    """Whether a source file is a family's own code: a module in a family-path folder (a helper
    beside a family too) or an installed plugin family's module."""
    path = Path(filename).resolve()
    if any(folder.resolve() in path.parents for folder in family_paths()):
        return True
    return any(path == Path(inspect.getfile(type(family))).resolve() for family in registry().families.values()
               if not type(family).__module__.startswith(f"{__package__}."))


def all_families() -> dict[str, Family]:
    """Every usable family, built-in and plugin, by name."""
    return registry().families


def builtin_families() -> dict[str, Family]:
    return {name: family for name, family in all_families().items() if type(family) in BUILTIN_FAMILIES}


def get_family(name: str) -> Family:
    """The family called `name`; UsageError lists the known ones and any plugin that failed to load."""
    if not isinstance(name, str):
        raise UsageError(f"a family is named by text, like 'matmul'; got {name!r}")
    found = registry()
    if name in found.families:
        return found.families[name]
    if name in found.conflicts:
        raise UsageError(f"{found.conflicts[name]}; rename one of them (its name attribute)")
    problems = "; ".join(found.problems)
    hint = f"; plugins left out: {problems}" if problems else ""
    raise UsageError(f"unknown family {name!r}; families: {', '.join(found.families)}{hint}")


def variant_from_name(name: str) -> Variant:
    """Any family's variant from its name (the family is the name's first token)."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"a variant name is text like matmul_f32_t16_p1_guard_both, got {name!r}")
    return get_family(name.split("_", 1)[0]).variant_type.from_name(name)


@functools.lru_cache(maxsize=4096)  # a database's rows name the same variants over and over
def epilogue_of_name(name: str) -> str:
    """What the variant a row names computes after its product (Family.epilogue_of); '' when its
    family is not loaded here."""
    try:
        variant = variant_from_name(name)
    except UsageError:
        return ""
    return get_family(variant.family).epilogue_of(variant)


def element_type(name: str) -> str:
    """The element type of the variant a row or database entry names; '' when its family is not
    loaded here (a plugin's row read without its --family-path)."""
    try:
        return variant_from_name(name).dtype
    except UsageError:
        return ""


def gemm_families(dtype: np.dtype) -> list[Family]:
    """The families gen.matmul may multiply `dtype` matrices with, in the order it tries them: those
    that declare the element type in their `matmul_dtypes`; first the ones made for a few rows of A
    (Family.matmul_rows: gemv), then the ones made for one architecture (Family.target_arch: wgmma),
    then the others, each group in the order registered. The last runs everywhere (hgemm)."""
    element = element_type_of(dtype)
    families = all_families().values()
    found = [f for f in families if element is not None and element in f.matmul_dtypes]
    if not found:
        known = ", ".join(f"{numpy_dtype(d)} ({f.name})" for f in families for d in f.matmul_dtypes)
        raise UsageError(f"no registered family multiplies {dtype} matrices; gen.matmul multiplies {known}")
    return sorted(found, key=lambda f: (f.matmul_rows is None, f.target_arch is None))
