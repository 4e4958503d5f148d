#!/usr/bin/env python3
"""Plan the points of recorded result rows again, with no GPU, and compare: is each row's name the
name its parameters give, and is each point skipped (with the same message) or run as recorded?

    python scripts/replan_recorded.py [--family-path DIR] [--where NAME=VALUE] ROWS.jsonl ...

Each row's parameters (a parameter it lacks, one added since, takes its default) make a point at
the row's shape and cache preference, planned with the code installed (tilegen before or after
issue 20's layers: both layouts are found). Rows that ran on a GPU (ok, wrong, racy, timeout) can
only be checked as runnable here. When the rows hold the product of their parameters' values
(each value list x shapes x cache preferences), the product is planned too and its names compared
with the rows': the whole space, not only the recorded points. Exits 1 when anything disagrees.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import gen
from gen.families import get_family

try:  # issue 20's layers
    from gen.evaluate.plan import make_plan
    from gen.families.space import Space
except ImportError:  # tilegen before them
    from gen.space import Space  # type: ignore[no-redef]
    from gen.sweep import make_plan  # type: ignore[no-redef]

Key = tuple[str, str, str]
RUN = ""  # a planned verdict: the point is run (otherwise the reason it is not)
SHOW = 5


def recorded_key(row: dict[str, Any]) -> Key:
    return row["name"], row["shape"], row.get("cache_config") or "none"


def full_params(family: Any, params: dict[str, Any]) -> dict[str, Any]:
    """A row's parameters, in the family's order, with the default of any it does not name."""
    return {p.name: params.get(p.name, p.default) for p in family.variant_type.parameters()}


def plan_verdicts(family: Any, values: dict[str, list[Any]], shapes: list[str], caches: list[str]) -> dict[Key, str]:
    """Each point of a space's plan: RUN, or the reason it is not run."""
    space = Space.default(family, values)
    plan = make_plan(family, space, [family.parse_shape(s) for s in shapes], caches, keep=True)
    verdicts = {(p.variant.name, str(p.shape), p.cache_config): RUN for p in plan.runnable}
    for group in plan.skipped.values():
        verdicts.update({(p.variant.name, str(p.shape), p.cache_config): group.reason for p in group.points})
    return verdicts


def replan_rows(family: Any, rows: list[dict[str, Any]]) -> dict[int, tuple[Key, str]]:
    """Each row's planned point (by row index): its key and verdict, planned in groups of rows
    with the same parameters."""
    by_params: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        by_params[json.dumps(full_params(family, row["params"]), sort_keys=True)].append(index)
    planned: dict[int, tuple[Key, str]] = {}
    for text, indices in by_params.items():
        values = {name: [value] for name, value in json.loads(text).items()}
        verdicts = plan_verdicts(family, values, sorted({rows[i]["shape"] for i in indices}),
                                 sorted({recorded_key(rows[i])[2] for i in indices}))
        (name,) = {key[0] for key in verdicts}
        for i in indices:
            key = (name, rows[i]["shape"], recorded_key(rows[i])[2])
            planned[i] = (key, verdicts[key])
    return planned


def row_problems(rows: list[dict[str, Any]], planned: dict[int, tuple[Key, str]]) -> tuple[Counter[str], list[str]]:
    """Counts of agreement kinds, and a line per disagreement."""
    counts: Counter[str] = Counter()
    problems: list[str] = []
    for index, row in enumerate(rows):
        key, verdict = planned[index]
        if key != recorded_key(row):
            problems.append(f"name: recorded {row['name']} planned {key[0]}")
        elif row["status"] == "skipped" and verdict == row.get("message"):
            counts["skipped, same message"] += 1
        elif row["status"] == "skipped":
            problems.append(f"{' '.join(key)}: recorded skipped {row.get('message')!r}, planned "
                            f"{'run' if verdict == RUN else repr(verdict)}")
        elif verdict == RUN:
            counts[f"run ({row['status']}), planned run"] += 1
        else:
            problems.append(f"{' '.join(key)}: recorded {row['status']}, planned skipped {verdict!r}")
    return counts, problems


def product_check(family: Any, rows: list[dict[str, Any]]) -> str:
    """Whether the rows are the product of their values; if so, whether its plan has their names."""
    values: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        for name, value in full_params(family, row["params"]).items():
            if value not in values[name]:
                values[name].append(value)
    shapes = sorted({row["shape"] for row in rows})
    caches = sorted({recorded_key(row)[2] for row in rows})
    points = len(shapes) * len(caches)
    for chosen in values.values():
        points *= len(chosen)
    keys = {recorded_key(row) for row in rows}
    if points > 200_000:
        return f"product of the rows' values: {points:,} points, too many to plan"
    verdicts = plan_verdicts(family, values, shapes, caches)
    runnable = {key for key, verdict in verdicts.items() if verdict == RUN}
    if keys == set(verdicts):
        return f"the rows are the whole product ({points:,} points): same keys as its plan"
    if keys == runnable:
        return (f"the rows are the runnable points of the product ({len(runnable):,} of {points:,}): same keys "
                f"as its plan's runnable points")
    return (f"the rows are not the product of their values ({len(keys):,} keys, product {points:,}, "
            f"{len(runnable):,} runnable): per-row check only")


def check_file(path: Path, where: dict[str, str]) -> bool:
    every = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [row for row in every if all(str(row["params"].get(k)) == v for k, v in where.items())]
    keys = Counter(recorded_key(row) for row in rows)
    print(f"{path}: {len(rows)} rows, {len(keys)} keys ({sum(n - 1 for n in keys.values())} repeated), "
          f"statuses {dict(Counter(row['status'] for row in rows))}")
    fine = True
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_family[row["family"]].append(row)
    for name, family_rows in by_family.items():
        family = get_family(name)
        counts, problems = row_problems(family_rows, replan_rows(family, family_rows))
        print(f"  {name}: {dict(counts)}; {len(problems)} disagree")
        for line in problems[:SHOW]:
            print(f"    {line}")
        print(f"  {name}: {product_check(family, family_rows)}")
        fine = fine and not problems
    return fine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path, nargs="+", help="results.jsonl files")
    parser.add_argument("--family-path", type=Path, action="append", default=[], help="plugin families")
    parser.add_argument("--where", action="append", default=[], metavar="NAME=VALUE",
                        help="only the rows whose parameter NAME has VALUE (repeatable)")
    args = parser.parse_args(argv)
    for folder in args.family_path:
        gen.load_families(folder)
    where = dict(item.split("=", 1) for item in args.where)
    return 0 if all([check_file(path, where) for path in args.rows]) else 1


if __name__ == "__main__":
    sys.exit(main())
