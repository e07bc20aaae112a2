"""Euclidean metrics: a constant mass matrix ``M`` (identity, diagonal or dense).

The dynamics only ever need ``M⁻¹`` (the velocity ``M⁻¹p``) and a factor of ``M`` (to
turn a standard normal draw into ``p ~ N(0, M)``), so that is what a metric keeps. Its
methods are arithmetic only: the same metric works on NumPy arrays (a chain's start, unit
tests) and, with its two arrays replaced by symbolic inputs, inside the compiled
trajectory. Every method takes the position (and optionally the target) so that a kernel
written for a metric also runs with a position-dependent one
(:mod:`pymc_sgmcmc.metrics.riemannian`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import scipy.linalg

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.dynamics.common import kinetic_energy, kinetic_temperature, velocity


class EuclideanMetric(NamedTuple):
    """A constant mass matrix ``M``, diagonal or dense.

    Attributes
    ----------
    inverse : array
        ``M⁻¹``: its diagonal (1-D) or the full matrix (2-D).
    factor : array
        ``√diag(M)`` (1-D) or the lower Cholesky factor ``L`` of ``M = L Lᵀ`` (2-D).
    """

    inverse: Array
    factor: Array

    @property
    def is_dense(self) -> bool:
        """Whether ``M`` is a full matrix."""
        return self.inverse.ndim == 2

    def momentum(self, position: Array, normal: Array, target: Any = None) -> Array:
        """Map a standard normal draw ``z`` to ``L z ~ N(0, M)``."""
        return self.factor @ normal if self.is_dense else self.factor * normal

    def velocity(self, position: Array, momentum: Array, target: Any = None) -> Array:
        """``∂K/∂p = M⁻¹ p``."""
        return velocity(self.inverse, momentum)

    def kinetic_energy(self, position: Array, momentum: Array, target: Any = None) -> Array:
        """``K(p) = pᵀ M⁻¹ p / 2`` (constant terms dropped: they cancel in any test)."""
        return kinetic_energy(self.inverse, momentum)

    def kinetic_temperature(self, position: Array, momentum: Array, target: Any = None) -> Array:
        """``pᵀ M⁻¹ p / D``, which averages 1 when ``p ~ N(0, M)``."""
        return kinetic_temperature(self.inverse, momentum)

    def whitened_length(self, displacement: np.ndarray) -> float:
        """``|Lᵀ δ|``: the length of a move ``δ`` in the units where ``M`` is the identity."""
        # A dot product, not np.linalg.norm: this runs at every draw, on short vectors,
        # where the norm's argument handling costs more than the arithmetic.
        whitened = self.factor.T @ displacement if self.is_dense else self.factor * displacement
        return math.sqrt(float(whitened @ whitened))

    def whiten(self, vector: np.ndarray) -> np.ndarray:
        """``L⁻¹ v`` for ``M = LLᵀ``: a gradient (or its error) in the units where ``M = I``."""
        if self.is_dense:
            return scipy.linalg.solve_triangular(self.factor, vector, lower=True)
        return vector / self.factor

    def draw_momentum(self, rng: np.random.Generator) -> np.ndarray:
        """Draw ``p ~ N(0, M)`` with NumPy."""
        return self.momentum(None, rng.standard_normal(self.inverse.shape[0]))


def euclidean_metric(mass: Any, dim: int, dtype: str | np.dtype = "float64") -> EuclideanMetric:
    """Validate a user's ``mass`` and return it as a :class:`EuclideanMetric`.

    Parameters
    ----------
    mass : None, float, 1-D or 2-D array
        ``None`` for the identity; a positive number for ``m I``; a positive vector of
        length ``dim`` for a diagonal ``M``; a symmetric positive-definite ``dim × dim``
        matrix for a dense ``M``. Entries follow the order of the sampled variables,
        each raveled, as in ``pm.sample``'s own ``scaling``.
    dim : int
        Number of sampled scalars.
    dtype : dtype
        Floating point type of the model.
    """
    fix = (
        "Pass mass=None (identity), a positive number, a positive vector of length "
        f"{dim} (diagonal) or a symmetric positive-definite {dim}x{dim} matrix."
    )
    if mass is None:
        m = np.ones(dim)
    else:
        try:
            m = np.asarray(mass, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"mass must be numeric, got {mass!r}. {fix}") from None
        if m.ndim == 0:
            m = np.full(dim, float(m))
    if m.ndim == 1:
        if m.shape != (dim,) or not np.all(np.isfinite(m)) or np.any(m <= 0):
            raise ValueError(f"mass vector of shape {m.shape} is not valid here. {fix}")
        return EuclideanMetric(inverse=(1.0 / m).astype(dtype), factor=np.sqrt(m).astype(dtype))
    if m.ndim == 2:
        # Symmetry relative to the matrix's own scale: an absolute tolerance refused
        # the inverted Laplace covariance of a posterior with sds of 1e-3.
        valid = m.shape == (dim, dim) and np.all(np.isfinite(m))
        if not (valid and np.allclose(m, m.T, rtol=1e-8, atol=1e-12 * np.abs(m).max())):
            raise ValueError(f"mass matrix of shape {m.shape} is not valid here. {fix}")
        try:
            chol = scipy.linalg.cholesky(m, lower=True)
        except np.linalg.LinAlgError:
            raise ValueError(f"mass matrix is not positive definite. {fix}") from None
        inverse = scipy.linalg.cho_solve((chol, True), np.eye(dim))
        return EuclideanMetric(
            inverse=(0.5 * (inverse + inverse.T)).astype(dtype), factor=chol.astype(dtype)
        )
    raise ValueError(f"mass must be a scalar, a vector or a matrix, got {m.ndim} dimensions. {fix}")


def metric_from_inverse(inverse: np.ndarray, dtype: Any = "float64") -> EuclideanMetric:
    """A :class:`EuclideanMetric` from ``M⁻¹`` (what an M step estimates, eq. 5)."""
    if inverse.ndim == 1:
        return EuclideanMetric(
            inverse=inverse.astype(dtype), factor=np.sqrt(1.0 / inverse).astype(dtype)
        )
    sym = 0.5 * (inverse + inverse.T)
    mass = scipy.linalg.cho_solve(scipy.linalg.cho_factor(sym, lower=True), np.eye(len(sym)))
    factor = scipy.linalg.cholesky(0.5 * (mass + mass.T), lower=True)
    return EuclideanMetric(inverse=sym.astype(dtype), factor=factor.astype(dtype))
