"""What evaluations produce, as plain data: statuses, result rows, timings, measurements, GPU models.

Pure data: this module imports neither jinja2 nor pycuda (nor any other part of tilegen), so the
store, reports, strategies and the tuning database never pull in rendering or the GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

from .checks import strict_json
from .quantities import OPTIONAL_COLUMNS
from .timing import Timing


class Status(StrEnum):
    OK = "ok"
    WRONG = "wrong"
    RACY = "racy"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"
    COMPILED = "compiled"


FULL_LEVEL = "full"  # the compile level of every row made before levels (gen.compiling.levels owns the rest)
_DISPLAYED = re.compile(r"(?P<name>.+) \(cc (?P<cc>[0-9.]+), (?P<sm_count>[0-9]+) SMs, (?P<memory_gib>[0-9]+) GiB\)")


@dataclass(frozen=True, order=True)
class GpuModel:
    """What tuning is kept per: two parts of one architecture (an H100 and an H200) differ."""

    name: str
    cc: str
    sm_count: int
    memory_gib: int

    def __str__(self) -> str:
        return f"{self.name} (cc {self.cc}, {self.sm_count} SMs, {self.memory_gib} GiB)"

    @property
    def key(self) -> str:
        """A stable key made of the fields alone (files keyed by a GPU model use it, not the display
        string, which may be reworded): 'NVIDIA H100 80GB HBM3|9.0|132|79'."""
        return f"{self.name}|{self.cc}|{self.sm_count}|{self.memory_gib}"

    @property
    def arch(self) -> str:
        """The nvcc architecture of this model: cc 9.0 -> sm_90."""
        return "sm_" + self.cc.replace(".", "")

    @classmethod
    def from_display(cls, text: str) -> "GpuModel | None":
        """The model that tilegen 0.1 and 0.2 wrote as its display string (`str`), like "NVIDIA H100
        80GB HBM3 (cc 9.0, 132 SMs, 79 GiB)"; None for any other text."""
        found = _DISPLAYED.fullmatch(text)
        return found and cls(found["name"], found["cc"], int(found["sm_count"]), int(found["memory_gib"]))

    @classmethod
    def from_provenance(cls, provenance: dict[str, Any]) -> "GpuModel | None":
        """The model a row ran on; None for a row that ran on no GPU (a compile error), or whose
        record of it is not whole."""
        recorded = {"gpu": str, "cc": str, "sm_count": int, "gpu_memory_bytes": int}
        if not all(_fits(provenance.get(key), kind) for key, kind in recorded.items()):
            return None
        return cls(provenance["gpu"], provenance["cc"], provenance["sm_count"],
                   provenance["gpu_memory_bytes"] // 2**30)


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU as a worker sees it."""

    name: str
    cc: str
    sm_count: int
    memory_bytes: int
    l2_bytes: int
    driver: str
    index: int = 0  # the physical GPU's index on its host
    host: str = ""  # the host it sits on, where that matters (a cluster)

    @property
    def model(self) -> GpuModel:
        return GpuModel(self.name, self.cc, self.sm_count, self.memory_bytes // 2**30)

    def provenance(self) -> dict[str, Any]:
        provenance = {"gpu": self.name, "cc": self.cc, "sm_count": self.sm_count,
                      "gpu_memory_bytes": self.memory_bytes, "driver": self.driver, "gpu_index": self.index,
                      "gpu_model": str(self.model)}
        if self.host:
            provenance["host"] = self.host
        return provenance


@dataclass
class Row:
    """One variant on one problem (or, for compile-only runs, one variant)."""

    name: str
    family: str
    params: dict[str, Any]
    status: Status
    shape: str = ""
    cache_config: str = ""  # run-time cache preference ("" when not set)
    message: str = ""  # why skipped, the error, or the compile log of a failure
    # resources, from ptxas
    registers: int | None = None
    static_shared_bytes: int | None = None
    dynamic_shared_bytes: int | None = None
    spill_bytes: int | None = None
    stack_bytes: int | None = None
    compile_seconds: float | None = None
    compile_level: str = ""  # the compile level (gen.compiling.levels); '': never compiled, or before levels (full)
    measure_seconds: float | None = None  # checking and timing on the GPU
    # correctness
    error: float | None = None  # worst ||out - ref|| / ||ref|| over the checks
    tolerance: float | None = None
    checks: int | None = None
    hazards: dict[str, int] | None = None  # compute-sanitizer tool -> hazards found
    # timing, milliseconds per launch
    median_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    stdev_ms: float | None = None
    samples: int | None = None
    l2_flushed: bool | None = None
    throughput: float | None = None
    unit: str = ""
    ceiling: float | None = None  # the measured ceiling throughput is compared with, same unit
    ceiling_share: float | None = None
    energy_j: float | None = None  # joules per launch (None: not measured, or no energy counter)
    power_w: float | None = None  # the GPU's average power while it ran the variant
    sm_clock_mhz: float | None = None  # the median SM clock while it was timed (None: not read, or no NVML)
    throttle: str | None = None  # what slowed the SM meanwhile, named ('': nothing; None: not read)
    skipped_count: int | None = None  # a summary row of skipped points: how many it stands for
    # provenance
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """What identifies the row in a run: variant, problem and cache preference."""
        return row_key(self.name, self.shape, self.cache_config)

    @property
    def level(self) -> str:
        """The compile level it was compiled at: a row of tilegen before levels was compiled at full."""
        return self.compile_level or FULL_LEVEL

    @property
    def points(self) -> int:
        """How many points the row stands for: one, or a summary row's count of skipped points."""
        return self.skipped_count or 1

    def to_dict(self) -> dict[str, Any]:
        """Every field by name; the dicts (params, hazards, provenance) copied one level deep, which
        is all the depth a row has (dataclasses.asdict's deep copy cost more than the rest of a row)."""
        data = {name: getattr(self, name) for name in _row_fields()}
        for name in ("params", "hazards", "provenance"):
            if data[name] is not None:
                data[name] = dict(data[name])
        return data

    def to_json(self) -> str:
        data = self.to_dict()
        if data["skipped_count"] is None:
            del data["skipped_count"]  # rows of a single point, as before summaries existed
        return json.dumps(data, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Row":
        """The row `data` describes, every field checked against its type and range (keys tilegen does not
        know are left out); ValueError naming the field otherwise."""
        if not isinstance(data, dict):
            raise ValueError(f"a result row is a JSON object, not {_json_kind(data)}")
        for name in _required_fields():
            if name not in data:
                raise ValueError(f"its field {name!r} is missing")
        kinds = _row_types()
        for name, value in data.items():
            if name in kinds and not _fits(value, kinds[name]):
                raise ValueError(f"its field {name!r} must be {_expected(kinds[name])}, got {_shown(value)}")
            if name in kinds and (problem := _value_problem(name, value, data["status"] == Status.OK)):
                raise ValueError(f"its field {name!r} {problem}, got {_shown(value)}")
        if data["status"] == Status.OK:
            for name in OK_NUMBERS:
                if not _fits(data.get(name), float):
                    raise ValueError(f"an ok row needs a number in its field {name!r}, got {_shown(data.get(name))}")
        row = cls(**{k: v for k, v in data.items() if k in kinds})
        row.status = Status(row.status)
        return row

    def flat(self) -> dict[str, Any]:
        """One level of keys, for CSV: params become param_<name>, provenance its own keys."""
        data = self.to_dict()
        params, provenance, hazards = data.pop("params"), data.pop("provenance"), data.pop("hazards")
        data.update({f"param_{k}": v for k, v in params.items()})
        data.update({f"hazards_{k}": v for k, v in (hazards or {}).items()})
        data.update(provenance)
        return data


OK_NUMBERS = ("error", "median_ms")  # what makes a row ok: it was checked, and timed
TIMES = ("median_ms", "min_ms", "max_ms")  # milliseconds per launch: finite and above 0


def _value_problem(name: str, value: Any, ok: bool) -> str | None:
    """What is wrong with a number a row holds, or None: times finite and above 0, other numbers finite
    and not negative; `error` may be infinite where the row is not ok (an output holding NaN)."""
    numbers = value.values() if name == "hazards" and value else [value]  # params and provenance are free
    for number in (n for n in numbers if isinstance(n, (int, float)) and not isinstance(n, bool)):  # None: fine
        if math.isnan(number) or number < 0 or (name in TIMES and number == 0):
            return "must be above 0" if name in TIMES else "must not be negative or NaN"
        if math.isinf(number) and (name != "error" or ok):
            return "must be finite"
    return None


def row_from_json(text: str | bytes) -> Row:
    """A row from one line of JSON, checked field by field (Row.from_dict); a key given twice is
    refused, not settled silently by the last one. ValueError naming what is wrong."""
    return Row.from_dict(strict_json(text))


@functools.cache
def _row_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Row))


