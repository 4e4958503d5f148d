#!/usr/bin/env bash
# A few seconds on a GPU machine: one tiny sweep must come back ok before anything long runs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
python3 -m gen sweep matmul -p tile=16 -p padding=0 -p bounds=guard --size 300x200x100 --out "$out" --timing-budget 0.1 \
  2>/dev/null | tee "$out/summary.txt" | head -1
grep -q "^status: ok 1$" "$out/summary.txt" || { echo "smoke sweep failed:"; head -c 2000 "$out/results.jsonl"; exit 1; }
if [ "${1:-}" = "--sanitize" ]; then  # a correct variant must come back free of hazards
  python3 -m gen sweep matmul -p tile=16 -p padding=0 -p bounds=guard --size 300x200x100 --out "$out/s" \
    --timing-budget 0.1 --sanitize 2>/dev/null | head -1 | grep -q "^status: ok 1$" ||
    { echo "sanitized smoke sweep failed:"; head -c 2000 "$out/s/results.jsonl"; exit 1; }
fi
