"""Kernel of preconditioned SGLD (pSGLD), with RMSprop's preconditioner in the metric.

Li, Chen, Carlson and Carin, "Preconditioned Stochastic Gradient Langevin Dynamics for
Deep Neural Networks" (the survey's §3.2): the update rules are
:mod:`pymc_sgmcmc.dynamics.psgld`. Here they act in the coordinates that whiten the
step's metric ``M = L Lᵀ`` (the Laplace covariance at the mode by default, rescaled in
windows during tuning): ``u = Lᵀθ``, where a posterior near its Laplace approximation
has unit scale and RMSprop's mean square ``V`` of the whitened gradient is about 1 plus
the gradient noise's variance, so ``G ≈ 1/√(1 + noise)`` slows the coordinates whose
gradient is noisy and leaves the others at SGLD's step. With the identity mass (a step
size given by hand, no mode search) it is the paper's algorithm. ``V`` is part of the
state, updated at every step while ``adapting`` is 1 (tuning) and held after it, so
that ``G`` is constant over the kept draws and the correction ``Γ(θ)`` is zero.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.core.validation import check_in_range
from pymc_sgmcmc.dynamics.psgld import psgld_step, rmsprop_mean_square, rmsprop_preconditioner
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class PSGLDState(NamedTuple):
    """pSGLD's state: the position ``θ`` and RMSprop's mean square ``V`` (whitened)."""

    position: Array
    mean_square: Array


class PSGLDParams(NamedTuple):
    """pSGLD's parameters: ``η``, the metric ``M``, ``α``, ``λ`` and the adapting flag."""

    step_size: Array
    metric: EuclideanMetric
    decay: Array
    offset: Array
    adapting: Array


def parameters(decay: float = 0.99, offset: float = 1e-5) -> dict:
    """Validated ``decay`` (``0 < α < 1``) and ``offset`` (``λ > 0``); adapting at first."""
    decay = check_in_range("decay", decay, 0.0, 1.0, "RMSprop's usual decay is 0.99.")
    if not (0.0 < decay < 1.0):
        raise ValueError(f"decay must lie strictly between 0 and 1, got {decay}. Try 0.99.")
    offset = float(offset)
    if not (np.isfinite(offset) and offset > 0.0):
        raise ValueError(f"offset must be positive and finite, got {offset}. Try 1e-5.")
    return {"decay": decay, "offset": offset, "adapting": 1.0}


def init(position: Array, normal: Array, params: PSGLDParams) -> PSGLDState:
    """A chain at ``position``, with ``V = 1``: a whitened Gaussian's mean square gradient.

    The paper starts from ``V = 0``, whose first steps are ``1/√(1 − α)`` times too long
    (10× at ``α = 0.99``) until the running mean fills.
    """
    return PSGLDState(position, position * 0.0 + 1.0)


def step(state: PSGLDState, target: Target, noise: Array, params: PSGLDParams) -> PSGLDState:
    """Steps (c)-(e) of §3.2 in the coordinates ``u = Lᵀθ`` that whiten ``M = L Lᵀ``.

    There ``∇_u = L⁻¹∇_θ = Lᵀ M⁻¹ ∇_θ`` and a move ``Δu`` is ``Δθ = L⁻ᵀΔu = M⁻¹ L Δu``:
    products with the metric's factor and inverse, no triangular solve. With ``G = 1`` the
    step is SGLD's in the metric (drift ``η M⁻¹∇``, noise ``N(0, 2η M⁻¹)``).
    """
    metric, position = params.metric, state.position
    factor = metric.factor  # L: √diag(M), or the lower Cholesky factor of a dense M
    whitened_gradient = _times_factor_transposed(
        factor, metric.velocity(position, target.grad(position))
    )
    mean_square = rmsprop_mean_square(
        state.mean_square, whitened_gradient, params.decay, params.adapting
    )
    preconditioner = rmsprop_preconditioner(mean_square, params.offset)
    # Step (e) from u = 0 gives the move Δu itself, whatever u is.
    move = psgld_step(position * 0.0, whitened_gradient, noise, params.step_size, preconditioner)
    return PSGLDState(
        position + metric.velocity(position, metric.momentum(position, move)), mean_square
    )


def _times_factor_transposed(factor: Array, vector: Array) -> Array:
    """``Lᵀ v`` for a diagonal (1-D) or lower-triangular (2-D) factor."""
    return factor.T @ vector if factor.ndim == 2 else factor * vector


def stats(state: PSGLDState, info: dict, params: PSGLDParams) -> dict:
    """The range of the preconditioner ``G`` at the draw (1 where noise is negligible)."""
    preconditioner = rmsprop_preconditioner(state.mean_square, params.offset)
    return {"preconditioner_min": preconditioner.min(), "preconditioner_max": preconditioner.max()}


KERNEL = Kernel(
    metric="euclidean",
    coordinatewise=True,
    name="psgld",
    state_type=PSGLDState,
    params_type=PSGLDParams,
    init=init,
    step=step,
    stats=stats,
    stats_dtypes={"preconditioner_min": (np.float64, []), "preconditioner_max": (np.float64, [])},
    tuning_parameter="adapting",
    # SGLD's: with G = 1, a unit-scale Gaussian's stationary variance is 1/(1 − η/2).
    default_step_size=0.1,
)
