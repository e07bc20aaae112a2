"""Helpers shared by the test files (imported as ``helpers``; tests/ is on sys.path)."""

import math

import numpy as np
import pymc as pm

N_ROWS = 200
BATCH_SIZE = 10
PRIOR_SD = 10.0
"""The shared minibatch model (conftest's ``minibatch_model``): its data and prior."""


def sample(step, model, **kwargs):
    """``pm.sample`` with short, quiet, reproducible defaults; keyword arguments override."""
    options = {
        "draws": 50,
        "tune": 10,
        "chains": 1,
        "cores": 1,
        "random_seed": 1,
        "progressbar": False,
        "compute_convergence_checks": False,
    }
    with model:
        return pm.sample(step=step, **(options | kwargs))


def draws_of(idata, name):
    """The posterior draws of ``name`` as an array ``(chain, draw, ...)``."""
    return idata.posterior[name].values


def stat(idata, name, group="sample_stats"):
    """A sampler statistic as an array ``(chain, draw)``."""
    return idata[group][name].values


def compiled(step):
    """Compile ``step``'s trajectory now, so every test sharing the fixture shares it."""
    step.trajectory_function  # noqa: B018
    return step


def standard_error(values, ess):
    """Monte Carlo standard error of a mean from ``ess`` effective draws."""
    return float(np.std(values)) / math.sqrt(float(ess))
