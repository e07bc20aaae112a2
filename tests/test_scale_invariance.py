"""Defaults are invariant to the scale of the model.

A model rescaled by 10⁻³ or 10³ (data, prior and noise scales) must give the same
posterior in its own units: nothing in absolute units may decide a step size, a mass, a
shrinkage or a refusal. Every sampler with an automatic step size runs with default
arguments, built afresh for each scale, on two models with exact posteriors; its draws
divided by the scale are checked against the exact posterior at Monte Carlo tolerances
(``assert_matches_gaussian``: ``Z_MCSE`` MCSE, no bias allowance).

The EM samplers failed this before their position M step kept the initial mass's
determinant: at scale 10³ it replaced a Laplace mass of sd 1,000 by one of sd 1 (SGHMC-EM
sd ratio 0.24, SGNHT-EM 0.28, SG-NPHMC-EM 0.42 on the normal mean), and HMC-EM refused its
own inverted Laplace mass at 10⁻³ as asymmetric (an absolute tolerance).

The scale enters through ``pm.Data`` (the prior and noise scales, and the rows), so every
scale compiles the same graph and a fresh step loads it from the compile cache. The
Riemannian samplers are left out for the suite's time (RHMC took 150 s per scale on the
10-D model); their SoftAbs floor ``1/α`` is in absolute curvature units (see docs/usage.md).
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from test_samplers_statistical import assert_matches_gaussian

import pymc_sgmcmc as pmsg

pytestmark = pytest.mark.statistical

SCALES = (1e-3, 1e3)
"""The two extremes, six orders of magnitude apart. Every sampler here is checked with its
defaults at the model's own scale elsewhere (against NUTS in ``test_initial_values.py``);
running scale 1 here as well cost a third of the file's time."""
SAMPLERS = [
    "SGLD",
    "SGHMC",
    "SGNHT",
    "SGNPHMC",
    "HMC",
    "HMCEM",
    "SGHMCEM",
    "SGNHTEM",
    "SGNPHMCEM",
]
"""Every sampler with an automatic step size but the Riemannian two (see above)."""

CHAINS, TUNE, DRAWS = 1, 500, 1000
MIN_ESS = 200
"""Of 1,000 draws, one chain (its tuning is paid once per scale). The MCSE of an sd, from
the ESS of the squared deviations, came out at most 5.8 % of the sd, so 4.5 MCSE (26 %)
still sees the collapse this file guards against (sd ratios 0.24–0.42: 58 % or more off,
10 MCSE or more)."""

# Normal mean: y_i ~ N(mu, (20 s)²), mu ~ N(0, (100 s)²), 400 rows seen 100 at a time.
MEAN_ROWS, MEAN_BATCH, MEAN_SIGMA, MEAN_TAU = 400, 100, 20.0, 100.0
MEAN_Y = 60.0 + MEAN_SIGMA * np.random.default_rng(5).normal(size=MEAN_ROWS)
_MEAN_PRECISION = 1 / MEAN_TAU**2 + MEAN_ROWS / MEAN_SIGMA**2
MEAN_EXACT = (MEAN_Y.sum() / MEAN_SIGMA**2 / _MEAN_PRECISION, _MEAN_PRECISION**-0.5)

# Correlated 10-D Gaussian: rows y_i ~ N(x, N Σ s²) with Σ an AR(1) correlation (ρ = 0.9)
# times sds from 0.5 to 2 (condition number ~ 300), x ~ N(0, (10 s)² I); 400 rows seen 100
# at a time. The posterior covariance is (Σ⁻¹ + I/10²)⁻¹ s².
DIM, CORR_ROWS, CORR_BATCH, CORR_TAU = 10, 400, 100, 10.0
_LAG = np.abs(np.subtract.outer(np.arange(DIM), np.arange(DIM)))
SIGMA = 0.9**_LAG * np.outer(np.linspace(0.5, 2.0, DIM), np.linspace(0.5, 2.0, DIM))
CORR_Y = np.random.default_rng(6).multivariate_normal(
    np.linspace(-1.0, 1.0, DIM), CORR_ROWS * SIGMA / 25, size=CORR_ROWS
)
_CORR_COV = np.linalg.inv(np.linalg.inv(SIGMA) + np.eye(DIM) / CORR_TAU**2)
CORR_EXACT = (
    _CORR_COV @ np.linalg.solve(CORR_ROWS * SIGMA, CORR_Y.sum(axis=0)),
    np.sqrt(np.diag(_CORR_COV)),
)


def normal_mean_model() -> pm.Model:
    with pm.Model() as model:
        scale = pm.Data("scale", 1.0)
        rows = pm.Data("rows", MEAN_Y)
        mu = pm.Normal("mu", 0.0, MEAN_TAU * scale)
        batch = pm.Minibatch(rows, batch_size=MEAN_BATCH)
        pm.Normal("y", mu, MEAN_SIGMA * scale, observed=batch, total_size=MEAN_ROWS)
    return model


def correlated_model() -> pm.Model:
    with pm.Model() as model:
        scale = pm.Data("scale", 1.0)
        rows = pm.Data("rows", CORR_Y)
        x = pm.Normal("x", 0.0, CORR_TAU * scale, shape=DIM)
        batch = pm.Minibatch(rows, batch_size=CORR_BATCH)
        cov = CORR_ROWS * SIGMA * scale**2
        pm.MvNormal("y", x, cov, observed=batch, total_size=CORR_ROWS)
    return model


MODELS = {
    "normal_mean": (normal_mean_model, MEAN_Y, "mu", MEAN_EXACT),
    "correlated_10d": (correlated_model, CORR_Y, "x", CORR_EXACT),
}


@pytest.fixture(scope="module", params=list(MODELS))
def problem(request):
    build, rows, name, exact = MODELS[request.param]
    return build(), rows, name, exact


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_defaults_give_the_same_posterior_at_every_scale(problem, sampler):
    model, rows, name, (mean, sd) = problem
    for scale in SCALES:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            pm.set_data({"scale": scale, "rows": rows * scale})
            step = getattr(pmsg, sampler)(mode_kwargs={"progressbar": False})
            idata = pm.sample(
                draws=DRAWS,
                tune=TUNE,
                chains=CHAINS,
                cores=1,
                step=step,
                random_seed=3,
                progressbar=False,
                compute_convergence_checks=False,
            )
        draws = idata.posterior[name].values.reshape(CHAINS, DRAWS, -1) / scale
        labels = [f"{name}[{k}] at scale {scale:g}" for k in range(draws.shape[-1])]
        assert_matches_gaussian(
            draws, np.atleast_1d(mean), np.atleast_1d(sd), labels=labels, min_ess=MIN_ESS
        )
