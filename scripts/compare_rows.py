#!/usr/bin/env python3
"""Compare the rows and plans of two tilegen trees (this one and an older one), with no GPU.

    python scripts/compare_rows.py --against OLD_TREE [--family-path DIR] [--show 20]
    python scripts/compare_rows.py OLD/results.jsonl NEW/results.jsonl [--show 20]

With --against, each tree runs the same fresh commands, its own `gen` first on PYTHONPATH, with a
cache of its own: compile-only sweeps of several families (a user's family from tests/families
among them, --keep-skipped), each sweep's --dry-run account, the variants a tune of the recorded
spaces would search (sizes that need adaptations among them), and scripts/replan_recorded.py over
the recorded rows in docs/results/data. OLD_TREE is a checkout, e.g. `git worktree add /tmp/base
d878fc8`. With two files, only those rows are compared.

Rows are matched by (name, shape, cache_config) and compared on every field but the run's
durations (compile_seconds, measure_seconds) and the columns only the new tree writes (listed with
their values: a column added on purpose, like compile_level, is no difference in a row); text is
compared line by line with durations, paths and the temporary folders written as placeholders. Prints each check's counts and the first
differences; exits 0 when nothing differs, 1 otherwise (2 on unreadable input).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
IGNORED = ("compile_seconds", "measure_seconds")  # durations: they differ from run to run by design
SIZES = {"2d": ["--size", "1024x1024", "--size", "1000x999"],
         "3d": ["--size", "256x256x256", "--size", "1000x999x333"]}
SWEEPS = (  # compile-only sweeps, small enough for 2 cores
    ["matmul", *SIZES["3d"]],
    ["sgemm", *SIZES["3d"], "-p", "bm=64,128", "-p", "bn=64", "-p", "bk=8", "-p", "wm=32,64", "-p", "wn=32",
     "-p", "tm=8", "-p", "bounds=none,guard,split"],
    ["hgemm", *SIZES["3d"], "--filter", "*_s2_*"],
    ["transpose", *SIZES["2d"], "-p", "tile=16,32"],
    ["copy", *SIZES["2d"]],
    ["stencil", "--size", "512x512", "--size", "1000x999"],
    ["blur", "--size", "512x512", "--size", "1000x999"],
)
TUNES = (("sgemm", "2000x7000x3000"), ("sgemm", "2048x2048x2048"), ("hgemm", "1000x999x333"),
         ("matmul", "1000x999x333"), ("transpose", "1000x999"), ("stencil", "1000x999"))
CANDIDATES = """
import sys
from gen.families import get_family
try:
    from gen.commands.tune import TuneOptions, candidates
except ImportError:  # a tree from before issue 45's move
    from gen.search.tune import TuneOptions, candidates
for name, size in (word.split(':') for word in sys.argv[1:]):
    family = get_family(name)
    found = candidates(family, family.parse_shape(size), TuneOptions(family=name, size=size, strategy='brute'))
    print(name, size, len(found.variants), found.budget)
    print(*sorted(v.name for v in found.variants))
"""

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


def field_differences(old: Row, new: Row, added: set[str] = frozenset()) -> list[str]:
    """One line per field whose values differ (a missing field reads as None), durations and the
    columns the new tree added aside."""
    return [f"{field}: old {old.get(field)!r} new {new.get(field)!r}" for field in sorted(set(old) | set(new))
            if field not in IGNORED and field not in added and old.get(field) != new.get(field)]


def compare(old_path: Path, new_path: Path, show: int) -> bool:
    """Print the comparison; True when both files hold the same keys with identical fields."""
    old, old_repeated = read_rows(old_path)
    new, new_repeated = read_rows(new_path)
    only_old = sorted(set(old) - set(new))
    only_new = sorted(set(new) - set(old))
    added = {f for row in new.values() for f in row} - {f for row in old.values() for f in row}
    differing = [(key, lines) for key in sorted(set(old) & set(new))
                 if (lines := field_differences(old[key], new[key], added))]
    identical = len(set(old) & set(new)) - len(differing)
    print(f"rows: old {len(old)}, new {len(new)}; identical {identical}, differing {len(differing)}, "
          f"only old {len(only_old)}, only new {len(only_new)}, "
          f"repeated keys old {len(old_repeated)} new {len(new_repeated)}")
    for field in sorted(added):  # a column the old tree did not write: its values, not a difference
        values: dict[str, int] = {}
        for row in new.values():
            values[repr(row.get(field))] = values.get(repr(row.get(field)), 0) + 1
        print(f"  added column {field}: " + ", ".join(f"{v} in {n}" for v, n in sorted(values.items())))
    for label, keys in (("only old", only_old), ("only new", only_new),
                        ("repeated old", old_repeated), ("repeated new", new_repeated)):
        for key in keys[:show]:
            print(f"  {label}: {' '.join(key)}")
    for key, lines in differing[:show]:
        print(f"  differs: {' '.join(key)}")
        for line in lines:
            print(f"    {line}")
    return not (only_old or only_new or differing or old_repeated or new_repeated)


def normalized(text: str, tree: Path, scratch: Path) -> list[str]:
    """Text with the scratch folder's, the tree's and this tree's paths and every duration as placeholders."""
    text = text.replace(str(scratch), "SCRATCH").replace(str(tree), "TREE").replace(str(HERE), "TREE")
    return re.sub(r"\d+(\.\d+)? ?(s|ms|seconds)\b", "N s", text).splitlines()


