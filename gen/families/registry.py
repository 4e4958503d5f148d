"""Families from outside tilegen: the modules in the folders of --family-path / $TILEGEN_FAMILY_PATH,
and packages that declare an entry point in the group `tilegen.families`.

A plugin module defines its variant type, its Problem and its Family with `gen.api`, and keeps its
template beside it. Each family is checked when it is loaded (names, arguments, template, and its
default variant's launch and reference on a small problem); one that fails is left out with a
one-line problem naming its file and the fix, and every other family keeps working.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import itertools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .builtin import BUILTIN_FAMILIES
from ..core.errors import InvalidVariant, TilegenError, UsageError
from .family import SCALAR_TYPES, Family, Input, Launch, Output, Problem, Scalar, launch_refusal
from ..core.limits import DTYPE_CTYPE
from ..core.paths import as_path, builtin_templates_dir, path_problem
from .space import Space
from .variant import Variant

FAMILY_PATH_ENV = "TILEGEN_FAMILY_PATH"
ENTRY_POINT_GROUP = "tilegen.families"
MAX_CHECKED = 20_000  # points of a plugin's default space checked when it loads (about 1 s)
# Attributes of every variant: a parameter of the same name would hide them.
RESERVED_PARAMETERS = {name for name in dir(Variant) if not name.startswith("__")} - {"dtype"}


class PluginProblem(TilegenError):
    """A family that cannot be used: the message names its file and what to fix."""


@dataclass
class Registry:
    families: dict[str, Family] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # plugins left out, one line each
    conflicts: dict[str, str] = field(default_factory=dict)  # family name -> why it is ambiguous


def add_family_path(folder: Path | str) -> None:
    """Load the families in `folder` too, here and in every worker process started from now on."""
    folder = as_path(folder, "--family-path").expanduser().resolve()  # '' would be the current folder
    if not folder.is_dir():
        raise UsageError(f"--family-path {folder}: no such folder (give the folder holding your family's .py and "
                         f"template)")
    paths = family_paths()
    if folder not in paths:
        os.environ[FAMILY_PATH_ENV] = os.pathsep.join(str(p) for p in [folder, *paths])
    registry.cache_clear()


def family_paths() -> list[Path]:
    return [Path(p) for p in os.environ.get(FAMILY_PATH_ENV, "").split(os.pathsep) if p]


def family_path_of(family: Family) -> Path | None:
    """The family-path folder `family` was loaded from; None for built-ins and installed plugins."""
    folder = Path(family.source).parent.resolve()
    return folder if folder in {path.resolve() for path in family_paths()} else None


@functools.cache
def registry() -> Registry:
    """Every family: the built-ins, then entry-point plugins, then the family path's modules."""
    found = Registry()
    for cls in BUILTIN_FAMILIES:
        _register(found, cls, inspect.getfile(cls), (builtin_templates_dir(),))
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {entry.name} = {entry.value}"
        try:
            with _importing():
                loaded = entry.load()
        except Exception as error:
            found.problems.append(f"{source}: cannot be imported ({one_line(error)}); fix the package or uninstall it")
            continue
        classes = _families_in(loaded) if isinstance(loaded, ModuleType) else [loaded]
        for cls in classes:
            _register(found, cls, inspect.getfile(cls), _template_dirs(Path(inspect.getfile(cls)).parent))
    for folder in family_paths():
        if problem := path_problem(folder):  # before is_dir(), which raises on such a path
            found.problems.append(f"{FAMILY_PATH_ENV} {problem}; fix the path")
            continue
        if not folder.is_dir():
            found.problems.append(f"{FAMILY_PATH_ENV} names {folder}, which is not a folder; fix the path")
            continue
        try:
            package = _folder_package(folder)
        except Exception as error:
            found.problems.append(f"{folder / '__init__.py'}: cannot be imported ({one_line(error)}); fix it")
            continue
        for path in sorted(folder.glob("*.py")):
            if not path.name.startswith("_"):
                _load_module_file(found, package, path)
    return found


