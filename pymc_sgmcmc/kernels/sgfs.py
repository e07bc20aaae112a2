"""Kernel of stochastic gradient Fisher scoring (SGFS).

Ahn, Korattikara and Welling, "Bayesian Posterior Sampling via Stochastic Gradient Fisher
Scoring": the update rule is :func:`pymc_sgmcmc.dynamics.sgfs.fisher_scoring_step`. The
state is the position alone. The parameters hold the metric ``M = F`` (the curvature the
adapter learned, :class:`~pymc_sgmcmc.adaptation.fisher_scoring.FisherScoring`; the glue
reads the posterior's scale from it) and what a step reads: the basis ``W`` that whitens
``F`` and diagonalises the gradient's noise ``Q``, and ``Q``'s variances ``q`` there.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.dynamics.sgfs import fisher_scoring_step
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class SGFSState(NamedTuple):
    """SGFS's state: the position ``θ``."""

    position: Array


class SGFSParams(NamedTuple):
    """SGFS's parameters: ``h``, ``M = F``, the basis ``W`` and the noise's variances ``q``."""

    step_size: Array
    metric: EuclideanMetric
    basis: Array
    noise_eigenvalues: Array


def parameters() -> dict:
    """None besides the step size: the adapter owns the metric, ``W`` and ``q``."""
    return {}


def init(position: Array, normal: Array, params: SGFSParams) -> SGFSState:
    """A chain at ``position``."""
    return SGFSState(position)


def step(state: SGFSState, target: Target, noise: Array, params: SGFSParams) -> SGFSState:
    """``θ ← θ + 2C⁻¹(g̃ + ζ)``, ``C = 2F/h + Q``, ``ζ ~ N(0, (2/h − 1)F)`` (Alg. 1, line 9)."""
    position, basis, variances = state.position, params.basis, params.noise_eigenvalues
    gradient = target.grad(position)
    return SGFSState(
        fisher_scoring_step(position, gradient, noise, params.step_size, basis, variances)
    )


def stats(state: SGFSState, info: dict, params: SGFSParams) -> dict:
    """The largest gradient-noise variance ``q`` relative to the curvature (0: no noise)."""
    return {"fisher_noise_max": params.noise_eigenvalues.max()}


KERNEL = Kernel(
    metric="euclidean",
    name="sgfs",
    state_type=SGFSState,
    params_type=SGFSParams,
    init=init,
    step=step,
    stats=stats,
    stats_dtypes={"fisher_noise_max": (np.float64, [])},
    # The step makes room for the gradient's noise itself (C holds Q): no cap for it.
    compensates_noise=True,
    # A Gaussian posterior is invariant at any h < 2 if F is its precision; the empirical
    # Fisher is not (measured: twice it on overdispersed counts), and that error widens
    # or narrows the draws in proportion to h: sds 7 % narrow at h = 0.5, 2.3 % at 0.2.
    default_step_size=0.2,
    maximum_step_size=2.0,
)
