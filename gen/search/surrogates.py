"""Cheap models of a space fitted on what was measured, to guess which unmeasured points are fast
before any is run: the strategies screen many candidates with them and propose the best guess.
Each takes the measured points' scaled positions (SearchSpace.encoded), a value per point (lower is
faster: a log time, a rank) and the candidates' positions, and returns a guessed value per candidate."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def ranks_of(times: Sequence[float | None]) -> np.ndarray:
    """Each time's rank among them scaled to [0, 1], the fastest 0 (None, a failure, last; equals in order)."""
    order = [math.inf if t is None else t for t in times]
    return np.argsort(np.argsort(order, kind="stable"), kind="stable") / max(len(order) - 1, 1)


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


def trend_and_forest(positions: np.ndarray, values: np.ndarray, candidates: np.ndarray, ridge: float, trees: int,
                     leaf: int, share: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's guess by the quadratic trend plus a forest of what the trend leaves out (its
    residuals at the measured points), and the forest's spread: the trend says which way each parameter
    is faster, even beyond the measured points; a split of the forest, a conjunction it averages away."""
    trend = quadratic_trend(positions, values, np.vstack([candidates, positions]), ridge)
    mean, spread = forest(positions, values - trend[len(candidates):], candidates, trees, leaf, share, rng)
    return trend[:len(candidates)] + mean, spread


def forest(positions: np.ndarray, values: np.ndarray, candidates: np.ndarray, trees: int, leaf: int,
           share: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's guess by a random forest of regression trees, and how much the trees disagree:
    the mean and standard deviation of `trees` trees' guesses. Each tree is fitted on a bootstrap
    resample of the measured points; each node is split where the squared error falls most, at a
    midpoint between two measured positions of one of a random `share` of the parameters, and only
    where each side keeps `leaf` points; a leaf guesses its points' mean. The trees grow a level at a
    time, all at once, and the candidates follow each split as it is made, so no tree is kept."""
    count, width = positions.shape
    cuts = [np.unique(positions[:, f]) for f in range(width)]
    middles = [(c[1:] + c[:-1]) / 2 for c in cuts]  # a position's level: how many middles lie below it
    known, asked = (np.array([np.searchsorted(m, x[:, f]) for f, m in enumerate(middles)], dtype=np.int64)
                    .reshape(width, len(x)).T for x in (positions, candidates))
    levels = max([2, *(len(c) for c in cuts)])
    rows = rng.integers(count, size=(trees, count)).ravel()  # the bootstrap resamples, tree after tree
    node, nodes = np.repeat(np.arange(trees), count), trees  # each resampled point's node, numbered in order
    followed = np.repeat(np.arange(trees), len(candidates))  # each (tree, candidate)'s node
    guesses, at_candidate = np.empty(trees * len(candidates)), np.arange(trees * len(candidates))
    while at_candidate.size:
        shape = (nodes, width, levels)
        bins = ((node[:, None] * width + np.arange(width)) * levels + known[rows]).ravel()
        sums = np.bincount(bins, np.repeat(values[rows], width), np.prod(shape)).reshape(shape)
        ns = np.bincount(bins, None, np.prod(shape)).reshape(shape)
        total, total_n = sums[:, 0].sum(axis=1), ns[:, 0].sum(axis=1)
        left, left_n = sums.cumsum(axis=2)[:, :, :-1], ns.cumsum(axis=2)[:, :, :-1]
        right_n = total_n[:, None, None] - left_n
        gain = left ** 2 / np.maximum(left_n, 1) + (total[:, None, None] - left) ** 2 / np.maximum(right_n, 1)
        chosen = rng.random((nodes, width)) < share
        chosen[np.arange(nodes), rng.integers(width, size=nodes)] = True
        gain[(left_n < leaf) | (right_n < leaf) | ~chosen[:, :, None]] = -np.inf
        best = gain.reshape(nodes, -1).argmax(axis=1)
        splits = gain.reshape(nodes, -1)[np.arange(nodes), best] > total ** 2 / total_n + 1e-9
        feature, cut = np.divmod(best, levels - 1)
        child = 2 * np.cumsum(splits) - 2  # a split node's left child; its right child is the next
        ended = ~splits[followed]
        guesses[at_candidate[ended]] = (total / total_n)[followed[ended]]
        going = splits[node]
        parent, rows = node[going], rows[going]
        node = child[parent] + (known[rows, feature[parent]] > cut[parent])
        at_candidate, parent = at_candidate[~ended], followed[~ended]
        followed = child[parent] + (asked[at_candidate % len(candidates), feature[parent]] > cut[parent])
        nodes = 2 * int(splits.sum())
    by_tree = guesses.reshape(trees, len(candidates))
    return by_tree.mean(axis=0), by_tree.std(axis=0)
