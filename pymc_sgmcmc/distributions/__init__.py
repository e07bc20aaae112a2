"""Distributions on the unit sphere, their transform and special functions.

>>> import pymc as pm, pymc_sgmcmc as pmsg
>>> with pm.Model():
...     mu = pmsg.SphereUniform("mu", d=3)
...     x = pmsg.VonMisesFisher("x", mu=mu, kappa=10.0, observed=[[0.0, 0.0, 1.0]])
"""

from pymc_sgmcmc.distributions.special import (
    log_sphere_area,
    log_vmf_normaliser,
    vmf_mean_resultant_length,
)
from pymc_sgmcmc.distributions.sphere import (
    SphereContinuous,
    SphereUniform,
    VonMisesFisher,
    sample_vmf,
)
from pymc_sgmcmc.distributions.transform import SphereTransform, sphere_transform

__all__ = [
    "SphereContinuous",
    "SphereTransform",
    "SphereUniform",
    "VonMisesFisher",
    "log_sphere_area",
    "log_vmf_normaliser",
    "sample_vmf",
    "sphere_transform",
    "vmf_mean_resultant_length",
]
