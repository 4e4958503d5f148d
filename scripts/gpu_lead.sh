#!/usr/bin/env bash
# The lead's batch on a lent GPU: wheels from .whl (PyCUDA built for the machine), then the named parts,
# each bounded, its log under $OUT. Usage: scripts/gpu_lead.sh PART...   (parts: below)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/gpu-lead}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl .whl/built/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee "$out/gpu.txt"
part() { local name=$1 limit=$2; shift 2; local start=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
  echo "=== $name: rc $rc after $((SECONDS - start)) s" | tee -a "$out/summary.txt"; tail -n "${TAIL:-6}" "$out/$name.log"; }
for p in "$@"; do case $p in
  call-tests) part call-tests 180 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_gpu_call_path.py tests/test_gpu_arrays.py ;;
  launch) TAIL=60 part launch 200 python3 -u scripts/bench_launch.py --rounds 30 --markdown "$out/launch.md" ;;
  portfolio) TAIL=30 part portfolio 200 python3 -u scripts/bench_vs_kernel_tuner.py --only "tilegen brute nvrtc,tilegen bayes nvrtc,tilegen portfolio nvrtc" --out runs/kt --markdown "$out/portfolio.md" ;;
  epilogue) TAIL=20 part epilogue 150 python3 -u scripts/bench_epilogue.py --samples 50 --markdown "$out/epilogues.md" ;;
  tests) TAIL=25 part tests 560 python3 -m pytest -m gpu -q -p no:cacheprovider -rs -k "not every_default_sgemm" tests/ ;;
  *) echo "unknown part $p"; exit 2 ;;
esac; done
