"""The kernel families tilegen knows: the four built in here, and plugins (see gen.plugins).

Each built-in is one module here plus one template in templates/, written with the same public
API (gen.api) a plugin uses; families that compute the same thing share a Problem (gemm, matrix).
"""

from __future__ import annotations

from ..errors import UsageError
from ..family import Family
from ..variant import Variant
from .copy import CopyFamily, CopyVariant
from .gemm import GEMM, MatmulShape
from .matmul import MatmulFamily, MatmulVariant
from .sgemm import SgemmFamily, SgemmVariant
from .transpose import TransposeFamily, TransposeVariant

BUILTIN_FAMILIES: tuple[type[Family], ...] = (MatmulFamily, SgemmFamily, TransposeFamily, CopyFamily)


def all_families() -> dict[str, Family]:
    """Every usable family, built-in and plugin, by name."""
    from ..plugins import registry

    return registry().families


def builtin_families() -> dict[str, Family]:
    return {name: family for name, family in all_families().items() if type(family) in BUILTIN_FAMILIES}


def get_family(name: str) -> Family:
    """The family called `name`; UsageError lists the known ones and any plugin that failed to load."""
    from ..plugins import registry

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


__all__ = ["BUILTIN_FAMILIES", "CopyFamily", "CopyVariant", "GEMM", "MatmulFamily", "MatmulShape", "MatmulVariant",
           "SgemmFamily", "SgemmVariant", "TransposeFamily", "TransposeVariant", "all_families", "builtin_families",
           "element_type", "get_family", "variant_from_name"]
