"""The kernel families tilegen knows. Adding a family = one module here + one template."""

from __future__ import annotations

from ..errors import UsageError
from ..family import Family
from ..variant import Variant
from .copy import CopyFamily, CopyVariant
from .matmul import MatmulFamily, MatmulShape, MatmulVariant
from .sgemm import SgemmFamily, SgemmVariant
from .transpose import TransposeFamily, TransposeShape, TransposeVariant

FAMILIES: dict[str, Family] = {f.name: f for f in (MatmulFamily(), SgemmFamily(), TransposeFamily(), CopyFamily())}


def get_family(name: str) -> Family:
    """The family called `name`; UsageError lists the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise UsageError(f"unknown family {name!r}; families: {', '.join(FAMILIES)}") from None


def variant_from_name(name: str) -> Variant:
    """Any family's variant from its name (the family is the name's first token)."""
    return get_family(name.split("_", 1)[0]).variant_type.from_name(name)


__all__ = ["FAMILIES", "CopyFamily", "CopyVariant", "get_family", "variant_from_name", "MatmulFamily", "MatmulShape", "MatmulVariant",
           "SgemmFamily", "SgemmVariant", "TransposeFamily", "TransposeShape", "TransposeVariant"]
