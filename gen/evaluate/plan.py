"""What to evaluate: points (a variant on a shape, with a run-time cache preference), and a plan
that checks every point of a space exactly once, when it is made.

A point the plan lets through is runnable: the engine trusts it and checks nothing again. The
others are counted per reason, size and cache preference, so that they become `skipped` rows
(one per reason, or one per point with `keep`), never silence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.results import Row, row_key, skipped_row
from ..families.family import Family, family_arch, point_refusal, refused
from ..families.space import Space, name_matches
from ..families.variant import Variant

SAMPLE = 5  # points a dry run shows
ANNOUNCE_POINTS = 10_000  # spaces this large take a second or more to check: their size is said first


@dataclass(frozen=True)
class Point:
    """One evaluation: a variant on a shape (None: compile only) with a run-time cache preference,
    and with its joules per launch where `energy` (a tune's finalists), compiled at `level` (None:
    the run's compile level; a tune's screening names its fast one)."""

    variant: Variant
    shape: Any = None
    cache_config: str = ""
    energy: bool = False
    level: str | None = None

    @property
    def key(self) -> str:
        return row_key(self.variant.name, shape_text(self.shape), self.cache_config)

    def __str__(self) -> str:
        where = " ".join(part for part in (shape_text(self.shape), self.cache_config) if part)
        return f"{self.variant.name} {where}".strip()


@dataclass
class SkippedGroup:
    """Points not run for one reason, at one size and cache preference."""

    reason: str
    example: Point
    count: int = 0
    points: list[Point] = field(default_factory=list)  # every one, kept only when rows per point are wanted


@dataclass
class Plan:
    """The points of a space at some shapes: those to run, and those not run, by reason."""

    family: Family
    space: Space
    runnable: list[Point]
    skipped: dict[tuple[str, str, str], SkippedGroup]
    sizes: int
    filtered: int = 0  # points whose names --filter left out
    adapted: int = 0  # runnable points that are their family's adaptation of a point that cannot run (`adapt`)
    merged: int = 0  # points that are (once adapted) another runnable point
    changes: list[str] = field(default_factory=list)  # the values the adaptations set, e.g. ['bounds=guard']

    @property
    def skipped_count(self) -> int:
        return sum(group.count for group in self.skipped.values())

    def describe(self) -> str:
        """Counts in one line: what is run, and what is not (for how many reasons)."""
        reasons = f" ({len(self.skipped)} reasons)" if len(self.skipped) > 1 else ""
        filtered = f", {self.filtered:,} left out by --filter" if self.filtered else ""
        changes = ", ".join(self.changes)
        adapted = f" ({self.adapted:,} of them adapted: {changes})" if self.adapted else ""
        adapted += f", {self.merged:,} more the same as one of those" if self.merged else ""
        return (f"{space_line(self.space, self.sizes)}; {len(self.runnable):,} to run{adapted}, {self.skipped_count:,} "
                f"not run{reasons}{filtered}")

    def preview(self, sample: int = SAMPLE) -> str:
        """The counts, a sample of the points to run, and every reason a point is not run."""
        lines = [self.describe()]
        lines += [f"  run: {point}" for point in self.runnable[:sample]]
        if len(self.runnable) > sample:
            lines.append(f"  ... and {len(self.runnable) - sample:,} more")
        lines += [f"  not run ({group.count:,}, e.g. {group.example}): {group.reason}"
                  for group in self.skipped.values()]
        return "\n".join(lines)

    def skipped_rows(self, provenance: Mapping[str, Any], keep: bool) -> list[Row]:
        """A row per point not run (`keep`), or one summary row per group with its count."""
        if keep:
            return [_skipped(point, group.reason, provenance) for group in self.skipped.values()
                    for point in group.points]
        return [_skipped(group.example, group.reason, provenance, group.count) for group in self.skipped.values()]


def make_plan(family: Family, space: Space, shapes: Sequence[Any], cache_configs: Sequence[str],
              pattern: str | None = None, keep: bool = False, adapt: bool = False, arch: str | None = None) -> Plan:
    """Every point of the space at every shape (None: compile only) and cache preference, each
    checked once: the runnable ones listed, the others counted per reason (and kept, with `keep`).
    Given the `arch` the run compiles for, variants that cannot be compiled for it are skipped too,
    and a family whose kernels cannot run there is refused (UsageError), as the run refuses it.
    With `adapt` (a tune), a valid variant that cannot run a shape runs as the family's nearest
    adaptation that can (Family.runnable), each runnable point listed once."""
    if arch is not None:
        family_arch(family, arch)
    runnable: list[Point] = []
    skipped: dict[tuple[str, str, str], SkippedGroup] = {}
    matched = False
    filtered = 0
    seen: set[Point] = set()
    adapted, merged, changes = 0, 0, dict[str, None]()
    for variant in space:
        if pattern and not name_matches(variant.name, pattern):
            filtered += len(shapes) * len(cache_configs)
            continue
        matched = True
        invalid = point_refusal(family, variant, arch=arch)  # the same at every shape: checked once
        for shape in shapes:
            reason = invalid or (None if shape is None else refused(family, variant, shape))
            runs = family.runnable(variant, shape) if adapt and reason and not invalid else None
            if runs is not None:
                reason = None
                changes.update((f"{k}={v}", None) for k, v in runs.params().items() if variant.params()[k] != v)
            for cache in cache_configs:
                point = Point(runs or variant, shape, cache)
                if reason is None:
                    merged += point in seen  # only with adaptations can a point repeat
                    if point not in seen:
                        adapted += runs is not None
                        runnable.append(point)
                        seen.add(point)
                    continue
                group = skipped.setdefault((reason, shape_text(shape), cache), SkippedGroup(reason, point))
                group.count += 1
                if keep:
                    group.points.append(point)
    if not matched:
        raise space.nothing_matches(pattern)
    return Plan(family, space, runnable, skipped, len(shapes), filtered, adapted, merged, list(changes))


def space_line(space: Space, sizes: int) -> str:
    """'matmul: 18 points (tile: 3 x ...) at 2 sizes'."""
    return f"{space.family.name}: {space.describe()}" + (f" at {sizes} sizes" if sizes > 1 else "")


def shape_text(shape: Any) -> str:
    return "" if shape is None else str(shape)


def _skipped(point: Point, reason: str, provenance: Mapping[str, Any], count: int | None = None) -> Row:
    return skipped_row(point.variant, reason, shape_text(point.shape), cache_config=point.cache_config,
                       provenance=dict(provenance), skipped_count=count)
