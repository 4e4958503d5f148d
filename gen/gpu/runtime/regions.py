"""The memory of a region of an array as 2-D spans, for a memset to clear: what pycuda's launches
(gen.gpu.runtime.launch) and the driver's (gen.gpu.runtime.native) both zero before a kernel that adds into its
output. Pure arithmetic: no CUDA here."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def spans(base: int, strides: Sequence[int], item: int, region: tuple[slice, ...]) -> list[tuple[int, int, int, int]]:
    """(address, pitch, width in bytes, height) of each 2-D block of `region` (its padding left
    out): one per index of the leading dimensions, a single one for 1-D and 2-D arrays (a 1-D
    region is one row)."""
    if len(region) == 1:
        start = region[0].start or 0
        width = (region[0].stop - start) * item
        return [(base + start * strides[0], width, width, 1)]
    *leading, rows, columns = region
    width = (columns.stop - (columns.start or 0)) * item
    height = rows.stop - (rows.start or 0)
    corner = (rows.start or 0) * strides[-2] + (columns.start or 0) * strides[-1]
    return [(base + sum((i + (s.start or 0)) * stride for i, s, stride in zip(index, leading, strides)) + corner,
             strides[-2], width, height)
            for index in np.ndindex(*[s.stop - (s.start or 0) for s in leading])]
