"""Everything that touches PyMC: model-graph rewrites, the generic step, the samplers."""

from pymc_sgmcmc.pymc.samplers import (
    GSGNHT,
    HMC,
    HMCEM,
    SAMPLERS,
    SGGMC,
    SGHMC,
    SGHMCEM,
    SGLD,
    SGNHT,
    SGNHTEM,
    SGNPHMC,
    SGNPHMCEM,
)
from pymc_sgmcmc.pymc.step import StochasticGradientStep

__all__ = [
    "GSGNHT",
    "HMC",
    "HMCEM",
    "SAMPLERS",
    "SGGMC",
    "SGHMC",
    "SGHMCEM",
    "SGLD",
    "SGNHT",
    "SGNHTEM",
    "SGNPHMC",
    "SGNPHMCEM",
    "StochasticGradientStep",
]
