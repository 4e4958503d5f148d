"""tilegen: Jinja templates -> CUDA C kernel variants, compiled, checked, timed and tuned.

`import gen` needs no GPU and no pycuda; `tuned`, `kernel`, `matmul` and `tune_kernel` import what they need when
called. Families from outside tilegen: `load_families(folder)` (or $TILEGEN_FAMILY_PATH).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .core.version import __version__


def tuned(family: str, *dims: int | str, dtype: str | None = None, **options: Any) -> Any:
    """The best known variant of `family` for this shape on the current GPU (see gen.search.lookup)."""
    from .search.lookup import tuned as lookup

    return lookup(family, *dims, dtype=dtype, **options)


def kernel(family: str, *dims: int | str, dtype: str | None = None) -> Any:
    """The tuned variant of `family` for this shape, ready to call on device arrays (see gen.kernels)."""
    from .kernels import kernel as prepared

    return prepared(family, *dims, dtype=dtype)


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """C = A·B on pycuda GPUArrays (views too) with the tuned variant for this GPU (see gen.kernels)."""
    from .kernels import matmul as run

    return run(a, b, out)


def tune_kernel(kernel_name: str, kernel_source: Any, problem_size: Any, arguments: list, tune_params: Any,
                *args: Any, **options: Any) -> tuple[list[dict], dict]:
    """Kernel Tuner's tune_kernel, over a tilegen family made on the fly (see gen.kernel_tuner)."""
    from .kernel_tuner import tune_kernel as tune

    return tune(kernel_name, kernel_source, problem_size, arguments, tune_params, *args, **options)


def load_families(folder: str | Path) -> None:
    """Use the family modules (and templates) in `folder`, here and in every worker started later."""
    from .families.registry import add_family_path

    add_family_path(folder)
