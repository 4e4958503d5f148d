"""What a family module imports: the whole public family API in one place.

    from gen.api import Family, Problem, Variant, Input, Output, Scalar, Launch, choice, integer, require

See README.md, "Bring your own kernel", and docs/examples/reduction/ for a complete plugin.
"""

from .core.errors import InvalidVariant
from .families.family import Family, Launch, blocks, check_shared_bytes, check_threads
from .families.problem import (CEILINGS, COPY_BANDWIDTH, GEMM_BF16, GEMM_F16, GEMM_F32, GEMM_F64, GEMM_FP8,
                               UNIT_ROUNDOFF, Ceiling, Dims, Input, Output, Problem, Scalar, element_bytes, parse_dims,
                               sum_tolerance)
from .core.limits import MAX_THREADS_PER_BLOCK, WARP_SIZE
from .families.variant import Variant, choice, integer, require

__all__ = ["CEILINGS", "COPY_BANDWIDTH", "Ceiling", "Dims", "Family", "GEMM_BF16", "GEMM_F16", "GEMM_F32",
           "GEMM_F64", "GEMM_FP8", "Input", "InvalidVariant", "Launch", "MAX_THREADS_PER_BLOCK", "Output", "Problem", "Scalar", "UNIT_ROUNDOFF",
           "Variant", "WARP_SIZE", "blocks", "check_shared_bytes", "check_threads", "choice", "element_bytes",
           "integer", "parse_dims", "require", "sum_tolerance"]
