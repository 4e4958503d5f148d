"""gen.matmul: C = A·B on the caller's arrays by the tuned GEMM that multiplies their type (the
families that declare it, gen.families.gemm_families), at the least host cost per call: what a call
works out is kept per layout of the arrays, and a call on a layout seen before only launches.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from dataclasses import replace
from typing import Any

import numpy as np

from .arrays import LEGACY_STREAM, DeviceArray, describe, layout_key, output_maker, stream_handle, torch_element_type
from ..core.errors import InvalidVariant, TilegenError, UsageError
from ..families import MatmulShape, gemm_families, get_family
from ..families.epilogue import Epilogue, called_epilogue
from ..families.fp8gemm import FP8_OUTPUTS, SCALE_BLOCK
from ..families.problem import element_type_of, numpy_dtype
from ..families.variant import Variant
from .kernels import Kernel, Prepared, driver_api, kernel, remember

LAUNCHES_KEPT = 64  # gen.matmul's prepared launches, for all its shapes together
FP8_FAMILY = "fp8gemm"
FP8_RELATIVES = ({}, {"store": "direct"}, {"bn": 128}, {"bn": 128, "store": "direct"})  # fp8_variant's, in turn
# torch._scaled_mm's blockwise scales: a's outer-dim-major, b's the transpose of w's row-major blocks
BLOCK_LAYOUT = ": block scales go by columns (scale_a = s_a.t().contiguous().t(), scale_b = s_w.t() for w's " \
               "row-major N/128 x K/128 s_w)"


def matmul(a: Any, b: Any, out: Any = None, stream: Any = None, *, bias: Any = None, activation: str | None = None,
           residual: Any = None, alpha: float | None = None, beta: float | None = None, scale_a: Any = None,
           scale_b: Any = None, out_dtype: Any = None) -> Any:
    """C = A·B for row-major matrices on the GPU, sub-matrix views included (a family that
    declares the element type in `matmul_dtypes`: float32 sgemm, float64 matmul, and half precision
    where a family declares it). `out` defaults to a new array of the caller's kind. What a call
    works out (the arrays' layout, the family and variant, the launch's arguments) is kept per
    layout of PyTorch, CuPy and pycuda arrays, so a call on a layout seen before only launches.

    A fused epilogue (wgmma, float16 and bfloat16 on sm_90): C = act(alpha·A·B + bias) + beta·R, with
    `bias` a vector of N in A's type, `activation` one of relu, gelu-tanh, gelu-erf, silu, and
    `residual` R a matrix like `out` (its type and row stride).

    FP8 (float8_e4m3fn, float8_e5m2) as torch._scaled_mm takes it: a row-major, b K x N by columns,
    `scale_a` and `scale_b` float32 on the GPU (one number each, or one per row of a and per column
    of b, or its blockwise ones: M x ceil(K/128) and ceil(K/128) x ceil(N/128), both column-major),
    C in `out_dtype` (bfloat16 unless `out` says otherwise; float16, float32)."""
    inputs = _inputs_key(a, b, scale_a, scale_b, out_dtype)
    fused = () if bias is None and activation is None and residual is None and alpha is None and beta is None else \
        ((activation, alpha, beta), _extra_key(bias), _extra_key(residual))
    if out is None:
        new_output = _matmul_outputs.get(inputs)
        out = new_output() if new_output is not None else None
    prepared = _matmul_launches.get((*inputs, layout_key(out), *fused)) if out is not None else None
    if prepared is None:
        extras = dict(bias=bias, activation=activation, residual=residual, alpha=alpha, beta=beta) if fused else None
        out, prepared = _matmul_prepared(a, b, out, stream, extras, (scale_a, scale_b, out_dtype))
        key = (*inputs, layout_key(out), *fused)
        if None not in key:
            remember(_matmul_launches, key, prepared.by_address(), LAUNCHES_KEPT)
    prepared(stream)
    return out


def _matmul_prepared(a: Any, b: Any, out: Any, stream: Any, extras: dict[str, Any] | None,
                     fp8_arguments: tuple[Any, Any, Any]) -> tuple[Any, Prepared]:
    """gen.matmul's output and launch for these arrays, each array read and checked (once per layout)."""
    epilogue = _epilogue(extras) if extras is not None else None
    dlpack_stream = LEGACY_STREAM if stream is None else stream_handle(stream)
    arrays = {"a": describe(a, "a", dlpack_stream), "b": describe(b, "b", dlpack_stream)}
    (m, k), (k2, n) = (_matrix(x, label) for label, x in arrays.items())
    families = gemm_families(arrays["a"].dtype)
    if k != k2 or arrays["b"].dtype != arrays["a"].dtype:
        raise UsageError(f"gen.matmul multiplies (M x K)(K x N) matrices of one type; got {arrays['a'].dtype} "
                         f"{arrays['a'].shape} and {arrays['b'].dtype} {arrays['b'].shape}")
    dtype = element_type_of(arrays["a"].dtype)
    fp8, (scale_a, scale_b, wanted) = families[0].name == FP8_FAMILY, fp8_arguments
    if not fp8 and fp8_arguments != (None, None, None):
        raise UsageError(f"scale_a, scale_b and out_dtype go with FP8 matrices (float8_e4m3fn, float8_e5m2); these "
                         f"are {arrays['a'].dtype}: leave them out")
    if fp8 and epilogue is not None:
        raise UsageError("gen.matmul fuses no epilogue into an FP8 product yet: leave out bias, activation, residual, "
                         "alpha and beta, and apply them after it")
    out_dtype = _fp8_output(wanted, out, dlpack_stream) if fp8 else output_dtype(arrays["a"].dtype)
    if out is None:
        new_output = output_maker(arrays["a"], (m, n), out_dtype)
        out = new_output()
        if None not in (inputs := _inputs_key(a, b, scale_a, scale_b, wanted)):
            remember(_matmul_outputs, inputs, new_output, LAUNCHES_KEPT)
    arrays["out"] = describe(out, "out", dlpack_stream)
    if _matrix(arrays["out"], "out") != (m, n) or arrays["out"].dtype != out_dtype:
        raise UsageError(f"out must be a {out_dtype} {m} x {n} matrix, got {arrays['out'].dtype} {arrays['out'].shape}")
    if fp8:
        return out, _fp8_prepared(arrays, (m, n, k), dtype, _scales(scale_a, scale_b, (m, n, k), dlpack_stream), stream)
    lda, ldb, ldc = (_leading(x, label) for label, x in arrays.items())
    shape = MatmulShape(m, n, k, lda, ldb, ldc)
    native = driver_api()
    family = families[0] if len(families) == 1 else get_family(matmul_family(
        str(arrays["a"].dtype), str(shape), dtype, str(arrays["out"].dtype),
        tuple(arrays[label].pointer for label in ("a", "b", "out")),
        native.compute_capability(native.current_context(arrays["a"].device)[1]),
        "" if epilogue is None else epilogue.text))
    views = [_allocated(arrays[label], rows, lead) for label, rows, lead in (("a", m, lda), ("b", k, ldb),
                                                                            ("out", m, ldc))]
    if epilogue is None:
        return out, _gemm_kernel(family.name, str(shape), dtype, "").prepared(*views, stream=stream)
    more = _epilogue_arrays(extras, shape, arrays, dlpack_stream)
    if family.with_epilogue(family.default_variant().with_element_type(dtype), epilogue.text) is None:
        raise UsageError(f"{family.name} fuses no epilogue: bias, activation, residual, alpha and beta need the "
                         f"wgmma family (float16 or bfloat16 on an sm_90 GPU, rows of A and B on 16-byte "
                         f"boundaries); apply them after the product")
    fused = _gemm_kernel(family.name, str(shape), dtype, epilogue.text)
    scalars = {name: float(extras[name]) for name in ("alpha", "beta") if extras[name] is not None}
    if "beta" in scalars:
        scalars.setdefault("alpha", 1.0)
    return out, fused.prepared(*views, *more, stream=stream, scalars=scalars)


