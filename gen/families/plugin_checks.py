"""The checks a family passes when it is loaded: its names, its parameters, its arguments and
template, and every point of its default space (rules, launch, shared memory, reference). A family
that fails one is left out with a PluginProblem: one line naming its file, the variant and the fix."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable

import numpy as np

from ..core.errors import InvalidVariant, TilegenError
from ..core.limits import INPUT_CTYPE
from .family import ARCH_PATTERN, Family, Launch, launch_refusal
from .problem import SCALAR_TYPES, Input, Output, Problem, Scalar
from .space import Space
from .variant import Variant

MAX_CHECKED = 20_000  # points of a plugin's default space checked when it loads (about 1 s)
# Attributes of every variant: a parameter of the same name would hide them.
RESERVED_PARAMETERS = {name for name in dir(Variant) if not name.startswith("__")} - {"dtype"}


class PluginProblem(TilegenError):
    """A family that cannot be used: the message names its file and what to fix."""


def check_family(family: Family, contract: bool = True) -> None:
    """Raise PluginProblem when a family breaks the family API's rules (see the module doc); with
    `contract` False, all but the walk over its default space (_check_contract), which the built-ins'
    tests make instead of every process that loads them (a fifth of a second)."""
    where = family.source
    name = getattr(family, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or "_" in name or name != name.lower():
        raise PluginProblem(f"{where}: family name {name!r} must be a lowercase identifier without '_' (it starts "
                            f"every variant name)")
    variant_type = getattr(family, "variant_type", None)
    if not (isinstance(variant_type, type) and issubclass(variant_type, Variant)
            and dataclasses.is_dataclass(variant_type) and variant_type.__dataclass_params__.frozen):
        raise PluginProblem(f"{where}: {name}.variant_type must be a @dataclass(frozen=True, order=True) subclass "
                            f"of gen.api.Variant")
    if getattr(variant_type, "family", None) != name:
        raise PluginProblem(f"{where}: {variant_type.__name__}.family is {getattr(variant_type, 'family', None)!r}; "
                            f"set it to {name!r}, the family's name")
    _check_parameters(family, variant_type)
    if not isinstance(getattr(family, "problem", None), Problem):
        raise PluginProblem(f"{where}: {name}.problem must be an instance of a gen.api.Problem subclass")
    _check_arguments(family)
    _check_architecture(family)
    if not any((folder / family.template).is_file() for folder in family.template_dirs):
        folders = ", ".join(str(f) for f in family.template_dirs)
        raise PluginProblem(f"{where}: template {family.template!r} of {name} is not in {folders}; put it beside "
                            f"the module")
    if contract:
        _check_contract(family)


def _check_architecture(family: Family) -> None:
    """A target_arch is an architecture like 'sm_90a'; a fallback, another family's name, only with one."""
    where, name, own, fallback = family.source, family.name, family.target_arch, family.fallback
    if own is not None and not (isinstance(own, str) and ARCH_PATTERN.fullmatch(own)):
        raise PluginProblem(f"{where}: {name}.target_arch {own!r} must be an architecture like 'sm_90a' (or None)")
    if fallback is not None and (own is None or not isinstance(fallback, str) or fallback == name):
        raise PluginProblem(f"{where}: {name}.fallback {fallback!r} must name another family, and only with a "
                            f"target_arch (the GPUs the family does not run on are where the fallback answers)")


# ---- loading -------------------------------------------------------------------------------------

def _check_parameters(family: Family, variant_type: type[Variant]) -> None:
    parameters = variant_type.parameters()
    clashes = sorted({p.name for p in parameters} & RESERVED_PARAMETERS)
    if clashes:
        raise PluginProblem(f"{family.source}: parameter {clashes[0]!r} of {family.name} clashes with an attribute "
                            f"every variant has; rename it")
    tags = [p.tag for p in parameters if p.tag]
    repeated = sorted({t for t in tags if tags.count(t) > 1})
    if repeated:
        raise PluginProblem(f"{family.source}: two parameters of {family.name} share the name tag {repeated[0]!r}, "
                            f"so their values could not be told apart in names; give each its own tag")
    for parameter in parameters:
        _check_space(family, parameter)
    default = variant_type()
    try:
        default.check()
    except TilegenError as error:
        raise PluginProblem(f"{family.source}: the default variant of {family.name} is invalid ({error}); change "
                            f"the parameters' defaults") from None
    if variant_type.from_name(default.name) != default:
        raise PluginProblem(f"{family.source}: {default.name!r} does not parse back to the default variant of "
                            f"{family.name}; give the parameters distinct tags or values")


