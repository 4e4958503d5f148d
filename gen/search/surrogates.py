"""Cheap models of a space fitted on what was measured, to guess which unmeasured points are fast
before any is run: the strategies screen many candidates with them and propose the best guess.
Each takes the measured points' scaled positions (SearchSpace.encoded), a value per point (lower is
faster: a log time, a rank) and the candidates' positions, and returns a guessed value per candidate."""

from __future__ import annotations

import numpy as np


def nearest_mean(positions: np.ndarray, log_times: np.ndarray, candidates: np.ndarray, nearest: int) -> np.ndarray:
    """Each candidate's guess: the mean log time of its `nearest` measured points (city-block distance
    over the positions, the first measured first among equals)."""
    distances = np.abs(candidates[:, None, :] - positions[None, :, :]).sum(axis=2)
    closest = np.argsort(distances, axis=1, kind="stable")[:, :nearest]
    return log_times[closest].mean(axis=1)


def quadratic_trend(positions: np.ndarray, values: np.ndarray, candidates: np.ndarray, ridge: float) -> np.ndarray:
    """Each candidate's guess by a trend over the whole space: the value as a quadratic in each
    parameter's position (no cross terms), fitted by least squares with a ridge penalty on all but the
    constant, so a few points already say which way each parameter is faster."""
    def terms(x: np.ndarray) -> np.ndarray:
        return np.hstack([x, x ** 2, np.ones((len(x), 1))])

    design = terms(positions)
    penalty = ridge * np.eye(design.shape[1])
    penalty[-1, -1] = 0.0
    weights = np.linalg.solve(design.T @ design + penalty, design.T @ values)
    return terms(candidates) @ weights
