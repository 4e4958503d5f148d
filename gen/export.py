"""Results in the auto-tuning community's T4 format (the Open Autotuning Results Schema used by
Kernel Tuner: https://github.com/odgaard/TuningSchema, results-schema.json, version 1.0.0)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable

from . import __version__
from .errors import UsageError
from .paths import writable_file
from .results import Row, Status

T4_VERSION = "1.0.0"
# tilegen's statuses as T4 invalidity kinds; "correct" marks a valid, correct measurement.
INVALIDITY = {Status.OK: "correct", Status.WRONG: "correctness", Status.RACY: "correctness",
              Status.COMPILE_ERROR: "compile", Status.LAUNCH_ERROR: "runtime", Status.TIMEOUT: "timeout",
              Status.SKIPPED: "constraints", Status.COMPILED: "runtime"}


def t4_document(rows: Iterable[Row]) -> dict[str, Any]:
    rows = list(rows)
    problems = sorted({(r.family, r.shape, r.provenance.get("gpu_model", "")) for r in rows})
    return {
        "schema_version": T4_VERSION,
        "metadata": {"tool": f"tilegen {__version__}",
                     "problems": [{"family": f, "shape": s, "gpu": g} for f, s, g in problems]},
        "results": [t4_result(row, several=len(problems) > 1) for row in rows],
    }


def t4_result(row: Row, several: bool = False) -> dict[str, Any]:
    configuration = dict(row.params)
    if several:  # one file holding several problems: say which each result belongs to
        configuration.update(family=row.family, shape=row.shape, gpu=row.provenance.get("gpu_model", ""))
    result: dict[str, Any] = {
        "timestamp": row.provenance.get("measured_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
        "configuration": configuration,
        "objectives": ["time"],
        "times": {"compilation_time": row.compile_seconds or 0.0, "runtimes": _runtimes(row)},
        "invalidity": INVALIDITY[row.status],
        "correctness": 1 if row.status == Status.OK else 0,
        "measurements": [],
    }
    if row.median_ms is not None:
        result["measurements"] = [{"name": "time", "value": row.median_ms, "unit": "ms"}]
        if row.throughput is not None:
            result["measurements"].append({"name": row.unit, "value": row.throughput, "unit": row.unit})
    return result


def write_t4(rows: Iterable[Row], path: Path) -> int:
    path = writable_file(path, "--t4")
    document = t4_document(rows)
    try:
        path.write_text(json.dumps(document, indent=1))
    except OSError as error:
        raise UsageError(f"cannot write --t4 {path} ({error.strerror}); give another file") from None
    return len(document["results"])


def _runtimes(row: Row) -> list[float]:
    return [row.median_ms] if row.median_ms is not None else []
