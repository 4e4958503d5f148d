"""The family API: what a kernel family knows, in one place. The built-in families and users'
plugins use it alike (`gen.api` gathers the names a plugin needs).

A family is two things:

- a **Problem** (gen.families.problem): what its kernels compute.
- a **Family**: how its kernels compute it. Its variant type (the parameters), its template, the
  launch geometry of a variant on a shape, the shapes a variant refuses, and the relatives a
  variant can be adapted into when it cannot run a shape.

Nothing here touches the GPU or a template engine: the runner allocates arrays and launches, the
renderer renders, both by asking these objects. CUDA's launch limits are checked here, once.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping

from ..core.errors import InvalidVariant, UsageError
from ..core.limits import (MAX_BLOCK_DIMS, MAX_DYNAMIC_SHARED_BYTES, MAX_GRID_DIMS, MAX_STATIC_SHARED_BYTES,
                           MAX_THREADS_PER_BLOCK)
from .problem import Problem
from .variant import Variant


# ---- launches ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    """How one variant is launched on one shape. Shorter grids and blocks are padded with 1s."""

    grid: tuple[int, ...]
    block: tuple[int, ...]
    dynamic_shared_bytes: int = 0
    clears_output: bool = False  # the kernel adds into its output (split-K): zero the region first

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", tuple(self.grid) + (1,) * (3 - len(self.grid)))
        object.__setattr__(self, "block", tuple(self.block) + (1,) * (3 - len(self.block)))

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


def threads_refusal(threads: int, what: str) -> str | None:
    """Why `threads` per block break CUDA's limit, or None: the one place that checks it (a variant's
    rules call check_threads, a launch's limits call this)."""
    if threads > MAX_THREADS_PER_BLOCK:
        return f"{what} gives {threads} threads per block; the CUDA limit is {MAX_THREADS_PER_BLOCK}"
    return None


def check_threads(threads: int, what: str) -> None:
    """A variant rule: InvalidVariant when `what` (the parameters that make the block) gives more
    threads per block than CUDA allows."""
    if reason := threads_refusal(threads, what):
        raise InvalidVariant(reason)


def launch_refusal(launch: Launch) -> str | None:
    """Why a launch breaks a CUDA limit, or None."""
    if reason := threads_refusal(launch.threads_per_block, "a block of " + " x ".join(map(str, launch.block))):
        return reason
    for what, sizes, limits in (("block", launch.block, MAX_BLOCK_DIMS), ("grid", launch.grid, MAX_GRID_DIMS)):
        for axis, size, limit in zip("xyz", sizes, limits):
            if size > limit:
                return f"{what} of {size} {'threads' if what == 'block' else 'blocks'} in {axis} exceeds the CUDA limit of {limit}"
            if size < 1:
                return f"{what} of {size} in {axis}: every launch dimension must be at least 1"
    if launch.dynamic_shared_bytes > MAX_DYNAMIC_SHARED_BYTES:
        return (f"{launch.dynamic_shared_bytes} bytes of dynamic shared memory exceed the sm_90 limit of "
                f"{MAX_DYNAMIC_SHARED_BYTES}")
    return None


# ---- the two halves of a family ------------------------------------------------------------------

