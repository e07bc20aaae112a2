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


def __getattr__(name: str):
    # Moved to pymc_sgmcmc.metrics (imported lazily: metrics builds on this package).
    moved = {"Mass": "EuclideanMetric", "make_mass": "euclidean_metric"}
    if name in moved:
        import warnings

        from pymc_sgmcmc import metrics

        warnings.warn(
            f"pymc_sgmcmc.dynamics.{name} is deprecated: use pymc_sgmcmc.metrics.{moved[name]}.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(metrics, moved[name])
    raise AttributeError(f"module 'pymc_sgmcmc.dynamics' has no attribute {name!r}")
