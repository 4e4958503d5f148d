"""What every kernel variant shares: declared parameters, validation and procedural names.

A family declares its variant as a frozen, ordered dataclass whose fields are made with
`choice(...)` or `integer(...)`. The field order is the order of the tokens in the name:

    matmul_f32_t16_p1_guard_both   <->   MatmulVariant(dtype="f32", tile=16, padding=1, ...)

The name is the kernel's `extern "C"` symbol, its file name in `variants/`, the filter target and
the key of every result row and tuning-database entry: a persistence format. It must be a C
identifier and must parse back (`from_name`). So a parameter added to a family that already has
stored results is declared with `omit=` its default: variants at the default keep their old
names, and old names parse to the default. `Variant.name_format()` shows the format.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, Self

from ..core.checks import whole_rule, whole_text
from ..core.errors import InvalidVariant, UsageError

_PARAMETER = "tilegen.parameter"
NAMES_KEPT = 1 << 16  # variant names remembered: a coordinator asks each point's several times
ELEMENT_TYPE = "dtype"  # the parameter that gives a variant's element type (see Variant)


def require(condition: bool, reason: str) -> None:
    """A constraint of a family's variants: raise InvalidVariant with `reason` when `condition` is
    false. The reason becomes the skipped row's message, so it names parameter, value and limit."""
    if not condition:
        raise InvalidVariant(reason)


