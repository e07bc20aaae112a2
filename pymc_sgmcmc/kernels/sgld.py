"""Kernel of stochastic gradient Langevin dynamics (SGLD).

Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §2.2; the update rule
is :func:`pymc_sgmcmc.dynamics.sgld.sgld_step`. The state is the position alone.
"""

from __future__ import annotations

from typing import NamedTuple

from pymc_sgmcmc.dynamics.common import Array
from pymc_sgmcmc.dynamics.sgld import sgld_step
from pymc_sgmcmc.kernels.base import Kernel, Target


class SGLDState(NamedTuple):
    """SGLD's state: the position ``θ``."""

    position: Array


class SGLDParams(NamedTuple):
    """SGLD's parameters: the step size ``η``."""

    step_size: Array


def parameters() -> dict:
    """SGLD has no parameters besides the step size."""
    return {}


def init(position: Array, normal: Array, params: SGLDParams) -> SGLDState:
    """A chain at ``position``."""
    return SGLDState(position)


def step(state: SGLDState, target: Target, noise: Array, params: SGLDParams) -> SGLDState:
    """``θ ← θ + η ∇log p̃(θ) + N(0, 2η)`` (§2.2)."""
    return SGLDState(sgld_step(state.position, target.grad, noise, params.step_size))


KERNEL = Kernel(name="sgld", state_type=SGLDState, params_type=SGLDParams, init=init, step=step)
