"""Variant -> CUDA C source, through one cached Jinja environment per template search path.

tilegen's templates live in `templates/` at the top of the source tree (a wheel ships them inside
the package as `gen/templates/`); a plugin's template sits beside its module and may import
tilegen's `macros.cu.j2`. A template error names the template file and line.

Every template gets: `v` (the variant), `name` (its kernel symbol), `ctype`, `params`, `signature()`
(the kernel's parameter list, made from the family's arguments) and what the banner needs.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
import sys
import threading
import traceback
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import jinja2
import jinja2.meta

from ..core.version import __version__
from ..core.errors import TemplateProblem, UsageError
from .. import families
from ..families import get_family
from ..families.family import Family
from ..families.problem import signature
from ..core import limits
from ..core.limits import INPUT_CTYPE
from ..core.paths import builtin_templates_dir
from ..families.registry import family_path_of
from ..families.variant import Variant


@functools.cache
def environment(template_dirs: tuple[Path, ...]) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in template_dirs]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


# What every template gets (see `context`); a name outside these is a mistake found before rendering.
CONTEXT_NAMES = ("v", "name", "ctype", "params", "signature", "template", "template_hash", "command", "version")
# One thread at a time looks a template over and compiles it: a compile pool's threads, all starting on the same
# template, would otherwise each do it at once under the GIL (16 threads: 3.8 s before the first source, one: 0.2 s).
_LOADING = threading.Lock()


def render(variant: Variant) -> str:
    """The complete .cu source of a validated variant (InvalidVariant if it breaks a rule)."""
    require_variant(variant)
    variant.check()
    family = get_family(variant.family)
    try:
        with _LOADING:
            problems = template_problems(family)
            if problems:
                raise TemplateProblem(problems[0])
            template = environment(family.template_dirs).get_template(family.template)
        return template.render(**context(family, variant))
    except jinja2.TemplateSyntaxError as error:
        raise TemplateProblem(f"{_where(error.filename or error.name)}:{error.lineno}: {error.message}") from error
    except jinja2.TemplateNotFound as error:
        folders = ", ".join(str(d) for d in family.template_dirs)
        raise TemplateProblem(f"template {error.name!r} of {family.name} is missing from {folders}; restore it") \
            from error
    except jinja2.UndefinedError as error:
        raise TemplateProblem(f"{_template_location(error)}: {error}{_undefined_hint(str(error), variant)}") \
            from error
    except jinja2.TemplateError as error:
        raise TemplateProblem(f"{_template_location(error)}: {error}") from error


def require_variant(variant: object) -> None:
    if not isinstance(variant, Variant):
        raise UsageError(f"a variant is needed, like gen.variant('matmul', tile=16); got {variant!r}")


def context(family: Family, variant: Variant) -> dict[str, Any]:
    """The names a template is rendered with (CONTEXT_NAMES)."""
    values = dict(
        v=variant,
        name=variant.name,
        ctype=INPUT_CTYPE[variant.dtype],
        params=variant.params(),
        signature=lambda indent="    ": signature(family.problem_of(variant).arguments, variant.dtype, indent,
                                                 variant.output_dtype),
        template=family.template,
        template_hash=template_hash(family),
        command=variant.render_command(family_path_of(family)),
        version=__version__,
    )
    assert tuple(values) == CONTEXT_NAMES
    return values


def template_problems(family: Family) -> list[str]:
    """Mistakes in a family's own template, and in each template it includes or imports, found
    without rendering them, in every branch: a syntax error, a name the template does not get, and
    `v.NAME` where the variant has no NAME. Each is one line with the template file, the line and the fix.
    Looked for again only when one of the templates changed (`_while_unchanged`)."""
    dirs, template = family.template_dirs, family.template

    def look() -> tuple[list[Path], tuple[str, ...]]:
        try:
            closure = _template_closure(dirs, template)
        except TemplateProblem as problem:
            return [], (str(problem),)  # not kept: the missing template may be put back
        given = _names_set(dirs, template)  # an included template sees them too
        return [path for _, path in closure], tuple(
            problem for name, _ in closure for problem in _template_problems(dirs, name, family.variant_type, given))

    return list(_while_unchanged(("problems", dirs, template, family.variant_type), look))


def _names_set(template_dirs: tuple[Path, ...], template: str) -> tuple[str, ...]:
    """The names a template sets at its top level ({% set x = ... %}): the templates it includes get them."""
    env = environment(template_dirs)
    parsed = env.parse(env.loader.get_source(env, template)[0])
    return tuple(sorted(target.name for node in parsed.body if isinstance(node, jinja2.nodes.Assign)
                        for target in node.find_all(jinja2.nodes.Name)))


def _template_problems(template_dirs: tuple[Path, ...], template: str, variant_type: type[Variant],
                       given: tuple[str, ...] = ()) -> tuple[str, ...]:
    env = environment(template_dirs)
    source, filename, _ = env.loader.get_source(env, template)
    parsed = env.parse(source, name=template, filename=filename)  # _template_closure parsed it already
    where = _where(filename)
    undeclared = jinja2.meta.find_undeclared_variables(parsed) - set(CONTEXT_NAMES) - set(given)
    problems = [f"{where}:{node.lineno}: {{{{ {node.name} }}}} is not defined{_undefined_hint(node.name, variant_type)}"
                for node in _first_uses(parsed, undeclared)]
    for node in parsed.find_all(jinja2.nodes.Getattr):
        if isinstance(node.node, jinja2.nodes.Name) and node.node.name == "v" and not _has(variant_type, node.attr):
            problems.append(f"{where}:{node.lineno}: v.{node.attr}: {variant_type.__name__} has no attribute "
                            f"{node.attr!r}{_closest(node.attr, variant_type)}")
    return tuple(problems)


def _first_uses(parsed: jinja2.nodes.Template, names: set[str]) -> list[jinja2.nodes.Name]:
    first: dict[str, jinja2.nodes.Name] = {}
    for node in parsed.find_all(jinja2.nodes.Name):
        if node.name in names and node.ctx == "load":
            first.setdefault(node.name, node)
    return sorted(first.values(), key=lambda node: node.lineno)


def _has(variant_type: type[Variant], attribute: str) -> bool:
    return attribute in {p.name for p in variant_type.parameters()} or hasattr(variant_type, attribute)


def _attributes(variant_type: type[Variant]) -> list[str]:
    """What `v.` can name: the parameters, then the properties and other public attributes."""
    parameters = [p.name for p in variant_type.parameters()]
    return parameters + [name for name in dir(variant_type) if not name.startswith("_") and name not in parameters]


def _closest(attribute: str, variant_type: type[Variant]) -> str:
    matches = difflib.get_close_matches(attribute, _attributes(variant_type), n=1, cutoff=0.5)
    return f"; did you mean v.{matches[0]}?" if matches else f"; its parameters are: " \
        f"{', '.join(p.name for p in variant_type.parameters())}"


def _undefined_hint(message: str, variant: Variant | type[Variant]) -> str:
    """For an undefined name that the variant has: how to write it (the variant is `v`)."""
    found = re.search(r"'?(\w+)'? is undefined", message) or re.fullmatch(r"(\w+)", message)
    variant_type = variant if isinstance(variant, type) else type(variant)
    if found and _has(variant_type, found.group(1)):
        return f"; the variant is `v`: write {{{{ v.{found.group(1)} }}}}"
    if found:
        return f"; a template gets {', '.join(CONTEXT_NAMES)}"
    return ""


def template_hash(family: Family) -> str:
    """Short sha256 over a family's template and every template it imports or includes, recursively."""
    dirs, template = family.template_dirs, family.template

    def digest() -> tuple[list[Path], str]:
        closure = _template_closure(dirs, template)
        hashed = hashlib.sha256()
        for name, path in closure:
            hashed.update(name.encode() + b"\0" + path.read_bytes())
        return [path for _, path in closure], hashed.hexdigest()[:12]

    return _while_unchanged(("hash", dirs, template), digest)


