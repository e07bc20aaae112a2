"""Models whose variables carry ``initval=`` sample with every sampler's defaults.

PyMC's docs advise an ``initval`` for ordered transforms (the default initial point of
an ordered vector, all zeros, is outside the support). PyMC refuses to copy such a model
(``fgraph_from_model``: "Cannot convert models with non-default initial_values"), and
every graph rewrite of ours copies it: the mode search, the gradient-noise probes and the
full-data density. The model here is a two-component normal mixture (a PyMC symbolic
random variable, which the rewrites must also remake rather than pin to the minibatch's
static shape) of 600 rows seen 100 at a time; the reference is PyMC's NUTS on all rows.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling import SAMPLERS

ROWS = np.concatenate(
    [
        np.random.default_rng(8).normal(-2.0, 1.0, 300),
        np.random.default_rng(9).normal(2.0, 1.0, 300),
    ]
)
CHAINS, TUNE, DRAWS = 1, 300, 600
"""One chain: the tolerance is in the run's own MCSE, and what the initial values could
break is the building of the step (the model's copies), not the mixing."""
Z = 5.0
"""Tolerance in combined MCSE of the two runs' means (11 samplers × 4 comparisons)."""


def mixture_model(minibatch: bool) -> pm.Model:
    with pm.Model() as model:
        data = pm.Minibatch(ROWS, batch_size=100) if minibatch else ROWS
        mus = pm.Normal(
            "mus",
            0.0,
            5.0,
            shape=2,
            transform=pm.distributions.transforms.ordered,
            initval=np.array([-1.0, 1.0]),
        )
        weights = pm.Dirichlet("w", np.ones(2))
        pm.NormalMixture(
            "y",
            w=weights,
            mu=mus,
            sigma=1.0,
            observed=data,
            total_size=len(ROWS) if minibatch else None,
        )
    return model


def draws(idata):
    posterior = idata.posterior
    return np.concatenate([posterior["mus"].values, posterior["w"].values], axis=-1)


@pytest.fixture(scope="module")
def reference():
    with mixture_model(minibatch=False):
        idata = pm.sample(
            draws=1000,
            tune=1000,
            chains=2,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
            nuts_sampler="pymc",
        )
    values = draws(idata)
    return values.mean(axis=(0, 1)), np.asarray(az.mcse(values, method="mean"))


@pytest.fixture(scope="module")
def model():
    return mixture_model(minibatch=True)


RIEMANNIAN = (pmsg.RHMC, pmsg.SGRNPHMC)
"""Built on the model (mode search and rewrites included) but not sampled here: their
compiled trajectories on a mixture take minutes (the Hessian's derivatives)."""

DEFAULT_SAMPLERS = [
    cls for cls in SAMPLERS if cls.kernel.default_step_size is not None and cls not in RIEMANNIAN
]


@pytest.mark.statistical
@pytest.mark.parametrize("cls", DEFAULT_SAMPLERS, ids=lambda cls: cls.__name__)
def test_an_ordered_variable_with_initval_samples_with_default_arguments(model, reference, cls):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        idata = pm.sample(
            draws=DRAWS,
            tune=TUNE,
            chains=CHAINS,
            cores=1,
            random_seed=2,
            progressbar=False,
            compute_convergence_checks=False,
            step=cls(mode_kwargs={"progressbar": False}),
        )
    values = draws(idata)
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(idata.posterior["mus"].values, axis=-1) > 0)
    mean, mcse = reference
    error = np.abs(values.mean(axis=(0, 1)) - mean)
    tolerance = Z * np.hypot(mcse, np.asarray(az.mcse(values, method="mean")))
    assert np.all(error <= tolerance), (error, tolerance)


def test_the_plain_estimator_and_its_noise_probes_accept_initval(model):
    # The gradient-noise probes during sampling copy the model too.
    with model:
        idata = pm.sample(
            draws=20,
            tune=20,
            chains=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
            step=pmsg.SGHMC(gradient="minibatch", step_size=0.01),
        )
    assert np.all(np.isfinite(idata.posterior["mus"].values))
    assert "gradient_noise" in idata.sample_stats


def test_the_model_keeps_its_initial_values(model):
    assert [v for v in model.rvs_to_initial_values.values() if v is not None]
    np.testing.assert_array_equal(model.initial_point()["mus_ordered__"][0], -1.0)


@pytest.mark.parametrize("cls", RIEMANNIAN, ids=lambda cls: cls.__name__)
def test_the_riemannian_samplers_are_built_on_a_model_with_initval(model, cls):
    with model:
        step = cls(mode_kwargs={"progressbar": False})
    assert step.mode is not None and step.mode.converged
