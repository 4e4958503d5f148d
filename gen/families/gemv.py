"""gemv: C = A·B for one to eight rows of A (a model's tokens), A and B in float16 or bfloat16, sums in
float32 on the CUDA cores, C in the inputs' type: hgemm's problem, for shapes where reading B once is the
whole cost and a tensor-core tile of 64 rows would mostly multiply zeros.

Each thread owns 8 consecutive columns of C and reads B one row's 8 columns (16 bytes) at a time, `unroll`
rows in flight. The `kgroups` groups of threads of a block share K, row chunk by row chunk, and add their
float32 sums in shared memory in a fixed order; with `split`, the blocks of a cluster share K too, and the
first adds the others' sums through distributed shared memory in rank order. No float atomics: the same
inputs give the same bits every run. Its epilogues are wgmma's (gen.families.epilogue), applied to each
output's float32 sum as it is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..core.errors import InvalidVariant
from ..core.limits import HOPPER_SMS, MAX_THREADS_PER_SM, REGISTERS_PER_SM
from .family import Family, Launch, arch_cc, blocks, check_shared_bytes, check_threads
from .gemm import MatmulShape
from .epilogue import Epilogue, epilogue_field, with_epilogue
from .hgemm import CHUNK, HALF_GEMM, HalfGemmProblem
from .variant import Variant, choice

ROWS = (1, 2, 4, 8)
SPLITS = (1, 2, 4, 8)  # blocks of a cluster sharing K: 8 the most a cluster portably holds
# likely_best's aim: at least this many threads reading B at once (about 500 per SM of an H200), each keeping
# MIN_STEPS chunks of `unroll` rows of K; measured best at the six one-token Llama-3 shapes on an H200
# (96-114% of cuBLAS there, docs/results/h200-models.md)
THREADS_READING = 1 << 16
MIN_STEPS = 2  # chunks of `unroll` rows each thread reads at least
BLOCKS = ((128, 32), (128, 64), (64, 32), (256, 16), (64, 16))  # (bn, kgroups) likely_best tries, in turn
# Blocks beyond what the SMs hold at once come in rounds: likely_best splits K until those rounds are this
# full. At 1x57344x8192 on an H200 (448 blocks of 512 threads, 264 at once) splitting in four (rounds 97%
# full) ran 0.232 ms against 0.242 unsplit and 0.239 in two (both 85% full); where every block fits at
# once, no more splits paid (docs/results/h200-models.md)
FULL_ROUNDS = 0.95
REGISTERS_PER_THREAD = 64  # a thread's at unroll 8 (NVRTC 13.0 and 13.5, sm_90a): two blocks of 512 an SM


@dataclass(frozen=True, order=True)
class GemvVariant(Variant):
    family: ClassVar[str] = "gemv"

    dtype: str = choice("f16", ("f16", "bf16"), space=("f16",), emitted=("f16", "bf16"),
                        help="element type of A, B and C: float16 or bfloat16")
    rows: int = choice(1, ROWS, tag="r", space=ROWS, emitted=(8,),
                       help="rows of A (and C) a block computes: the shape's M must be at most this")
    bn: int = choice(64, (64, 128, 256), tag="bn", space=(64, 128, 256), emitted=(64,),
                     help="columns of C per block, 8 per thread")
    kgroups: int = choice(16, (1, 2, 4, 8, 16, 32, 64), tag="kg", space=(16, 32, 64), emitted=(16,),
                          help="groups of bn / 8 threads per block, each summing its share of K")
    unroll: int = choice(4, (1, 2, 4, 8), tag="u", space=(2, 4, 8), emitted=(4,),
                         help="rows of B each thread has in flight (16 bytes each)")
    split: int = choice(1, SPLITS, tag="split", omit=1, space=SPLITS, emitted=(1, 4),
                        help="blocks of a cluster sharing K; the first adds the others' sums in rank order (sm_90)")
    copy: str = choice("vector", ("vector", "scalar"), omit="vector", space=("vector",), emitted=("vector", "scalar"),
                       help="vector: B read 16 bytes at a time (ldb a multiple of 8, B on a 16-byte boundary); "
                            "scalar: element by element, any stride and alignment")
    scale: str = epilogue_field("scale")
    bias: str = epilogue_field("bias")
    act: str = epilogue_field("act")
    residual: str = epilogue_field("residual")

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(self.scale, self.bias, self.act, self.residual)

    @property
    def threads_per_block(self) -> int:
        return self.bn // CHUNK * self.kgroups

    @property
    def static_shared_bytes(self) -> int:
        """Every group's float32 sums, rows x bn each, added in a fixed order."""
        return 4 * self.kgroups * self.rows * self.bn

    def check_combination(self) -> None:
        self.epilogue.check()
        check_threads(self.threads_per_block, f"bn {self.bn} with kgroups {self.kgroups}")
        check_shared_bytes("static", self.static_shared_bytes,
                           f"kgroups {self.kgroups} x rows {self.rows} x bn {self.bn} float32 sums")
        if self.rows * self.unroll > 32:
            raise InvalidVariant(f"rows {self.rows} x unroll {self.unroll} values of A held with each thread's "
                                 f"{8 * self.rows} sums spill out of registers; keep rows x unroll at most 32")