@functools.cache
def _required_fields() -> tuple[str, ...]:
    """The fields every row names: those without a default."""
    return tuple(f.name for f in dataclasses.fields(Row)
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


@functools.cache
def _row_types() -> dict[str, Any]:
    """Row's fields and their types, as annotated: the one statement of what a row holds."""
    return typing.get_type_hints(Row)


def _fits(value: Any, kind: Any) -> bool:
    """Whether a value read from JSON is of the annotated type `kind` (an int counts as a float)."""
    if kind is Any:
        return True
    if kind is type(None):
        return value is None
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is dict:
        keys, values = typing.get_args(kind)
        return isinstance(value, dict) and all(_fits(k, keys) and _fits(v, values) for k, v in value.items())
    if isinstance(kind, type) and issubclass(kind, Enum):
        return isinstance(value, str) and value in {member.value for member in kind}
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _expected(kind: Any) -> str:
    """The annotated type `kind` in words: 'a whole number, or null'."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        named = " or ".join(_expected(option) for option in options if option is not type(None))
        return f"{named}, or null" if type(None) in options else named
    if typing.get_origin(kind) is dict:
        keys, values = typing.get_args(kind)
        return "an object" if values is Any else f"an object whose values are each {_expected(values)}"
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "one of: " + ", ".join(member.value for member in kind)
    return {str: "text", int: "a whole number", float: "a number", bool: "true or false"}.get(
        kind, getattr(kind, "__name__", str(kind)))


def _json_kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "text", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _shown(value: Any) -> str:
    """A value as JSON writes it, cut short: what the file holds, not Python's spelling."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def skipped_row(variant: Any, reason: str, shape: str = "", **extra: Any) -> Row:
    """The row of a point that is not run: an invalid variant, or a shape the variant refuses."""
    return Row(variant.name, variant.family, variant.params(), Status.SKIPPED, shape=shape, message=reason, **extra)


def row_key(name: str, shape: str, cache_config: str = "") -> str:
    return "@".join(part for part in (name, shape, cache_config) if part)


@dataclass
class Measurement:
    """A worker's verdict on one job."""

    status: Status
    message: str = ""
    error: float | None = None
    tolerance: float | None = None
    checks: int = 0
    timing: Timing | None = None
    l2_flushed: bool | None = None
    throughput: float | None = None
    unit: str = ""
    ceiling: float | None = None
    check_seconds: float = 0.0
    time_seconds: float = 0.0
    device: DeviceInfo | None = None
    context_lost: bool = False  # the CUDA context is unusable: the worker must be replaced
    hazards: dict[str, int] | None = None  # compute-sanitizer tool -> hazards, when it ran
    hazard_note: str = ""  # what went wrong running the sanitizer
    energy_j: float | None = None  # joules per launch, when asked for and the GPU reports energy
    power_w: float | None = None
    sm_clock_mhz: float | None = None  # read with energy, where NVML reports the clock
    throttle: str | None = None

    def apply_to(self, row: Row) -> None:
        """Copy the verdict, timing, hazards and device into a result row; a variant with hazards
        that computed a result (right or wrong) is `racy`."""
        row.status, row.message = self.status, self.message
        row.error, row.tolerance, row.checks = self.error, self.tolerance, self.checks
        if self.timing:
            t = self.timing
            row.median_ms, row.min_ms, row.max_ms, row.stdev_ms, row.samples = (
                t.median_ms, t.min_ms, t.max_ms, t.stdev_ms, t.samples)
            row.l2_flushed = self.l2_flushed
        row.throughput, row.unit, row.ceiling = self.throughput, self.unit, self.ceiling
        for column in OPTIONAL_COLUMNS:
            setattr(row, column.field, getattr(self, column.field))
        row.measure_seconds = self.check_seconds + self.time_seconds
        if self.throughput is not None and self.ceiling:
            row.ceiling_share = self.throughput / self.ceiling
        if self.device:
            row.provenance.update(self.device.provenance())
        if self.hazards is not None:
            row.hazards = self.hazards
            found = ", ".join(f"{tool} {count}" for tool, count in self.hazards.items() if count)
            if found and row.status in (Status.OK, Status.WRONG):
                row.status = Status.RACY
            notes = [self.hazard_note, f"compute-sanitizer hazards: {found}" if found else ""]
            row.message = "; ".join(m for m in (row.message, *notes) if m)


def is_ok(row: Row) -> bool:
    """A correct, timed row."""
    return row.status == Status.OK and row.median_ms is not None
