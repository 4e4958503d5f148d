"""A fully measured space read from a file, for replaying strategies without a GPU: a T4 results
file (the auto-tuning community's format, as the FAIR benchmark hub's brute-forced spaces are kept)
or a Kernel Tuner cache file.

The space is the file's configurations (those its restrictions allow); a configuration marked failed
is a hidden constraint: proposing it costs its compile and framework time and answers a failure."""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, make_dataclass
from pathlib import Path
from typing import Any, Iterator

from ..core.errors import UsageError
from ..families.variant import Variant, choice
from .strategies import SearchSpace


@dataclass(frozen=True)
class MeasuredSpace:
    """A space measured in full: each configuration's time (ms, None where it failed) and what
    evaluating it cost (seconds of compile, framework, validation and runs)."""

    source: str
    space: SearchSpace
    time_ms: dict[str, float | None]  # by variant name
    cost_s: dict[str, float]

    @property
    def optimum_ms(self) -> float:
        return min(t for t in self.time_ms.values() if t is not None)

    def __len__(self) -> int:
        return len(self.space.variants)


def read_measured(path: Path | str) -> MeasuredSpace:
    """The measured space in a T4 file or a Kernel Tuner cache file (either may be gzipped)."""
    path = Path(path).expanduser()
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as stream:
            held = json.load(stream)
    except (OSError, ValueError, EOFError) as error:
        raise UsageError(f"{path} cannot be read as a T4 or Kernel Tuner cache file ({error}); give another "
                         f"file") from None
    if isinstance(held, dict) and isinstance(held.get("results"), list):
        entries = list(_t4_entries(held["results"]))
    elif isinstance(held, dict) and isinstance(held.get("cache"), dict):
        entries = list(_cache_entries(held["cache"], held.get("tune_params_keys")))
    else:
        raise UsageError(f"{path} is neither a T4 results file ('results') nor a Kernel Tuner cache file "
                         f"('cache'); give one of those")
    if not any(time is not None for _, time, _ in entries):
        raise UsageError(f"{path} has no configuration that ran; give a file of a measured space")
    return _measured(str(path), entries)


# ---- the two formats ------------------------------------------------------------------------------

Entry = tuple[dict[str, Any], float | None, float]  # parameters, time in ms or None, cost in seconds


def _t4_entries(results: list) -> Iterator[Entry]:
    for result in results:
        try:
            params, times = result["configuration"], result["times"]
            value = next(m["value"] for m in result["measurements"] if m["name"] == "time")
        except (KeyError, TypeError, StopIteration):
            raise UsageError("a T4 result lacks its configuration, times or 'time' measurement; give a T4 "
                             "file of Kernel Tuner's schema") from None
        cost_ms = sum(float(times.get(k) or 0) for k in ("compilation", "framework", "validation")) \
            + sum(times.get("runtimes") or [])
        failed = result.get("invalidity", "correct") != "correct"
        yield dict(params), _time(value, failed), cost_ms / 1000


def _cache_entries(cache: dict, keys: list | None) -> Iterator[Entry]:
    for record in cache.values():
        params = {k: record[k] for k in keys} if keys else {k: v for k, v in record.items() if k in _cache_keys(record)}
        cost_ms = sum(float(record.get(k) or 0) for k in
                      ("compile_time", "verification_time", "benchmark_time", "framework_time"))
        yield params, _time(record.get("time"), False), cost_ms / 1000


def _cache_keys(record: dict) -> list[str]:
    """A cache record's parameters when the file does not list them: what precedes its 'time'."""
    keys = list(record)
    return keys[:keys.index("time")] if "time" in keys else []


def _time(value: Any, failed: bool) -> float | None:
    if failed or isinstance(value, (str, bool)) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _measured(source: str, entries: list[Entry]) -> MeasuredSpace:
    names = list(entries[0][0])
    values = {n: tuple(dict.fromkeys(params[n] for params, _, _ in entries)) for n in names}
    fields = [(n, Any, choice(values[n][0], values[n], tag=_tag(n), help=f"the file's {n}")) for n in names]
    variant_type = make_dataclass("MeasuredVariant", fields, bases=(Variant,), frozen=True, order=False,
                                  namespace={"family": "measured"})
    variants, time_ms, cost_s = [], {}, {}
    for params, time, cost in entries:
        variant = variant_type(**params)
        if variant.name not in time_ms:
            variants.append(variant)
        time_ms[variant.name], cost_s[variant.name] = time, cost
    return MeasuredSpace(source, SearchSpace(variants), time_ms, cost_s)


def _tag(name: str) -> str:
    return "".join(c for c in name if c.isalnum() or c == "_") + "_"