@functools.cache
def output_dtype(element: np.dtype) -> np.dtype:
    """The element type of gen.matmul's output for matrices of `element` (UsageError where no family
    multiplies that type)."""
    last = gemm_families(element)[-1]  # the one that runs on every GPU: the others write what it writes
    return numpy_dtype(last.default_variant().with_element_type(element_type_of(element)).output_dtype)


@functools.lru_cache(maxsize=256)
def matmul_family(element: str, size: str, dtype: str, out_dtype: str, pointers: tuple[int, int, int], cc: str,
                  epilogue: str) -> str:
    """gen.matmul's family for these arrays (their element type, shape, output type and addresses)
    and epilogue on a GPU of compute capability `cc`, decided once per such call: of the families
    that declare the type, the first that runs on the GPU, is made for the shape's rows of A
    (Family.matmul_rows), writes the output's type, fuses the epilogue, runs the shape (its
    default, or a relative of it: Family.runnable) and takes the arrays where they start
    (gemm_families says in which order they are tried)."""
    families = gemm_families(np.dtype(element))
    for family in families[:-1]:
        shape = family.parse_shape(size)
        if not family.runs_on(cc) or (family.matmul_rows is not None and shape.m > family.matmul_rows):
            continue
        variant = family.default_variant().with_element_type(dtype)
        if (str(numpy_dtype(variant.output_dtype)) != out_dtype or family.with_epilogue(variant, epilogue) is None
                or family.runnable(variant, shape) is None):
            continue
        try:
            family.problem_of(variant).kernel_arguments(shape, dict(zip(("A", "B", "C"), pointers)))
        except TilegenError:  # arrays it cannot take (UsageError), or a driver that refuses them
            continue
        return family.name
    return families[-1].name


