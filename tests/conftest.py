"""Shared models of the test suite; shared functions live in ``helpers.py``.

Compiling a trajectory is the expensive part of a test (once per step-method instance),
so step methods live in module-scoped fixtures and the models are tiny.
"""

import os

import numpy as np
import pymc as pm
import pytensor
import pytest
import scipy.linalg  # noqa: F401  (loads SciPy's OpenBLAS before the limit below)
from helpers import BATCH_SIZE, N_ROWS, PRIOR_SD, build_graphs_afresh
from threadpoolctl import threadpool_limits

# The suite runs in two worker processes on two cores. OpenBLAS starts a thread per core
# in each and its idle threads spin, so each worker's BLAS calls fought the other
# worker: HMC on the scale-invariance file's 10-D Gaussian (a Cholesky factor and
# triangular solves on all rows at every Metropolis test) took 53 s beside another test
# and 9.6 s with one BLAS thread per worker. The limit applies to the BLAS libraries loaded
# when it is set (NumPy's and SciPy's); forked chain processes inherit it.
threadpool_limits(limits=1, user_api="blas")

# PyTensor records where every variable was created (a stack walk per variable, for the
# messages of errors raised when a compiled function runs). The suite builds hundreds of
# steps; without the records a step's set-up took ~10 % less (SGHMC, SGNHT-EM and HMC on
# the conformance model: 6.0-6.7 s against 5.1-5.7 s). Run a failing test again with
# PYTENSOR_FLAGS=traceback__limit=8 to have them.
if "traceback__limit" not in os.environ.get("PYTENSOR_FLAGS", ""):
    pytensor.config.traceback__limit = 0


@pytest.fixture(scope="module")
def observations():
    """200 draws of N(1, 1)."""
    return np.random.default_rng(0).normal(1.0, 1.0, size=N_ROWS)


@pytest.fixture(scope="module")
def minibatch_model(observations):
    """mu ~ N(0, 10²), x_i ~ N(mu, 1), seen 10 rows at a time."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        batch = pm.Minibatch(observations, batch_size=BATCH_SIZE)
        pm.Normal("obs", mu, 1.0, observed=batch, total_size=N_ROWS)
    return model


@pytest.fixture(scope="module")
def gaussian_model():
    """theta ~ N(0, I₂), no data."""
    with pm.Model() as model:
        pm.Normal("theta", 0.0, 1.0, shape=2)
    return model


@pytest.fixture(scope="module", autouse=True)
def _graphs_built_as_in_a_fresh_process():
    """Each test file builds its graphs as a fresh process would (``build_graphs_afresh``)."""
    build_graphs_afresh()
