"""Kernel of the stochastic gradient Nosé–Hoover thermostat (SGNHT).

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
Algorithm 2 without its M step; the update rule is
:func:`pymc_sgmcmc.dynamics.sgnht.sgnht_step`. Momentum and thermostat carry over from
one draw to the next; a chain starts from ``p ~ N(0, M)`` and ``ξ = A``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.core.validation import check_positive
from pymc_sgmcmc.dynamics.sgnht import sgnht_step
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class SGNHTState(NamedTuple):
    """SGNHT's state: position ``θ``, momentum ``p`` and thermostat ``ξ``."""

    position: Array
    momentum: Array
    thermostat: Array


class SGNHTParams(NamedTuple):
    """SGNHT's parameters: ``ε``, the diffusion ``A`` and the mass ``M``."""

    step_size: Array
    diffusion: Array
    metric: EuclideanMetric


def parameters(diffusion: float = 1.0) -> dict:
    """Validated ``diffusion`` (``A > 0``)."""
    fix = "Pass the diffusion A > 0 of SGNHT, e.g. diffusion=1.0."
    return {"diffusion": check_positive("diffusion", diffusion, fix)}


def init(position: Array, normal: Array, params: SGNHTParams) -> SGNHTState:
    """A chain at ``position`` with ``p ~ N(0, M)`` and ``ξ = A``."""
    momentum = params.metric.momentum(position, normal)
    return SGNHTState(position, momentum, np.array(params.diffusion, dtype=momentum.dtype))


def refresh(state: SGNHTState, target: Target, normal: Array, params: SGNHTParams) -> SGNHTState:
    """A fresh momentum ``p ~ N(0, M)`` (after the mass changed); ``ξ`` carries on."""
    return state._replace(momentum=params.metric.momentum(state.position, normal))


def held_step(
    state: SGNHTState, target: Target, noise: Array, params: SGNHTParams, moving: Array | None
) -> SGNHTState:
    """One step that moves only the coordinates where ``moving`` is 1 (whole groups).

    The thermostat follows the moving coordinates' kinetic temperature
    (:func:`~pymc_sgmcmc.dynamics.sgnht.sgnht_step`'s ``moving``); ``None``: all move.
    """
    metric = params.metric
    return SGNHTState(
        *sgnht_step(
            state.position,
            state.momentum,
            state.thermostat,
            target.grad,
            metric.momentum(state.position, noise),  # ξ_M ~ N(0, M)
            params.step_size,
            metric.inverse,
            params.diffusion,
            moving,
        )
    )


def step(state: SGNHTState, target: Target, noise: Array, params: SGNHTParams) -> SGNHTState:
    """One step of Algorithm 2's inner loop, every coordinate moving."""
    return held_step(state, target, noise, params, None)


def stats(state: SGNHTState, info: dict, params: SGNHTParams) -> dict:
    """Kinetic temperature ``pᵀM⁻¹p / D`` and thermostat ``ξ``."""
    temperature = params.metric.kinetic_temperature(state.position, state.momentum)
    return {"kinetic_temperature": temperature, "thermostat": state.thermostat}


KERNEL = Kernel(
    name="sgnht",
    state_type=SGNHTState,
    params_type=SGNHTParams,
    init=init,
    refresh=refresh,
    step=step,
    held_step=held_step,
    stats=stats,
    stats_dtypes={"kinetic_temperature": (np.float64, []), "thermostat": (np.float64, [])},
    gradient_at_end=True,
    noise_damping="diffusion",
    checked_stats=("kinetic_temperature", "thermostat"),
    metric="euclidean",
    default_step_size=0.1,
)
