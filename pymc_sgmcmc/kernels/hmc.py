"""Kernel of Hamiltonian Monte Carlo: leapfrog steps and a Metropolis–Hastings test.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
Algorithm 1 without its M step; the leapfrog step is
:func:`pymc_sgmcmc.dynamics.hmc.leapfrog_step`. The kernel's :func:`energy` makes the
glue test each trajectory with the full-data log density.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.dynamics.hmc import leapfrog_step
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class HMCState(NamedTuple):
    """HMC's state: position ``θ``, momentum ``p`` and the gradient ``∇L(θ)``."""

    position: Array
    momentum: Array
    gradient: Array


class HMCParams(NamedTuple):
    """HMC's parameters: ``ε`` and the mass ``M``."""

    step_size: Array
    metric: EuclideanMetric


def parameters() -> dict:
    """HMC has no parameters besides the step size and the mass."""
    return {}


def init(position: Array, normal: Array, params: HMCParams) -> HMCState:
    """A chain at ``position``; the gradient is filled in by :func:`prepare`."""
    momentum = params.metric.momentum(position, normal)
    return HMCState(position, momentum, np.zeros_like(position))


def refresh(state: HMCState, target: Target, normal: Array, params: HMCParams) -> HMCState:
    """Alg. 1: ``p ~ N(0, M)`` at the start of every trajectory."""
    return state._replace(momentum=params.metric.momentum(state.position, normal))


def prepare(state: HMCState, target: Target, params: HMCParams) -> HMCState:
    """The gradient at the starting position, which the first leapfrog step uses."""
    return state._replace(gradient=target.grad(state.position))


def step(state: HMCState, target: Target, noise: Array, params: HMCParams) -> HMCState:
    """One leapfrog step (Alg. 1)."""
    return HMCState(
        *leapfrog_step(
            state.position,
            state.momentum,
            state.gradient,
            target.grad,
            params.step_size,
            params.metric.inverse,
        )
    )


def energy(state: HMCState, target: Target, params: HMCParams) -> Array:
    """``H(θ, p) = −L(θ) + pᵀM⁻¹p/2`` (eq. 1)."""
    kinetic = params.metric.kinetic_energy(state.position, state.momentum)
    return -target.logp(state.position) + kinetic


def stats(state: HMCState, info: dict, params: HMCParams) -> dict:
    """The kinetic temperature ``pᵀM⁻¹p / D`` of the momentum."""
    temperature = params.metric.kinetic_temperature(state.position, state.momentum)
    return {"kinetic_temperature": temperature}


KERNEL = Kernel(
    name="hmc",
    state_type=HMCState,
    params_type=HMCParams,
    init=init,
    refresh=refresh,
    prepare=prepare,
    step=step,
    energy=energy,
    stats=stats,
    stats_dtypes={"kinetic_temperature": (np.float64, [])},
    checked_stats=("kinetic_temperature",),
    metric="euclidean",
    step_noise=False,
    gradient_at_end=True,
    default_step_size=0.3,
)