def _check_space(family: Family, parameter: Any) -> None:
    """A parameter's default space: at least one value, each one the parameter allows."""
    where = f"{family.source}: parameter {parameter.name!r} of {family.name}"
    if not parameter.space:
        raise PluginProblem(f"{where} has an empty space (space=()); give it at least one value, or leave space out "
                            f"for its default alone")
    for value in parameter.space:
        try:
            parameter.check(value)
        except TilegenError as error:
            raise PluginProblem(f"{where}: its space holds {value!r}, which it does not allow ({error}); fix the "
                                f"space") from None


def _check_arguments(family: Family) -> None:
    arguments = family.problem.arguments
    names = [a.name for a in arguments]
    if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        raise PluginProblem(f"{family.source}: {family.name}'s kernel arguments {names} must be distinct identifiers")
    if sum(isinstance(a, Output) for a in arguments) != 1:
        raise PluginProblem(f"{family.source}: {family.name} needs exactly one Output argument, the array that is "
                            f"poisoned, written and checked")
    for argument in arguments:
        if not isinstance(argument, (Input, Output, Scalar)):
            raise PluginProblem(f"{family.source}: argument {argument!r} of {family.name} is not an Input, Output or "
                                f"Scalar")
        if isinstance(argument, Scalar) and argument.ctype not in SCALAR_TYPES:
            raise PluginProblem(f"{family.source}: scalar {argument.name} of {family.name} has type "
                                f"{argument.ctype!r}; use one of {', '.join(SCALAR_TYPES)}")


def _check_contract(family: Family) -> None:
    """Every point of the default space (up to MAX_CHECKED): its rules apply without an error, and a
    valid variant's launch on its small problem stays inside CUDA's limits; the default variant's
    problem has arrays for every argument, and a reference of the output region's shape for each
    element type in the space."""
    _check_arrays(family, family.default_variant())
    checked_types: set[str] = set()
    for variant in itertools.islice(Space.default(family), MAX_CHECKED):
        if not _valid(family, variant):
            continue
        shape = _attempt(family, variant, "sanitize_size() or parse_shape()",
                         lambda: family.parse_shape(family.sanitize_size(variant)))
        _check_launch(family, variant, shape)
        if variant.dtype not in checked_types:
            checked_types.add(variant.dtype)
            _check_reference(family, variant, shape)


def _valid(family: Family, variant: Variant) -> bool:
    """Whether a point of the space is valid; PluginProblem when its rules raise anything but
    InvalidVariant."""
    try:
        variant.check()
        return True
    except InvalidVariant:
        return False
    except Exception as error:
        raise PluginProblem(f"{family.source}: {variant.name}: check_combination() raised {one_line(error)}; a rule "
                            f"a variant breaks is require(condition, reason), any other error is a bug to fix") \
            from None


def _attempt(family: Family, variant: Variant, what: str, call: Callable[[], Any]) -> Any:
    """`call()`, or PluginProblem naming the file, the variant and the method that failed."""
    try:
        return call()
    except TilegenError as error:
        raise PluginProblem(f"{family.source}: {variant.name}: {what}: {error}") from None
    except Exception as error:
        raise PluginProblem(f"{family.source}: {variant.name}: {what} raised {one_line(error)}; fix {what} for "
                            f"this variant, or make such variants invalid in check_combination()") from None


