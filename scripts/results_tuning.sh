#!/usr/bin/env bash
# The tuning runs behind docs/results/<gpu>-tuning.md and <gpu>-vs-vendor.md, on one GPU.
# Usage: scripts/results_tuning.sh OUT_DIR [PART ...]   (default: every part, in this order)
#   sgemm      every default sgemm variant at 2048^3 (exhaustive), a live Bayesian search, and the
#              vendor benchmark's large shapes warm-started from the 2048^3 ranking
#   async      the cp.async twins (load=async) of the sgemm neighbourhood that wins, at 2048^3,
#              then 4096^3 and 8192^3 with both loads in the search
#   transpose  the default transpose space exhaustively at 8192^2 and 16384^2, then the winning
#              neighbourhood with the streaming hint and tile 128
#   shapes     the vendor table's other shapes, each tuned for itself (odd ones with bound checks)
#   splitk     split-K for the shapes whose M x N tiles cannot fill the GPU, around their winners
#   vendor     scripts/bench_vs_vendor.py on what the database now holds
#   suite-a, suite-b, suite-t   issue 13's shape suite, each shape tuned at its own size (Bayesian,
#              24 evaluations; bound checks where the shape needs them, split-K where M x N is
#              small, the winning transpose neighbourhood exhaustively), in parts that fit 10 minutes
#   suite      scripts/bench_vs_vendor.py --suite on what the database now holds
# Writes OUT_DIR/tuning.sqlite (kept between parts and runs), live.sqlite and vs-vendor.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/results_tuning.sh OUT_DIR [sgemm|async|transpose|shapes|splitk|vendor ...]}
shift
parts=${*:-sgemm async transpose shapes splitk vendor}
mkdir -p "$out"
db="$out/tuning.sqlite"
quiet() { grep -v '^tune \|^compile ' || true; }
timed() { local start=$SECONDS; "$@"; echo "[$(( SECONDS - start )) s] $*"; }
tune() { timed python3 -m gen tune "$@" --db "$db" 2>&1 | quiet; }
# The neighbourhood of the H200's sgemm winners: 16-byte vectors, padded A, two stages, tn 4.
NEAR_SGEMM=(-p vec=4 -p padding=4 -p stages=2 -p tn=4 -p bounds=none)

for part in $parts; do
  case $part in
    sgemm)
      timed python3 -m gen compile sgemm --arch sm_90 2>/dev/null | tail -1
      tune sgemm --size 2048x2048x2048 --strategy brute --budget 100000 --timing-budget 0.2
      timed python3 -m gen tune sgemm --size 2048x2048x2048 --strategy bayes --budget 100 --timing-budget 0.2 \
        --db "$out/live.sqlite" 2>&1 | quiet  # a database of its own: nothing known beforehand
      for size in 4096x4096x4096 8192x8192x8192; do
        tune sgemm --size "$size" --strategy bayes --budget 40 --timing-budget 0.3
      done ;;
    async)
      tune sgemm --size 2048x2048x2048 --strategy brute --budget 1000 --timing-budget 0.2 "${NEAR_SGEMM[@]}" \
        -p load=async
      for size in 4096x4096x4096 8192x8192x8192; do
        tune sgemm --size "$size" --strategy bayes --budget 20 --timing-budget 0.3 "${NEAR_SGEMM[@]}" \
          -p load=registers,async
      done ;;
    transpose)
      for size in 8192x8192 16384x16384; do
        tune transpose --size "$size" --strategy brute --budget 1000 --timing-budget 0.2 --finalists 5
        tune transpose --size "$size" --strategy brute --budget 1000 --timing-budget 0.2 --finalists 5 -p method=shared \
          -p tile=64 -p rows=4,8 -p padding=1 -p group=1,2,4 -p vec=1,4 -p hint=normal,stream -p bounds=none
        tune transpose --size "$size" --strategy brute --budget 1000 --timing-budget 0.2 --finalists 3 -p method=shared \
          -p tile=128 -p rows=4,8 -p padding=1 -p group=1,2 -p vec=1,4 -p bounds=none -p smem=dynamic
      done ;;
    shapes)
      for size in 4096x4096x256 1000x1000x1000 3000x5000x700; do
        tune sgemm --size "$size" --strategy bayes --budget 30 --timing-budget 0.3 -p bounds=none,guard,split \
          -p load=registers,async
      done ;;
    splitk)
      for size in 8192x128x8192 128x8192x8192 4096x4096x256; do
        tune sgemm --size "$size" --strategy bayes --budget 40 --timing-budget 0.3 -p bm=64,128 -p bn=64,128 \
          -p bk=16 -p tm=4,8 -p tn=4 -p vec=4 -p padding=4 -p stages=2 -p load=registers,async \
          -p splitk=1,2,4,8,16 -p bounds=none
      done ;;
    vendor)
      timed python3 scripts/bench_vs_vendor.py --db "$db" --markdown "$out/vs-vendor.md" ;;
    suite-a)
      for size in 1024x1024x1024 2048x2048x2048 4096x4096x4096 8192x8192x8192 16384x16384x1024 \
                  4096x4096x4096:4100,4100,4100; do
        tune sgemm --size "$size" --strategy bayes --budget 24 --timing-budget 0.3
      done ;;
    suite-b)
      for size in 1000x1000x1000 3000x5000x700 4095x4097x4093; do
        tune sgemm --size "$size" --strategy bayes --budget 24 --timing-budget 0.3 -p bounds=guard,split
      done
      for size in 8192x128x8192 128x8192x8192 4096x4096x256 1024x1024x16384; do
        tune sgemm --size "$size" --strategy bayes --budget 24 --timing-budget 0.3 -p bm=64,128 -p bn=64,128 \
          -p bk=16 -p tm=4,8 -p tn=4 -p vec=4 -p padding=4 -p stages=2 -p load=registers,async \
          -p splitk=1,2,4,8,16 -p bounds=none
      done ;;
    suite-t)
      for size in 4096x4096 8192x8192 16384x16384 32768x32768 8192x16384 16384x8192; do
        tune transpose --size "$size" --strategy brute --budget 1000 --timing-budget 0.2 --finalists 3 -p method=shared \
          -p tile=64 -p rows=4,8 -p padding=1 -p group=1,2,4 -p vec=1,4 -p bounds=none
      done ;;
    suite)
      timed python3 scripts/bench_vs_vendor.py --suite --db "$db" --markdown "$out/suite.md" ;;
    *)
      echo "unknown part '$part'; parts: sgemm async transpose shapes splitk vendor suite-a suite-b suite-t suite" >&2
      exit 2 ;;
  esac
done
