"""A parameter space: value lists per parameter, expanded with itertools.product.

Values are checked one by one when the space is built (an unknown parameter or a value outside its
list is the user's mistake: UsageError). Combinations that break a rule or a CUDA limit are kept
out of the expansion with their reason, so that they become `skipped` rows, not silence.
"""

from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .errors import InvalidVariant, UsageError
from .family import Family
from .variant import Variant


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
        base = {p.name: p.space for p in family.variant_type.parameters()}
        return cls._build(family, base, overrides or {})

    @classmethod
    def emitted(cls, family: Family) -> "Space":
        """The golden record's space: what `tilegen emit` writes to variants/."""
        return cls._build(family, {p.name: p.emitted for p in family.variant_type.parameters()}, {})

    @classmethod
    def from_options(cls, family: Family, options: Iterable[str]) -> "Space":
        """The default space changed by command-line options of the form name=v1,v2,..."""
        return cls.default(family, parse_options(family, options))

    @classmethod
    def _build(cls, family: Family, base: dict[str, tuple[Any, ...]],
               overrides: Mapping[str, Sequence[Any]]) -> "Space":
        values = dict(base)
        for name, chosen in overrides.items():
            parameter = family.variant_type.parameter(name)
            if not chosen:
                raise UsageError(f"parameter {name} needs at least one value")
            values[name] = tuple(parameter.parse(str(v)) for v in chosen)
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

    def select(self, pattern: str | None = None) -> Expansion:
        """`expand`, refusing a filter that matches no variant at all."""
        expansion = self.expand(pattern)
        if not expansion.valid and not expansion.skipped:
            raise UsageError(f"no {self.family.name} variant matches --filter {pattern!r}")
        return expansion

    def expand(self, pattern: str | None = None) -> Expansion:
        """Valid variants and skipped ones with their reasons, keeping only names matching `pattern`."""
        valid, skipped = [], []
        for variant in self:
            if pattern and not name_matches(variant.name, pattern):
                continue
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
        parsed.setdefault(name.strip(), []).extend(v.strip() for v in text.split(",") if v.strip())
    return parsed


def name_matches(name: str, pattern: str) -> bool:
    """A glob (`*_guard_*`) when the pattern has wildcards, else a substring (`guard_both`)."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name
