"""Stochastic gradient Nosé–Hoover thermostat.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
Algorithm 2 without its M step (the inner loop)::

    p ← p − ε ξ M⁻¹ p + ε ∇log p̃(θ) + √(2A) N(0, ε)
    θ ← θ + ε M⁻¹ p
    ξ ← ξ + ε (pᵀ M⁻¹ p / D − 1)

The algorithm updates ``p`` before ``θ``. We move ``θ`` first and update ``p`` with the
gradient at the new ``θ``: with the momentum carried from one iteration to the next,
this is the same chain read at another point of its cycle (the sequence of positions is
identical).
"""

from __future__ import annotations

from pymc_sgmcmc.dynamics.common import Array, GradLogp, kinetic_temperature, velocity


def sgnht_step(
    position: Array,
    momentum: Array,
    thermostat: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    inv_mass: Array,
    diffusion: Array,
) -> tuple[Array, Array, Array]:
    """One SGNHT step.

    Parameters
    ----------
    position, momentum : array
        ``θ`` and ``p``.
    thermostat : scalar
        ``ξ``.
    grad_logp : callable
        ``θ ↦ ∇log p̃(θ)`` on this step's minibatch.
    noise : array
        Standard normal draw, same shape as ``position``.
    step_size : scalar
        ``ε``.
    inv_mass : array
        ``M⁻¹``, diagonal (1-D) or dense (2-D).
    diffusion : scalar
        ``A``.

    Returns
    -------
    new_position, new_momentum, new_thermostat
    """
    # Alg. 2: θ ← θ + ε M⁻¹ p
    new_position = position + step_size * velocity(inv_mass, momentum)
    # Alg. 2: p ← p − εξ M⁻¹p + ε∇log p̃(θ) + √(2A) N(0, ε)
    new_momentum = (
        momentum
        - step_size * thermostat * velocity(inv_mass, momentum)
        + step_size * grad_logp(new_position)
        + (2.0 * diffusion * step_size) ** 0.5 * noise
    )
    # Alg. 2: ξ ← ξ + ε (pᵀM⁻¹p / D − 1)
    new_thermostat = thermostat + step_size * (kinetic_temperature(inv_mass, new_momentum) - 1.0)
    return new_position, new_momentum, new_thermostat
