"""Variant -> CUDA C source, through one cached Jinja environment per template search path.

tilegen's templates live in `templates/` at the top of the source tree (a wheel ships them inside
the package as `gen/templates/`); a plugin's template sits beside its module and may import
tilegen's `macros.cu.j2`. A template error names the template file and line.

Every template gets: `v` (the variant), `name` (its kernel symbol), `ctype`, `params`, `signature()`
(the kernel's parameter list, made from the family's arguments) and what the banner needs.
"""

from __future__ import annotations

import functools
import hashlib
import traceback
from pathlib import Path

import jinja2
import jinja2.meta

from . import __version__
from .errors import TemplateProblem
from .families import get_family
from .family import Family, signature
from .limits import DTYPE_CTYPE
from .plugins import family_path_of
from .variant import Variant


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


def render(variant: Variant) -> str:
    """The complete .cu source of a validated variant (InvalidVariant if it breaks a rule)."""
    variant.check()
    family = get_family(variant.family)
    try:
        template = environment(family.template_dirs).get_template(family.template)
        return template.render(
            v=variant,
            name=variant.name,
            ctype=DTYPE_CTYPE[variant.dtype],
            params=variant.params(),
            signature=lambda indent="    ": signature(family.problem.arguments, variant.dtype, indent),
            template=family.template,
            template_hash=template_hash(family),
            command=variant.render_command(family_path_of(family)),
            version=__version__,
        )
    except jinja2.TemplateSyntaxError as error:
        raise TemplateProblem(f"{_where(error.filename or error.name)}:{error.lineno}: {error.message}") from error
    except jinja2.TemplateNotFound as error:
        folders = ", ".join(str(d) for d in family.template_dirs)
        raise TemplateProblem(f"template {error.name!r} of {family.name} is missing from {folders}; restore it") \
            from error
    except jinja2.TemplateError as error:
        raise TemplateProblem(f"{_template_location(error)}: {error}") from error


def template_hash(family: Family) -> str:
    """Short sha256 over a family's template and every template it imports or includes, recursively."""
    return _template_hash(family.template_dirs, family.template)


@functools.cache
def _template_hash(template_dirs: tuple[Path, ...], template: str) -> str:
    digest = hashlib.sha256()
    for name, path in _template_closure(template_dirs, template):
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _template_closure(template_dirs: tuple[Path, ...], template: str) -> list[tuple[str, Path]]:
    loader = environment(template_dirs).loader
    seen: dict[str, Path] = {}
    pending = [template]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        try:
            source, filename, _ = loader.get_source(environment(template_dirs), name)
        except jinja2.TemplateNotFound:
            folders = ", ".join(str(d) for d in template_dirs)
            raise TemplateProblem(f"template {name!r} is missing from {folders}; restore it") from None
        seen[name] = Path(filename)
        parsed = environment(template_dirs).parse(source, name=name)
        pending.extend(n for n in jinja2.meta.find_referenced_templates(parsed) if n)
    return sorted(seen.items())


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
    from .paths import builtin_templates_dir

    return path.name if path.parent == builtin_templates_dir() else str(path)
