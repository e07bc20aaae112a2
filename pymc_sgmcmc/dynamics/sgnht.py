"""Stochastic gradient Nosé–Hoover thermostat.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
Algorithm 2 without its M step (the inner loop)::

    p ← p − ε ξ M⁻¹ p + ε ∇log p̃(θ) + √(2A) N(0, ε)
    θ ← θ + ε M⁻¹ p
    ξ ← ξ + ε (pᵀ M⁻¹ p / D − 1)

With a mass other than the identity, the friction ``ξ M⁻¹ p`` and the noise
``√(2A) N(0, ε)`` of the paper are taken proportional to the mass, ``ξ p`` and
``√(2Aε) ξ_M`` with ``ξ_M ~ N(0, M)`` (the same for ``M = I``): ``N(0, M)`` stays the
stationary momentum law, the explicit friction step is stable for ``ε ξ < 2`` whatever
the mass, and a learned mass does not over-damp the wide directions of the posterior
(see :mod:`pymc_sgmcmc.dynamics.sghmc`).

The algorithm updates ``p`` before ``θ``. We move ``θ`` first and update ``p`` with the
gradient at the new ``θ``: with the momentum carried from one iteration to the next,
this is the same chain read at another point of its cycle (the sequence of positions is
identical).
"""

from __future__ import annotations

from pymc_sgmcmc.core.arrays import Array, GradLogp
from pymc_sgmcmc.dynamics.common import (
    kinetic_temperature,
    moving_kinetic_temperature,
    velocity,
)


def sgnht_step(
    position: Array,
    momentum: Array,
    thermostat: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    inv_mass: Array,
    diffusion: Array,
    moving: Array | None = None,
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
        A draw ``ξ_M ~ N(0, M)``, same shape as ``position`` (standard normal for
        ``M = I``).
    step_size : scalar
        ``ε``.
    inv_mass : array
        ``M⁻¹``, diagonal (1-D) or dense (2-D).
    diffusion : scalar
        ``A``.
    moving : array, optional
        1 where a coordinate moves, 0 where the step holds it (minibatches of whole
        groups; held coordinates come in with zero momentum and a diagonal mass, and the
        caller restores their state). The thermostat then reads the kinetic temperature
        of the moving coordinates ``S`` alone, ``Σ_S p_i² (M⁻¹)_ii / |S|``: with ``|S|``
        the same at every step, ``π(θ) N(p; 0, M) N(ξ; A, 1/|S|)`` is invariant under the
        step on ``S`` (the Fokker–Planck terms of the friction and of the thermostat
        cancel as for the whole vector), so any sequence of such steps keeps it.

    Returns
    -------
    new_position, new_momentum, new_thermostat
    """
    # Alg. 2: θ ← θ + ε M⁻¹ p
    new_position = position + step_size * velocity(inv_mass, momentum)
    # Alg. 2 (friction and noise in the metric of M): p ← p − εξp + ε∇log p̃(θ) + √(2Aε) ξ_M
    new_momentum = (
        momentum
        - step_size * thermostat * momentum
        + step_size * grad_logp(new_position)
        + (2.0 * diffusion * step_size) ** 0.5 * noise
    )
    # Alg. 2: ξ ← ξ + ε (pᵀM⁻¹p / D − 1)
    temperature = (
        kinetic_temperature(inv_mass, new_momentum)
        if moving is None
        else moving_kinetic_temperature(inv_mass, new_momentum, moving)
    )
    new_thermostat = thermostat + step_size * (temperature - 1.0)
    return new_position, new_momentum, new_thermostat
