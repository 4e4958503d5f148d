#!/usr/bin/env bash
# The tuning runs behind docs/results/<gpu>-tuning.md and <gpu>-vs-vendor.md, on one GPU.
# Usage: scripts/results_tuning.sh OUT_DIR   (writes OUT_DIR/tuning.sqlite, live.sqlite and the logs)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/results_tuning.sh OUT_DIR}
mkdir -p "$out"
db="$out/tuning.sqlite"
quiet() { grep -v '^tune \|^compile ' || true; }
timed() { local start=$SECONDS; "$@"; echo "[$(( SECONDS - start )) s] $*"; }
# Every default sgemm variant compiled at once (all cores), then measured at 2048^3: the exhaustive
# reference the strategies are judged against.
timed python3 -m gen compile sgemm --arch sm_90 2>/dev/null | tail -1
timed python3 -m gen tune sgemm --size 2048x2048x2048 --strategy brute --budget 100000 --timing-budget 0.2 \
  --db "$db" 2>&1 | quiet
# A live Bayesian search at the same size, into a database of its own (nothing known beforehand).
timed python3 -m gen tune sgemm --size 2048x2048x2048 --strategy bayes --budget 100 --timing-budget 0.2 \
  --db "$out/live.sqlite" 2>&1 | quiet
# The vendor benchmark's large shapes, warm-started from the 2048^3 ranking; the transposes exhaustively.
for size in 4096x4096x4096 8192x8192x8192; do
  timed python3 -m gen tune sgemm --size "$size" --strategy bayes --budget 40 --timing-budget 0.3 --db "$db" 2>&1 | quiet
done
for size in 8192x8192 16384x16384; do
  timed python3 -m gen tune transpose --size "$size" --strategy brute --budget 1000 --timing-budget 0.2 \
    --db "$db" 2>&1 | quiet
done
timed python3 scripts/bench_vs_vendor.py --db "$db" --markdown "$out/vs-vendor.md"
