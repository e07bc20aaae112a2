"""Pure update rules: one integrator step each, for NumPy arrays or PyTensor variables."""

from pymc_sgmcmc.dynamics.common import kinetic_energy, kinetic_temperature, velocity
from pymc_sgmcmc.dynamics.sghmc import sghmc_step
from pymc_sgmcmc.dynamics.sgld import sgld_step
from pymc_sgmcmc.dynamics.sgnht import sgnht_step

__all__ = [
    "kinetic_energy",
    "kinetic_temperature",
    "sghmc_step",
    "sgld_step",
    "sgnht_step",
    "velocity",
]
