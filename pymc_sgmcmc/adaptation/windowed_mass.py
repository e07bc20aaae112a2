"""The mass of the samplers without an M step: the Laplace covariance, rescaled in windows.

Stan's and PyMC's samplers estimate the posterior variances from the warm-up draws in
windows that double in length, and set the inverse mass to them (Stan Reference Manual,
"HMC algorithm parameters", windowed adaptation). Our samplers start from the Laplace
covariance at the mode (:func:`pymc_sgmcmc.find_mode`), which already holds the
correlations; a window rescales it along its own whitened coordinates: with ``Σ = L Lᵀ``
(Cholesky) and ``s²`` the window's variances of ``L⁻¹θ``, ``Σ ← L diag(s²) Lᵀ``. For a
diagonal ``Σ`` that is Stan's update, the window's variances. Where the mode is not in the
bulk of the posterior (hierarchical models, skewed marginals) the scales then follow the
draws, and a Gaussian posterior keeps its Laplace metric up to Monte Carlo noise.

Rescaling in whitened coordinates rather than per coordinate (``Σ ← D Σ D``) is what
keeps a strongly correlated Laplace fit well conditioned: on a 100-dimensional Gaussian of
condition number 1e4 noisy per-coordinate factors shrank the smallest eigenvalue by orders
of magnitude and SGLD diverged, while whitened factors near 1 leave it where it was.

A stochastic-gradient chain with a small step can be strongly autocorrelated within a
window, so each window's variance is shrunk toward the current one with its effective
sample size as the weight (Stan shrinks toward a constant with the draw count): ArviZ's
bulk ESS, computed over all coordinates at once
(:func:`~pymc_sgmcmc.core.effective_sample_size.bulk_ess`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import scipy.linalg
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.core.effective_sample_size import bulk_ess
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric, metric_from_inverse

PRIOR_WEIGHT = 5.0
"""Effective draws the current variance counts for when a window's is shrunk toward it."""


def adaptation_windows(
    tune: int, initial_buffer: int = 75, first_window: int = 25, final_buffer: int = 50
) -> list[tuple[int, int]]:
    """The mass windows ``(start, end)`` of ``tune`` tuning iterations (Stan's schedule).

    An initial buffer (the chain finds the bulk), windows that double in length, the last
    stretched to the final buffer (the step size settles on the last mass). With fewer
    than ``initial_buffer + first_window + final_buffer`` tuning iterations the three
    parts take 15 %, 75 % and 10 % of them, as Stan does; under 20, no window.
    """
    if tune < 20:
        return []
    if tune < initial_buffer + first_window + final_buffer:
        initial_buffer = int(0.15 * tune)
        final_buffer = int(0.1 * tune)
        first_window = tune - initial_buffer - final_buffer
    windows = []
    start, size = initial_buffer, first_window
    last = tune - final_buffer
    while start + size <= last:
        # A window that would leave less than twice its length before the final buffer
        # takes the rest (Stan's rule).
        end = last if start + 3 * size > last else start + size
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


def shrunk_variance(
    window_variance: np.ndarray,
    effective_draws: np.ndarray,
    current_variance: np.ndarray,
    prior_weight: float = PRIOR_WEIGHT,
) -> np.ndarray:
    """A window's variances shrunk toward the current ones, weighted by effective draws."""
    weight = effective_draws / (effective_draws + prior_weight)
    return weight * window_variance + (1.0 - weight) * current_variance


def covariance_factor(covariance: np.ndarray) -> np.ndarray:
    """``L`` with ``Σ = L Lᵀ``: the square root (1-D ``Σ``) or the lower Cholesky factor."""
    if covariance.ndim == 1:
        return np.sqrt(covariance)
    return np.linalg.cholesky(covariance)


def whitened(draws: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """The draws (one per row) in the coordinates ``L⁻¹θ`` of a covariance factor."""
    if factor.ndim == 1:
        return draws / factor
    return scipy.linalg.solve_triangular(factor, draws.T, lower=True).T


def rescaled_covariance(factor: np.ndarray, whitened_variance: np.ndarray) -> np.ndarray:
    """``L diag(s²) Lᵀ``: the covariance whose whitened coordinates have variances ``s²``."""
    if factor.ndim == 1:
        return factor**2 * whitened_variance
    scaled = factor * whitened_variance[None, :]
    return scaled @ factor.T


@dataclass_state
class WindowedMassState(DataClassState):
    """A chain's windowed adaptation in progress."""

    metric: Any
    inverse: Any
    window: list
    windows: list
    mass_updates: int


class WindowedMass(Adapter):
    """The inverse mass rescaled at the end of each tuning window (see the module).

    Parameters
    ----------
    initial_inverse : ndarray
        The inverse mass of the first window: the Laplace covariance (1-D: its diagonal).
    """

    _state_class: ClassVar[type[DataClassState]] = WindowedMassState
    stats_dtypes_shapes: ClassVar[dict] = {"mass_updates": (np.int64, [])}
    learns: ClassVar[bool] = True

    def __init__(self, initial_inverse: np.ndarray) -> None:
        self.initial_inverse = np.asarray(initial_inverse, dtype=float)

    def init_chain(self, chain: ChainContext) -> None:
        """Start from the initial inverse mass; lay out the windows of this chain's tuning."""
        self.inverse = self.initial_inverse.copy()
        self.metric: EuclideanMetric = metric_from_inverse(self.inverse, chain.dtype)
        self.window: list = []
        self.windows = adaptation_windows(chain.tune or 0)
        self.mass_updates = 0

    def parameters(self) -> dict[str, Any]:
        """The parameter this adapter owns: the metric."""
        return {"metric": self.metric}

    def stats(self) -> dict[str, Any]:
        """Windows closed so far."""
        return {"mass_updates": self.mass_updates}

    def update(self, result: IterationResult, chain: ChainContext) -> frozenset[str]:
        """Store the draw; at the end of a window, rescale the inverse mass."""
        if self.mass_updates >= len(self.windows):
            return frozenset()
        start, end = self.windows[self.mass_updates]
        if result.iteration >= start and not result.diverging:
            self.window.append(result.position)
        if result.iteration + 1 < end:
            return frozenset()
        draws = np.asarray(self.window, dtype=float)
        self.window = []
        self.mass_updates += 1
        if len(draws) < 10:
            return frozenset()
        factor = covariance_factor(self.inverse)
        draws = whitened(draws, factor)
        effective = bulk_ess(draws)
        effective = np.clip(np.nan_to_num(effective, nan=1.0), 1.0, len(draws))
        # Shrunk toward 1: the current metric, in its own whitened coordinates.
        variance = shrunk_variance(draws.var(axis=0, ddof=1), effective, 1.0)
        if not np.all(np.isfinite(variance) & (variance > 0)):
            return frozenset()
        self.inverse = rescaled_covariance(factor, variance)
        self.metric = metric_from_inverse(self.inverse, chain.dtype)
        return frozenset({"metric"})
