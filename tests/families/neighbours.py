"""A helper module beside the families: the five-point stencil's float64 reference. The stencil
family imports it with a relative import, as a user keeps helpers beside a family."""

from __future__ import annotations

import numpy as np


def five_point(grid: np.ndarray) -> np.ndarray:
    """4·g[i][j] − (the four neighbours), with zeros outside the grid."""
    padded = np.pad(grid, 1)
    return 4 * grid - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]


def box3(grid: np.ndarray) -> np.ndarray:
    """The mean of the 3 x 3 neighbourhood, with zeros outside the grid."""
    padded = np.pad(grid, 1)
    rows, columns = grid.shape
    return sum(padded[i:i + rows, j:j + columns] for i in range(3) for j in range(3)) / 9
