"""Stochastic gradient Langevin dynamics.

Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §2.2:
``θ* = θ + η ∇log p̃(θ)`` followed by ``θ ~ N(θ*, σ²)``; Langevin dynamics leaves the
posterior invariant when ``σ² = 2η``, which is the choice made here (so our ``step_size``
is half the ``ε`` of Welling and Teh's ``θ + ε/2 ∇ + N(0, ε)``).
"""

from __future__ import annotations

from pymc_sgmcmc.core.arrays import Array, GradLogp


def sgld_step(
    position: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
) -> Array:
    """One Langevin step from a stochastic gradient.

    Parameters
    ----------
    position : array
        Current position ``θ``.
    grad_logp : callable
        ``θ ↦ ∇log p̃(θ)`` on this step's minibatch.
    noise : array
        Standard normal draw, same shape as ``position``.
    step_size : scalar
        ``η``.

    Returns
    -------
    new_position
    """
    # §2.2: θ ← θ + η∇log p̃(θ) + N(0, 2η)
    return position + step_size * grad_logp(position) + (2.0 * step_size) ** 0.5 * noise
