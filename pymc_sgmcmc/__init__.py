"""Adaptive and stochastic-gradient Hamiltonian samplers as PyMC step methods.

>>> import pymc as pm, pymc_sgmcmc as pmsg
>>> # pm.sample(step=pmsg.SGHMC())  # control variates at the mode, automatic step size
"""

import logging

from pymc_sgmcmc import sources
from pymc_sgmcmc.adaptation.sample_size import SampleSizeRule
from pymc_sgmcmc.adaptation.schedules import ConstantStepSize, PolynomialDecay
from pymc_sgmcmc.data import Minibatch
from pymc_sgmcmc.diagnostics import diagnostics, kernel_stein_discrepancy
from pymc_sgmcmc.distributions import SphereUniform, VonMisesFisher
from pymc_sgmcmc.sampling import samplers as _samplers
from pymc_sgmcmc.sampling.mode import ModeResult, find_mode
from pymc_sgmcmc.sampling.samplers import *  # noqa: F403 (every registered sampler)

__version__ = "0.1.0"

# As PyMC does for its own messages: shown at INFO unless the application set up logging.
_log = logging.getLogger(__name__)
if not logging.root.handlers:
    _log.setLevel(logging.INFO)
    if not _log.handlers:
        _log.addHandler(logging.StreamHandler())

__all__ = [
    *_samplers.__all__,
    "ConstantStepSize",
    "Minibatch",
    "ModeResult",
    "PolynomialDecay",
    "SampleSizeRule",
    "SphereUniform",
    "VonMisesFisher",
    "__version__",
    "diagnostics",
    "find_mode",
    "kernel_stein_discrepancy",
    "sources",
]
