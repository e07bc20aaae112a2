"""Deprecated: the step methods now live in :mod:`pymc_sgmcmc.pymc`.

``from pymc_sgmcmc.step_methods import SGHMC`` still works, with a ``DeprecationWarning``;
import the samplers from ``pymc_sgmcmc`` instead.
"""

import warnings

_MOVED = {"SGHMC", "SGLD", "SGNHT", "StochasticGradientStep"}


def __getattr__(name: str):
    if name in _MOVED:
        warnings.warn(
            f"pymc_sgmcmc.step_methods.{name} is deprecated: use pymc_sgmcmc.{name} "
            f"(or pymc_sgmcmc.pymc.{name}).",
            DeprecationWarning,
            stacklevel=2,
        )
        import pymc_sgmcmc.pymc

        return getattr(pymc_sgmcmc.pymc, name)
    if name == "HamiltonianStep":
        raise AttributeError(
            "pymc_sgmcmc.step_methods.HamiltonianStep is gone: a sampler is now a kernel "
            "(pymc_sgmcmc.kernels) run by pymc_sgmcmc.pymc.StochasticGradientStep; see "
            "docs/architecture.md."
        )
    raise AttributeError(f"module 'pymc_sgmcmc.step_methods' has no attribute {name!r}")
