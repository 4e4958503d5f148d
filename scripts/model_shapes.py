"""The GEMMs a model runs (issue 48), for scripts/bench_vs_vendor.py --models and
scripts/bench_epilogue.py --models; run alone, prints them one a line (for a shell loop)."""

import argparse

# (N, K) of each projection: Llama-3-8B (hidden 4096, intermediate 14336, 8 KV heads of 128) and 70B
# (hidden 8192, intermediate 28672, 8 KV heads of 128)
PROJECTIONS = {"8B qkv": (6144, 4096), "8B gate-up": (28672, 4096), "8B down": (4096, 14336),
               "70B qkv": (10240, 8192), "70B gate-up": (57344, 8192), "70B down": (8192, 28672)}
TOKENS = (1, 16, 128, 512, 2048, 8192)
MODEL_SHAPES = [f"{m}x{n}x{k}" for n, k in PROJECTIONS.values() for m in TOKENS] + [
    "3000x5000x1000", "2000x7000x3000", "1000x1000x1000", "999x1001x1003:1008,1008,1001"]


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print("\n".join(MODEL_SHAPES))
