#!/usr/bin/env bash
# The GPU work behind the GPU tests and docs/results, in named parts, on a lent GPU machine with
# no network: the wheels in .whl/ (PyCUDA built for it, Kernel Tuner, Dask) are installed first.
# Logs and results go to $OUT (or runs/gpu-session). A failed part is reported and the next runs.
#
# Usage: scripts/gpu_session.sh PART [PART ...]
#   tests      every GPU test but the all-sgemm one          tests-sgemm  the all-sgemm GPU test
#   reduce     the example family's sweep, for docs/results   kt           scripts/bench_vs_kernel_tuner.py
#   full       cold brute force over the full sgemm space     smoke        scripts/gpu_smoke.sh --sanitize
#   compilers  scripts/bench_compilers.py: NVRTC against nvcc, cold compiles and resources
#   scale      scripts/bench_scale.py: the coordinator against 1-64 simulated GPUs, local executor
#              (2 s of ideal work per run: up to 12,800 jobs)
#   scale-ab   the same at N = 1, 16, 32, 64 (3 s of ideal work a run), this tree against the one in
#              $BENCH_OLD, alternating, twice each ($SCALE_ROUNDS: "1" for once); $SCALE_FLAGS
#              replaces those flags (--executors dask ...)
#   scale-dask the same on a local Dask cluster (1-32 workers; needs the Dask wheels in .whl/)
#   early-stop scripts/bench_early_stop.py: a tune with and without the early stop (issue 21)
#   cold       scripts/bench_cold.py: each compile level's fidelity and cold tunes with and without
#              screening (issue 35), into $out/cold; $COLD_FLAGS adds flags (--spaces sgemm180, say)
#   tests-k    the GPU tests whose names match $TESTS_K (pytest -k)
#   launch     scripts/bench_launch.py: a kernel launch's host cost against CuPy's RawKernel and
#              PyTorch's op, gen.matmul's against torch.matmul, a captured graph, single calls (issues 31, 47)
#   epilogue   scripts/bench_epilogue.py: a fused bias + GELU against the same wgmma variant and
#              torch.matmul + PyTorch's bias and GELU (issue 48)
#   portfolio  scripts/bench_vs_kernel_tuner.py, tilegen's runs only: brute force, bayes and the
#              portfolio (the default strategy) on the 180-point sgemm space, cold (issue 50)
#   energy     scripts/bench_energy.py: NVML's energy counter (update interval, resolution) and the
#              sgemm finalists' joules per launch at 4096^3 over three tunes (issue 36; needs nvidia-ml-py);
#              $ENERGY_FLAGS adds flags (--budget 40, say)
#   throughput scripts/bench_sweep.py: the sgemm space at 512^3, warm cache, budget 0.05 s (issue 22);
#              the cache comes from .whl/sgemm-cache-sm90-nvcc.tar.xz when carried; $BENCH_FILTER
#              narrows the space, $BENCH_FLAGS adds flags (--profile-jobs N, say); with $BENCH_GPUS
#              (0,1), one GPU against those, alternating
#   throughput-ab  the same, this tree against the one in $BENCH_OLD (git archive REV gen templates
#              tests scripts, with this bench_sweep.py), alternating, twice each
#   hgemm-check  the hgemm family at odd and aligned shapes, both dtypes and output types, every layout,
#              guarded and unguarded copies: every row must be ok or skipped ($HGEMM_CHECK_FLAGS adds flags)
#   hgemm      scripts/bench_vs_vendor.py --only hgemm: against cuBLAS (PyTorch) for the same dtype;
#              $HGEMM_FLAGS adds flags (--tune N, --variants A,B, --sizes ...)
#   wgmma-check  the wgmma family (sm_90a) at odd, small and many-tile shapes, both dtypes and output
#              types, every schedule: every row must be ok or skipped ($WGMMA_CHECK_FLAGS adds flags)
#   wgmma      scripts/bench_vs_vendor.py --only wgmma: against cuBLAS (PyTorch); $WGMMA_FLAGS adds flags
#   layouts    the hgemm layout lesson: none, pad and swizzle at 4096^3, and report's heatmaps of them
#   kt-examples  scripts/bench_vs_kernel_tuner_examples.py on Kernel Tuner's example files in
#              $KT_EXAMPLES (default .whl/kt; Kernel Tuner's wheels in .whl/); $KT_FLAGS adds flags
#              (--only vector_add,matmul, say)
#   dask       the two-GPU test (two GPUs)
#   dask-a     the Dask cluster benchmark's compile and one-GPU sweep; dask-b (a later call, with
#              runs/cluster-bench carried): its cluster sweeps, whole and with a worker killed, and
#              the report
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/gpu-session}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ! python3 -c "import pycuda" 2>/dev/null; then
  source scripts/install_pycuda_offline.sh .whl /tmp/site || exit 2
  [ -d .whl/built ] && cp .whl/built/*.whl "$out/" 2>/dev/null  # keep the built wheel: carry it next time
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
nvcc --version | tail -1 >> "$out/gpu.txt"
python3 -c "from gen.compiling import nvrtc_library as n; print('NVRTC', n.library_version() if n.available() else 'missing')" \
  | tee -a "$out/gpu.txt"
failed=()
part() {  # part NAME COMMAND...: run it, log it, time it
  local name=$1 start=$SECONDS
  shift
  echo "=== $name: $*"
  if "$@" > >(tee "$out/$name.log") 2>&1; then status=ok; else status="FAILED ($?)"; failed+=("$name"); fi
  echo "=== $name: $status after $(( SECONDS - start )) s" | tee -a "$out/summary.txt"
}
for name in "$@"; do
  case $name in
    tests) part tests python3 -m pytest -m gpu -v -rs -p no:cacheprovider --timeout 300 -k "not every_default_sgemm" tests/ ;;
    scale)  # the coordinator against 1-64 simulated GPUs on this machine's cores (issue 22)
      part scale python3 scripts/bench_scale.py --executors local --max-jobs 13000 --markdown "$out/scale-local.md" ;;
    scale-ab)  # this tree's coordinator against $BENCH_OLD's (run from its own folder), alternating
      # shellcheck disable=SC2206  # SCALE_FLAGS is several flags
      scale=(${SCALE_FLAGS:---executors local --workers 1,16,32,64 --seconds 3 --max-jobs 20000})
      for round in ${SCALE_ROUNDS:-1 2}; do
        part "scale-old-$round" bash -c 'cd "$0" && exec python3 scripts/bench_scale.py "$@"' "$BENCH_OLD" "${scale[@]}"
        part "scale-new-$round" python3 scripts/bench_scale.py "${scale[@]}" --markdown "$out/scale-new-$round.md"
      done ;;
    scale-dask)  # the same on a local Dask cluster (its wheels carried in .whl/), up to 32 workers
      part scale-dask timeout 300 python3 scripts/bench_scale.py --executors dask --workers 1,2,4,8,16,32 --max-jobs 1000 \
        --markdown "$out/scale-dask.md" ;;
    early-stop) part early-stop python3 scripts/bench_early_stop.py ;;
    cold) part cold python3 scripts/bench_cold.py "$out/cold" ${COLD_FLAGS:-} ;;
    hgemm-check)
      # shellcheck disable=SC2086  # HGEMM_CHECK_FLAGS is several flags
      part hgemm-check python3 -m gen sweep hgemm -p dtype=f16,bf16 -p out=same,f32 -p bm=64,128 -p bn=128 -p bk=32,64 \
        -p wm=32,64 -p wn=64 -p stages=2,4 -p layout=swizzle,pad,none -p bounds=none,guard -p copy=async,scalar \
        --size 1000x1000x1000 --size 999x1001x1003 --size 256x384x512:520,392,400 --timing-budget 0.01 \
        --out "$out/hgemm-check" ${HGEMM_CHECK_FLAGS:-} ;;
    wgmma-check)
      # shellcheck disable=SC2086  # WGMMA_CHECK_FLAGS is several flags
      part wgmma-check python3 -m gen sweep wgmma -p dtype=f16,bf16 -p out=same,f32 -p bm=64,128,256 -p bn=64,128,256 \
        -p consumers=1,2 -p stages=2,4 -p schedule=grid,persistent --size 999x1001x1003:1008,1008,1001 \
        --size 77x45x33:40,48,45 --size 4000x4000x200 --timing-budget 0.01 --out "$out/wgmma-check" ${WGMMA_CHECK_FLAGS:-} ;;
    wgmma)
      # shellcheck disable=SC2086  # WGMMA_FLAGS is several flags
      part wgmma python3 scripts/bench_vs_vendor.py --only wgmma --markdown "$out/wgmma.md" ${WGMMA_FLAGS:-} ;;
    layouts)
      part layouts python3 -m gen sweep hgemm --size 4096x4096x4096 -p layout=none,pad,swizzle -p bm=64,128,256 \
        -p bn=64,128,256 -p stages=3 --timing-budget 0.2 --out "$out/layouts" --quiet
      part layouts-plot python3 -m gen report hgemm "$out/layouts" --plot "$out/layouts.png" ;;
    kt-examples) part kt-examples python3 scripts/bench_vs_kernel_tuner_examples.py --examples "${KT_EXAMPLES:-.whl/kt}" \
                   --markdown "$out/kt-examples.md" ${KT_FLAGS:-} ;;
    hgemm)
      # shellcheck disable=SC2086  # HGEMM_FLAGS is several flags
      part hgemm python3 scripts/bench_vs_vendor.py --only hgemm --markdown "$out/hgemm.md" ${HGEMM_FLAGS:-} ;;
    launch) part launch python3 scripts/bench_launch.py --rounds 30 --markdown "$out/launch.md" ;;
    epilogue) part epilogue python3 scripts/bench_epilogue.py --samples 50 --markdown "$out/epilogues.md" ;;
    portfolio) part portfolio python3 scripts/bench_vs_kernel_tuner.py --only "tilegen brute nvrtc,tilegen bayes nvrtc,tilegen portfolio nvrtc" \
                 --out runs/kt --markdown "$out/portfolio.md" ;;
    energy) part energy python3 scripts/bench_energy.py --markdown "$out/energy.md" ${ENERGY_FLAGS:-} ;;
    tests-k) part tests-k python3 -m pytest -m gpu -v -rs -p no:cacheprovider --timeout 300 -k "$TESTS_K" tests/ ;;
    throughput|throughput-ab)
      if [ ! -d runs/sgemm-cache ] && [ -f .whl/sgemm-cache-sm90-nvcc.tar.xz ]; then
        mkdir -p runs/sgemm-cache && tar xJf .whl/sgemm-cache-sm90-nvcc.tar.xz -C runs/sgemm-cache --strip-components=1
      fi
      bench=(--family sgemm --size 512x512x512 --timing-budget 0.05 --compiler nvcc --cache "$PWD/runs/sgemm-cache"
             ${BENCH_FILTER:+--filter "$BENCH_FILTER"})
      if [ "$name" = throughput ] && [ -n "${BENCH_GPUS:-}" ]; then  # one GPU against $BENCH_GPUS, alternating
        for round in 1 2; do
          part "throughput-1gpu-$round" python3 scripts/bench_sweep.py "${bench[@]}"
          part "throughput-gpus-$round" python3 scripts/bench_sweep.py "${bench[@]}" --gpus "$BENCH_GPUS"
        done
      elif [ "$name" = throughput ]; then
        # shellcheck disable=SC2086  # BENCH_FLAGS is several flags
        part throughput python3 scripts/bench_sweep.py "${bench[@]}" ${BENCH_FLAGS:-}
      else  # this tree against an older one ($BENCH_OLD: its gen/ and scripts/), alternating, 2 runs each;
        # the older one runs from its own folder: a GPU worker (python -m) imports gen from there
        for round in 1 2; do
          part "throughput-old-$round" bash -c 'cd "$0" && exec python3 scripts/bench_sweep.py "$@"' "$BENCH_OLD" "${bench[@]}"
          part "throughput-new-$round" python3 scripts/bench_sweep.py "${bench[@]}"
        done
      fi ;;
    tests-sgemm) part tests-sgemm python3 -m pytest -m gpu -v -rs -p no:cacheprovider --timeout 400 -k every_default_sgemm tests/ ;;
    reduce) part reduce python3 -m gen --family-path docs/examples/reduction sweep reduce -p dtype=f32,f64 \
              --size 16384x16384 --size 4096x65536 --size 1000x999 --out "$out/reduce" ;;
    compilers) part compilers python3 scripts/bench_compilers.py --markdown "$out/compilers.md" ;;
    kt) part kt python3 scripts/bench_vs_kernel_tuner.py --out "$out/kt" --markdown "$out/vs-kernel-tuner.md" ;;
    full) part full python3 scripts/bench_vs_kernel_tuner.py --full --out "$out/full" --markdown "$out/full.md" ;;
    smoke) part smoke scripts/gpu_smoke.sh --sanitize ;;
    dask) part dask-tests python3 -m pytest -m gpu -v -rs -p no:cacheprovider --timeout 300 -k two_gpus tests/ ;;
    dask-a|dask-b)  # the cluster benchmark in two calls: its parts keep their rows in runs/ between them
      parts=$([ "$name" = dask-a ] && echo compile,one || echo warm,cluster,killed)
      part "$name" python3 scripts/bench_cluster.py --parts "$parts" --out runs/cluster-bench \
        --markdown "$out/cluster.md" ;;
    *) echo "unknown part '$name'"; exit 2 ;;
  esac
done
[ ${#failed[@]} -eq 0 ] || { echo "failed parts: ${failed[*]}"; exit 1; }
