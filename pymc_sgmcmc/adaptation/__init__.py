"""Adaptation: step-size schedules (and, later, mass learning and E-step sizes)."""

from pymc_sgmcmc.adaptation.schedules import ConstantStepSize, PolynomialDecay, as_schedule

__all__ = ["ConstantStepSize", "PolynomialDecay", "as_schedule"]
