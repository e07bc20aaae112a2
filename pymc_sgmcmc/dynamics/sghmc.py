"""Stochastic gradient Hamiltonian Monte Carlo with friction.

Jiang and Huang, "sghmcmc: a Python package for stochastic gradient MCMC", eq. 8 and
Algorithm 2 (also Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference",
§3.4)::

    θ_i ← θ_{i−1} + ε M⁻¹ r_{i−1}
    r_i ← r_{i−1} + ε ∇log p̃(θ_i) − ε C M⁻¹ r_{i−1} + N(0, 2(C − B̂) ε)

with the potential ``U = −log p`` written as the log density. ``C`` is the user's
friction and ``B̂`` the estimate of the gradient noise, both scalars so that
``N(0, M)`` stays the stationary momentum law for any mass.
"""

from __future__ import annotations

from pymc_sgmcmc.dynamics.common import Array, GradLogp, velocity


def sghmc_step(
    position: Array,
    momentum: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    inv_mass: Array,
    friction: Array,
    noise_estimate: Array,
) -> tuple[Array, Array]:
    """One SGHMC step (position first, then momentum at the new position).

    Parameters
    ----------
    position, momentum : array
        ``θ_{i−1}`` and ``r_{i−1}``.
    grad_logp : callable
        ``θ ↦ ∇log p̃(θ)`` on this step's minibatch.
    noise : array
        Standard normal draw, same shape as ``position``.
    step_size : scalar
        ``ε``.
    inv_mass : array
        ``M⁻¹``, diagonal (1-D) or dense (2-D).
    friction : scalar
        ``C``.
    noise_estimate : scalar
        ``B̂``, with ``0 ≤ B̂ ≤ C``.

    Returns
    -------
    new_position, new_momentum
        ``θ_i`` and ``r_i``.
    """
    v = velocity(inv_mass, momentum)
    # Alg. 2: θ_i ← θ_{i−1} + ε M⁻¹ r_{i−1}
    new_position = position + step_size * v
    # Alg. 2 / eq. 8: r_i ← r_{i−1} + ε∇log p̃(θ_i) − εC M⁻¹ r_{i−1} + N(0, 2(C − B̂)ε)
    new_momentum = (
        momentum
        + step_size * grad_logp(new_position)
        - step_size * friction * v
        + (2.0 * (friction - noise_estimate) * step_size) ** 0.5 * noise
    )
    return new_position, new_momentum
