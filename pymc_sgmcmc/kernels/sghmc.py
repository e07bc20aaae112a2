"""Kernel of stochastic gradient Hamiltonian Monte Carlo with friction (SGHMC).

Jiang and Huang, "sghmcmc: a Python package for stochastic gradient MCMC", Algorithm 2;
the update rule, with friction and noise in the metric of the mass, is
:func:`pymc_sgmcmc.dynamics.sghmc.sghmc_step`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.core.validation import friction_and_noise
from pymc_sgmcmc.dynamics.sghmc import sghmc_step
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class SGHMCState(NamedTuple):
    """SGHMC's state: position ``θ`` and momentum ``r``."""

    position: Array
    momentum: Array


class SGHMCParams(NamedTuple):
    """SGHMC's parameters: ``ε``, friction ``c``, noise estimate ``b``, the mass ``M``.

    Friction and noise estimate act in the metric of the mass: ``C = cM``, ``B̂ = bM``.
    """

    step_size: Array
    friction: Array
    noise_estimate: Array
    metric: EuclideanMetric


def parameters(friction: float = 1.0, noise_estimate: float = 0.0) -> dict:
    """Validated ``friction`` (``C > 0``) and ``noise_estimate`` (``0 ≤ B̂ ≤ C``)."""
    friction, noise_estimate = friction_and_noise(
        "friction", friction, noise_estimate, "Pass the friction C > 0 of SGHMC, e.g. friction=1.0."
    )
    return {"friction": friction, "noise_estimate": noise_estimate}


def init(position: Array, normal: Array, params: SGHMCParams) -> SGHMCState:
    """A chain at ``position`` with momentum ``r ~ N(0, M)``."""
    return SGHMCState(position, params.metric.momentum(position, normal))


def refresh(state: SGHMCState, target: Target, normal: Array, params: SGHMCParams) -> SGHMCState:
    """Algorithm 2's optional step: a fresh momentum ``r ~ N(0, M)``."""
    return state._replace(momentum=params.metric.momentum(state.position, normal))


def step(state: SGHMCState, target: Target, noise: Array, params: SGHMCParams) -> SGHMCState:
    """One step of Algorithm 2 (position first, then momentum at the new position)."""
    metric = params.metric
    position, momentum = sghmc_step(
        state.position,
        state.momentum,
        target.grad,
        metric.momentum(state.position, noise),  # ξ ~ N(0, M)
        params.step_size,
        metric.inverse,
        params.friction,
        params.noise_estimate,
    )
    return SGHMCState(position, momentum)


def temperature_scale(step_size: Array, params: SGHMCParams) -> Array:
    """``1 − εc/2``: the explicit friction step's momentum variance is ``1/(1 − εc/2)``.

    With exact gradients on a unit Gaussian, ``r' = (1 − εc) r + …`` keeps
    ``E[rᵀM⁻¹r/D] = 1/(1 − εc/2)`` (the stationary Lyapunov equation of the scheme), and
    the rescaled temperature equals the position's variance ratio exactly, so that an
    oversized step shows up as a temperature above 1.
    """
    return 1.0 - 0.5 * step_size * params.friction


def stats(state: SGHMCState, info: dict, params: SGHMCParams) -> dict:
    """The kinetic temperature ``rᵀM⁻¹r / D``, scaled by :func:`temperature_scale`."""
    temperature = params.metric.kinetic_temperature(state.position, state.momentum)
    return {"kinetic_temperature": temperature * temperature_scale(params.step_size, params)}


KERNEL = Kernel(
    name="sghmc",
    state_type=SGHMCState,
    params_type=SGHMCParams,
    init=init,
    refresh=refresh,
    step=step,
    stats=stats,
    stats_dtypes={"kinetic_temperature": (np.float64, [])},
    gradient_at_end=True,
    noise_damping="friction",
    checked_stats=("kinetic_temperature",),
    metric="euclidean",
    coordinatewise=True,
    estimated_noise="noise_estimate",
    default_step_size=0.2,
)