class GemvFamily(Family):
    """The half-precision GEMM for a few rows of A, bound by reading B: CUDA cores, 16-byte loads."""

    name = "gemv"
    summary = "C = A·B for 1 to 8 rows of A in float16 or bfloat16: B read once, K shared by warps and clusters"
    variant_type = GemvVariant
    problem = HALF_GEMM
    template = "gemv.cu.j2"
    heatmap_axes = ("bn", "kgroups")
    heatmap_panels = "split"
    matmul_dtypes = ("f16", "bf16")
    # gen.matmul's choice for one row of A only: on an H200 it ties wgmma at two rows and loses at four
    # and eight, where the float32 sums on the CUDA cores, not B's bytes, set the pace
    matmul_rows = 1

    def problem_of(self, variant: GemvVariant) -> HalfGemmProblem:
        return variant.epilogue.problem(HALF_GEMM)

    def epilogue_of(self, variant: GemvVariant) -> str:
        return variant.epilogue.text

    def with_epilogue(self, variant: GemvVariant, epilogue: str) -> GemvVariant:
        return with_epilogue(self, variant, epilogue)

    def launch(self, variant: GemvVariant, shape: MatmulShape) -> Launch:
        return Launch(grid=(blocks(shape.n, variant.bn) * variant.split,), block=(variant.threads_per_block,))

    def refusal(self, variant: GemvVariant, shape: MatmulShape) -> str | None:
        if shape.m > variant.rows:
            fitting = next((f"rows={rows}" for rows in ROWS if rows >= shape.m), "wgmma or hgemm")
            return (f"rows {variant.rows} computes at most {variant.rows} rows of A; {shape} has M = {shape.m} "
                    f"(use {fitting})")
        if variant.copy == "vector" and shape.ldb % CHUNK:
            return (f"copy=vector reads B 16 bytes at a time: ldb must be a multiple of {CHUNK}; {shape} is not "
                    f"(use copy=scalar)")
        return None

    def arch_refusal(self, variant: GemvVariant, arch: str) -> str | None:
        if variant.split > 1 and not self.runs_on(arch_cc(arch)):
            return (f"split {variant.split} shares K in a cluster of blocks, sm_90 or later; this run compiles for "
                    f"{arch} (use split=1)")
        return None

    def runs_on(self, cc: str) -> bool:
        """sm_90 and later: the GPUs it was made and measured on, where its likeliest best variants'
        clusters run (a split=1 variant runs on sm_80 too, through gen.kernel)."""
        return int(cc.split(".")[0]) >= 9

    def adaptations(self, variant: GemvVariant) -> list[GemvVariant]:
        """More rows (up to the shape's M), then element-by-element reads of B as well."""
        wider = [replace(variant, rows=rows) for rows in ROWS if rows >= variant.rows]
        return wider[1:] + [replace(v, copy="scalar") for v in wider]

    def unaligned(self, variant: GemvVariant) -> GemvVariant | None:
        return replace(variant, copy="scalar") if variant.copy == "vector" else None

    def sanitize_size(self, variant: GemvVariant) -> str:
        return f"{variant.rows}x77x45:45,{80 if variant.copy == 'vector' else 77},77"

    def likely_best(self, shape: MatmulShape, dtype: str | None = None) -> list[Variant]:
        """For each block of BLOCKS, in turn, the fewest blocks per cluster that have THREADS_READING
        threads read B, each keeping MIN_STEPS chunks of K, and whose rounds of blocks are full (the
        fewest that read enough where none fills its rounds; the most that keep MIN_STEPS, where none
        reads enough)."""
        rows = next((rows for rows in ROWS if rows >= shape.m), None)
        if rows is None:
            return []
        default, unroll = self.adapted_default(shape, dtype), min(8, 32 // rows)
        chosen: list[Variant] = []
        for bn, kgroups in BLOCKS:
            splits = [split for split in SPLITS if kgroups * split * unroll * MIN_STEPS <= max(shape.k, 1)] or [1]
            enough = [split for split in splits if blocks(shape.n, CHUNK) * kgroups * split >= THREADS_READING]
            block = replace(default, rows=rows, bn=bn, kgroups=kgroups, unroll=unroll)
            split = next((split for split in enough if rounds_full(replace(block, split=split), shape)),
                         enough[0] if enough else splits[-1])
            variant = replace(block, split=split)
            if self.runnable(variant, shape) == variant and variant not in chosen:
                chosen.append(variant)
        return chosen


def rounds_full(variant: GemvVariant, shape: MatmulShape) -> bool:
    """Whether the SMs (HOPPER_SMS of them, an H100's or H200's) hold every block of the launch at
    once, or its rounds of blocks are at least FULL_ROUNDS full. Blocks an SM holds: by REGISTERS_PER_THREAD,
    measured at one row of A; more rows take more registers, so there it is an estimate from above."""
    threads = variant.threads_per_block
    at_once = HOPPER_SMS * max(1, min(MAX_THREADS_PER_SM // threads,
                                      REGISTERS_PER_SM // (threads * REGISTERS_PER_THREAD)))
    launched = blocks(shape.n, variant.bn) * variant.split
    return launched <= at_once or launched / (blocks(launched, at_once) * at_once) >= FULL_ROUNDS