class Family(ABC):
    """One kernel family: the variants of one template that compute one Problem."""

    name: ClassVar[str]  # a lowercase identifier without '_': the first token of every variant name
    summary: ClassVar[str]
    variant_type: ClassVar[type[Variant]]
    problem: ClassVar[Problem]
    template: ClassVar[str]  # file name, found beside the family's module (or in tilegen's templates/)
    heatmap_axes: ClassVar[tuple[str, str] | None] = None  # the report's throughput heatmap
    heatmap_panels: ClassVar[str | None] = None  # a parameter: one heatmap per value of it (None: one heatmap)
    # Compile several variants in one nvcc run (wrapped in namespaces): only for templates whose
    # file scope holds nothing but the kernel and helper functions (no macros, no globals).
    compile_together: ClassVar[bool] = False
    # nvcc flags every variant of the family is compiled with, after the run's own (-I for its headers, say).
    compile_flags: ClassVar[tuple[str, ...]] = ()
    # The one architecture the family's kernels compile for, where they use its own instructions
    # ('sm_90a': wgmma, TMA); run on a GPU of that base (sm_90) only. None: the run's architecture.
    target_arch: ClassVar[str | None] = None
    # The family gen.tuned, `tilegen best` and gen.kernel answer with on a GPU that target_arch rules
    # out (wgmma's: hgemm); None: none.
    fallback: ClassVar[str | None] = None
    # The element types gen.matmul multiplies with this family (a GEMM family's Problem: A, B, C,
    # M, N, K, lda, ldb, ldc). Of the families that declare a type, gen.matmul takes the first that
    # runs on the GPU and takes the arrays, in gemm_families' order (gen.families.registry).
    matmul_dtypes: ClassVar[tuple[str, ...]] = ()
    # The most rows of A gen.matmul gives the family (gemv's 1: a token), or None for any M: gen.matmul
    # tries such families first for up to that many rows, where their refusal lets them run the shape.
    matmul_rows: ClassVar[int | None] = None
    # Set when the family is registered: where it was defined and where its template is found.
    source: str = ""
    template_dirs: tuple[Path, ...] = ()

    @abstractmethod
    def launch(self, variant: Any, shape: Any) -> Launch:
        """Grid, block and dynamic shared memory of a variant on a shape."""

    def refusal(self, variant: Any, shape: Any) -> str | None:
        """Why this (valid) variant must not run this shape, or None. CUDA's launch limits are
        checked on top of this (`refused`)."""
        return None

    def adaptations(self, variant: Any) -> list[Any]:
        """Relatives of a variant to try, nearest first, when it cannot run a shape (say, with
        bound checks turned on): how a stored winner serves shapes it was not tuned for."""
        return []

    def unaligned(self, variant: Any) -> Any | None:
        """A relative of a variant whose loads need no more alignment than one element's, for arrays
        that start off a 16-byte boundary (sub-matrix views); None when the variant needs none."""
        return None

    def sanitize_size(self, variant: Any) -> str:
        """A small problem this variant can run, for compute-sanitizer."""
        return self.problem.small_size

    def arch_refusal(self, variant: Any, arch: str) -> str | None:
        """Why this variant's kernel cannot be compiled for `arch` ('sm_80') though the family's others
        can, or None (a rule for the whole family is `target_arch`)."""
        return None

    def problem_of(self, variant: Any) -> Problem:
        """The problem as this variant's kernel takes it: `problem`, unless the family's kernels differ
        in their parameters (hgemm's copy=tma takes tensor maps for A and B)."""
        return self.problem

    def epilogue_of(self, variant: Any) -> str:
        """What the variant computes after the product, as the parameters that ask for it
        ('bias=col,act=gelu-tanh'), or '' for the family's plain problem: tuning results are kept per
        epilogue (a fused variant is no rival of a plain one)."""
        return ""

    def with_epilogue(self, variant: Any, epilogue: str) -> Any | None:
        """The variant computing `epilogue` (epilogue_of's text) after its product; None where the
        family has no such epilogue."""
        return None if epilogue else variant

    def runs_on(self, cc: str) -> bool:
        """Whether the kernels run on a GPU of compute capability `cc` ('9.0'): any does, unless
        the family names its own architecture (target_arch 'sm_90a' runs on 9.0 only)."""
        return self.target_arch is None or runs_on(self.target_arch, cc)

    # ---- conveniences, the same for every family ----

    @property
    def shape_format(self) -> str:
        return self.problem.shape_format

    @property
    def default_sizes(self) -> tuple[str, ...]:
        return self.problem.default_sizes

    def parse_shape(self, text: str) -> Any:
        return self.problem.parse_shape(text, self.name)

    def default_variant(self) -> Variant:
        return self.variant_type()

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The element types this family's variants come in."""
        return self.variant_type.element_types()

    def check_dtype(self, dtype: str | None) -> str:
        """`dtype` if this family has it; None means the default variant's."""
        if dtype is None:
            return self.default_variant().dtype
        if dtype not in self.dtypes:
            raise UsageError(f"{self.name} has no element type {dtype!r}; its element types are: "
                             f"{', '.join(self.dtypes)}")
        return dtype

    def variant(self, values: Mapping[str, Any]) -> Variant:
        """The variant of these parameter values (the others take their defaults); UsageError for a
        value or a combination the family does not allow, saying why."""
        variant = self.variant_type.from_params(values)
        try:
            variant.check()
        except InvalidVariant as reason:
            raise UsageError(f"{variant.name} is not a valid {self.name} variant: {reason}") from None
        return variant

    def runnable(self, variant: Variant, shape: Any) -> Variant | None:
        """The variant, or its nearest adaptation that is valid and can run the shape."""
        for candidate in (variant, *self.adaptations(variant)):
            try:
                candidate.check()
            except InvalidVariant:
                continue
            if refused(self, candidate, shape) is None:
                return candidate
        return None

    def safe_variant(self, shape: Any, dtype: str | None = None) -> Variant:
        """What runs this shape untuned: the first of likely_best, else the default variant of this
        element type, adapted to run the shape if it must be."""
        return next(iter(self.likely_best(shape, dtype)), None) or self.adapted_default(shape, dtype)

    def adapted_default(self, shape: Any, dtype: str | None = None) -> Variant:
        default = self.default_variant().with_element_type(self.check_dtype(dtype))
        return self.runnable(default, shape) or default

    def likely_best(self, shape: Any, dtype: str | None = None) -> list[Variant]:
        """Variants likeliest to be fastest at this shape, best guess first, each valid and able to run
        it: a tune measures them before its strategy's own picks. None by default (a family that
        knows its GPU names them)."""
        return []


