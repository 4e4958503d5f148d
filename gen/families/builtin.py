"""The eight families built into tilegen. Each is one module here plus one template in templates/
(fp8gemm shares wgmma's), written with the same public API (gen.api) a plugin uses; families that
compute the same thing share a Problem (gemm, matrix)."""

from __future__ import annotations

from .copy import CopyFamily
from .family import Family
from .fp8gemm import Fp8GemmFamily
from .gemv import GemvFamily
from .hgemm import HgemmFamily
from .matmul import MatmulFamily
from .sgemm import SgemmFamily
from .transpose import TransposeFamily
from .wgmma import WgmmaFamily

BUILTIN_FAMILIES: tuple[type[Family], ...] = (MatmulFamily, SgemmFamily, HgemmFamily, WgmmaFamily, Fp8GemmFamily,
                                                   GemvFamily, TransposeFamily, CopyFamily)
