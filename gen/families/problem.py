"""What a family's kernels compute: the Problem (shapes, kernel arguments, arrays, a float64
reference and its tolerance, the work one launch does) and the ceilings its throughput is
measured against. Families that compute the same thing share one Problem (matmul and sgemm share
the GEMM). Nothing here touches the GPU: the runner allocates and compares by asking these objects."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from ..core.checks import whole_rule, whole_text
from ..core.errors import UsageError
from ..core.limits import DTYPE_BYTES, DTYPE_CTYPE

NUMPY_DTYPE = {"f32": np.float32, "f64": np.float64, "f16": np.float16}  # the others: ML_DTYPES
ML_DTYPES = {"bf16": "bfloat16", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}  # types NumPy has none of
# Unit roundoff of each element type: the relative error of one rounding.
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f64": 2.0**-53, "f16": 2.0**-11, "bf16": 2.0**-8}


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy type of an element type; bfloat16 and the FP8 types come from ml_dtypes."""
    if dtype in ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise UsageError(f"{dtype} arrays on the host need the ml_dtypes package: pip install ml_dtypes "
                             f"(or use dtype f16)") from None
        return np.dtype(getattr(ml_dtypes, ML_DTYPES[dtype]))
    return np.dtype(NUMPY_DTYPE[dtype])


def element_type_of(dtype: np.dtype) -> str | None:
    """The element type (f32, bf16, e4m3, ...) of a NumPy type; None for one tilegen has none of."""
    name = np.dtype(dtype).name
    return {"float32": "f32", "float64": "f64", "float16": "f16", **{v: k for k, v in ML_DTYPES.items()}}.get(name)


# ---- ceilings ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ceiling:
    """A rate measured once per GPU model that a family's throughput is compared with. tilegen
    measures its own (COPY_BANDWIDTH, GEMM_F32, GEMM_F64); a family may name one of its own, with
    `measure`: a function run in the GPU worker process, on the GPU the variants run on (its context
    current: it may use PyCUDA, CuPy or PyTorch), that returns the rate in `unit`, or None where it
    cannot measure it. A ceiling that cannot be measured leaves its rows without a share."""

    key: str  # where the measurement is kept: a family's own ceiling needs a key of its own
    unit: str  # the unit of the rate and of the family's throughput
    scale: float  # units of work in one unit of rate per second: 1e9 bytes, 1e12 operations
    what: str
    measure: Callable[[], float | None] | None = None

    def rate(self, work: float, seconds: float) -> float:
        return work / seconds / self.scale


COPY_BANDWIDTH = Ceiling("copy", "GB/s", 1e9, "a device-to-device copy, counting bytes read and written")
GEMM_F32 = Ceiling("gemm_f32", "TFLOP/s", 1e12, "cuBLAS SGEMM at 8192^3, no TF32")
GEMM_F64 = Ceiling("gemm_f64", "TFLOP/s", 1e12, "cuBLAS DGEMM at 8192^3")
GEMM_F16 = Ceiling("gemm_f16", "TFLOP/s", 1e12, "cuBLAS GEMM at 8192^3, float16 in and out, float32 sums")
GEMM_BF16 = Ceiling("gemm_bf16", "TFLOP/s", 1e12, "cuBLAS GEMM at 8192^3, bfloat16 in and out, float32 sums")
GEMM_FP8 = Ceiling("gemm_fp8", "TFLOP/s", 1e12, "cuBLAS FP8 GEMM at 8192^3 (torch._scaled_mm: e4m3, per-tensor "
                   "scales, bfloat16 out)")
CEILINGS = (COPY_BANDWIDTH, GEMM_F32, GEMM_F64, GEMM_F16, GEMM_BF16, GEMM_FP8)


# ---- kernel arguments --------------------------------------------------------------------------

@dataclass(frozen=True)
class Input:
    """An array the kernel reads: fresh random values in [-1, 1) for every check, of the variant's
    element type unless `dtype` names another (FP8's float32 scales)."""

    name: str
    dtype: str | None = None


@dataclass(frozen=True)
class Output:
    """The array the kernel writes: poisoned with NaN before every launch, then compared with the
    reference inside the output region, and checked untouched outside it."""

    name: str


@dataclass(frozen=True)
class Scalar:
    """A number passed by value, taken from the shape's attribute `source` (default: the name)."""

    name: str
    source: str = ""
    ctype: str = "int"

    @property
    def attribute(self) -> str:
        return self.source or self.name


