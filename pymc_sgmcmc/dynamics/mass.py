"""Mass matrices: validation, the inverse used by the dynamics, momentum draws.

The dynamics only ever need ``M⁻¹`` (the velocity ``M⁻¹p``), so that is what we keep;
momentum draws ``p ~ N(0, M)`` use a Cholesky factor of ``M``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg


@dataclass(frozen=True)
class Mass:
    """A diagonal or dense mass matrix ``M``.

    Attributes
    ----------
    inverse : ndarray
        ``M⁻¹``: its diagonal (1-D) or the full matrix (2-D).
    factor : ndarray
        ``√diag(M)`` (1-D) or the lower Cholesky factor of ``M`` (2-D).
    """

    inverse: np.ndarray
    factor: np.ndarray

    @property
    def is_dense(self) -> bool:
        """Whether ``M`` is a full matrix."""
        return self.inverse.ndim == 2

    def draw_momentum(self, rng: np.random.Generator) -> np.ndarray:
        """Draw ``p ~ N(0, M)``."""
        z = rng.standard_normal(self.inverse.shape[0])
        return self.factor @ z if self.is_dense else self.factor * z


def make_mass(mass, dim: int, dtype: str | np.dtype = "float64") -> Mass:
    """Validate a user's ``mass`` and return it as a :class:`Mass`.

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
        return Mass(inverse=(1.0 / m).astype(dtype), factor=np.sqrt(m).astype(dtype))
    if m.ndim == 2:
        if m.shape != (dim, dim) or not np.all(np.isfinite(m)) or not np.allclose(m, m.T):
            raise ValueError(f"mass matrix of shape {m.shape} is not valid here. {fix}")
        try:
            chol = scipy.linalg.cholesky(m, lower=True)
        except np.linalg.LinAlgError:
            raise ValueError(f"mass matrix is not positive definite. {fix}") from None
        inverse = scipy.linalg.cho_solve((chol, True), np.eye(dim))
        return Mass(inverse=(0.5 * (inverse + inverse.T)).astype(dtype), factor=chol.astype(dtype))
    raise ValueError(f"mass must be a scalar, a vector or a matrix, got {m.ndim} dimensions. {fix}")
