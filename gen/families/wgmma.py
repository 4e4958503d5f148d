"""wgmma: C = A·B on Hopper's tensor cores (sm_90a), A and B in float16 or bfloat16, sums in float32.

Round 2 of the tensor-core GEMM (round 1 is hgemm, on mma.sync). A block's producer warp group
copies tiles of A and B into shared memory with the Tensor Memory Accelerator (TMA), `stages` deep,
in 64 x 64 boxes with the 128-byte swizzle (a thin tile's A: 16 or 32 rows); its `consumers` warp groups multiply them with
wgmma.mma_async straight from shared memory; mbarriers pass each stage between them. `cluster` pairs
blocks on tiles one above the other, each copying half of their shared tiles of B into both (TMA
multicast); `schedule` gives each block one tile of C, or keeps a persistent block per SM walking through the tiles (the
next tile's copies overlap this one's stores), or has its two consumers take whole tiles in turn
(ping-pong: one's stores overlap the other's products), or shares the last wave's tiles out along K
among persistent blocks (stream-K); `group` orders the tiles for L2 reuse.
Where one row of tiles covers M, B's copies leave L2 first (read once), A's stay (16-bit tiles of 128
columns or more, without clusters).
`scale`, `bias`, `act` and `residual` fuse an epilogue into the stores (gen.families.epilogue).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..core.errors import InvalidVariant
from ..core.limits import HOPPER_SMS
from ..core.tensor_maps import BOX, off_sectors
from .family import Family, Launch, blocks, check_shared_bytes
from .gemm import MatmulShape
from .epilogue import Epilogue, epilogue_field, epilogue_problem, with_epilogue
from .hgemm import ALIGNMENT_SLACK, TMA_GEMM, TmaGemmProblem, tma_gemm
from .problem import Workspace, element_bytes
from .variant import Variant, choice

SCHEDULES = ("grid", "persistent", "pingpong", "streamk")
THIN_ROWS = (16, 32)  # a thin tile's rows: its stages hold only those of A (wgmma's m64 reads on into B's)
STAGES = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20)  # tiles of A and B in shared memory at once (thin tiles take the deep ones)
SPLITS = (1, 2, 4, 8)  # split-K: blocks of a cluster per tile, 8 the most a cluster portably holds
BK = 64  # K per stage: 128 bytes of a row, the width of the 128-byte swizzle
MAX_SUMS = 128  # float32 sums per consumer thread: beyond them, the consumers' 232 registers spill
PERSISTENT_BLOCKS = HOPPER_SMS  # one persistent block per SM
STREAM_K_FLAGS = 256  # stream-K's workspace: a flag word per block (PERSISTENT_BLOCKS at most), 1 KiB
STREAM_K_SLOT = 128 * 256  # then a slot of float32 sums per block, as many as the largest tile's
STREAM_K_WORKSPACE = Workspace("W", STREAM_K_FLAGS + PERSISTENT_BLOCKS * STREAM_K_SLOT)
BARRIER_BYTES = 16  # two mbarriers per stage
TURN_BYTES = 16  # two more for schedule=pingpong: whose turn it is to multiply
CLUSTER_HELP = "blocks of a cluster, on tiles one above the other: each copies half of B's boxes into both (TMA multicast)"
# A tune's first picks and the untuned choice (WgmmaFamily.likely_best): the tiles that won the Llama-3
# projections and odd shapes on an H200 (docs/results/h200-models.md: 30-evaluation tunes and brute
# force over the space), as changes to the default. A thin M (up to 64 rows): 64-row tiles, with K
# split among the blocks of a tile (FILL: see fill_split) unless 192-column tiles alone fill the SMs,
# and deep pipelines (such a product streams B, and the bytes in flight set its pace): 12 and 8 stages
# of 64 and 128 columns, the deepest that fit; 5 of 192 (6 fit, but ran 3-4% slower at 16x10240x8192,
# docs/results/data/h200/thin-2026-11-28/thin.md). A few tiles (the default's fill less than
# half the SMs): stream-K over tiles of 192 and 128 columns, narrower tiles and splits. Many: the
# default and its relatives, stream-K's among them, in the order of wave_cost. Stream-K only where
# it pays (stream_k_pays). Clusters of two (the default's tiles, whole or stream-K, and 64 x 128 ones
# for a few tiles) after every tile alone, but first where the rows of A or B start off L2's sectors:
# there the halved loads of B win (3000x5000x1000 87% of cuBLAS against 75%, 2000x7000x3000 stream-K 86%
# against 72%, 1000^3 87% against 85%: data/h200/session-2026-11-29g/cl-*.md); on the sectors they take
# 1.02-1.04x the time, at a short K too (4096^3, 2048x28672x4096: data/h200/session-2026-11-29e/
# end-barrier-after.md; 4096x4096x1024, 8192x8192x1024: session-2026-11-29g/shortk.md).
FILL = 0
THIN_M = ({"bm": 64, "bn": 64, "consumers": 1, "stages": 12, "schedule": "grid", "store": "direct", "split": FILL},
          {"bm": 64, "bn": 128, "consumers": 1, "stages": 8, "schedule": "grid", "store": "direct", "split": FILL},
          {"bm": 64, "bn": 192, "consumers": 1, "stages": 5, "schedule": "grid", "store": "direct", "split": FILL},
          {"bm": 64, "bn": 256, "stages": 4, "schedule": "pingpong", "store": "direct"}, {})
# A few tokens (up to a thin tile's 16 rows): thin tiles, whose stages hold 16 rows of A where 64-row
# tiles hold 64, so as deep again in the same shared memory (64 and 128 columns: 20 and 8 stages).
# Against the 64-row choices at the six 16-token shapes: 87% against 83% of cuBLAS at 16x6144x4096,
# 97% against 90% at 16x4096x14336, 99% against 94% at 16x10240x8192; thin 192-column tiles split in two
# ran 83% there, 64-row ping-pong 39-78% below 132 tiles (docs/results/data/h200/session-2026-11-29c/thin-16-tokens.md).
FEW_TOKENS = ({"bm": 16, "bn": 64, "consumers": 1, "stages": 20, "schedule": "grid", "store": "direct", "split": FILL},
              {"bm": 16, "bn": 128, "consumers": 1, "stages": 8, "schedule": "grid", "store": "direct", "split": FILL}, {})
THIN_M_WIDE_N = ({"bm": 64, "bn": 256, "consumers": 1, "stages": 4, "store": "direct"},
                 {"bm": 64, "bn": 256, "stages": 4, "schedule": "pingpong", "store": "direct"}, {})
FEW_TILES = ({"bn": 192, "stages": 5, "schedule": "streamk", "store": "direct"},
             {"bn": 128, "stages": 6, "schedule": "streamk", "store": "direct"},
             {"bn": 128, "stages": 6, "schedule": "grid", "store": "direct", "split": FILL},
             {"bm": 64, "bn": 128, "consumers": 1, "stages": 8, "schedule": "grid", "store": "direct", "split": FILL},
             {"bm": 64, "bn": 128, "consumers": 1, "stages": 8, "schedule": "grid", "store": "direct", "cluster": 2},
             {"bm": 64, "bn": 192, "consumers": 1, "stages": 5, "schedule": "grid", "store": "direct", "split": FILL},
             {"stages": 4, "schedule": "grid", "store": "direct", "split": FILL},
             {"bn": 192, "stages": 4, "schedule": "grid", "split": FILL}, {})
# Stream-K's 256 x 128 tiles come before its 128 x 256 ones, so a tie in wave_cost goes to them: as fast
# or up to 12% faster at the eight suite shapes where the two tie (data/h200/session-2026-11-29g/tall-*.md)
MANY_TILES = ({}, {"bn": 192, "stages": 5, "store": "direct"}, {"stages": 4, "store": "direct"},
              {"bm": 256, "bn": 128, "store": "direct"}, {"bn": 128, "stages": 5, "schedule": "pingpong", "store": "direct"},
              {"bm": 256, "bn": 128, "stages": 4, "schedule": "streamk", "store": "direct"},
              {"schedule": "streamk"}, {"cluster": 2}, {"schedule": "streamk", "cluster": 2})
# wave_cost's cost of a tile's element by tile: a 128 x 256 tile (or 256 x 128) multiplies most per
# byte it loads; narrower tiles pay for their loads (fitted to the 512-token shapes' winners)
ELEMENT_COST = {128 * 256: 1.0, 128 * 192: 1.1, 128 * 128: 1.2}
MIN_SPLIT_STEPS = 32  # steps of BK each block of a split keeps: fewer, and the sum costs more than it saves
# wave_cost's cost of stream-K's sums passed through global memory, in steps of a block: fitted to an
# H200's 128 x 256 tiles at 2000x7000x3000, 2048x7168x3072 and 8192x6144x4096 (docs/results/h200-models.md)
STREAM_K_FIXUP_STEPS = 24
STREAM_K_MAX_FILL = 0.6  # the fullest last round of tiles stream-K still beats (see stream_k_pays)





@dataclass(frozen=True, order=True)
class WgmmaVariant(Variant):
    family: ClassVar[str] = "wgmma"

    dtype: str = choice("f16", ("f16", "bf16"), space=("f16",), emitted=("f16", "bf16"),
                        help="element type of A and B: float16 or bfloat16")
    out: str = choice("same", ("same", "f32"), tag="c", space=("same",), emitted=("same",),
                      help="C's type: the inputs' (same) or float32")
    bm: int = choice(128, THIN_ROWS + (64, 128, 256), tag="bm", space=(16, 64, 128, 256), emitted=(128,),
                     help="block tile rows (of C); 64: one consumer, or ping-pong's two, for a thin M; 16 and 32: "
                          "a thin tile, whose stages hold only its rows of A (one consumer's m64 product, the rest "
                          "dropped)")
    bn: int = choice(256, (64, 128, 192, 256), tag="bn", space=(64, 128, 192, 256), emitted=(256,),
                     help="block tile columns: the wgmma's N")
    consumers: int = choice(2, (1, 2), tag="wg", space=(1, 2), emitted=(2,),
                            help="consumer warp groups, each multiplying bm / consumers rows (64 or 128)")
    stages: int = choice(3, STAGES, tag="s", space=(3, 4, 5, 6, 8, 12, 16, 20), emitted=(3,),
                         help="tiles in shared memory at once; the producer refills each as soon as it is free")
    schedule: str = choice("persistent", SCHEDULES, space=SCHEDULES, emitted=("persistent", "streamk"),
                           help=f"grid: a block per tile; persistent: {PERSISTENT_BLOCKS} blocks walk the tiles; pingpong: "
                                "so do they, their two consumers taking whole tiles in turn; streamk: so do they, and "
                                "share the last wave's tiles (and one wave more) along K (partial sums in global "
                                "memory, added in a fixed order)")
    group: int = choice(8, (1, 8, 16), tag="g", space=(8,), emitted=(8,),
                        help="rows of tiles taken together, column by column, for L2 reuse (1: row by row)")
    specialize: str = choice("producer", ("producer", "none"), space=("producer",), emitted=("producer",),
                             help="producer: a warp group of its own copies, the others multiply; none: the "
                                  "multiplying warps' first thread asks for the copies too")
    cluster: int = choice(1, (1, 2), tag="cl", space=(1, 2), emitted=(1,), help=CLUSTER_HELP)
    store: str = choice("bulk", ("direct", "bulk"), space=("direct", "bulk"), emitted=("direct", "bulk"),
                        help="direct: from registers (a 16-bit C in 16 bytes a lane), checked at C's edges; bulk: whole "
                             "tiles through shared memory and the bulk copy engine, behind the next tile's products")
    split: int = choice(1, SPLITS, tag="split", omit=1, space=SPLITS[:3],
                        help="blocks per tile of C, a cluster, each multiplying its share of K; the first adds the "
                             "others' float32 sums in their order (deterministic) and stores")
    # The epilogue (gen.families.epilogue): D = act(alpha * A·B + bias) + beta * R, asked for, never searched.
    scale: str = epilogue_field("scale")
    bias: str = epilogue_field("bias")
    act: str = epilogue_field("act")
    residual: str = epilogue_field("residual")

    @property
    def output_dtype(self) -> str:
        return "f32" if self.out == "f32" else self.dtype

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(self.scale, self.bias, self.act, self.residual, self.out)

    @property
    def rows_per_consumer(self) -> int:
        return self.bm if self.schedule == "pingpong" else self.bm // self.consumers

    @property
    def multiplied_rows(self) -> int:
        """The rows each consumer multiplies: its rows of the tile, at least wgmma's m64."""
        return max(self.rows_per_consumer, 64)

    @property
    def sums_per_thread(self) -> int:
        """The float32 sums each consumer thread holds: its rows x bn over a warp group's 128 threads."""
        return self.multiplied_rows * self.bn // 128

    @property
    def skips_rows_outside_c(self) -> bool:
        """Whether a warp whose rows all lie outside C skips the epilogue (a thin M): only with fewer
        than MAX_SUMS sums a thread, where the branch leaves ptxas registers (with 128 it spilled)."""
        return self.sums_per_thread < MAX_SUMS

    @property
    def threads_per_block(self) -> int:
        return 128 * (self.consumers + (self.specialize == "producer"))  # the consumers and a producer warp group

    @property
    def persistent_blocks(self) -> int:
        return PERSISTENT_BLOCKS

    @property
    def stream_k_flags(self) -> int:
        return STREAM_K_FLAGS

    @property
    def staging_bytes(self) -> int:
        """C's tile on its way out (store=bulk): each consumer's rows, padded by 8 elements."""
        if self.store != "bulk":
            return 0
        out_bytes = element_bytes(self.output_dtype)
        return self.consumers * self.rows_per_consumer * (self.bn + 8) * out_bytes

    @property
    def bias_bytes(self) -> int:
        """bias=col: each consumer's last two tiles' columns of the bias (the inputs' type)."""
        return 2 * self.consumers * self.bn * 2 if self.bias == "col" else 0

    @property
    def shared_bytes(self) -> int:
        return (self.stages * ((self.bm + self.bn) * BK * 2 + BARRIER_BYTES) + self.staging_bytes + self.bias_bytes
                + TURN_BYTES + ALIGNMENT_SLACK)

    @property
    def dynamic_shared_bytes(self) -> int:
        return self.shared_bytes

    @property
    def static_shared_bytes(self) -> int:
        return 0

    def check_combination(self) -> None:
        self.epilogue.check()
        rows = self.rows_per_consumer
        if self.specialize == "none" and (self.schedule == "pingpong" or self.cluster > 1):
            raise InvalidVariant("specialize=none has the multiplying warps copy too, so they cannot take turns or "
                                 "wait for another block (use schedule=grid or persistent and cluster=1)")
        if self.schedule == "pingpong" and self.consumers != 2:
            raise InvalidVariant(f"schedule=pingpong takes turns between two consumer warp groups; consumers is "
                                 f"{self.consumers} (use consumers=2)")
        if self.schedule == "pingpong" and rows not in (64, 128):
            raise InvalidVariant(f"schedule=pingpong gives each consumer a whole tile: bm {self.bm} is not 64 or 128 "
                                 f"rows (wgmma's m64, once or twice)")
        if self.bm in THIN_ROWS:
            self._check_thin()
        elif rows not in (64, 128):
            raise InvalidVariant(f"bm {self.bm} over {self.consumers} consumer warp groups gives each {rows} rows; "
                                 f"a consumer multiplies 64 or 128 (wgmma's m64, once or twice)")
        sums = self.sums_per_thread
        if sums > MAX_SUMS:
            raise InvalidVariant(f"{rows} rows x bn {self.bn} leave {sums} float32 sums per consumer thread; more than "
                                 f"{MAX_SUMS} spill out of registers (use more consumers or a smaller bn)")
        check_shared_bytes("dynamic", self.shared_bytes, f"bm {self.bm}, bn {self.bn} x {self.stages} stages")
        if self.schedule == "streamk" and self.bm * self.bn > STREAM_K_SLOT:
            raise InvalidVariant(f"schedule=streamk keeps a block's sums in a slot of {STREAM_K_SLOT} float32: bm "
                                 f"{self.bm} x bn {self.bn} is more")
        if self.schedule == "streamk" and self.cluster > 1 and self.bm > 128:  # nvcc 13.0 spilled 48 bytes there
            raise InvalidVariant(f"schedule=streamk in clusters of {self.cluster} takes tiles of at most 128 rows: their "
                                 f"sums and the clusters' runs spill out of registers at bm {self.bm}")
        self._check_split()

    def _check_thin(self) -> None:
        if (self.consumers, self.schedule in ("grid", "persistent"), self.store, self.cluster) != (1, True, "direct", 1):
            raise InvalidVariant(f"a thin tile (bm {self.bm}) is one consumer's m64 product with its rows past the tile "
                                 f"dropped: use consumers=1, schedule=grid or persistent, store=direct and cluster=1")

    def _check_split(self) -> None:
        if self.split == 1:
            return
        if self.schedule != "grid" or self.cluster != 1:
            raise InvalidVariant(f"split {self.split} makes each tile's blocks a cluster that ends with the tile: use "
                                 f"schedule=grid and cluster=1 (schedule is {self.schedule}, cluster {self.cluster})")
        rows = self.multiplied_rows * self.consumers  # a thin tile's consumer passes on its whole m64 product
        sums, stages = rows * self.bn * 4, self.stages * (self.bm + self.bn) * BK * 2
        if sums > stages:
            raise InvalidVariant(f"split {self.split} gathers each block's {rows} x {self.bn} float32 sums ({sums} "
                                 f"bytes) in its stages' shared memory, {stages} bytes: use more stages")


