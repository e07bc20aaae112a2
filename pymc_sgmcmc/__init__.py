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


def _preload_in_forkserver() -> None:
    """Have Python's forkserver import PyMC and this package once, when it starts.

    ``pm.sample(cores > 1)`` with the "forkserver" start method (Python's default on
    Linux from 3.14) forks each chain's worker from that server. The server preloads
    ``__main__`` by default, which imports them for a script that imports them at its
    top; from a notebook (a ``__main__`` without a file) or a script that imports them
    inside its main block, every worker imported them itself, ~3 s a worker at every
    ``pm.sample`` call. Names already on the list stay; a server started before this
    import keeps its list. The list is read from a private attribute because
    multiprocessing offers no getter; where that fails, nothing changes.
    """
    try:
        import multiprocessing.forkserver
    except ImportError:  # a platform without it (Windows)
        return
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    current = getattr(server, "_preload_modules", None)
    if not isinstance(current, list):
        return
    wanted = [name for name in ("pymc", __name__) if name not in current]
    if wanted:
        multiprocessing.forkserver.set_forkserver_preload([*current, *wanted])


_preload_in_forkserver()

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
