"""Adaptive and stochastic-gradient Hamiltonian samplers as PyMC step methods.

>>> import pymc as pm, pymc_sgmcmc as pmsg
>>> # pm.sample(step=pmsg.SGHMC())  # control variates at the mode, automatic step size
"""

from pymc_sgmcmc.adaptation.sample_size import SampleSizeRule
from pymc_sgmcmc.adaptation.schedules import ConstantStepSize, PolynomialDecay
from pymc_sgmcmc.data import Minibatch
from pymc_sgmcmc.diagnostics import diagnostics, kernel_stein_discrepancy
from pymc_sgmcmc.distributions import SphereUniform, VonMisesFisher
from pymc_sgmcmc.pymc.mode import ModeResult, find_mode
from pymc_sgmcmc.pymc.samplers import (
    GSGNHT,
    HMC,
    HMCEM,
    RHMC,
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

__version__ = "0.1.0"

__all__ = [
    "GSGNHT",
    "SGGMC",
    "HMC",
    "HMCEM",
    "RHMC",
    "SGHMC",
    "SGHMCEM",
    "SGNHTEM",
    "SampleSizeRule",
    "SGLD",
    "SGNHT",
    "SGNPHMC",
    "SGNPHMCEM",
    "SGRNPHMC",
    "SphereUniform",
    "VonMisesFisher",
    "ConstantStepSize",
    "Minibatch",
    "ModeResult",
    "diagnostics",
    "find_mode",
    "kernel_stein_discrepancy",
    "PolynomialDecay",
    "__version__",
]
