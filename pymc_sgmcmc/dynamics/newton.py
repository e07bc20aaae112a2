"""A Newton proposal: a Gaussian fitted to the target's gradient and curvature.

At ``θ`` with gradient ``g`` and curvature ``h = −diag ∇²log π(θ)`` (positive), propose
``θ' ~ N(θ + g/h, diag(1/h))``: the maximum of the local quadratic fit, with its
spread. For a Gaussian target it is an exact, independent draw; a Metropolis–Hastings
test with the reverse density (the fit at ``θ'``) keeps any target (Qi and Minka,
"Hessian-based Markov Chain Monte-Carlo Algorithms"; Girolami and Calderhead,
"Riemann manifold Langevin and Hamiltonian Monte Carlo methods", the simplified
manifold MALA with a unit step).
"""

from __future__ import annotations

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