def _check_launch(family: Family, variant: Variant, shape: Any) -> None:
    if (reason := _attempt(family, variant, "refusal()", lambda: family.refusal(variant, shape))) is not None:
        raise PluginProblem(f"{family.source}: {variant.name}: sanitize_size() gives {shape}, which refusal() "
                            f"refuses ({reason}); give a size every valid variant runs, or compute-sanitizer "
                            f"never launches it")
    launch = _attempt(family, variant, "launch()", lambda: family.launch(variant, shape))
    if not isinstance(launch, Launch):
        raise PluginProblem(f"{family.source}: {variant.name}: launch() returned {launch!r}; return "
                            f"gen.api.Launch(grid=..., block=...)")
    if reason := launch_refusal(launch):
        raise PluginProblem(f"{family.source}: {family.name}'s launch() of {variant.name} at {shape}: {reason}; "
                            f"keep launch() inside the limits or add a constraint that makes such variants invalid")
    dynamic = _attempt(family, variant, "dynamic_shared_bytes", lambda: int(variant.dynamic_shared_bytes))
    if launch.dynamic_shared_bytes != dynamic:
        raise PluginProblem(f"{family.source}: {variant.name}: launch() asks for {launch.dynamic_shared_bytes} bytes "
                            f"of dynamic shared memory, but the variant's dynamic_shared_bytes is {dynamic}; give "
                            f"launch() dynamic_shared_bytes=variant.dynamic_shared_bytes")
    _attempt(family, variant, "deliberately_racy", lambda: bool(variant.deliberately_racy))


def _check_arrays(family: Family, variant: Variant) -> None:
    """Arrays for every Input and Output, and each Scalar's source on the shapes."""
    problem, where = family.problem, family.source
    shape = _attempt(family, variant, "sanitize_size() or parse_shape()",
                     lambda: problem.parse_shape(family.sanitize_size(variant)))
    arrays = _attempt(family, variant, "arrays()", lambda: problem.arrays(shape))
    missing = [a.name for a in problem.arguments if not isinstance(a, Scalar) and a.name not in arrays]
    if missing:
        raise PluginProblem(f"{where}: {family.name}'s arrays() gives no dimensions for {', '.join(missing)}")
    scalars = [a for a in problem.arguments if isinstance(a, Scalar)]
    if type(problem).scalars is Problem.scalars:  # each value is the shape's attribute: say which is missing
        for scalar in (a for a in scalars if not hasattr(shape, a.attribute)):
            raise PluginProblem(f"{where}: scalar {scalar.name} of {family.name} takes the shape's "
                                f"{scalar.attribute!r}, which its shapes do not have (set Scalar(..., source=...) or "
                                f"override scalars())")
    values = _attempt(family, variant, "scalars()", lambda: problem.scalars(shape))
    if missing := [a.name for a in scalars if a.name not in values]:
        raise PluginProblem(f"{where}: {family.name}'s scalars() gives no value for {', '.join(missing)}")


def _check_reference(family: Family, variant: Variant, shape: Any) -> None:
    """A reference of the output region's shape, from inputs of the variant's element type."""
    problem = family.problem
    if variant.dtype not in INPUT_CTYPE:
        raise PluginProblem(f"{family.source}: {variant.name}: element type (dtype) {variant.dtype!r} is not one of "
                            f"{', '.join(INPUT_CTYPE)}; the parameter named dtype is the arrays' element type")

    def expected() -> np.ndarray | None:
        inputs = {name: array.astype(np.float64) for name, array in problem.random_inputs(variant.dtype, shape, 1).items()}
        reference = problem.reference(inputs, shape)
        return None if reference is None else np.asarray(reference)

    result = _attempt(family, variant, "reference()", expected)
    if result is None:  # an output that is not checked
        return
    region = tuple(s.stop - s.start for s in problem.output_region(shape))
    if result.shape != region:
        raise PluginProblem(f"{family.source}: {family.name}'s reference() returns an array of shape {result.shape} at "
                            f"{shape}, but the output region of {problem.output.name} is {region}; return the "
                            f"expected values of exactly that region")


def one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return text[0] if text else type(error).__name__
