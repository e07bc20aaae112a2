"""Adaptation: step-size schedules, and adapters that learn parameters during tuning.

An adapter (:class:`~pymc_sgmcmc.adaptation.base.Adapter`) owns parameters of a sampler
and learns them from the chain: :class:`~pymc_sgmcmc.adaptation.step_size.StepSizeAdapter`
(a schedule, optionally jittered) and :class:`~pymc_sgmcmc.adaptation.em.MassEM` (the
mass by Monte Carlo EM, with the adaptive E-step size).
"""

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.adaptation.em import MassEM
from pymc_sgmcmc.adaptation.schedules import ConstantStepSize, PolynomialDecay, as_schedule
from pymc_sgmcmc.adaptation.step_size import StepSizeAdapter

__all__ = [
    "Adapter",
    "ChainContext",
    "ConstantStepSize",
    "IterationResult",
    "MassEM",
    "PolynomialDecay",
    "StepSizeAdapter",
    "as_schedule",
]