@dataclass(frozen=True)
class Workspace:
    """`words` of float32 device memory a kernel's blocks pass partial results through (stream-K's
    flags, then its sums), never the caller's, zeros that the kernel leaves zeros (its flags) or
    writes before it reads: gen.kernel passes one per stream (gen.gpu.runtime.native.DriverLaunch),
    the GPU worker zeros before each check (gen.gpu.process.runner). Built-in families only: a
    family of the user's own is refused one (gen.families.plugin_checks)."""

    name: str
    words: int


Argument = Input | Output | Scalar | Workspace
SCALAR_TYPES = {"int": np.int32, "long long": np.int64, "float": np.float32, "double": np.float64}


def signature(arguments: Sequence[Argument], dtype: str, indent: str = "    ", output_dtype: str | None = None) -> str:
    """The kernel's parameter list, as the templates write it: pointers on one line, scalars on
    the next (`indent` before them). Inputs are of `dtype`, the output of `output_dtype` (default: the same)."""
    ctype, out_ctype = DTYPE_CTYPE[dtype], DTYPE_CTYPE[output_dtype or dtype]
    pointers = [f"const {ctype}* __restrict__ {a.name}" if isinstance(a, Input) else f"{out_ctype}* __restrict__ {a.name}"
                for a in arguments if not isinstance(a, Scalar)]
    scalars = [f"{a.ctype} {a.name}" for a in arguments if isinstance(a, Scalar)]
    lines = [", ".join(part) for part in (pointers, scalars) if part]
    return f",\n{indent}".join(lines)


# ---- shapes ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Dims:
    """A problem shape of named dimensions, written with x between them: 4096x8192."""

    names: tuple[str, ...]
    dims: tuple[int, ...]

    def __getattr__(self, name: str) -> int:
        try:
            return self.dims[object.__getattribute__(self, "names").index(name)]
        except ValueError:
            raise AttributeError(name) from None

    def __str__(self) -> str:
        return "x".join(str(d) for d in self.dims)


def parse_dims(text: str, count: int, separator: str = "x") -> list[int]:
    """'4096x4096x4096' -> [4096, 4096, 4096]; ValueError when not `count` positive integers, each
    written as every count is (gen.core.checks.whole_text: ASCII digits, no sign, no '_')."""
    parts = text.lower().split(separator)
    dims = [whole_text(p.strip()) for p in parts]
    if len(parts) != count or None in dims:
        raise ValueError(f"needs {count} positive integers separated by {separator!r} ({whole_rule()})")
    if min(dims) < 1:
        raise ValueError("every dimension must be at least 1")
    return dims



