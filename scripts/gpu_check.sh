#!/usr/bin/env bash
# On a GPU machine: every GPU test, then the default sweeps of both families and the sweep benchmark.
# Usage: scripts/gpu_check.sh [OUT_DIR]   (needs pycuda: pip install '.[cuda]')
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/gpu-check}
python3 -c "import pycuda" 2>/dev/null || { echo "pycuda is not installed: pip install '.[cuda]'" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -m pytest -m gpu -v -rs tests/
python3 -m gen sweep matmul --size 2048x2048x2048 --size 1000x999x1001 --out "$out/matmul"
python3 -m gen sweep transpose --size 8192x8192 --size 1000x999 --out "$out/transpose"
python3 scripts/bench_sweep.py