def rendering_hash(family: Family) -> str:
    """What a family's rendered sources depend on, but for the variant, in one hash: its templates
    (`template_hash`), where they and the family were found, tilegen's version, and the code that makes
    the names a template gets (the Python files beside the family's modules, of its variant type and
    problem too, and this module's). Of two renders of one variant, the same hash means the same source:
    the compile cache finds a variant's cubin by it without rendering (compiler.py)."""
    where = (family.name, family.template, *map(str, family.template_dirs), str(family_path_of(family)), __version__)
    return hashlib.sha256("\0".join([*where, template_hash(family), _code_hash(type(family), family.variant_type,
                                                                           type(family.problem))]).encode()
                          ).hexdigest()[:32]


@functools.cache
def _code_hash(*types: type) -> str:
    """The Python files of the folders whose modules define `types` and tilegen's families, with this
    module and the C types': hashed once a process, as the code it runs was read once. Code from no
    file (a notebook's) cannot be hashed: its hash is this process's own, found by no other."""
    if any(getattr(sys.modules.get(kind.__module__), "__file__", None) is None for kind in types):
        return uuid.uuid4().hex
    folders = {_file_of(sys.modules[kind.__module__]).parent for kind in types} | {_file_of(families).parent}
    files = sorted({*(path for folder in folders for path in folder.glob("*.py")), _file_of(sys.modules[__name__]),
                    _file_of(limits)})
    hashed = hashlib.sha256()
    for path in files:
        hashed.update(str(path).encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()


def _file_of(module: ModuleType) -> Path:
    return Path(str(module.__file__))


# What is worked out from a family's templates (their mistakes, their hash), by what it was worked out
# for: the files it came from, their modification times and sizes, and the value. Parsing the
# templates was 97% of a render; a template edited in a long-lived process is read again.
_WORKED_OUT: dict[tuple[Any, ...], tuple[tuple[Any, ...], list[Path], Any]] = {}


def _while_unchanged(key: tuple[Any, ...], work: Callable[[], tuple[list[Path], Any]]) -> Any:
    """`work()`'s value (it also returns the files the value comes from), worked out again only once
    one of those files has changed; a value from no files (an error) is worked out every time."""
    known = _WORKED_OUT.get(key)
    if known is not None and known[0] == _stamps(known[1]):
        return known[2]
    paths, value = work()
    if paths:
        _WORKED_OUT[key] = (_stamps(paths), paths, value)
    return value


def _stamps(paths: list[Path]) -> tuple[Any, ...]:
    stamps = []
    for path in paths:
        try:
            found = path.stat()
            stamps.append((found.st_mtime_ns, found.st_size))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def _template_closure(template_dirs: tuple[Path, ...], template: str) -> list[tuple[str, Path]]:
    loader = environment(template_dirs).loader
    seen: dict[str, Path] = {}
    pending: list[tuple[str, str]] = [(template, "")]  # a template's name, and where it is named ('' for the family's)
    while pending:
        name, named_at = pending.pop()
        if name in seen:
            continue
        try:
            source, filename, _ = loader.get_source(environment(template_dirs), name)
        except jinja2.TemplateNotFound:
            folders = ", ".join(str(d) for d in template_dirs)
            if named_at:
                raise TemplateProblem(f"{named_at}: template {name!r} is missing from {folders}; fix the name there, "
                                      f"or restore the file") from None
            raise TemplateProblem(f"template {name!r} is missing from {folders}; restore it") from None
        seen[name] = Path(filename)
        try:
            parsed = environment(template_dirs).parse(source, name=name, filename=filename)
        except jinja2.TemplateSyntaxError as error:
            raise TemplateProblem(f"{_where(filename)}:{error.lineno}: {error.message}; fix the template") from None
        pending.extend((named, f"{_where(filename)}:{line}") for named, line in _references(parsed))
    return sorted(seen.items())


REFERENCES = (jinja2.nodes.Extends, jinja2.nodes.Include, jinja2.nodes.Import, jinja2.nodes.FromImport)


def _references(parsed: jinja2.nodes.Template) -> list[tuple[str, int]]:
    """The templates a template includes, imports or extends by a name written in it (or a list of
    names), each with its line."""
    found = []
    for node in parsed.find_all(REFERENCES):
        names = [node.template] if isinstance(node.template, jinja2.nodes.Const) else getattr(node.template, "items", [])
        found += [(name.value, node.lineno) for name in names
                  if isinstance(name, jinja2.nodes.Const) and isinstance(name.value, str)]
    return found


def _template_location(error: Exception) -> str:
    """'matmul.cu.j2:42' from the traceback frames Jinja maps back onto template lines."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(".j2")]
    if not frames:
        return "template"
    return f"{_where(frames[-1].filename)}:{frames[-1].lineno}"


def _where(filename: str | None) -> str:
    """A built-in template by its name; a plugin's by its path, so the user finds the file."""
    if not filename:
        return "template"
    path = Path(filename)
    return path.name if path.parent == builtin_templates_dir() else str(path)
