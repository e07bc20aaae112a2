"""A Newton proposal: a Gaussian fitted to the target's gradient and curvature.

At ``θ`` with gradient ``g`` and curvature ``h = −diag ∇²log π(θ)`` (positive), propose
``θ' ~ N(θ + g/h, diag(1/h))``: the maximum of the local quadratic fit, with its
spread. For a Gaussian target it is an exact, independent draw; a Metropolis–Hastings
test with the reverse density (the fit at ``θ'``) keeps any target (Qi and Minka,
"Hessian-based Markov Chain Monte-Carlo Algorithms"; Girolami and Calderhead,
"Riemann manifold Langevin and Hamiltonian Monte Carlo methods", the simplified
manifold MALA with a unit step).

The diagonal form moves many independent groups at once (each group's coordinates
tested apart). Its anchored form (:func:`anchored_newton_proposal`) takes the Newton
step from a fixed point instead of the chain's, with Student's t spread: an
independence proposal. The dense form (:func:`dense_newton_proposal`) moves a few coupled
coordinates, e.g. a hierarchy's globals, with a fixed precision matrix.
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


def anchored_newton_proposal(
    centre: Array, gradient: Array, curvature: Array, student_t: Array
) -> Array:
    """``θ' = c + g/h + t/√h``: the Newton step from a fixed ``centre`` ``c``, t-distributed.

    ``gradient`` and ``curvature`` are the fit at ``c``; ``student_t``: standard Student's
    t draws, one per coordinate. The proposal does not depend on where the chain stands
    (an independence proposal), and its tails are heavier than the Gaussian fit's.
    """
    return centre + gradient / curvature + student_t / curvature**0.5


def anchored_newton_log_density(
    to: Array,
    centre: Array,
    gradient: Array,
    curvature: Array,
    degrees_of_freedom: float,
    groups: Array,
) -> Array:
    """``log q(to)`` of :func:`anchored_newton_proposal`, summed over each group's coordinates.

    Student's t with ``ν`` degrees of freedom per coordinate, location ``c + g/h`` and scale
    ``1/√h``: ``−(ν + 1)/2 · log(1 + h (to − c − g/h)²/ν)``; the normalising constants, the
    same at both ends of a move, are left out.
    """
    # Not PyMC's StudentT log density: that one is symbolic only and adds the constants
    # and parameter checks; this works on NumPy arrays and PyTensor graphs alike.
    deviation = to - centre - gradient / curvature
    log1p = namespace(curvature).log1p
    squared = curvature * deviation**2 / degrees_of_freedom
    per_coordinate = -0.5 * (degrees_of_freedom + 1.0) * log1p(squared)
    return per_coordinate[groups].sum(axis=1)


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
