"""PyMC step methods: the shared glue and one thin class per sampler."""

from pymc_sgmcmc.step_methods.base import StochasticGradientStep
from pymc_sgmcmc.step_methods.samplers import SGHMC, SGLD, SGNHT, HamiltonianStep

__all__ = ["SGHMC", "SGLD", "SGNHT", "HamiltonianStep", "StochasticGradientStep"]
