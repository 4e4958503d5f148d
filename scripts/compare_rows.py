#!/usr/bin/env python3
"""Compare two results.jsonl files (say, the old code's and the new code's) row by row.

Rows are matched by (name, shape, cache_config) and compared on the fields that say what a variant
is and what became of it: status, message (exact), params, registers, static shared bytes, spill
bytes and skipped_count. Provenance, timings and compile seconds differ from run to run by design
and are not compared.

    python scripts/compare_rows.py OLD/results.jsonl NEW/results.jsonl [--show 20]

Prints the counts of identical rows, of rows on one side only, and the first differences; exits 0
when every row is on both sides and identical, 1 otherwise (2 on unreadable input).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

FIELDS = ("status", "message", "params", "registers", "static_shared_bytes", "spill_bytes",
          "skipped_count")

Key = tuple[str, str, str]
Row = dict[str, Any]


def row_key(row: Row) -> Key:
    return (str(row.get("name")), str(row.get("shape")), str(row.get("cache_config")))


def read_rows(path: Path) -> tuple[dict[Key, Row], list[Key]]:
    """The rows of a JSONL file by key, and the keys seen more than once (the last row is kept)."""
    rows: dict[Key, Row] = {}
    repeated: list[Key] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
        key = row_key(row)
        if key in rows:
            repeated.append(key)
        rows[key] = row
    return rows, repeated


def field_differences(old: Row, new: Row) -> list[str]:
    """One line per compared field whose values differ (a missing field reads as None)."""
    return [f"{field}: old {old.get(field)!r} new {new.get(field)!r}"
            for field in FIELDS if old.get(field) != new.get(field)]


def show_key(key: Key) -> str:
    return " ".join(key)


def compare(old_path: Path, new_path: Path, show: int) -> bool:
    """Print the comparison; True when both files hold the same keys with identical fields."""
    old, old_repeated = read_rows(old_path)
    new, new_repeated = read_rows(new_path)
    only_old = sorted(set(old) - set(new))
    only_new = sorted(set(new) - set(old))
    differing = [(key, lines) for key in sorted(set(old) & set(new))
                 if (lines := field_differences(old[key], new[key]))]
    identical = len(set(old) & set(new)) - len(differing)
    print(f"rows: old {len(old)}, new {len(new)}; identical {identical}, differing {len(differing)}, "
          f"only old {len(only_old)}, only new {len(only_new)}, "
          f"repeated keys old {len(old_repeated)} new {len(new_repeated)}")
    for label, keys in (("only old", only_old), ("only new", only_new),
                        ("repeated old", old_repeated), ("repeated new", new_repeated)):
        for key in keys[:show]:
            print(f"  {label}: {show_key(key)}")
    for key, lines in differing[:show]:
        print(f"  differs: {show_key(key)}")
        for line in lines:
            print(f"    {line}")
    return not (only_old or only_new or differing or old_repeated or new_repeated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the first results.jsonl (e.g. the old code's)")
    parser.add_argument("new", type=Path, help="the second results.jsonl (e.g. the new code's)")
    parser.add_argument("--show", type=int, default=20, help="differences shown per kind (default 20)")
    args = parser.parse_args(argv)
    try:
        same = compare(args.old, args.new, args.show)
    except (OSError, ValueError) as exc:
        print(f"compare_rows: {exc}", file=sys.stderr)
        return 2
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