@functools.lru_cache(maxsize=64)
def _gemm_kernel(family: str, size: str, dtype: str, epilogue: str) -> Kernel:
    """gen.matmul's kernel per shape and epilogue, kept (its variant is looked up once)."""
    return kernel(family, size, dtype=dtype, epilogue=epilogue)


def _epilogue(extras: dict[str, Any]) -> Epilogue:
    """The epilogue a call asks for, its factors checked."""
    for name in ("alpha", "beta"):
        value = extras[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not math.isfinite(value)):
            raise UsageError(f"{name} must be a finite number (or None), got {value!r}")
    return called_epilogue(extras["bias"] is not None, extras["activation"], extras["residual"] is not None,
                           extras["alpha"] is not None, extras["beta"] is not None)


def _epilogue_arrays(extras: dict[str, Any], shape: MatmulShape, arrays: dict[str, DeviceArray],
                     dlpack_stream: Any) -> list[DeviceArray]:
    """The bias (a vector of N in A's type) and the residual (a matrix like out) given, each checked."""
    found = []
    if extras["bias"] is not None:
        bias, dtype = describe(extras["bias"], "bias", dlpack_stream), arrays["a"].dtype
        if bias.on_host or bias.shape != (shape.n,) or bias.dtype != dtype or not bias.row_major():
            raise UsageError(f"bias must be a contiguous vector of N = {shape.n} {dtype} on the GPU, got "
                             f"{'a NumPy array' if bias.on_host else bias.dtype} {bias.shape}")
        found.append(bias)
    if extras["residual"] is not None:
        residual, dtype = describe(extras["residual"], "residual", dlpack_stream), arrays["out"].dtype
        if (_matrix(residual, "residual") != (shape.m, shape.n) or residual.dtype != dtype
                or _leading(residual, "residual") != shape.ldc):
            raise UsageError(f"residual must be a {dtype} {shape.m} x {shape.n} matrix with out's row stride "
                             f"({shape.ldc} elements), got {residual.dtype} {residual.shape} with strides "
                             f"{residual.strides} bytes")
        found.append(_allocated(residual, shape.m, shape.ldc))
    return found


