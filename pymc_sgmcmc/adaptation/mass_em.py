"""The M step of Monte Carlo EM mass learning.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM", §3.3:
the inverse mass ``M_I`` is updated by the running average of eq. 5,
``M_I ← (1 − κ_k) M_I + κ_k M_I^est``, with ``Σ κ_k = ∞`` and ``Σ κ_k² < ∞``.

Two estimates ``M_I^est`` are offered:

``"momentum"``
    The seed's: the inverse of the empirical covariance of the stored momenta. Since
    ``p ~ N(0, M)``, that covariance estimates the *current* ``M``; it moves ``M`` only
    where the dynamics leave the momenta out of equilibrium (burn-in, gradient noise).
``"position"``
    The estimate PyMC and Stan use: the empirical covariance of the stored positions,
    which is the ``M⁻¹`` that makes the posterior isotropic in the velocity's metric,
    normalised to the determinant of the initial inverse mass. The normalisation keeps
    the overall scale of the mass the chain started from (the identity, or the Laplace
    covariance with ``step_size="auto"``), so ``step_size`` and ``friction`` keep their
    meaning while the mass learns the posterior's shape; without it a wide posterior
    would make the samplers' explicit friction step ``ε C M⁻¹`` unstable (it needs
    ``ε C λ_max(M⁻¹) < 2``). A fixed determinant (one) would be in absolute units: a
    Laplace mass of a posterior with sd 1,000 was replaced by the identity, and the
    chain, its step size learned in the Laplace units, barely moved.

An M step is refused when it would make the sampler stiffer than ``MAX_STIFFNESS`` (and
than ``STIFFNESS_TOLERANCE`` times the initial mass), judged from the curvature the E
step saw: an estimate
formed from a burn-in that drifted through the space can point a large ``M⁻¹`` at a
narrow direction of the posterior (see :func:`stiffness`).

All functions are pure NumPy.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg

MASS_ESTIMATORS = ("position", "momentum")
MASS_STRUCTURES = ("diag", "dense")

SHRINKAGE_PSEUDO_COUNT = 5.0
"""Weight, in samples, of the identity-scaled target the covariance is shrunk towards."""

MAX_CONDITION = 1e10
"""Estimates worse conditioned than this fall back to their diagonal."""


def step_sequence(k: int, exponent: float = 0.7) -> float:
    """``κ_k = k^(−exponent)`` for the ``k``-th M step (``k ≥ 1``).

    With ``exponent ∈ (0.5, 1]`` the sequence satisfies ``Σ κ = ∞`` and ``Σ κ² < ∞``
    (Proposition 1's conditions). ``κ_1 = 1``: the first M step replaces the arbitrary
    initial mass entirely.
    """
    if k < 1:
        raise ValueError(f"M steps are counted from 1, got k={k}.")
    return float(k ** (-exponent))


def regularized_covariance(samples: np.ndarray, structure: str) -> np.ndarray:
    """Empirical covariance, shrunk towards a multiple of the identity.

    ``Σ_reg = n/(n + c) Σ + c/(n + c) · mean(diag Σ) · I`` with ``c`` =
    :data:`SHRINKAGE_PSEUDO_COUNT`: positive definite for any ``n ≥ 2`` even when the
    samples span fewer than ``D`` directions (rank-deficient), and scale-free.

    Parameters
    ----------
    samples : ndarray
        Shape ``(n, D)``.
    structure : {"diag", "dense"}
        Variances only, or the full covariance.

    Returns
    -------
    ndarray
        Variances (``"diag"``, shape ``(D,)``) or covariance (``"dense"``, ``(D, D)``).
    """
    samples = np.asarray(samples, dtype=float)
    n = samples.shape[0]
    if n < 2:
        raise ValueError(f"A covariance needs at least 2 samples, got {n}.")
    centred = samples - samples.mean(axis=0)
    weight = n / (n + SHRINKAGE_PSEUDO_COUNT)
    if structure == "diag":
        var = (centred**2).sum(axis=0) / (n - 1)
        scale = var.mean() if var.mean() > 0 else 1.0
        return weight * var + (1 - weight) * scale
    cov = centred.T @ centred / (n - 1)
    scale = np.trace(cov) / cov.shape[0]
    scale = scale if scale > 0 else 1.0
    return weight * cov + (1 - weight) * scale * np.eye(cov.shape[0])


def _is_well_conditioned(matrix: np.ndarray) -> bool:
    if not np.all(np.isfinite(matrix)):
        return False
    if matrix.ndim == 1:
        return bool(np.all(matrix > 0) and matrix.max() / matrix.min() < MAX_CONDITION)
    eig = np.linalg.eigvalsh(0.5 * (matrix + matrix.T))
    return bool(eig[0] > 0 and eig[-1] / eig[0] < MAX_CONDITION)


def estimate_inverse_mass(
    samples: np.ndarray, estimator: str, structure: str, scale: float = 1.0
) -> np.ndarray | None:
    """``M_I^est`` from the stored samples of one E step.

    Parameters
    ----------
    samples : ndarray
        Shape ``(n, D)``: momenta (``estimator="momentum"``) or positions.
    estimator : {"momentum", "position"}
        Which estimate of ``M_I`` to form (see the module docstring).
    structure : {"diag", "dense"}
        Diagonal or dense mass.
    scale : float
        ``"position"`` only: the geometric mean eigenvalue the estimate is normalised
        to, that of the initial inverse mass (:func:`geometric_mean_eigenvalue`).

    Returns
    -------
    ndarray or None
        The estimate (diagonal or matrix); the diagonal of a dense estimate that is
        ill-conditioned; ``None`` (with a warning) when nothing usable can be formed,
        in which case the caller keeps its current mass.
    """
    cov = regularized_covariance(samples, structure)
    if structure == "dense" and not _is_well_conditioned(cov):
        warnings.warn(
            "M step: the sample covariance is ill-conditioned; using its diagonal.",
            RuntimeWarning,
            stacklevel=2,
        )
        cov = np.diag(np.diag(cov)).copy()
    if not _is_well_conditioned(cov):
        warnings.warn(
            "M step skipped: the stored samples give no usable covariance (non-finite or "
            "degenerate); the mass stays as it was. A smaller step size usually helps.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    if estimator == "position":
        return cov * (scale / geometric_mean_eigenvalue(cov))
    # eq. 5's M_I^est: the inverse of the empirical momentum covariance.
    if structure == "diag":
        return 1.0 / cov
    chol = scipy.linalg.cho_factor(cov, lower=True)
    inverse = scipy.linalg.cho_solve(chol, np.eye(cov.shape[0]))
    return 0.5 * (inverse + inverse.T)


def geometric_mean_eigenvalue(matrix: np.ndarray) -> float:
    """``det(A)^(1/D)`` of a positive vector (diagonal) or a positive-definite matrix."""
    if matrix.ndim == 1:
        return float(np.exp(np.mean(np.log(matrix))))
    sign, logdet = np.linalg.slogdet(matrix)
    return float(np.exp(logdet / matrix.shape[0]))


def online_inverse_mass_update(
    inverse_mass: np.ndarray, estimate: np.ndarray, kappa: float
) -> np.ndarray:
    """Eq. 5: ``M_I^(k) = (1 − κ_k) M_I^(k−1) + κ_k M_I^(k,est)``.

    A convex combination of symmetric positive-definite matrices (or positive vectors)
    stays symmetric positive definite.
    """
    if not 0.0 < kappa <= 1.0:
        raise ValueError(f"kappa must lie in (0, 1], got {kappa}.")
    return (1.0 - kappa) * inverse_mass + kappa * estimate


def condition_number(inverse_mass: np.ndarray) -> float:
    """Condition number of ``M_I`` (ratio of its extreme eigenvalues)."""
    if inverse_mass.ndim == 1:
        return float(inverse_mass.max() / inverse_mass.min())
    eig = np.linalg.eigvalsh(inverse_mass)
    return float(eig[-1] / eig[0])


MAX_STIFFNESS = 0.5
"""Largest ``ε √λ_max(M⁻¹ H)`` an M step may move the sampler to (see ``stiffness``)."""

STIFFNESS_TOLERANCE = 1.25
"""...unless the initial mass was already stiffer: then up to this multiple of its value.
The estimate of ``H`` from a minibatch chain scatters by 5-10 % between E steps."""


def curvature_estimate(positions: np.ndarray, gradients: np.ndarray, structure: str) -> np.ndarray:
    """The average curvature ``H = −E[∇²log p]`` seen along an E step.

    For a Gaussian ``∇log p(θ) = −H (θ − μ)``, so the regression of the stored gradients
    on the stored positions, ``H = −Cov(∇, θ) Cov(θ)⁻¹``, recovers ``H`` whatever the
    spread of the positions (a burn-in drift included), and zero-mean minibatch noise in
    the gradients averages out of the cross-covariance. For other targets it is the
    best linear fit over the region the chain visited.

    Parameters
    ----------
    positions, gradients : ndarray
        Shape ``(n, D)``, one row per stored iteration.
    structure : {"diag", "dense"}
        Per-coordinate slopes (shape ``(D,)``) or the symmetrised matrix ``(D, D)``.
    """
    positions = np.asarray(positions, dtype=float)
    gradients = np.asarray(gradients, dtype=float)
    dx = positions - positions.mean(axis=0)
    dg = gradients - gradients.mean(axis=0)
    if structure == "diag":
        spread = (dx**2).sum(axis=0)
        slope = np.divide(
            (dg * dx).sum(axis=0), spread, out=np.zeros_like(spread), where=spread > 0
        )
        return -slope
    # Least squares rather than a shrunk covariance (which would bias the slope); in
    # directions the E step never moved along it reports no curvature.
    slope, *_ = np.linalg.lstsq(dx, dg, rcond=None)
    return -0.5 * (slope + slope.T)


def stiffness(step_size: float, inverse_mass: np.ndarray, curvature: np.ndarray) -> float:
    """``ε √λ_max(M⁻¹ H)``: the largest phase a step advances any direction by.

    An explicit integrator is unstable beyond 2; with the momentum resampled between
    trajectories (HMC, SGHMC) the position-first update of SGHMC and SGNHT can amplify
    a direction by up to ``1/cos(φ/2)`` per trajectory at ``φ = ε √λ`` well before that,
    so a mass that raises this number is a risk the M step refuses.
    """
    if inverse_mass.ndim == 1 and curvature.ndim == 1:
        largest = float(np.max(inverse_mass * curvature))
    else:
        if inverse_mass.ndim == 1:
            inverse_mass = np.diag(inverse_mass)
        if curvature.ndim == 1:
            curvature = np.diag(curvature)
        factor = np.linalg.cholesky(0.5 * (inverse_mass + inverse_mass.T))
        largest = float(np.linalg.eigvalsh(factor.T @ curvature @ factor)[-1])
    return float(step_size * np.sqrt(max(largest, 0.0)))
