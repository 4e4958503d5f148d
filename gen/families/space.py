"""A parameter space: value lists per parameter, expanded with itertools.product.

Values are checked one by one when the space is built (an unknown parameter or a value outside its
list is the user's mistake: UsageError). Combinations that break a rule or a CUDA limit are kept
out of the expansion with their reason, so that they become `skipped` rows, not silence.
"""

from __future__ import annotations

import fnmatch
import itertools
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..core.errors import InvalidVariant, UsageError
from .family import Family
from .variant import Variant

# Points a command takes on without --max-points: an sgemm default space is 15,552; checking a
# point costs about 0.1 ms, so this many are checked in seconds.
MAX_POINTS = 100_000


@dataclass(frozen=True)
class Skipped:
    variant: Variant
    reason: str


@dataclass(frozen=True)
class Expansion:
    valid: list[Variant]
    skipped: list[Skipped]


@dataclass(frozen=True)
class Space:
    family: Family
    values: Mapping[str, tuple[Any, ...]]  # every parameter of the family, in declaration order

    @classmethod
    def default(cls, family: Family, overrides: Mapping[str, Sequence[Any]] | None = None) -> "Space":
        """The family's default space, with the parameters in `overrides` replaced."""
        _check_family(family)
        base = {p.name: p.space for p in family.variant_type.parameters()}
        return cls._build(family, base, overrides or {})

    @classmethod
    def emitted(cls, family: Family) -> "Space":
        """The golden record's space: what `tilegen emit` writes to variants/."""
        _check_family(family)
        return cls._build(family, {p.name: p.emitted for p in family.variant_type.parameters()}, {})

    @classmethod
    def from_options(cls, family: Family, options: Iterable[str]) -> "Space":
        """The default space changed by command-line options of the form name=v1,v2,..."""
        return cls.default(family, parse_options(family, options))

    @classmethod
    def _build(cls, family: Family, base: dict[str, tuple[Any, ...]],
               overrides: Mapping[str, Sequence[Any]]) -> "Space":
        if not isinstance(overrides, Mapping):
            raise UsageError(f"params must map parameter names to values, like {{'tile': [16, 32]}}; got "
                             f"{overrides!r}")
        values = dict(base)
        for name, chosen in overrides.items():
            parameter = family.variant_type.parameter(name)
            chosen = values_of(chosen, f"parameter {name}")
            if not chosen:
                raise no_values(family, name)
            values[name] = tuple(dict.fromkeys(parameter.parse(str(v)) for v in chosen))
        return cls(family, values)

    def __iter__(self) -> Iterator[Variant]:
        names = list(self.values)
        for combination in itertools.product(*self.values.values()):
            yield self.family.variant_type(**dict(zip(names, combination)))

    def __len__(self) -> int:
        count = 1
        for values in self.values.values():
            count *= len(values)
        return count

    def describe(self) -> str:
        """'18 points (tile: 3 x padding: 2 x bounds: 3)': the size, and the values each parameter has."""
        factors = " x ".join(f"{name}: {len(values)}" for name, values in self.values.items() if len(values) > 1)
        return f"{len(self):,} points" + (f" ({factors})" if factors else "")

    def check_size(self, max_points: int = MAX_POINTS, times: int = 1) -> None:
        """Refuse more than `max_points` points before anything is expanded: the space's, times
        `times` (a sweep's sizes and cache preferences)."""
        total = len(self) * times
        if total > max_points:
            each = f", at {times} sizes and cache preferences {total:,}" if times > 1 else ""
            raise UsageError(f"the {self.family.name} space has {self.describe()}{each}, more than --max-points "
                             f"{max_points:,}: narrow it with -p NAME=VALUES, or raise --max-points")

    def select(self, pattern: str | None = None, max_points: int = MAX_POINTS) -> Expansion:
        """`expand`, refusing a space larger than `max_points` and a filter that matches no variant."""
        self.check_size(max_points)
        expansion = self.expand(pattern)
        if not expansion.valid and not expansion.skipped:
            raise self.nothing_matches(pattern)
        return expansion

    def nothing_matches(self, pattern: str | None) -> UsageError:
        return UsageError(f"no {self.family.name} variant matches --filter {pattern!r}")

    def matching(self, pattern: str | None = None) -> Iterator[Variant]:
        """The variants whose names match `pattern` (all without one), one at a time."""
        return (variant for variant in self if not pattern or name_matches(variant.name, pattern))

    def expand(self, pattern: str | None = None) -> Expansion:
        """Valid variants and skipped ones with their reasons, keeping only names matching `pattern`."""
        valid, skipped = [], []
        for variant in self.matching(pattern):
            try:
                variant.check()
                valid.append(variant)
            except InvalidVariant as reason:
                skipped.append(Skipped(variant, str(reason)))
        return Expansion(valid, skipped)


def parse_options(family: Family, options: Iterable[str]) -> dict[str, list[str]]:
    """['tile=8,16', 'bounds=guard'] -> {'tile': ['8', '16'], 'bounds': ['guard']}."""
    parsed: dict[str, list[str]] = {}
    for option in options:
        name, equals, text = option.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"parameter option {option!r} must look like name=value or name=v1,v2")
        family.variant_type.parameter(name.strip())
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values:  # 'tile=', 'tile=,,': every command needs a value to take
            raise no_values(family, name.strip())
        parsed.setdefault(name.strip(), []).extend(values)
    return parsed


def no_values(family: Family, name: str) -> UsageError:
    return UsageError(f"parameter {name} needs at least one value (tilegen list {family.name} shows its values)")


def values_of(given: Any, what: str) -> tuple[Any, ...]:
    """A list of values as the API takes it: a sequence, or one value on its own (a string is one
    value, never its characters; a number, numpy's too, is one value; bytes are one value, refused
    where it is read, never a list of character codes)."""
    if isinstance(given, (str, bytes, bytearray, numbers.Number)):
        return (given,)
    if isinstance(given, Mapping) or not isinstance(given, Iterable):
        raise UsageError(f"{what} takes a list of values, like ['16', '32'], got {given!r}")
    try:
        return tuple(given)
    except TypeError:  # an iterable that will not iterate: a numpy array of no dimensions
        raise UsageError(f"{what} takes a list of values, like ['16', '32'], got {given!r}") from None


def _check_family(family: Any) -> None:
    if not isinstance(family, Family):
        raise UsageError(f"a space is made of a family object (gen.families.get_family('matmul')), got {family!r}")


def name_matches(name: str, pattern: str) -> bool:
    """A glob (`*_guard_*`) when the pattern has wildcards, else a substring (`guard_both`)."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name