@dataclass(frozen=True)
class Parameter:
    """One knob of a variant: its allowed values, its default space and how it is spelt in names."""

    name: str
    kind: type  # int or str
    default: Any
    space: tuple[Any, ...]  # values a sweep or compile takes when the user names none
    emitted: tuple[Any, ...]  # values of the golden record in variants/
    choices: tuple[Any, ...] | None  # the only allowed values, or None for any integer >= minimum
    minimum: int | None
    tag: str  # prefix of the value in the name: "t" gives t16
    omit: Any  # a value left out of the name (None: always written)
    help: str
    # the choices as a set: a value is checked at every point of a space (10,000 values: 10,000 points)
    allowed: frozenset[Any] = dataclasses.field(init=False, repr=False, compare=False, default=frozenset())

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed", frozenset(self.choices or ()))

    def parse(self, text: str) -> Any:
        """The value a user typed, converted and checked on its own (not against other values)."""
        value: Any = text
        if self.kind is int:
            value = whole_text(text, negative=self.negative)
            if value is None:
                raise UsageError(f"{self.name} must be an integer written in digits, like 16; got {text!r} "
                                 f"({whole_rule(self.negative)})")
        self.check(value)
        return value

    @property
    def negative(self) -> bool:
        """Whether a value may be written with a '-': only for a parameter whose minimum is below 0."""
        return self.minimum is not None and self.minimum < 0

    def check(self, value: Any) -> None:
        if self.choices is not None and not self.allows(value):
            allowed = ", ".join(str(c) for c in self.choices)
            raise InvalidVariant(f"{self.name} {value!r} is not one of: {allowed}")
        if self.kind is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidVariant(f"{self.name} must be an integer, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise InvalidVariant(f"{self.name} {value} is below its minimum of {self.minimum}")

    def allows(self, value: Any) -> bool:
        """Whether `value` is one of the choices (an unhashable value is none of them)."""
        try:
            return value in self.allowed
        except TypeError:
            return False

    def token(self, value: Any) -> str:
        """How the value reads inside a name: a C identifier fragment ("after-load" -> "afterload")."""
        return f"{self.tag}{value}".replace("-", "")

    def from_token(self, token: str) -> Any:
        if self.choices is not None:
            for value in self.choices:
                if self.token(value) == token:
                    return value
            raise ValueError(token)
        value = whole_text(token.removeprefix(self.tag))  # names never hold a '-': token() drops it
        if not token.startswith(self.tag) or value is None:
            raise ValueError(token)
        return value


def choice(default: Any, choices: Iterable[Any], *, help: str, space: Iterable[Any] | None = None,
           emitted: Iterable[Any] | None = None, omit: Any = None, tag: str = "") -> Any:
    """A dataclass field for an enumerated parameter (strings, or integers with a `tag`)."""
    choices = tuple(choices)
    return _field(default, kind=type(default), choices=choices, minimum=None, tag=tag, omit=omit, help=help,
                  space=space, emitted=emitted)


def integer(default: int, *, tag: str, minimum: int, help: str, space: Iterable[int] | None = None,
            emitted: Iterable[int] | None = None, omit: int | None = None) -> Any:
    """A dataclass field for an integer parameter, written `<tag><value>` in names (left out at `omit`)."""
    return _field(default, kind=int, choices=None, minimum=minimum, tag=tag, omit=omit, help=help,
                  space=space, emitted=emitted)


def _field(default: Any, *, space: Iterable[Any] | None, emitted: Iterable[Any] | None,
           **spec: Any) -> Any:
    space = tuple(space) if space is not None else (default,)
    emitted = tuple(emitted) if emitted is not None else space
    metadata = {_PARAMETER: dict(spec, default=default, space=space, emitted=emitted)}
    return dataclasses.field(default=default, metadata=metadata)


class Variant:
    """Base of every family's variant dataclass (which must be frozen and ordered).

    `dtype` is the element type of the kernel's arrays (f32 or f64): a class without a `dtype`
    parameter has one element type, this class attribute; a `dtype` parameter makes it a choice
    per variant. It is the one parameter name with a meaning to tilegen."""

    family: ClassVar[str]
    dtype: ClassVar[str] = "f32"

    @classmethod
    def parameters(cls) -> tuple[Parameter, ...]:
        return _parameters(cls)

    @classmethod
    def parameter(cls, name: str) -> Parameter:
        for parameter in cls.parameters():
            if parameter.name == name:
                return parameter
        known = ", ".join(p.name for p in cls.parameters())
        raise UsageError(f"{cls.family} has no parameter {name!r}; its parameters are: {known}")

    @classmethod
    def name_format(cls) -> str:
        """How names are spelt: `[...]` parts are left out at the value given, e.g.
        matmul_{dtype}_t{tile}_p{padding}_{bounds}_{sync}[_{smem}: static][_{method}: tiled]."""
        parts = [cls.family]
        for p in cls.parameters():
            token = f"_{p.tag}{{{p.name}}}"
            parts.append(token if p.omit is None else f"[{token}: {p.omit}]")
        return "".join(parts)

    @classmethod
    def from_params(cls, values: Mapping[str, Any]) -> Self:
        """A variant from user-typed values (strings or ints); missing ones take their defaults."""
        if not isinstance(values, Mapping):
            raise UsageError(f"a variant's values map parameter names to values, like {{'tile': 16}}; got {values!r}")
        converted = {}
        for name, value in values.items():
            parameter = cls.parameter(name)
            converted[name] = parameter.parse(str(value))
        return cls(**converted)

    @classmethod
    def from_name(cls, name: str) -> Self:
        if not isinstance(name, str):
            raise UsageError(f"a variant name is text like {cls().name}, got {name!r}")
        tokens = name.split("_")
        if tokens[0] != cls.family:
            raise UsageError(f"{name!r} is not a {cls.family} variant name")
        values: dict[str, Any] = {}
        position = 1
        for parameter in cls.parameters():
            token = tokens[position] if position < len(tokens) else ""
            try:
                values[parameter.name] = parameter.from_token(token)
                position += 1
            except ValueError:
                if parameter.omit is None:
                    raise UsageError(f"cannot read {parameter.name} from {token!r} in {name!r}") from None
                values[parameter.name] = parameter.omit
        variant = cls(**values)
        if position != len(tokens) or variant.name != name:
            raise UsageError(f"{name!r} is not a {cls.family} variant name (closest: {variant.name})")
        return variant

    @property
    def name(self) -> str:
        return _name(self)

    def params(self) -> dict[str, Any]:
        return {p.name: getattr(self, p.name) for p in self.parameters()}

    def check(self) -> None:
        """Raise InvalidVariant naming parameter, value and limit, or return if the variant is valid."""
        for parameter in self.parameters():
            parameter.check(getattr(self, parameter.name))
        self.check_combination()

    @classmethod
    def element_types(cls) -> tuple[str, ...]:
        """The element types this variant type comes in: its `dtype` parameter's choices, or the
        class's one `dtype` (f32 unless the class says otherwise) when it has no such parameter."""
        declared = [p.choices for p in cls.parameters() if p.name == ELEMENT_TYPE]
        return tuple(declared[0]) if declared and declared[0] else (cls.dtype,)

    def with_element_type(self, dtype: str) -> Self:
        """This variant in element type `dtype` (itself when it has no `dtype` parameter)."""
        has_parameter = any(p.name == ELEMENT_TYPE for p in self.parameters())
        return dataclasses.replace(self, **{ELEMENT_TYPE: dtype}) if has_parameter else self

    @property
    def output_dtype(self) -> str:
        """The output array's element type: `dtype`, unless the family's variants say otherwise
        (a half-precision GEMM that writes float32, say)."""
        return self.dtype

    @property
    def dynamic_shared_bytes(self) -> int:
        """Shared memory to ask for at launch (extern __shared__): none unless the family says so."""
        return 0

    @property
    def deliberately_racy(self) -> bool:
        """Whether a barrier was left out on purpose (checked several times, on different inputs)."""
        return False

    def check_combination(self) -> None:
        """Family rules that involve several parameters or a CUDA limit; overridden per family."""

    def render_command(self, family_path: Path | None = None) -> str:
        """The command line that renders exactly this variant (a plugin's with its --family-path)."""
        options = " ".join(f"-p {name}={value}" for name, value in self.params().items())
        loading = f"--family-path {family_path} " if family_path else ""
        return f"tilegen {loading}render {self.family} {options}"

    def __str__(self) -> str:
        return self.name



@functools.cache
def _parameters(variant_type: type[Variant]) -> tuple[Parameter, ...]:
    """A variant type's parameters, made once: its fields never change."""
    return tuple(Parameter(name=f.name, **f.metadata[_PARAMETER]) for f in dataclasses.fields(variant_type))


@functools.lru_cache(maxsize=NAMES_KEPT)
def _name(variant: Variant) -> str:
    """A variant's name, spelt once (frozen: equal variants have one name)."""
    tokens = [variant.family]
    for parameter in variant.parameters():
        value = getattr(variant, parameter.name)
        if parameter.omit is None or value != parameter.omit:
            tokens.append(parameter.token(value))
    return "_".join(tokens)
