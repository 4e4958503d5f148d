"""Tensor maps for Hopper's Tensor Memory Accelerator (TMA): the driver's 128-byte CUtensorMap that
describes a row-major matrix of 16-bit elements and the box one copy moves into shared memory with
the 128-byte swizzle (64 x 64; a thin tile's A: its rows x 64). Encoded on the host by the driver's cuTensorMapEncodeTiled (libcuda
through ctypes: a host function that needs no context), passed to a kernel by value."""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from .errors import TilegenError, UsageError

TENSOR_MAP = np.dtype((np.void, 128))  # a kernel argument of this type is passed as its 128 bytes
BOX = 64  # rows and columns of one box: 64 rows of 128 bytes, the width of the swizzle
ALIGNMENT = 16  # bytes: where a matrix starts and how long its rows are, for TMA

_UINT8, _UINT16, _SWIZZLE_128B = 0, 1, 3  # the driver's CUtensorMapDataType and CUtensorMapSwizzle
_L2_128B, _L2_256B = 2, 3  # its CUtensorMapL2promotion
SECTOR = 32  # bytes: L2's unit of a read


def off_sectors(row_bytes: int) -> bool:
    """Whether rows this many bytes apart start off L2's 32-byte sectors (half of them do)."""
    return row_bytes % SECTOR != 0


def l2_promotion(row_bytes: int) -> int:
    """How much L2 fetches from memory around what a box asks for: 256 bytes where rows fall on
    32-byte sectors, 128 where they do not (measured with wgmma in bf16 on an H200, where 128 was 11%
    faster off the sectors and as fast on them: docs/results/h200-models.md, "Rows off the sectors";
    FP8's maps follow the same rule, not measured)."""
    return _L2_128B if off_sectors(row_bytes) else _L2_256B


def box_map(address: int, rows: int, columns: int, row_bytes: int, name: str, element_bytes: int = 2,
            box_rows: int = BOX) -> np.void:
    """The map of matrix `name` (rows x columns of 16-bit elements, or 8-bit ones, rows `row_bytes`
    apart, at device `address`) in boxes of `box_rows` rows of 128 bytes (64 x 64 elements, or 64 x 128).
    Elements beyond the matrix read as zeros. UsageError when the matrix does not start, or its rows
    do not fall, on 16-byte boundaries."""
    if address % ALIGNMENT or row_bytes % ALIGNMENT:
        raise UsageError(f"{name} must start at a 16-byte boundary and have rows of a multiple of 16 bytes "
                         f"({ALIGNMENT // element_bytes} elements) for TMA; it starts at {address:#x} with rows "
                         f"{row_bytes} bytes apart")
    room = (ctypes.c_uint8 * (TENSOR_MAP.itemsize + 64))()  # the driver writes the map at a 64-byte boundary
    bits = (ctypes.c_uint64 * 16).from_buffer(room, -ctypes.addressof(room) % 64)
    kind, box_columns = (_UINT16, BOX) if element_bytes == 2 else (_UINT8, 2 * BOX)
    status = _encode()(ctypes.byref(bits), kind, 2, ctypes.c_void_p(address), (ctypes.c_uint64 * 2)(columns, rows),
                       (ctypes.c_uint64 * 1)(row_bytes), (ctypes.c_uint32 * 2)(box_columns, box_rows), (ctypes.c_uint32 * 2)(1, 1),
                       0, _SWIZZLE_128B, l2_promotion(row_bytes), 0)
    if status:
        raise TilegenError(f"the driver refused the tensor map of {name} ({rows} x {columns}, rows {row_bytes} bytes "
                           f"apart): cuTensorMapEncodeTiled returned CUDA error {status}")
    return np.frombuffer(bytes(bits), dtype=TENSOR_MAP)[0]


@functools.cache
def _encode():  # noqa: ANN202 - a ctypes function
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise TilegenError(f"tensor maps need the CUDA driver (libcuda.so.1), which did not load: {error}") from None
    encode = driver.cuTensorMapEncodeTiled
    encode.restype = ctypes.c_int
    return encode
