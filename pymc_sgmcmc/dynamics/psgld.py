"""Preconditioned stochastic gradient Langevin dynamics (pSGLD): RMSprop's preconditioner.

Li, Chen, Carlson and Carin, "Preconditioned Stochastic Gradient Langevin Dynamics for
Deep Neural Networks", as Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian
inference", §3.2 gives its algorithm: steps (c) and (d) keep a running mean of the
squared stochastic gradient and precondition by the inverse of its root; step (e) is a
Langevin step in that preconditioner. Written, as :func:`pymc_sgmcmc.dynamics.sgld.sgld_step`,
with ``σ² = 2η`` (our ``step_size`` ``η`` is half the survey's ``ε``), and for a gradient
already expressed in the coordinates the preconditioner acts on.
"""

from __future__ import annotations

from pymc_sgmcmc.core.arrays import Array, namespace


def rmsprop_mean_square(
    mean_square: Array, gradient: Array, decay: Array, adapting: Array
) -> Array:
    """Step (c): ``V ← α V + (1 − α) ḡ ⊙ ḡ``; ``V`` unchanged where ``adapting`` is 0.

    ``adapting`` is 1 or 0 (a number, so that one compiled trajectory serves both).
    """
    # §3.2 (c): V(θ_t) = α V(θ_{t−1}) + (1 − α) ḡ ⊙ ḡ
    return mean_square + adapting * (1.0 - decay) * (gradient * gradient - mean_square)


def rmsprop_preconditioner(mean_square: Array, offset: Array) -> Array:
    """Step (d): the diagonal of ``G = diag(1 ⊘ (λ 1 + √V))``."""
    # §3.2 (d): G(θ_t) = diag(1 ⊘ (λ1 + √V(θ_t)))
    return 1.0 / (offset + namespace(mean_square).sqrt(mean_square))


def psgld_step(
    position: Array, gradient: Array, noise: Array, step_size: Array, preconditioner: Array
) -> Array:
    """Step (e) without ``Γ(θ)``: ``θ ← θ + η G ∇log p̃(θ) + N(0, 2η G)``.

    ``Γ(θ)``, the divergence of ``G`` along the chain, is zero where ``G`` is held
    constant, as :class:`pymc_sgmcmc.PSGLD` holds it after tuning.

    Parameters
    ----------
    position : array
        ``θ``, in the preconditioner's coordinates.
    gradient : array
        ``∇log p̃(θ)`` on this step's minibatch, in the same coordinates.
    noise : array
        Standard normal draw, same shape as ``position``.
    step_size : scalar
        ``η``.
    preconditioner : array
        The diagonal of ``G``.
    """
    # §3.2 (e): θ ← θ + ε/2 [G ∇] + N(0, ε G), with ε = 2η and Γ = 0
    drift = step_size * preconditioner * gradient
    spread = namespace(preconditioner).sqrt(2.0 * step_size * preconditioner)
    return position + drift + spread * noise
