"""A Newton proposal: a Gaussian fitted to the target's gradient and curvature.

At ``θ`` with gradient ``g`` and curvature ``h = −diag ∇²log π(θ)`` (positive), propose
``θ' ~ N(θ + g/h, diag(1/h))``: the maximum of the local quadratic fit, with its
spread. For a Gaussian target it is an exact, independent draw; a Metropolis–Hastings
test with the reverse density (the fit at ``θ'``) keeps any target (Qi and Minka,
"Hessian-based Markov Chain Monte-Carlo Algorithms"; Girolami and Calderhead,
"Riemann manifold Langevin and Hamiltonian Monte Carlo methods", the simplified
manifold MALA with a unit step).

The diagonal form moves many independent groups at once (each group's coordinates
tested apart). The block form (:func:`block_newton_proposal`) gives each group's locals
a dense precision block; taken from a fixed point instead of the chain's, with
Student's t spread, it is the anchored move's independence proposal. The dense form
(:func:`dense_newton_proposal`) moves a few coupled coordinates, e.g. a hierarchy's
globals, with a fixed precision matrix.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_solve, solve_triangular

from pymc_sgmcmc.core.arrays import Array, namespace


def newton_proposal(position: Array, gradient: Array, curvature: Array, normal: Array) -> Array:
    """``θ' = θ + g/h + ξ/√h`` with ``ξ ~ N(0, I)`` (zero where nothing moves)."""
    return position + gradient / curvature + normal / curvature**0.5


def newton_log_density(
    to: Array, start: Array, gradient: Array, curvature: Array, groups: Array
) -> Array:
    """``log q(to | start)`` summed over each group's coordinates (``groups``: ``(M, r)``).

    ``gradient`` and ``curvature`` are the fit at ``start``; constants that cancel in a
    ratio of forward and reverse densities are left out.
    """
    deviation = to - start - gradient / curvature
    log = namespace(curvature).log
    per_coordinate = 0.5 * log(curvature) - 0.5 * curvature * deviation**2
    return per_coordinate[groups].sum(axis=1)


def per_group_product(matrices: Array, vectors: Array) -> Array:
    """``matrices[m] @ vectors[m]`` for every group ``m``: ``(M, r, r)`` by ``(M, r)``."""
    return (matrices * vectors[:, None, :]).sum(axis=2)


def curvature_factors(blocks: np.ndarray, floor: float) -> tuple[np.ndarray, ...]:
    """``(H⁻¹, L⁻ᵀ, Lᵀ)`` of each group's precision block ``H = LLᵀ``, ``(M, r, r)`` each.

    Eigenvalues below ``floor`` are raised to it first (a block that is not positive
    definite there, e.g. an average of fits from far apart, still gives a proposal).
    """
    blocks = np.asarray(blocks, dtype=float)
    if blocks.shape[1] == 1:  # the diagonal case without a decomposition
        h = np.maximum(blocks, floor)
        return 1.0 / h, h**-0.5, h**0.5
    values, vectors = np.linalg.eigh(0.5 * (blocks + blocks.transpose(0, 2, 1)))
    vectors_t = vectors.transpose(0, 2, 1)
    values = np.maximum(values, floor)
    precision = (vectors * values[:, None, :]) @ vectors_t
    factor = np.linalg.cholesky(precision)
    inverse = np.linalg.inv(factor)  # L⁻¹, r × r
    shift = (vectors / values[:, None, :]) @ vectors_t
    return shift, inverse.transpose(0, 2, 1), factor.transpose(0, 2, 1)


def block_newton_proposal(
    position: Array, gradient: Array, shift: Array, spread: Array, noise: Array
) -> Array:
    """``θ' = θ + H⁻¹g + L⁻ᵀξ`` for each group's ``r`` locals (rows of ``(M, r)`` arrays).

    ``shift`` is ``H⁻¹`` and ``spread`` ``L⁻ᵀ`` for each group's precision block ``H =
    LLᵀ`` (:func:`curvature_factors`): the dense form of :func:`newton_proposal` within a
    group, whose locals the conditional correlates (an intercept and a slope). With a
    fixed ``θ`` (a centre ``c``, ``g`` fitted there) and Student's t ``ξ`` it is the
    anchored move's independence proposal.
    """
    return position + per_group_product(shift, gradient) + per_group_product(spread, noise)


def block_newton_log_density(
    to: Array, start: Array, gradient: Array, shift: Array, whitening: Array
) -> Array:
    """``log q(to | start)`` of :func:`block_newton_proposal` with Gaussian ``ξ``, per group.

    ``−‖Lᵀ(to − start − H⁻¹g)‖²/2`` (``whitening``: ``Lᵀ``); ``log|L|`` and ``2π`` are
    left out: with ``H`` fixed they are the same in both directions of a move.
    """
    whitened = per_group_product(whitening, to - start - per_group_product(shift, gradient))
    return -0.5 * (whitened**2).sum(axis=1)


def anchored_block_log_density(
    to: Array,
    centre: Array,
    gradient: Array,
    shift: Array,
    whitening: Array,
    degrees_of_freedom: float,
) -> Array:
    """``log q(to)`` of the anchored proposal: Student's t ``ξ`` with ``ν`` degrees of freedom.

    ``ξ = Lᵀ(to − c − H⁻¹g)``, each coordinate t-distributed: ``−(ν + 1)/2 · Σ log(1 +
    ξ_k²/ν)`` per group; the normalising constants (``log|L|`` among them), the same at
    both ends of a move, are left out.
    """
    # Not PyMC's StudentT log density: that one is symbolic only and adds the constants
    # and parameter checks; this works on NumPy arrays and PyTensor graphs alike.
    whitened = per_group_product(whitening, to - centre - per_group_product(shift, gradient))
    log1p = namespace(whitened).log1p
    return -0.5 * (degrees_of_freedom + 1.0) * log1p(whitened**2 / degrees_of_freedom).sum(axis=1)


def dense_newton_proposal(
    position: np.ndarray, gradient: np.ndarray, factor: np.ndarray, normal: np.ndarray
) -> np.ndarray:
    """``θ' = θ + A⁻¹g + L⁻ᵀξ``, ``ξ ~ N(0, I)``, for a precision ``A = LLᵀ`` (``factor``: ``L``).

    The dense form of :func:`newton_proposal`: ``N(θ + A⁻¹g, A⁻¹)``, the maximum of the
    quadratic fit ``−(θ' − θ)ᵀA(θ' − θ)/2 + gᵀ(θ' − θ)`` with its spread.
    """
    shift = cho_solve((factor, True), gradient)
    return position + shift + solve_triangular(factor, normal, lower=True, trans="T")


def dense_newton_log_density(
    to: np.ndarray, start: np.ndarray, gradient: np.ndarray, factor: np.ndarray
) -> float:
    """``log q(to | start)`` of :func:`dense_newton_proposal`, ``gradient`` taken at ``start``.

    ``−‖Lᵀ(to − start − A⁻¹g)‖²/2``: the normalising constant, ``log |L|`` and ``2π``,
    is the same in both directions for a fixed ``A`` and cancels in a Hastings ratio.
    """
    deviation = to - start - cho_solve((factor, True), gradient)
    whitened = factor.T @ deviation
    return float(-0.5 * whitened @ whitened)
