"""Gradient estimators over the model graph: the targets a kernel's steps move on.

Today: the plain minibatch estimator (every gradient on its own rows, scaled to the full
data by ``total_size``) and the exact full-data target of a Metropolis test. Control
variates and SVRG plug in here as further estimators with the same ``target(batch)``.
"""

from pymc_sgmcmc.gradients.minibatch import MinibatchGradient, exact_target

__all__ = ["MinibatchGradient", "exact_target"]
