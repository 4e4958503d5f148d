"""What the built-in families share about their shared-memory tiles: their `smem` parameter says
whether the tiles are declared static (sized when compiled) or extern (sized at launch)."""

from __future__ import annotations

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