def refused(family: Family, variant: Variant, shape: Any) -> str | None:
    """Why a valid variant cannot run a shape: the family's own refusal, then CUDA's launch limits."""
    return family.refusal(variant, shape) or launch_refusal(family.launch(variant, shape))


def point_refusal(family: Family, variant: Variant, shape: Any = None, arch: str | None = None) -> str | None:
    """Why a point is not run: the variant breaks a rule, (given the run's `arch`) cannot be compiled
    for it, or (given a shape) cannot run it."""
    try:
        variant.check()
    except InvalidVariant as reason:
        return str(reason)
    if arch is not None and (reason := family.arch_refusal(variant, arch)):
        return reason
    return None if shape is None else refused(family, variant, shape)


def family_arch(family: Family, arch: str) -> str:
    """What the family's kernels compile for when a run compiles for `arch`: the family's own
    architecture (Family.target_arch) where it has one, else `arch`. UsageError when the family's
    kernels cannot run where `arch` does."""
    own = family.target_arch
    if own is None or own == arch:
        return arch
    if not runs_on(own, arch_cc(arch)):
        raise UsageError(f"{family.name} kernels use {own}'s own instructions and run on {arch_base(own)} GPUs only; "
                         f"this run compiles for {arch} (use another family there)")
    return own


# ---- helpers for families -------------------------------------------------------------------------

ARCH_PATTERN = re.compile(r"sm_[0-9]{2,3}[af]?")  # a GPU architecture, matched whole ("sm_90\n" is none)


def arch_base(arch: str) -> str:
    """An architecture without its suffix: 'sm_90' for 'sm_90', 'sm_90a' and 'sm_90f'."""
    return re.sub(r"[af]$", "", arch)


def arch_cc(arch: str) -> str:
    """The compute capability an architecture is named for: '9.0' for 'sm_90a', '10.3' for 'sm_103'."""
    digits = arch_base(arch).removeprefix("sm_")
    return f"{digits[:-1]}.{digits[-1]}"


def runs_on(arch: str, cc: str) -> bool:
    """Whether a cubin for `arch` (sm_86, sm_90a, sm_100f) loads on a GPU of compute capability `cc`
    (8.9): the same major version and no newer minor; an `a` architecture only on its own."""
    digits = arch.removeprefix("sm_").removesuffix("f")
    major, minor = cc.split(".")
    if digits.endswith("a"):
        return digits[:-1] == major + minor
    return digits[:-1] == major and int(digits[-1]) <= int(minor)


def blocks(extent: int, tile: int) -> int:
    """Blocks needed to cover `extent` with tiles of `tile` (the last one may be partial)."""
    return math.ceil(extent / tile)


def check_neutral_settings(settings: Iterable[tuple[str, Any, tuple[Any, ...]]], method: str) -> None:
    """Parameters about shared tiles must keep a neutral value on a method that has none; each
    setting is (name, value, allowed values), the last allowed value being the one to suggest."""
    for name, value, allowed in settings:
        if value not in allowed:
            raise InvalidVariant(f"{name} {value} does not apply to method={method}, which has no shared tile "
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
