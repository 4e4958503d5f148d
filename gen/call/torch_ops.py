"""tilegen's tuned kernels as PyTorch custom operators (torch.library), with their shape functions,
so that a model calling them compiles with `torch.compile(fullgraph=True)` and no graph break, and
runs the tuned variants (captured in CUDA graphs too). Importing this module registers them and
imports torch; `import gen` never does.

    import gen.torch_ops
    c = torch.ops.tilegen.matmul(a, b)                        # gen.matmul: C = A·B, a new tensor
    h = torch.ops.tilegen.matmul(x, w, bias, "gelu-tanh")     # with a fused bias and GELU (wgmma)
    torch.ops.tilegen.kernel("softmax", "", [x], y)           # any family's kernel: y written in place
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from .arrays import torch_element_type
from ..core.errors import UsageError
from .kernels import Kernel, kernel as tuned_kernel
from .matmul import matmul as tuned_matmul, output_dtype


@torch.library.custom_op("tilegen::matmul", mutates_args=())
def matmul(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
           residual: Optional[torch.Tensor] = None, alpha: Optional[float] = None,
           beta: Optional[float] = None) -> torch.Tensor:
    """C = act(alpha·A·B + bias) + beta·residual by the tuned GEMM (gen.matmul: each epilogue part
    optional), on the current stream, as a new tensor."""
    return tuned_matmul(a, b, bias=bias, activation=activation, residual=residual, alpha=alpha, beta=beta)


@matmul.register_fake
def _matmul_shape(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
                  activation: Optional[str] = None, residual: Optional[torch.Tensor] = None,
                  alpha: Optional[float] = None, beta: Optional[float] = None) -> torch.Tensor:
    torch._check(a.dim() == 2 and b.dim() == 2 and a.dtype == b.dtype,
                 lambda: f"tilegen::matmul multiplies two matrices of one type; got {a.dtype} {tuple(a.shape)} and "
                         f"{b.dtype} {tuple(b.shape)}")
    torch._check(a.shape[1] == b.shape[0], lambda: f"tilegen::matmul: {tuple(a.shape)} by {tuple(b.shape)}: the "
                                                   f"inner dimensions differ")
    out = a.new_empty((a.shape[0], b.shape[1]), dtype=_torch_dtype(_output_element(a.dtype)))
    torch._check(bias is None or tuple(bias.shape) == (b.shape[1],),
                 lambda: f"tilegen::matmul: bias must be a vector of N = {b.shape[1]}, got {tuple(bias.shape)}")
    torch._check(residual is None or residual.shape == out.shape,
                 lambda: f"tilegen::matmul: residual must be {tuple(out.shape)} like C, got {tuple(residual.shape)}")
    return out


@torch.library.custom_op("tilegen::kernel", mutates_args=("out",))
def kernel(family: str, size: str, inputs: list[torch.Tensor], out: torch.Tensor) -> None:
    """Any family's tuned kernel (gen.kernel) on `inputs` (its arrays but the output, in order),
    writing `out`: at `size` ('4096x8192'), or, given '', at the shape the arrays make."""
    call, place = _kernel(family, size)
    arrays = list(inputs)
    arrays.insert(place, out)
    call(*arrays)


@kernel.register_fake
def _kernel_shape(family: str, size: str, inputs: list[torch.Tensor], out: torch.Tensor) -> None:
    return None  # it writes `out`, which the caller made: no new tensor to describe


@functools.cache
def _kernel(family: str, size: str) -> tuple[Kernel, int]:
    """The family's kernel at `size` (or choosing by shape), made once, and where its output goes."""
    call = tuned_kernel(family, size) if size else tuned_kernel(family)
    return call, call.arrays.index(call.output)


def _output_element(dtype: torch.dtype):  # noqa: ANN202 - a NumPy dtype
    element = torch_element_type(dtype)
    if element is None:
        raise UsageError(f"tilegen::matmul does not multiply {dtype} tensors")
    return output_dtype(element)


def _torch_dtype(element) -> torch.dtype:  # noqa: ANN001 - a NumPy dtype
    return getattr(torch, element.name)