def compare_text(label: str, old: list[str], new: list[str], show: int) -> bool:
    differing = [(i, a, b) for i, (a, b) in enumerate(zip(old, new), 1) if a != b]
    print(f"{label}: {len(old)} / {len(new)} lines, {len(differing)} differing")
    for number, a, b in differing[:show]:
        print(f"  line {number}:\n    old {a}\n    new {b}")
    if len(old) != len(new):
        longer, side = (old, "old") if len(old) > len(new) else (new, "new")
        print(f"  only {side}: " + "\n  ".join(longer[min(len(old), len(new)):][:show]))
    return not differing and len(old) == len(new)


class Tree:
    """One tree's commands: its `gen` first on PYTHONPATH, its own cache and output folders."""

    def __init__(self, root: Path, scratch: Path, family_path: Path) -> None:
        self.root, self.scratch = root.resolve(), scratch
        self.env = {**os.environ, "PYTHONPATH": str(self.root), "TILEGEN_CACHE": str(scratch / "cache"),
                    "TILEGEN_FAMILY_PATH": str(family_path), "TILEGEN_PROGRESS_S": "3600"}

    def run(self, *args: str) -> list[str]:
        done = subprocess.run([sys.executable, *args], cwd=self.scratch, env=self.env, capture_output=True, text=True)
        return [f"exit {done.returncode}"] + normalized(done.stdout + done.stderr, self.root, self.scratch)

    def sweep(self, number: int, args: list[str]) -> tuple[Path, list[str]]:
        out = self.scratch / f"sweep{number}"
        return out / "results.jsonl", self.run("-m", "gen", "sweep", *args, "--keep-skipped", "--quiet", "--out",
                                               str(out))


def compare_trees(old_root: Path, family_path: Path, show: int) -> bool:
    with tempfile.TemporaryDirectory(prefix="compare_rows_") as folder:
        (Path(folder) / "old").mkdir()
        (Path(folder) / "new").mkdir()
        old, new = (Tree(root, Path(folder) / side, family_path) for root, side in ((old_root, "old"), (HERE, "new")))
        same = True
        for number, args in enumerate(SWEEPS):
            label = f"sweep {' '.join(args)}"
            (old_rows, old_text), (new_rows, new_text) = old.sweep(number, args), new.sweep(number, args)
            print(f"== {label}")
            same &= compare_text("  output", old_text, new_text, show)
            same &= compare(old_rows, new_rows, show)
            plans = [tree.run("-m", "gen", "sweep", *args, "--dry-run") for tree in (old, new)]
            same &= compare_text("  --dry-run", *plans, show)
        words = [f"{name}:{size}" for name, size in TUNES]
        print("== the variants a tune searches: " + " ".join(words))
        same &= compare_text("  tunes", *(tree.run("-c", CANDIDATES, *words) for tree in (old, new)), show)
        recorded = [str(p) for p in sorted((HERE / "docs/results/data").glob("h*/*.jsonl"))]
        replan = [str(HERE / "scripts/replan_recorded.py"), "--family-path", str(HERE / "docs/examples/reduction")]
        print("== the recorded rows planned again (scripts/replan_recorded.py)")
        same &= compare_text("  replan", *(tree.run(*replan, *recorded) for tree in (old, new)), show)
    print("no differences" if same else "DIFFERENCES (above)")
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="*", metavar="OLD NEW", help="two results.jsonl files")
    parser.add_argument("--against", type=Path, metavar="OLD_TREE", help="an older tilegen checkout to run too")
    parser.add_argument("--family-path", type=Path, default=HERE / "tests/families",
                        help="the user's families both trees load (default: this tree's tests/families)")
    parser.add_argument("--show", type=int, default=20, help="differences shown per kind (default 20)")
    args = parser.parse_args(argv)
    if len(args.files) != (0 if args.against else 2):
        parser.error("give either --against OLD_TREE or two results.jsonl files")
    if args.against is not None and not (args.against / "gen" / "__init__.py").is_file():
        parser.error(f"{args.against} is not a tilegen tree (no gen/__init__.py)")
    try:
        same = compare_trees(args.against, args.family_path.resolve(), args.show) if args.against else compare(
            *args.files, args.show)
    except (OSError, ValueError) as exc:
        print(f"compare_rows: {exc}", file=sys.stderr)
        return 2
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
