"""Kernels: one file per sampler family, the one place a new sampler's mathematics goes.

See :mod:`pymc_sgmcmc.kernels.base` for what a kernel provides and
``docs/architecture.md`` for how to add one. The samplers that run them are listed once,
in :data:`pymc_sgmcmc.sampling.SAMPLERS` (each names its kernel).
"""

from pymc_sgmcmc.kernels.base import Kernel, Target

__all__ = ["Kernel", "Target"]
