"""CUDA limits every variant and launch is validated against: one place for each number.

Sources: CUDA C++ Programming Guide, "Compute Capabilities" table (threads per block, block and
grid dimensions, static shared memory per block, shared memory per block with opt-in on compute
capability 9.0).
"""

MAX_THREADS_PER_BLOCK = 1024
MAX_THREADS_PER_SM = 2048  # compute capability 7.0, 8.0 and 9.0 (7.5: 1024; 8.6 and 8.9: 1536)
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
MAX_STATIC_SHARED_BYTES = 48 * 1024
# Dynamic shared memory beyond 48 KiB needs cudaFuncSetAttribute; 227 KiB is the sm_90 opt-in maximum.
MAX_DYNAMIC_SHARED_BYTES = 227 * 1024
WARP_SIZE = 32
MAX_REGISTERS_PER_THREAD = 255
# Run-time cache preferences (cuFuncSetCacheConfig's CU_FUNC_CACHE_PREFER_<NAME>), with the
# shared-memory carveout in percent that goes with each on GPUs that have one (-1 leaves the driver's default).
CACHE_CONFIGS = {"none": -1, "shared": 100, "l1": 0, "equal": 50}
REGISTERS_PER_SM = 64 * 1024  # 32-bit registers of one SM, shared by the blocks on it
HOPPER_SMS = 132  # SMs of an H100 SXM and of an H200: what untuned choices and persistent launches plan for
# Kernels index with 32-bit ints, so no matrix may hold 2**31 elements or more.
MAX_ELEMENTS = 2**31 - 1

DTYPE_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1}
# f16 and bf16 are cuda_fp16.h's and cuda_bf16.h's types: a template that uses them includes the header.
DTYPE_CTYPE = {"f32": "float", "f64": "double", "f16": "__half", "bf16": "__nv_bfloat16"}
# The FP8 types (e4m3, e5m2) are only copied and fed to the tensor cores, never computed with in C, nor
# written as outputs: kernels see their bits.
INPUT_CTYPE = {**DTYPE_CTYPE, "e4m3": "unsigned char", "e5m2": "unsigned char"}
