"""Leapfrog Hamiltonian dynamics with a Metropolis–Hastings test.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
eq. 1 (``H(θ, p) = −L(θ) + pᵀM⁻¹p/2``) and the leapfrog loop of Algorithm 1; Jiang and
Huang, "sghmcmc: a Python package for stochastic gradient MCMC", Algorithm 1.
"""

from __future__ import annotations

from pymc_sgmcmc.core.arrays import Array, GradLogp
from pymc_sgmcmc.dynamics.common import velocity


def leapfrog_step(
    position: Array,
    momentum: Array,
    gradient: Array,
    grad_logp: GradLogp,
    step_size: Array,
    inv_mass: Array,
) -> tuple[Array, Array, Array]:
    """One leapfrog step that reuses the gradient at the starting position.

    Parameters
    ----------
    position, momentum : array
        ``θ`` and ``p`` at the start of the step.
    gradient : array
        ``∇L(θ)`` at the start of the step (the previous step's last gradient).
    grad_logp : callable
        ``θ ↦ ∇L(θ)``.
    step_size : scalar
        ``ε``.
    inv_mass : array
        ``M⁻¹``, diagonal (1-D) or dense (2-D).

    Returns
    -------
    new_position, new_momentum, new_gradient
    """
    # Alg. 1: p ← p − ε/2 ∇_θ H = p + ε/2 ∇L(θ)
    half_momentum = momentum + 0.5 * step_size * gradient
    # Alg. 1: θ ← θ + ε ∇_p H = θ + ε M⁻¹ p
    new_position = position + step_size * velocity(inv_mass, half_momentum)
    new_gradient = grad_logp(new_position)
    # Alg. 1: p ← p + ε/2 ∇L(θ)
    new_momentum = half_momentum + 0.5 * step_size * new_gradient
    return new_position, new_momentum, new_gradient


def metropolis_log_acceptance(energy_start: float, energy_end: float) -> float:
    """Log acceptance probability ``min(0, H_start − H_end)``; ``−inf`` if not finite."""
    delta = energy_start - energy_end
    if delta != delta or delta == float("-inf"):  # NaN or H_end = +inf
        return float("-inf")
    return min(0.0, delta)