def check_family(family: Family) -> None:
    """Raise PluginProblem when a family breaks the family API's rules (see the module doc)."""
    where = family.source
    name = getattr(family, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or "_" in name or name != name.lower():
        raise PluginProblem(f"{where}: family name {name!r} must be a lowercase identifier without '_' (it starts "
                            f"every variant name)")
    variant_type = getattr(family, "variant_type", None)
    if not (isinstance(variant_type, type) and issubclass(variant_type, Variant)
            and dataclasses.is_dataclass(variant_type) and variant_type.__dataclass_params__.frozen):
        raise PluginProblem(f"{where}: {name}.variant_type must be a @dataclass(frozen=True, order=True) subclass "
                            f"of gen.api.Variant")
    if getattr(variant_type, "family", None) != name:
        raise PluginProblem(f"{where}: {variant_type.__name__}.family is {getattr(variant_type, 'family', None)!r}; "
                            f"set it to {name!r}, the family's name")
    _check_parameters(family, variant_type)
    if not isinstance(getattr(family, "problem", None), Problem):
        raise PluginProblem(f"{where}: {name}.problem must be an instance of a gen.api.Problem subclass")
    _check_arguments(family)
    if not any((folder / family.template).is_file() for folder in family.template_dirs):
        folders = ", ".join(str(f) for f in family.template_dirs)
        raise PluginProblem(f"{where}: template {family.template!r} of {name} is not in {folders}; put it beside "
                            f"the module")
    _check_contract(family)


# ---- loading -------------------------------------------------------------------------------------

def _folder_package(folder: Path) -> str:
    """A family-path folder as a package of its own (its __init__.py, if it has one, is run), so
    that its modules can import the helpers beside them: `from . import helpers`. The package's
    name is made from the folder's path: the same in every process, distinct for every folder."""
    name = f"tilegen_families_{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:10]}"
    if name not in sys.modules:
        init = folder / "__init__.py"
        spec = (importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
                if init.is_file() else importlib.machinery.ModuleSpec(name, None, is_package=True))
        assert spec is not None
        package = importlib.util.module_from_spec(spec)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
        if spec.loader is not None:
            try:
                with _importing():
                    spec.loader.exec_module(package)
            except BaseException:
                del sys.modules[name]
                raise
    return name


def _load_module_file(found: Registry, package: str, path: Path) -> None:
    module_name = f"{package}.{path.stem}"
    try:
        with _importing():
            module = importlib.import_module(module_name)
    except Exception as error:
        sys.modules.pop(module_name, None)
        found.problems.append(f"{path}: cannot be imported ({one_line(error)}); fix the module or move it out of "
                              f"the family path")
        return
    for cls in _families_in(module):
        _register(found, cls, str(path), _template_dirs(path.parent))


class PluginExited(Exception):
    """A plugin that called sys.exit() while it was imported or checked."""


@contextlib.contextmanager
def _importing() -> Iterator[None]:
    """Around a plugin's import and checks: what it prints goes to stderr, as stdout is the
    command's own (`tilegen render` prints CUDA source there), and a sys.exit() in it is its
    failure, not the end of the command that loads it (any command: every family is loaded)."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except SystemExit as stop:
        raise PluginExited(f"it calls sys.exit({stop.code!r})") from None


def _families_in(module: ModuleType) -> list[type]:
    return [obj for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, Family) and obj.__module__ == module.__name__
            and not inspect.isabstract(obj)]


def _template_dirs(folder: Path) -> tuple[Path, ...]:
    """A plugin's own folder (and its templates/), then tilegen's, so it can import macros.cu.j2."""
    own = [folder, folder / "templates"]
    return tuple(f for f in own if f.is_dir()) + (builtin_templates_dir(),)


def _register(found: Registry, cls: type, source: str, template_dirs: Iterable[Path]) -> None:
    try:
        if not (inspect.isclass(cls) and issubclass(cls, Family)):
            raise PluginProblem(f"{source}: {cls!r} is not a gen.api.Family subclass")
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(cls.__abstractmethods__))
            raise PluginProblem(f"{source}: family {cls.__name__} does not define {missing}")
        with _importing():  # the checks call the plugin's own code
            family = cls()
            family.source, family.template_dirs = source, tuple(template_dirs)
            check_family(family)
    except PluginProblem as problem:
        found.problems.append(str(problem))
        return
    except Exception as error:
        found.problems.append(f"{source}: family {getattr(cls, '__name__', cls)} cannot be set up "
                              f"({one_line(error)})")
        return
    name = family.name
    if name in found.conflicts:
        found.conflicts[name] += f" and {source}"
    elif name in found.families:
        first = found.families.pop(name).source
        found.conflicts[name] = f"family {name!r} is defined twice, in {first} and {source}"
    else:
        found.families[name] = family


def _check_parameters(family: Family, variant_type: type[Variant]) -> None:
    parameters = variant_type.parameters()
    clashes = sorted({p.name for p in parameters} & RESERVED_PARAMETERS)
    if clashes:
        raise PluginProblem(f"{family.source}: parameter {clashes[0]!r} of {family.name} clashes with an attribute "
                            f"every variant has; rename it")
    tags = [p.tag for p in parameters if p.tag]
    repeated = sorted({t for t in tags if tags.count(t) > 1})
    if repeated:
        raise PluginProblem(f"{family.source}: two parameters of {family.name} share the name tag {repeated[0]!r}, "
                            f"so their values could not be told apart in names; give each its own tag")
    default = variant_type()
    try:
        default.check()
    except TilegenError as error:
        raise PluginProblem(f"{family.source}: the default variant of {family.name} is invalid ({error}); change "
                            f"the parameters' defaults") from None
    if variant_type.from_name(default.name) != default:
        raise PluginProblem(f"{family.source}: {default.name!r} does not parse back to the default variant of "
                            f"{family.name}; give the parameters distinct tags or values")


def _check_arguments(family: Family) -> None:
    arguments = family.problem.arguments
    names = [a.name for a in arguments]
    if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        raise PluginProblem(f"{family.source}: {family.name}'s kernel arguments {names} must be distinct identifiers")
    if sum(isinstance(a, Output) for a in arguments) != 1:
        raise PluginProblem(f"{family.source}: {family.name} needs exactly one Output argument, the array that is "
                            f"poisoned, written and checked")
    for argument in arguments:
        if not isinstance(argument, (Input, Output, Scalar)):
            raise PluginProblem(f"{family.source}: argument {argument!r} of {family.name} is not an Input, Output or "
                                f"Scalar")
        if isinstance(argument, Scalar) and argument.ctype not in SCALAR_TYPES:
            raise PluginProblem(f"{family.source}: scalar {argument.name} of {family.name} has type "
                                f"{argument.ctype!r}; use one of {', '.join(SCALAR_TYPES)}")


def _check_contract(family: Family) -> None:
    """Every point of the default space (up to MAX_CHECKED): its rules apply without an error, and a
    valid variant's launch on its small problem stays inside CUDA's limits; the default variant's
    problem has arrays for every argument, and a reference of the output region's shape for each
    element type in the space."""
    _check_arrays(family, family.default_variant())
    checked_types: set[str] = set()
    for variant in itertools.islice(Space.default(family), MAX_CHECKED):
        if not _valid(family, variant):
            continue
        shape = _attempt(family, variant, "sanitize_size() or parse_shape()",
                         lambda: family.parse_shape(family.sanitize_size(variant)))
        _check_launch(family, variant, shape)
        if variant.dtype not in checked_types:
            checked_types.add(variant.dtype)
            _check_reference(family, variant, shape)


def _valid(family: Family, variant: Variant) -> bool:
    """Whether a point of the space is valid; PluginProblem when its rules raise anything but
    InvalidVariant."""
    try:
        variant.check()
        return True
    except InvalidVariant:
        return False
    except Exception as error:
        raise PluginProblem(f"{family.source}: {variant.name}: check_combination() raised {one_line(error)}; a rule "
                            f"a variant breaks is require(condition, reason), any other error is a bug to fix") \
            from None


def _attempt(family: Family, variant: Variant, what: str, call: Callable[[], Any]) -> Any:
    """`call()`, or PluginProblem naming the file, the variant and the method that failed."""
    try:
        return call()
    except TilegenError as error:
        raise PluginProblem(f"{family.source}: {variant.name}: {what}: {error}") from None
    except Exception as error:
        raise PluginProblem(f"{family.source}: {variant.name}: {what} raised {one_line(error)}; fix {what} for "
                            f"this variant, or make such variants invalid in check_combination()") from None


def _check_launch(family: Family, variant: Variant, shape: Any) -> None:
    if _attempt(family, variant, "refusal()", lambda: family.refusal(variant, shape)) is not None:
        return
    launch = _attempt(family, variant, "launch()", lambda: family.launch(variant, shape))
    if not isinstance(launch, Launch):
        raise PluginProblem(f"{family.source}: {variant.name}: launch() returned {launch!r}; return "
                            f"gen.api.Launch(grid=..., block=...)")
    if reason := launch_refusal(launch):
        raise PluginProblem(f"{family.source}: {family.name}'s launch() of {variant.name} at {shape}: {reason}; "
                            f"keep launch() inside the limits or add a constraint that makes such variants invalid")
    dynamic = _attempt(family, variant, "dynamic_shared_bytes", lambda: int(variant.dynamic_shared_bytes))
    if launch.dynamic_shared_bytes != dynamic:
        raise PluginProblem(f"{family.source}: {variant.name}: launch() asks for {launch.dynamic_shared_bytes} bytes "
                            f"of dynamic shared memory, but the variant's dynamic_shared_bytes is {dynamic}; give "
                            f"launch() dynamic_shared_bytes=variant.dynamic_shared_bytes")
    _attempt(family, variant, "deliberately_racy", lambda: bool(variant.deliberately_racy))


def _check_arrays(family: Family, variant: Variant) -> None:
    """Arrays for every Input and Output, and each Scalar's source on the shapes."""
    problem, where = family.problem, family.source
    shape = _attempt(family, variant, "sanitize_size() or parse_shape()",
                     lambda: problem.parse_shape(family.sanitize_size(variant)))
    arrays = _attempt(family, variant, "arrays()", lambda: problem.arrays(shape))
    missing = [a.name for a in problem.arguments if not isinstance(a, Scalar) and a.name not in arrays]
    if missing:
        raise PluginProblem(f"{where}: {family.name}'s arrays() gives no dimensions for {', '.join(missing)}")
    for scalar in (a for a in problem.arguments if isinstance(a, Scalar)):
        if not hasattr(shape, scalar.attribute):
            raise PluginProblem(f"{where}: scalar {scalar.name} of {family.name} takes the shape's "
                                f"{scalar.attribute!r}, which its shapes do not have (set Scalar(..., source=...) or "
                                f"override scalars())")


def _check_reference(family: Family, variant: Variant, shape: Any) -> None:
    """A reference of the output region's shape, from inputs of the variant's element type."""
    problem = family.problem
    if variant.dtype not in DTYPE_CTYPE:
        raise PluginProblem(f"{family.source}: {variant.name}: element type (dtype) {variant.dtype!r} is not one of "
                            f"{', '.join(DTYPE_CTYPE)}; the parameter named dtype is the arrays' element type")

    def expected() -> np.ndarray:
        inputs = {name: array.astype(np.float64) for name, array in problem.random_inputs(variant.dtype, shape, 1).items()}
        return np.asarray(problem.reference(inputs, shape))

    result = _attempt(family, variant, "reference()", expected)
    region = tuple(s.stop - s.start for s in problem.output_region(shape))
    if result.shape != region:
        raise PluginProblem(f"{family.source}: {family.name}'s reference() returns an array of shape {result.shape} at "
                            f"{shape}, but the output region of {problem.output.name} is {region}; return the "
                            f"expected values of exactly that region")


def is_plugin_code(filename: str) -> bool:
    """Whether a source file is a family's own code: a module in a family-path folder (a helper
    beside a family too) or an installed plugin family's module."""
    path = Path(filename).resolve()
    if any(folder.resolve() in path.parents for folder in family_paths()):
        return True
    return any(path == Path(inspect.getfile(type(family))).resolve() for family in registry().families.values()
               if not type(family).__module__.startswith(f"{__package__}."))


def one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return text[0] if text else type(error).__name__


# ---- finding families ------------------------------------------------------------------------------

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


def element_type(name: str) -> str:
    """The element type of the variant a row or database entry names; '' when its family is not
    loaded here (a plugin's row read without its --family-path)."""
    try:
        return variant_from_name(name).dtype
    except UsageError:
        return ""
