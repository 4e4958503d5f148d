"""Variant -> CUDA C source, through one cached Jinja environment.

Templates live in `templates/` at the top of the source tree; a wheel ships them inside the
package as `gen/templates/`. A template error names the template file and line.
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
from .limits import DTYPE_CTYPE
from .variant import Variant

_PACKAGE_DIR = Path(__file__).resolve().parent


def templates_dir() -> Path:
    """Where the templates are: inside the installed package, else beside it in a source checkout."""
    for candidate in (_PACKAGE_DIR / "templates", _PACKAGE_DIR.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise TemplateProblem(f"no templates/ folder beside {_PACKAGE_DIR}; reinstall tilegen")


@functools.cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
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
        template = environment().get_template(family.template)
        return template.render(
            v=variant,
            name=variant.name,
            ctype=DTYPE_CTYPE[variant.dtype],
            params=variant.params(),
            template=family.template,
            template_hash=template_hash(family.template),
            command=variant.render_command(),
            version=__version__,
        )
    except jinja2.TemplateSyntaxError as error:
        raise TemplateProblem(f"{error.name or error.filename}:{error.lineno}: {error.message}") from error
    except jinja2.TemplateError as error:
        raise TemplateProblem(f"{_template_location(error)}: {error}") from error


@functools.cache
def template_hash(template: str) -> str:
    """Short sha256 over a template and every template it imports or includes, recursively."""
    digest = hashlib.sha256()
    for name in _template_closure(template):
        digest.update(name.encode() + b"\0" + (templates_dir() / name).read_bytes())
    return digest.hexdigest()[:12]


def _template_closure(template: str) -> list[str]:
    seen: list[str] = []
    pending = [template]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.append(name)
        source = (templates_dir() / name).read_text()
        pending.extend(n for n in jinja2.meta.find_referenced_templates(environment().parse(source, name=name)) if n)
    return sorted(seen)


def _template_location(error: Exception) -> str:
    """'matmul.cu.j2:42' from the traceback frames Jinja maps back onto template lines."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(".j2")]
    if not frames:
        return "template"
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}"
