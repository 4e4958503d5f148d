#!/usr/bin/env bash
# The sweeps behind docs/results/<gpu>.md: the seeds' claims, checked on this GPU.
# Usage: scripts/results_sweeps.sh OUT_DIR   (each sweep writes OUT_DIR/<name>/results.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/results_sweeps.sh OUT_DIR}
sweep() { python3 -m gen sweep "$@" 2>&1 | grep -v '^compile \|^run \|^sanitize '; }
# seed 004: tiled against naive matmul; the default space at a square and an odd size
sweep matmul -p method=tiled,naive --size 4096x4096x4096 --size 1000x999x1001 --out "$out/matmul"
# seed 001: transpose naive -> shared -> padded
sweep transpose --size 8192x8192 --size 16384x16384 --out "$out/transpose"
# the racy and divergent placements, with compute-sanitizer
sweep matmul -p sync=both,after-load,after-compute,none,divergent -p bounds=guard -p tile=16,32 -p padding=0 \
  --size 2048x2048x2048 --size 1000x999x1001 --sanitize --out "$out/racy"
sweep transpose -p method=shared -p sync=both,none -p tile=32 -p rows=8 -p padding=0,1 -p bounds=guard \
  --size 8192x8192 --sanitize --out "$out/racy-transpose"
# seed 002: the cache configuration
sweep matmul -p tile=16,32 -p padding=0 -p bounds=guard --cache-config none,shared,l1,equal --size 4096x4096x4096 \
  --out "$out/cache"
