"""The Gaussian process of Bayesian optimisation (gen.search.strategies.BayesianOptimisation): an RBF
kernel over the scaled parameter positions, its posterior, its marginal likelihood, and expected
improvement (which the forest's screen uses too)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


class Posterior:
    """Predictions (mean, standard deviation of standardised log time) of a fitted Gaussian process."""

    def __init__(self, space: Any, x: np.ndarray, y: np.ndarray, scale: float, noise: float):
        self.space, self.x, self.y, self.scale, self.noise = space, x, y, scale, noise
        self.best = float(y.min())

    @classmethod
    def fitted(cls, space: Any, x: np.ndarray, log_times: np.ndarray, scales: Sequence[float], noise: float
               ) -> Posterior:
        """The process of the log times standardised, with the length scale among `scales` of highest
        marginal likelihood."""
        y = (log_times - log_times.mean()) / (log_times.std() or 1.0)
        return cls(space, x, y, max(scales, key=lambda s: log_likelihood(x, y, s, noise)), noise)

    def __call__(self, variants: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        candidates = self.space.encoded(variants)
        return gp_posterior(self.x, self.y, candidates, self.scale, self.noise)


def _rbf(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    squared = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
    return np.exp(-0.5 * squared / scale**2)


def gp_posterior(x: np.ndarray, y: np.ndarray, candidates: np.ndarray, scale: float, noise: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    kernel = _rbf(x, x, scale) + noise * np.eye(len(x))
    factor = np.linalg.cholesky(kernel)
    alpha = np.linalg.solve(factor.T, np.linalg.solve(factor, y))
    cross = _rbf(candidates, x, scale)
    mu = cross @ alpha
    v = np.linalg.solve(factor, cross.T)
    variance = np.clip(1.0 - (v**2).sum(axis=0), 1e-12, None)
    return mu, np.sqrt(variance)


def log_likelihood(x: np.ndarray, y: np.ndarray, scale: float, noise: float) -> float:
    kernel = _rbf(x, x, scale) + noise * np.eye(len(x))
    try:
        factor = np.linalg.cholesky(kernel)
    except np.linalg.LinAlgError:
        return -math.inf
    alpha = np.linalg.solve(factor.T, np.linalg.solve(factor, y))
    return float(-0.5 * y @ alpha - np.log(np.diag(factor)).sum())


def normal_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


def expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    """How far below `best` each guess (mean mu, standard deviation sigma, normal) is expected to fall."""
    sigma = np.maximum(sigma, 1e-9)
    z = (best - mu) / sigma
    return (best - mu) * normal_cdf(z) + sigma * normal_pdf(z)
