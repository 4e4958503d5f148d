"""Loading families: the built-ins, installed packages' entry points (group `tilegen.families`), and
the modules of the family-path folders, each folder a package of its own. Each family is checked
(plugin_checks) as it is registered; one that fails is left out with its one-line problem."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Iterable, Iterator

from ..core.paths import builtin_templates_dir, path_problem
from ..core.signals import StopSignal, stop_handlers_installed
from .builtin import BUILTIN_FAMILIES
from .family import Family
from .plugin_checks import PluginProblem, check_family, one_line

ENTRY_POINT_GROUP = "tilegen.families"


@dataclass
class Registry:
    families: dict[str, Family] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # plugins left out, one line each
    conflicts: dict[str, str] = field(default_factory=dict)  # family name -> why it is ambiguous


def load_registry(folders: Iterable[Path], path_variable: str) -> Registry:
    """Every family: the built-ins, then entry-point plugins, then the modules of `folders` (given
    by `path_variable`, named in problems)."""
    found = Registry()
    for cls in BUILTIN_FAMILIES:  # their contract is checked by tilegen's tests, not at every start
        _register(found, cls, inspect.getfile(cls), (builtin_templates_dir(),), contract=False)
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
    for folder in folders:
        if problem := path_problem(folder):  # before is_dir(), which raises on such a path
            found.problems.append(f"{path_variable} {problem}; fix the path")
            continue
        if not folder.is_dir():
            found.problems.append(f"{path_variable} names {folder}, which is not a folder; fix the path")
            continue
        try:
            package = _folder_package(folder)
        except OSError as error:  # the folder itself cannot be read
            found.problems.append(f"{path_variable}: cannot read {folder} ({error.strerror}); fix its permissions")
            continue
        except Exception as error:
            found.problems.append(f"{folder / '__init__.py'}: cannot be imported ({one_line(error)}); fix it")
            continue
        for path in sorted(folder.glob("*.py")):
            if not path.name.startswith("_") and _defines_family(found, path):
                _load_module_file(found, package, path)
    return found


def _defines_family(found: Registry, path: Path) -> bool:
    """Whether a family-path module is one to import: its top level defines a class whose base is
    named Family or ends in Family (`class Reduce(Family)`, `class Reduce(api.Family)`), read without
    running it. A script or a helper kept beside a family is never run by tilegen; a module Python
    cannot parse is imported, so that its error is said."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError:
        return True
    except (OSError, ValueError) as error:
        found.problems.append(f"{path}: cannot be read ({one_line(error)}); fix it, or move it out of the family path")
        return False
    bases = (base for node in tree.body if isinstance(node, ast.ClassDef) for base in node.bases)
    return any((base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")).endswith("Family")
               for base in bases)


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
    command's own (`tilegen render` prints CUDA source there), and a sys.exit() in it, or a
    KeyboardInterrupt no stop signal raised, is its failure, not the end of the command that loads
    it (any command: every family is loaded)."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except SystemExit as stop:
        raise PluginExited(f"it calls sys.exit({stop.code!r})") from None
    except KeyboardInterrupt as stop:
        if isinstance(stop, StopSignal) or not stop_handlers_installed():  # Ctrl-C, SIGTERM: a stop
            raise
        raise PluginExited("it raises KeyboardInterrupt, though no one interrupted it") from None


def _families_in(module: ModuleType) -> list[type]:
    return [obj for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, Family) and obj.__module__ == module.__name__
            and not inspect.isabstract(obj)]


def _template_dirs(folder: Path) -> tuple[Path, ...]:
    """A plugin's own folder (and its templates/), then tilegen's, so it can import macros.cu.j2."""
    own = [folder, folder / "templates"]
    return tuple(f for f in own if f.is_dir()) + (builtin_templates_dir(),)


def _register(found: Registry, cls: type, source: str, template_dirs: Iterable[Path], contract: bool = True) -> None:
    try:
        if not (inspect.isclass(cls) and issubclass(cls, Family)):
            raise PluginProblem(f"{source}: {cls!r} is not a gen.api.Family subclass")
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(cls.__abstractmethods__))
            raise PluginProblem(f"{source}: family {cls.__name__} does not define {missing}")
        with _importing():  # the checks call the plugin's own code
            family = cls()
            family.source, family.template_dirs = source, tuple(template_dirs)
            check_family(family, contract)
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
