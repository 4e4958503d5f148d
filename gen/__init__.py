"""tilegen: Jinja templates -> CUDA C kernel variants, compiled, checked, timed and tuned.

`import gen` needs no GPU and no pycuda; `sweep`, `tune`, `replay`, `tuned`, `kernel`, `matmul` and `tune_kernel` come
from their modules when first used (gen.__getattr__). Families from outside tilegen: `load_families(folder)` (or $TILEGEN_FAMILY_PATH).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .core.errors import TilegenError, UsageError
from .core.version import __version__

__all__ = ["TilegenError", "UsageError", "__version__", "kernel", "load_families", "matmul", "replay", "sweep",
           "tune", "tune_kernel", "tuned"]


# The API's functions, each imported from its module when first used, so that `import gen` stays light.
_LAZY = {"sweep": "commands.python_api", "tune": "commands.python_api", "replay": "commands.python_api", "tuned": "call.lookup",
         "kernel": "call.kernels", "matmul": "call.matmul", "tune_kernel": "kernel_tuner.tune"}


def __getattr__(name: str) -> Any:
    """gen.sweep, gen.tune and gen.replay (gen.commands.python_api); gen.tuned, the best known variant for a shape, answered
    from the tuning database without a GPU (gen.call.lookup); gen.kernel and gen.matmul, tuned
    variants ready to call on the caller's arrays (gen.call.kernels); gen.tune_kernel, Kernel Tuner's
    call over a family made on the fly (gen.kernel_tuner.tune)."""
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'gen' has no attribute {name!r}")


def load_families(folder: str | Path) -> None:
    """Use the family modules (and templates) in `folder`, here and in every worker started later."""
    from .families.registry import add_family_path

    add_family_path(folder, "load_families' folder")
