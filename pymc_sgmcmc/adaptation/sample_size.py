"""Adaptive E-step sample size.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM", §3.2:
a test function ``q`` is evaluated at subsampled iterations of an E step; after the M step
it is evaluated again with the new mass, and when its new mean falls inside the interval
``C_S = m_S ± z_(1−α/2) · spread`` around the old one, the Monte Carlo error hides the
M step's change, so the next E step collects more samples: ``S ← S + S/S_I``.

Choices where our copy of the paper is silent (its supplement, with the constants, is
missing):

- the spread is the standard error of ``m_S``, ``√(v_S / n_sub)``, the Monte Carlo error
  the interval is meant to capture (the paper prints ``v_S``);
- defaults ``α = 0.05``, ``S_I = 4``, offsets ``x_i − 1 ~ Poisson(ν i^d)`` with
  ``ν = 1``, ``d = 0.5`` (gaps that grow as the chain matures), initial ``S = 100``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.special


def subsample_offsets(
    n_iterations: int, rng: np.random.Generator, nu: float = 1.0, d: float = 0.5
) -> np.ndarray:
    """Iterations ``t_s = Σ_{i≤s} x_i`` with ``x_i − 1 ~ Poisson(ν i^d)``, below ``n``.

    Offsets are 0-based iteration indices within the E step, strictly increasing.
    """
    if nu < 0 or d < 0:
        raise ValueError(f"nu and d must be non-negative, got nu={nu}, d={d}.")
    # Gaps are drawn in vectorised chunks (one NumPy call per chunk rather than per
    # offset): this runs at every E step, inside the sampling loop.
    chunk = 64
    pieces = []
    t, i = -1, 1
    while t < n_iterations:
        gaps = 1 + rng.poisson(nu * np.arange(i, i + chunk, dtype=float) ** d)
        times = t + np.cumsum(gaps)
        pieces.append(times[times < n_iterations])
        t, i = int(times[-1]), i + chunk
    return np.concatenate(pieces).astype(int)


def fixed_offsets(n_iterations: int, n_subsamples: int) -> np.ndarray:
    """``n_subsamples`` evenly spread iterations (the paper's fixed alternative)."""
    n_subsamples = min(n_subsamples, n_iterations)
    return np.unique(np.linspace(0, n_iterations - 1, n_subsamples).round().astype(int))


def monte_carlo_interval(
    q_samples: np.ndarray, alpha: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """``(m_S, half_width)`` of ``C_S`` for each component of ``q``.

    ``m_S`` is the sample mean, ``v_S`` the sample variance, and the half width
    ``z_(1−α/2) √(v_S / S)``.
    """
    q_samples = np.asarray(q_samples, dtype=float)
    n = q_samples.shape[0]
    mean = q_samples.mean(axis=0)
    var = (q_samples**2).mean(axis=0) - mean**2
    z = scipy.special.ndtri(1.0 - alpha / 2.0)
    return mean, z * np.sqrt(np.maximum(var, 0.0) / n)


def inside_interval(new_mean: np.ndarray, mean: np.ndarray, half_width: np.ndarray) -> bool:
    """Whether every component of ``new_mean`` lies in ``mean ± half_width``."""
    return bool(np.all(np.abs(np.asarray(new_mean) - mean) <= half_width))


def grow_sample_size(sample_size: int, increment_divisor: int) -> int:
    """``S + S / S_I`` (at least one more sample)."""
    return sample_size + max(1, sample_size // increment_divisor)


@dataclass
class SampleSizeRule:
    """The decision of §3.2, with its constants.

    Parameters
    ----------
    alpha : float
        ``α`` of the interval ``z_(1−α/2)``.
    increment_divisor : int
        ``S_I``.
    adaptive : bool
        False keeps ``S`` fixed (the paper's fixed ``S_count``).
    max_sample_size : int
        Ceiling for ``S``.
    """

    alpha: float = 0.05
    increment_divisor: int = 4
    adaptive: bool = True
    max_sample_size: int = 100_000

    def next_sample_size(self, sample_size: int, q_old: np.ndarray, q_new: np.ndarray) -> int:
        """``S`` for the next E step from ``q`` under the old and the new mass."""
        if not self.adaptive or len(q_old) < 2:
            return sample_size
        mean, half_width = monte_carlo_interval(q_old, self.alpha)
        if inside_interval(np.mean(q_new, axis=0), mean, half_width):
            return min(self.max_sample_size, grow_sample_size(sample_size, self.increment_divisor))
        return sample_size


def velocity_rows(inv_mass: np.ndarray, momenta: np.ndarray) -> np.ndarray:
    """``M⁻¹ p`` for each row ``p`` of ``momenta``."""
    return momenta @ inv_mass.T if inv_mass.ndim == 2 else momenta * inv_mass


def hmc_test_function(
    inv_mass: np.ndarray, momenta: np.ndarray, gradients: np.ndarray
) -> np.ndarray:
    """§3.2's ``q = [M⁻¹p, ∇L(θ)]`` (HMC-EM, also SGHMC-EM), one row per subsample."""
    return np.concatenate([velocity_rows(inv_mass, momenta), gradients], axis=1)


def sgnht_test_function(
    inv_mass: np.ndarray, momenta: np.ndarray, gradients: np.ndarray, thermostats: np.ndarray
) -> np.ndarray:
    """§3.2's ``q = [M⁻¹p, ∇L(θ) + ξM⁻¹p, pᵀM⁻¹p]`` (SGNHT-EM), one row per subsample."""
    v = velocity_rows(inv_mass, momenta)
    xi = np.asarray(thermostats, dtype=float).reshape(-1, 1)
    quadratic = (momenta * v).sum(axis=1, keepdims=True)
    return np.concatenate([v, gradients + xi * v, quadratic], axis=1)