class WgmmaFamily(Family):
    """The GEMM on half-precision inputs with Hopper's wgmma and TMA: sm_90a only."""

    name = "wgmma"
    summary = "C = A·B in float16 or bfloat16 on Hopper: TMA copies, wgmma from shared memory, mbarrier pipeline (sm_90a)"
    variant_type = WgmmaVariant
    problem = TMA_GEMM
    template = "wgmma.cu.j2"
    heatmap_axes = ("bm", "bn")
    heatmap_panels = "stages"
    target_arch = "sm_90a"
    fallback = "hgemm"  # round 1, on mma.sync: what runs elsewhere
    matmul_dtypes = ("f16", "bf16")  # gen.matmul's family for these types on sm_90, else hgemm's

    def problem_of(self, variant: WgmmaVariant) -> TmaGemmProblem:
        if variant.schedule == "streamk":
            return epilogue_problem(variant.epilogue, STREAM_K_WORKSPACE)
        return variant.epilogue.problem(tma_gemm(min(variant.bm, BOX)))

    def epilogue_of(self, variant: WgmmaVariant) -> str:
        return variant.epilogue.text

    def with_epilogue(self, variant: WgmmaVariant, epilogue: str) -> WgmmaVariant:
        return with_epilogue(self, variant, epilogue)

    def launch(self, variant: WgmmaVariant, shape: MatmulShape) -> Launch:
        units = cluster_units(variant, shape)  # a tile per block
        clusters = units if variant.schedule == "grid" else min(units, PERSISTENT_BLOCKS // variant.cluster)
        if variant.schedule == "streamk":  # a block per SM, each cluster with a run of steps along K
            clusters = min(units * blocks(shape.k, BK), PERSISTENT_BLOCKS // variant.cluster)
        grid = clusters * variant.cluster * variant.split
        return Launch(grid=(grid,), block=(variant.threads_per_block,), dynamic_shared_bytes=variant.dynamic_shared_bytes)

    def refusal(self, variant: WgmmaVariant, shape: MatmulShape) -> str | None:
        return TMA_GEMM.rows_refusal(shape, "hgemm")

    def likely_best(self, shape: MatmulShape, dtype: str | None = None) -> list[Variant]:
        default = self.adapted_default(shape, dtype)
        many = shape.m > 64 and blocks(shape.m, default.bm) * blocks(shape.n, default.bn) >= PERSISTENT_BLOCKS // 2
        clusters_first = any(off_sectors(rows * element_bytes(default.dtype)) for rows in (shape.lda, shape.ldb))
        later = lambda cluster: (cluster > 1) != clusters_first  # noqa: E731  (sorts after: clusters, or tiles alone)
        if many:
            changes = sorted(MANY_TILES, key=lambda change: (later(change.get("cluster", 1)),
                                                             wave_cost(replace(default, **change), shape)))
        elif shape.m <= 64:
            changes = (THIN_M_WIDE_N if blocks(shape.n, 192) >= PERSISTENT_BLOCKS
                       else FEW_TOKENS if shape.m <= THIN_ROWS[0] else THIN_M)
        else:
            changes = FEW_TILES
        chosen: list[Variant] = []
        for change in changes:
            if change.get("split") == FILL:
                change = {**change, "split": fill_split(change.get("bm", default.bm), change.get("bn", default.bn), shape)}
            variant = replace(default, **change)
            if variant.schedule == "streamk" and not stream_k_pays(variant, shape):
                continue
            if variant not in chosen and self.runnable(variant, shape) == variant:
                chosen.append(variant)
        if not many:  # a thin M or few tiles: those whose blocks all fit the SMs at once first, splits
            # in 4 last (with 64 and 128 columns 1.3-1.6x slower than a split in 2 at 16 and 128 tokens), then
            # the most consumer warp groups at work (data/h200/thin-2026-11-28/thin.md), then the most blocks
            # (at 1000³, 64 x 128 tiles on 128 SMs ran 80% of cuBLAS, 128 x 128 ones on 64 SMs with two
            # consumers each 74%: data/h200/session-2026-11-29c/low-rows.md), then the widest tile; clusters
            # last (first off the sectors)
            chosen.sort(key=lambda v: (later(v.cluster), self.launch(v, shape).grid[0] > PERSISTENT_BLOCKS, v.split > 2,
                                       -self.launch(v, shape).grid[0] * consumers_at_work(v, shape),
                                       -self.launch(v, shape).grid[0], -v.bn))
        return chosen

    def sanitize_size(self, variant: WgmmaVariant) -> str:
        return f"{variant.bm + 3}x{variant.bn + 8}x{BOX + 40}"


def consumers_at_work(variant: WgmmaVariant, shape: MatmulShape) -> int:
    """A block's consumer warp groups with rows of C to multiply: ping-pong's take whole tiles in turn; the
    others share a tile's rows, and at a thin M the lower ones have none."""
    if variant.schedule == "pingpong":
        return variant.consumers
    return min(variant.consumers, blocks(shape.m, variant.rows_per_consumer))


def fill_split(bm: int, bn: int, shape: MatmulShape) -> int:
    """The most blocks per bm x bn tile (1, 2 or 4) that still fit the SMs at once, each keeping at
    least MIN_SPLIT_STEPS steps of K."""
    tiles = blocks(shape.m, bm) * blocks(shape.n, bn)
    fitting = [split for split in SPLITS[:3]
               if tiles * split <= PERSISTENT_BLOCKS and blocks(shape.k, BK) >= split * MIN_SPLIT_STEPS]
    return max(fitting, default=1)


def stream_k_pays(variant: WgmmaVariant, shape: MatmulShape) -> bool:
    """Whether stream-K's tiles beat whole ones, as measured on an H200 with L2 flushed before each
    launch (docs/results/h200-models.md, "Stream-K"): K has MIN_SPLIT_STEPS steps and so does each
    block's run (fewer, and the sums cost more than the idle SMs: 9% slower at 3000x5000x1000, 5% at
    128x6144x4096); a single row of tiles only 128 columns wide (at 128 tokens tiles of 192 columns
    ran 7-15% slower); and a last round of tiles at most STREAM_K_MAX_FILL full where there are more
    tiles than SMs (fuller, and the blocks' runs out of step along K cost more than the idle SMs:
    5-12% slower at 70-94%)."""
    rows, steps = blocks(shape.m, variant.bm), blocks(shape.k, BK)
    tiles = rows * blocks(shape.n, variant.bn)
    last = tiles % PERSISTENT_BLOCKS
    return (min(steps, tiles * steps // PERSISTENT_BLOCKS) >= MIN_SPLIT_STEPS and (rows > 1 or variant.bn <= 128)
            and last > 0 and (tiles < PERSISTENT_BLOCKS or last <= STREAM_K_MAX_FILL * PERSISTENT_BLOCKS))


def cluster_units(variant: WgmmaVariant, shape: MatmulShape) -> int:
    """The units of C a cluster's blocks take together: its tiles one above the other (past M: tiles of
    zeros), one tile each without clusters."""
    return blocks(blocks(shape.m, variant.bm), variant.cluster) * blocks(shape.n, variant.bn)


def wave_cost(variant: WgmmaVariant, shape: MatmulShape) -> float:
    """A tile schedule's time, relatively: the steps along K an SM takes (whole rounds of tiles, the
    last one as long as a full one; stream-K: an equal share of every tile's steps, and its sums)
    times a tile's elements at ELEMENT_COST."""
    units, steps = cluster_units(variant, shape), blocks(shape.k, BK)
    if variant.schedule == "streamk":
        per_sm = units * variant.cluster * steps / PERSISTENT_BLOCKS + STREAM_K_FIXUP_STEPS
    else:
        per_sm = blocks(units, PERSISTENT_BLOCKS // variant.cluster) * steps
    return per_sm * variant.bm * variant.bn * ELEMENT_COST[variant.bm * variant.bn]
