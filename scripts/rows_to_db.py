#!/usr/bin/env python3
"""Record result rows (results.jsonl, e.g. docs/results/data/h200/sgemm-2048-exhaustive.jsonl) into
a tuning database, with the installed tilegen's own API (before or after issue 20's layers), so
that scripts/tuning_study.py can replay a recorded exhaustive run.

    python scripts/rows_to_db.py ROWS.jsonl DB.sqlite

Rows are recorded under the GPU model their provenance names; the database must not exist yet.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:  # issue 20's layers
    from gen.store.results_log import read_rows
    from gen.store.tuning_db import TuningDB
except ImportError:  # tilegen before them
    from gen.store import read_rows  # type: ignore[no-redef]
    from gen.tunedb import TuningDB  # type: ignore[no-redef]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path, help="a results.jsonl file")
    parser.add_argument("db", type=Path, help="the tuning database to make")
    args = parser.parse_args(argv)
    if args.db.exists():
        print(f"rows_to_db: {args.db} exists; give a new file", file=sys.stderr)
        return 2
    rows = read_rows(args.rows)
    recorded = TuningDB(args.db).record(rows)
    print(f"{recorded} of {len(rows)} rows recorded in {args.db}")
    return 0 if recorded == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
