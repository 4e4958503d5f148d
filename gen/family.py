"""What a kernel family knows, in one place: its variant type, template, problem shapes, launch
geometry, inputs, float64 reference and the work one launch does.

Nothing here touches the GPU: device arrays reach `kernel_arguments` as opaque objects, so the
runner (the only module that imports pycuda) stays generic.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Iterable, Mapping

import numpy as np

from .errors import InvalidVariant, UsageError
from .limits import DTYPE_BYTES, MAX_DYNAMIC_SHARED_BYTES, MAX_STATIC_SHARED_BYTES
from .variant import Variant

NUMPY_DTYPE = {"f32": np.float32, "f64": np.float64}
# Unit roundoff of each element type: the relative error of one rounding.
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f64": 2.0**-53}
MAX_GRID_Y = 65535


@dataclass(frozen=True)
class Cleared:
    """An output the kernel adds into (split-K): zeroed before every launch, `rows` rows of
    `width` 32-bit elements, `pitch_bytes` apart, in kernel argument number `argument`."""

    argument: int
    rows: int
    width: int
    pitch_bytes: int


@dataclass(frozen=True)
class Launch:
    """How one variant is launched on one shape."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_shared_bytes: int
    cleared: Cleared | None = None


class Family(ABC):
    """One kernel family. Subclasses fill in the class attributes and the abstract methods."""

    name: ClassVar[str]
    variant_type: ClassVar[type[Variant]]
    template: ClassVar[str]
    summary: ClassVar[str]
    shape_format: ClassVar[str]  # how a problem size is written, e.g. "MxNxK"
    shape_example: ClassVar[str]
    throughput_unit: ClassVar[str]  # "TFLOP/s" or "GB/s"
    default_sizes: ClassVar[tuple[str, ...]]  # problem sizes a sweep takes when given none
    heatmap_axes: ClassVar[tuple[str, str]] = ("tile", "padding")  # the report's throughput heatmap

    def default_variant(self) -> Variant:
        return self.variant_type()

    def safe_variant(self, shape: Any, dtype: str = "f32") -> Variant:
        """A variant of this element type that runs any shape: the default unless a family needs another."""
        return replace(self.default_variant(), dtype=dtype)

    def variant(self, values: Mapping[str, Any]) -> Variant:
        return self.variant_type.from_params(values)

    def parse_shape(self, text: str) -> Any:
        """A problem shape from its written form; UsageError says the expected form."""
        try:
            return self._parse_shape(text)
        except ValueError as error:
            raise UsageError(f"size {text!r} for {self.name}: {error} (expected {self.shape_format}, e.g. "
                             f"{self.shape_example})") from None

    def refusal(self, variant: Variant, shape: Any) -> str | None:
        """Why this variant must not run on this shape, or None when it may."""
        launch = self.launch(variant, shape)
        if launch.grid[1] > MAX_GRID_Y:
            return f"grid of {launch.grid[1]} blocks in y exceeds the CUDA limit of {MAX_GRID_Y}"
        return None

    def throughput(self, variant: Variant, shape: Any, seconds: float) -> float:
        """Achieved rate in `throughput_unit`: TFLOP/s for arithmetic, GB/s for data movement."""
        if self.throughput_unit == "TFLOP/s":
            return self.operations(shape) / seconds / 1e12
        return self.bytes_moved(shape, variant.dtype) / seconds / 1e9

    def random_inputs(self, variant: Variant, shape: Any, seed: int) -> dict[str, np.ndarray]:
        """Fresh random inputs in [-1, 1): never zeros, never constant, padding columns included."""
        rng = np.random.default_rng(seed)
        dtype = NUMPY_DTYPE[variant.dtype]
        return {name: rng.uniform(-1.0, 1.0, size=dims).astype(dtype) for name, dims in self.input_dims(shape).items()}

    # ---- what each family defines -------------------------------------------------------------

    @abstractmethod
    def _parse_shape(self, text: str) -> Any: ...

    @abstractmethod
    def launch(self, variant: Variant, shape: Any) -> Launch: ...

    @abstractmethod
    def input_dims(self, shape: Any) -> dict[str, tuple[int, ...]]:
        """Allocated dimensions of each input, leading dimensions included, in kernel order."""

    @abstractmethod
    def output_dims(self, shape: Any) -> tuple[str, tuple[int, ...]]:
        """The output's name and allocated dimensions; the kernel sees it poisoned with NaN."""

    @abstractmethod
    def output_region(self, shape: Any) -> tuple[slice, ...]:
        """The part of the output buffer the kernel must write; the rest must stay poisoned."""

    @abstractmethod
    def reference(self, inputs: Mapping[str, np.ndarray], shape: Any) -> np.ndarray:
        """The expected output region, computed in float64."""

    @abstractmethod
    def tolerance(self, dtype: str, shape: Any) -> float:
        """Largest accepted ||out - ref|| / ||ref||."""

    @abstractmethod
    def kernel_arguments(self, shape: Any, arrays: Mapping[str, Any]) -> list[Any]:
        """Launch arguments in the order of the kernel's signature; `arrays` maps names to device arrays."""

    @abstractmethod
    def ceiling_key(self, dtype: str) -> str:
        """Which measured ceiling throughput is compared with: "copy", "gemm_f32", "gemm_f64"."""

    @abstractmethod
    def sanitize_size(self, variant: Variant) -> str:
        """A small problem for compute-sanitizer; odd where the variant checks bounds."""

    @abstractmethod
    def operations(self, shape: Any) -> int:
        """Floating-point operations of one launch."""

    @abstractmethod
    def bytes_moved(self, shape: Any, dtype: str) -> int:
        """The fewest bytes one launch must move through device memory (inputs read once, output written once)."""


def blocks(extent: int, tile: int) -> int:
    """Blocks needed to cover `extent` with tiles of `tile` (the last one may be partial)."""
    return math.ceil(extent / tile)


def element_bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def parse_dims(text: str, count: int, separator: str = "x") -> list[int]:
    """'4096x4096x4096' -> [4096, 4096, 4096]; ValueError when not `count` positive integers."""
    parts = text.lower().split(separator)
    if len(parts) != count or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"needs {count} positive integers separated by {separator!r}")
    dims = [int(p) for p in parts]
    if min(dims) < 1:
        raise ValueError("every dimension must be at least 1")
    return dims


def check_naive_settings(settings: Iterable[tuple[str, Any, tuple[Any, ...]]]) -> None:
    """Parameters about shared tiles must keep a neutral value on method=naive, which has none;
    each setting is (name, value, allowed values), the last allowed value being the one to suggest."""
    for name, value, allowed in settings:
        if value not in allowed:
            raise InvalidVariant(f"{name} {value} does not apply to method=naive, which has no shared tile "
                                 f"(use {name}={allowed[-1]})")


def check_shared_bytes(smem: str, shared_bytes: int, what: str) -> None:
    """Refuse shared memory beyond the static limit (or, for dynamic, the opt-in limit)."""
    if smem == "static" and shared_bytes > MAX_STATIC_SHARED_BYTES:
        raise InvalidVariant(
            f"{what} needs {shared_bytes} bytes of static shared memory; the CUDA limit is "
            f"{MAX_STATIC_SHARED_BYTES} (use smem=dynamic)")
    if shared_bytes > MAX_DYNAMIC_SHARED_BYTES:
        raise InvalidVariant(
            f"{what} needs {shared_bytes} bytes of shared memory; the sm_90 limit is {MAX_DYNAMIC_SHARED_BYTES}")
