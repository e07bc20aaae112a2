"""Everything that touches PyMC: model-graph rewrites, the generic step, the samplers."""

from pymc_sgmcmc.pymc.samplers import (
    GSGNHT,
    HMC,
    HMCEM,
    RHMC,
    SAMPLERS,
    SGGMC,
    SGHMC,
    SGHMCEM,
    SGLD,
    SGNHT,
    SGNHTEM,
    SGNPHMC,
    SGNPHMCEM,
    SGRNPHMC,
)
from pymc_sgmcmc.pymc.step import StochasticGradientStep

__all__ = [
    "GSGNHT",
    "HMC",
    "HMCEM",
    "RHMC",
    "SAMPLERS",
    "SGGMC",
    "SGHMC",
    "SGHMCEM",
    "SGLD",
    "SGNHT",
    "SGNHTEM",
    "SGNPHMC",
    "SGNPHMCEM",
    "SGRNPHMC",
    "StochasticGradientStep",
]
