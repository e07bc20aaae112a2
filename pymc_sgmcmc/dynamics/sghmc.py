"""Stochastic gradient Hamiltonian Monte Carlo with friction.

Jiang and Huang, "sghmcmc: a Python package for stochastic gradient MCMC", eq. 8 and
Algorithm 2 (also Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference",
§3.4)::

    θ_i ← θ_{i−1} + ε M⁻¹ r_{i−1}
    r_i ← r_{i−1} + ε ∇log p̃(θ_i) − ε C M⁻¹ r_{i−1} + N(0, 2(C − B̂) ε)

with the potential ``U = −log p`` written as the log density. ``C`` is the user's
friction and ``B̂`` the estimate of the gradient noise.

Eq. 8 allows any friction matrix ``C ⪰ B̂``; the paper states it for ``M = I``. We take
both proportional to the mass, ``C = c M`` and ``B̂ = b M`` with scalars ``c ≥ b ≥ 0``,
so that the update reads::

    r_i ← r_{i−1} + ε ∇log p̃(θ_i) − ε c r_{i−1} + √(2(c − b) ε) ξ,   ξ ~ N(0, M)

which is Algorithm 2 exactly when ``M = I``. With another mass, ``N(0, M)`` stays the
stationary momentum law, and the friction damps every direction alike in the metric of
``M``: the explicit friction step is stable for ``ε c < 2`` whatever the mass, and a
learned mass does not over-damp the wide directions of the posterior (with ``C = c I`` the
damping ratio in a direction of posterior sd ``σ`` grows like ``c σ √(M⁻¹)``).
"""

from __future__ import annotations

from pymc_sgmcmc.core.arrays import Array, GradLogp
from pymc_sgmcmc.dynamics.common import velocity


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
        A draw ``ξ ~ N(0, M)``, same shape as ``position`` (standard normal for ``M = I``).
    step_size : scalar
        ``ε``.
    inv_mass : array
        ``M⁻¹``, diagonal (1-D) or dense (2-D).
    friction : scalar
        ``c`` in ``C = c M``.
    noise_estimate : scalar
        ``b`` in ``B̂ = b M``, with ``0 ≤ b ≤ c``.

    Returns
    -------
    new_position, new_momentum
        ``θ_i`` and ``r_i``.
    """
    v = velocity(inv_mass, momentum)
    # Alg. 2: θ_i ← θ_{i−1} + ε M⁻¹ r_{i−1}
    new_position = position + step_size * v
    # Alg. 2 / eq. 8 with C = cM, B̂ = bM: r ← r + ε∇log p̃(θ_i) − εc r + N(0, 2(c − b)εM)
    new_momentum = (
        momentum
        + step_size * grad_logp(new_position)
        - step_size * friction * momentum
        + (2.0 * (friction - noise_estimate) * step_size) ** 0.5 * noise
    )
    return new_position, new_momentum
