"""Kernel of stochastic gradient Langevin dynamics (SGLD).

Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §2.2; the update rule
is :func:`pymc_sgmcmc.dynamics.sgld.sgld_step`, preconditioned by a constant metric (Welling
and Teh's SGLD with a preconditioner ``M⁻¹``: drift ``η M⁻¹∇log p̃``, noise ``N(0, 2ηM⁻¹)``,
which leaves the posterior invariant as ``η → 0`` for any positive-definite ``M``). The
state is the position alone.
"""

from __future__ import annotations

from typing import NamedTuple

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.dynamics.sgld import sgld_step
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class SGLDState(NamedTuple):
    """SGLD's state: the position ``θ``."""

    position: Array


class SGLDParams(NamedTuple):
    """SGLD's parameters: the step size ``η`` and the metric ``M`` (the identity by default)."""

    step_size: Array
    metric: EuclideanMetric


def parameters() -> dict:
    """SGLD has no parameters besides the step size."""
    return {}


def init(position: Array, normal: Array, params: SGLDParams) -> SGLDState:
    """A chain at ``position``."""
    return SGLDState(position)


def step(state: SGLDState, target: Target, noise: Array, params: SGLDParams) -> SGLDState:
    """``θ ← θ + η M⁻¹∇log p̃(θ) + N(0, 2ηM⁻¹)`` (§2.2 with a preconditioner)."""
    metric = params.metric
    position = state.position
    # M⁻¹ L z ~ N(0, M⁻¹) for z ~ N(0, I) and M = L Lᵀ.
    whitened_noise = metric.velocity(position, metric.momentum(position, noise))
    return SGLDState(
        sgld_step(
            position,
            lambda x: metric.velocity(x, target.grad(x)),
            whitened_noise,
            params.step_size,
        )
    )


KERNEL = Kernel(
    metric="euclidean",
    coordinatewise=True,
    name="sgld",
    state_type=SGLDState,
    params_type=SGLDParams,
    init=init,
    step=step,
    # Unit-scale Gaussian: stationary variance 1/(1 − η/2), sds 2.6 % wide at η = 0.1.
    default_step_size=0.1,
)