def _extra_key(array: Any) -> Any:
    """An epilogue array's part of a kept launch's key: its layout, or '-' where it is not given."""
    return "-" if array is None else layout_key(array)


_matmul_launches: dict[tuple[Any, ...], Prepared] = {}  # by the layouts of a, b and out
_matmul_outputs: dict[tuple[Any, ...], Any] = {}  # what makes out, by the layouts of a and b


def _matrix(array: DeviceArray, label: str) -> tuple[int, int]:
    if len(array.shape) != 2 or array.on_host:
        raise UsageError(f"{label} must be a 2-D array on the GPU, got {'a NumPy array' if array.on_host else 'shape'}"
                         f" {array.shape}")
    return array.shape


def _leading(array: DeviceArray, label: str) -> int:
    """The row stride in elements of a row-major matrix or sub-matrix view."""
    item = array.dtype.itemsize
    row, column = array.strides
    if (column != item and array.shape[1] > 1) or row % item or (row // item < array.shape[1] and array.shape[0] > 1):
        raise UsageError(f"{label} ({array.shape} with strides {array.strides} bytes) is not a row-major view")
    return max(row // item, array.shape[1])


def _allocated(array: DeviceArray, rows: int, lead: int) -> DeviceArray:
    """A matrix view (rows x n, row stride lead) as the rows x lead allocation the GEMM arguments describe."""
    item = array.dtype.itemsize
    return DeviceArray(array.pointer, (rows, lead), (lead * item, item), array.dtype, array.kind, array.owner,
                       array.device, array.stream)


# ---- FP8, as torch._scaled_mm takes it ----------------------------------------------------------

def _inputs_key(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any) -> tuple[Any, ...]:
    """What a call's output and launch are kept by, beside out's layout: a's and b's layouts, and
    the scales' and out_dtype where any is given."""
    if (scale_a, scale_b, out_dtype) == (None, None, None):
        return layout_key(a), layout_key(b)
    return (layout_key(a), layout_key(b), *("none" if x is None else layout_key(x) for x in (scale_a, scale_b)),
            str(out_dtype))


def _fp8_output(wanted: Any, out: Any, dlpack_stream: int) -> np.dtype:
    """C's element type for FP8 matrices: out_dtype (a PyTorch or NumPy type), else out's, else bfloat16."""
    if wanted is None:
        return describe(out, "out", dlpack_stream).dtype if out is not None else numpy_dtype("bf16")
    try:
        dtype = torch_element_type(wanted) if type(wanted).__module__ == "torch" else np.dtype(wanted)
    except TypeError:
        dtype = None
    if dtype is None or element_type_of(dtype) not in FP8_OUTPUTS:
        raise UsageError(f"out_dtype must be bfloat16, float16 or float32 for FP8 matrices; got {wanted}")
    return dtype


def _scales(scale_a: Any, scale_b: Any, dims: tuple[int, int, int],
            dlpack_stream: int) -> tuple[str, dict[str, DeviceArray]]:
    """The scaling the scales ask for (none, tensor, rowcol, block) and the scales as vectors."""
    if scale_a is None and scale_b is None:
        return "none", {}
    if scale_a is None or scale_b is None:
        raise UsageError("give scale_a and scale_b together (float32 on the GPU), or neither")
    m, n, k = dims
    blocks_k = -(-k // SCALE_BLOCK)
    scales = {name: describe(x, name, dlpack_stream) for name, x in (("scale_a", scale_a), ("scale_b", scale_b))}
    sizes = {name: math.prod(array.shape) for name, array in scales.items()}
    block = {"scale_a": (m, blocks_k), "scale_b": (blocks_k, -(-n // SCALE_BLOCK))}
    by_blocks = all(scales[name].shape == shape for name, shape in block.items())
    for name, array in scales.items():
        if array.dtype != np.float32 or array.on_host or not (array.by_columns() if by_blocks else array.row_major()):
            raise UsageError(f"{name} must be a {'column-major' if by_blocks else 'contiguous'} float32 array on "
                             f"the GPU, got {array.dtype} {'on the host' if array.on_host else array.shape}"
                             f"{BLOCK_LAYOUT if by_blocks else ''}")
    scaling = "block" if by_blocks else {(1, 1): "tensor", (m, n): "rowcol"}.get((sizes["scale_a"], sizes["scale_b"]))
    if scaling is None:
        raise UsageError(f"scale_a and scale_b must hold one number each (per tensor), {m} and {n} (per row of a, per "
                         f"column of b), or be {m} x {blocks_k} and {blocks_k} x {block['scale_b'][1]} (per 128 of K "
                         f"of a's rows, per 128 x 128 block of b); got {scales['scale_a'].shape} and "
                         f"{scales['scale_b'].shape}")
    return scaling, {name: replace(array, shape=(sizes[name],), strides=(4,)) for name, array in scales.items()}


def _fp8_prepared(arrays: dict[str, DeviceArray], dims: tuple[int, int, int], dtype: str,
                  scales: tuple[str, dict[str, DeviceArray]], stream: Any) -> Prepared:
    """The FP8 launch: a row-major, b by columns (N x K row-major underneath), the scales as vectors."""
    (m, n, k), (scaling, vectors) = dims, scales
    lda, ldb, ldc = _leading(arrays["a"], "a"), _by_columns(arrays["b"]), _leading(arrays["out"], "out")
    family = get_family(FP8_FAMILY)
    shape = family.problem.shape_type(m, n, k, lda, ldb, ldc)
    if reason := family.refusal(family.default_variant(), shape):
        raise UsageError(reason)
    chosen = fp8_kernel(str(shape), dtype, scaling, element_type_of(arrays["out"].dtype))
    return chosen.prepared(A=_allocated(arrays["a"], m, lda), B=_allocated(arrays["b"], n, ldb),
                           C=_allocated(arrays["out"], m, ldc), **vectors, stream=stream)


@functools.lru_cache(maxsize=64)
def fp8_kernel(size: str, dtype: str, scaling: str, out: str) -> Kernel:
    """The tuned FP8 kernel with this call's scaling and output type (fp8_variant), kept per shape and kind."""
    tuned = _gemm_kernel(FP8_FAMILY, size, dtype, "")
    return Kernel(tuned.family, fp8_variant(tuned.variant, scaling, out), tuned.shape,
                  reason=f"{tuned.reason}, with this call's scales and output")


def fp8_variant(tuned: Variant, scaling: str, out: str) -> Variant:
    """The tuned FP8 variant with a call's scaling and output type: as tuned where it can; else storing
    from registers (C's staging too large for shared memory), on 128 columns (block scales' second
    sums too many for the registers), or both; else the family's default, so changed."""
    default = replace(get_family(FP8_FAMILY).default_variant(), dtype=tuned.dtype)
    for base, changes in itertools.product((tuned, default), FP8_RELATIVES):
        variant = replace(base, scaling=scaling, out=out, **changes)
        try:
            variant.check()
        except InvalidVariant:
            continue
        return variant
    raise UsageError(f"no fp8gemm variant takes {scaling} scales and {out} output")  # the default's relatives do


def _by_columns(b: DeviceArray) -> int:
    """The column stride in elements of b, K x N by columns (torch._scaled_mm's second argument)."""
    item, (k, n) = b.dtype.itemsize, b.shape
    row, column = b.strides
    if (row != item and k > 1) or column % item or (column // item < k and n > 1):
        raise UsageError(f"b must be K x N by columns, as torch._scaled_mm takes it (b = w.t() for a row-major N x K "
                         f"w); got {b.shape} with strides {b.strides} bytes: a row-major b is not taken for FP8")
    return max(column // item, k)
