"""The PyMC glue: model-graph rewrites, the mode search, the generic step, the samplers."""

from pymc_sgmcmc.sampling import samplers
from pymc_sgmcmc.sampling.samplers import *  # noqa: F403 (every registered sampler)
from pymc_sgmcmc.sampling.samplers import SAMPLERS
from pymc_sgmcmc.sampling.step import StochasticGradientStep

__all__ = [*samplers.__all__, "SAMPLERS", "StochasticGradientStep"]