class Problem(ABC):
    """What a family's kernels compute, shared by every family that computes the same thing."""

    dims: ClassVar[tuple[str, ...]] = ()  # names of the shape's dimensions (for the default parse_shape)
    arguments: ClassVar[tuple[Argument, ...]]  # the kernel's parameters, in order
    default_sizes: ClassVar[tuple[str, ...]]  # what a sweep runs when given no --size
    small_size: ClassVar[str]  # a small problem, odd where the kernels allow, for sanitizer runs and checks

    @property
    def shape_format(self) -> str:
        return "x".join(d.upper() if len(d) == 1 else d for d in self.dims)

    @property
    def shape_example(self) -> str:
        return self.default_sizes[0]

    @property
    def output(self) -> Output:
        (output,) = [a for a in self.arguments if isinstance(a, Output)]
        return output

    def element_type(self, name: str, dtype: str, output_dtype: str) -> str:
        """Array `name`'s element type in a variant of inputs `dtype` and output `output_dtype` (an
        input that names its own type has it: FP8's float32 scales)."""
        own = {a.name: a.dtype for a in self.arguments if isinstance(a, Input)}.get(name)
        return output_dtype if name == self.output.name else own or dtype

    def parse_shape(self, text: str, family: str = "") -> Any:
        """A shape from its written form; UsageError says the expected form."""
        of = f" for {family}" if family else ""
        if not isinstance(text, str):
            raise UsageError(f"a size{of} is text like {self.shape_example}, got {text!r}")
        try:
            return self._parse_shape(text.strip())
        except ValueError as error:
            raise UsageError(f"size {text!r}{of}: {error} (expected {self.shape_format}, e.g. "
                             f"{self.shape_example})") from None

    def _parse_shape(self, text: str) -> Any:
        return Dims(self.dims, tuple(parse_dims(text, len(self.dims))))

    def scalars(self, shape: Any) -> dict[str, int | float]:
        """The scalar arguments' values: each Scalar's attribute of the shape."""
        return {a.name: getattr(shape, a.attribute) for a in self.arguments if isinstance(a, Scalar)}

    def kernel_arguments(self, shape: Any, pointers: Mapping[str, int]) -> list[Any]:
        """The launch's arguments in the kernel's order: device pointers (as numpy uintp) for the
        arrays, typed numbers for the scalars."""
        scalars = self.scalars(shape)
        return [SCALAR_TYPES[a.ctype](scalars[a.name]) if isinstance(a, Scalar) else np.uintp(int(pointers[a.name]))
                for a in self.arguments]

    @property
    def checked_as(self) -> "Problem":
        """The problem whose inputs, reference and tolerance check this one's kernels: itself, unless it
        only passes the same arrays another way (TMA's tensor maps): variants that compute the same
        thing then share one set of inputs in the GPU worker."""
        return self

    def output_region(self, shape: Any) -> tuple[slice, ...]:
        """The part of the output array the kernel must write (the rest must stay poisoned)."""
        return tuple(slice(0, d) for d in self.arrays(shape)[self.output.name])

    def random_inputs(self, dtype: str, shape: Any, seed: int) -> dict[str, np.ndarray]:
        """Fresh random inputs in [-1, 1): never zeros, never constant, padding included."""
        rng = np.random.default_rng(seed)
        arrays = self.arrays(shape)
        return {a.name: rng.uniform(-1.0, 1.0, size=arrays[a.name]).astype(numpy_dtype(a.dtype or dtype))
                for a in self.arguments if isinstance(a, Input)}

    def initial_output(self, shape: Any) -> np.ndarray | None:
        """What the output holds before each check's launch; None: NaN everywhere, so that an element
        the kernel does not write is found. A family whose kernel adds into its output gives its own."""
        return None

    checks_on_host: bool = False  # True: host_check() judges each check's output, copied to the host

    def host_check(self, output: np.ndarray, shape: Any) -> str:
        """What is wrong with an output (copied to the host after a check's launch), or '': a check
        of the family's own, on top of the reference's (or instead, where reference() is None).
        Called only when `checks_on_host` is True."""
        return ""

    def constants(self, shape: Any) -> dict[str, np.ndarray]:
        """Constant-memory arrays by their `__constant__` symbol's name, copied into the kernel's
        module before every check (none unless the family says so). Each must fit its symbol."""
        return {}

    def throughput(self, shape: Any, dtype: str, seconds: float) -> float:
        """The achieved rate, in the unit of this problem's ceiling."""
        return self.ceiling(dtype).rate(self.work(shape, dtype), seconds)

    @abstractmethod
    def arrays(self, shape: Any) -> dict[str, tuple[int, ...]]:
        """The allocated dimensions of every Input and Output, leading dimensions included."""

    @abstractmethod
    def reference(self, inputs: Mapping[str, np.ndarray], shape: Any) -> np.ndarray | None:
        """The expected output region, from the inputs given in float64; None: the output is not
        checked (a kernel tuned without a known answer)."""

    @abstractmethod
    def tolerance(self, dtype: str, shape: Any) -> float:
        """The largest accepted ||out - ref|| / ||ref|| over the output region, for an output of
        element type `dtype` (the variant's `output_dtype`: its `dtype` unless the family says otherwise)."""

    @abstractmethod
    def ceiling(self, dtype: str) -> Ceiling:
        """The measured rate throughput is compared with (COPY_BANDWIDTH, GEMM_F32, GEMM_F64)."""

    @abstractmethod
    def work(self, shape: Any, dtype: str) -> float:
        """What one launch must do, in the ceiling's terms: bytes moved (each input read once, the
        output written once) or floating-point operations."""



def element_bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def sum_tolerance(dtype: str, terms: int) -> float:
    """For outputs that are sums of `terms` products: rounding errors grow like sqrt(terms) on
    random data; 16 leaves room for the order a kernel adds in, while a race or a wrong index is
    off by orders of magnitude."""
    return 16 * UNIT_ROUNDOFF[dtype] * math.sqrt(terms)
