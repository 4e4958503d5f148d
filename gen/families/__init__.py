"""The kernel families: the family API (family, variant, space), the six built in here
(builtin), and the registry that finds them and users' plugins (registry).

This package's face: the registry's lookups."""

from __future__ import annotations

from .builtin import BUILTIN_FAMILIES
from .copy import CopyFamily, CopyVariant
from .gemm import GEMM, MatmulShape
from .matmul import MatmulFamily, MatmulVariant
from .registry import (all_families, builtin_families, element_type, gemm_families, get_family, registry,
                       variant_from_name)
from .sgemm import SgemmFamily, SgemmVariant
from .transpose import TransposeFamily, TransposeVariant

__all__ = ["BUILTIN_FAMILIES", "CopyFamily", "CopyVariant", "GEMM", "MatmulShape", "MatmulFamily", "MatmulVariant",
           "SgemmFamily", "SgemmVariant", "TransposeFamily", "TransposeVariant", "all_families", "builtin_families",
           "element_type", "gemm_families", "get_family", "registry", "variant_from_name"]
