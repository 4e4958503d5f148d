"""tilegen: Jinja templates -> CUDA C kernel variants, compiled, checked, timed and tuned.

`import gen` needs no GPU and no pycuda; `tuned` and `matmul` import what they need when called.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def tuned(family: str, *dims: int, dtype: str = "f32", **options: Any) -> Any:
    """The best known variant of `family` for this shape on the current GPU (see gen.lookup)."""
    from .lookup import tuned as lookup

    return lookup(family, *dims, dtype=dtype, **options)


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """C = A·B on pycuda GPUArrays with the tuned variant for this GPU (see gen.kernels)."""
    from .kernels import matmul as run

    return run(a, b, out)
