"""What the built-in families share about their tiles: an `smem` parameter says whether the shared
tiles are declared static (sized when compiled) or extern (sized at launch); a GEMM's block tile is
cut into warp tiles."""

from __future__ import annotations

from ..core.limits import WARP_SIZE

SMEM = ("static", "dynamic")


class SharedTiles:
    """Mixed into a built-in variant with an `smem` parameter and a `shared_bytes` formula."""

    @property
    def static_shared_bytes(self) -> int:
        """What ptxas reports as the kernel's static shared memory."""
        return self.shared_bytes if self.smem == "static" else 0  # type: ignore[attr-defined]

    @property
    def dynamic_shared_bytes(self) -> int:
        """What the launch asks for (extern __shared__)."""
        return self.shared_bytes if self.smem == "dynamic" else 0  # type: ignore[attr-defined]


class WarpTiles:
    """Mixed into a GEMM variant whose block tile (bm x bn) is cut into warp tiles (wm x wn)."""

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)  # type: ignore[attr-defined]

    @property
    def threads_per_block(self) -> int:
        return self.warps * WARP_SIZE
