"""Our samplers in a ``CompoundStep``: two of ours against an exact posterior, and PyMC's.

Each step's log density reads the variables the other moves (PyMC puts their values in
shared variables before each draw). A control-variate gradient must stay unbiased for
the conditional density *now*: its minibatch term at the anchor is evaluated with the
values those variables had when the anchor's full-data pass was made. With today's
values instead, each step's draws ignored the other's moves (the correlation between the
two blocks came out ~0 against 0.24, the group mean 0.59 sd off).

PyMC's own samplers are no test partner here: they evaluate the whole model's log density
through ``pm.Minibatch``'s random rows, so even a variable outside the likelihood gets a
noisy acceptance test (``docs/usage.md``, "Other samplers next to a minibatched
likelihood").
"""

import arviz as az
import numpy as np
import pymc as pm
import pytest
from helpers import switch_model
from pymc.blocking import DictToArrayBijection

import pymc_sgmcmc as pmsg

ROWS, BATCH, DIM = 2_000, 100, 3
NOISE_SD, PRIOR_SD = 20.0, 10.0


@pytest.fixture(scope="module")
def shrinkage_regression():
    """``w ~ N(mu, 1)``, ``mu ~ N(0, 10²)``, ``y ~ N(X w, 20²)``: exact Gaussian posterior.

    Noisy rows, so that the prior ties ``w`` to ``mu`` (correlation ~0.24).
    """
    rng = np.random.default_rng(3)
    x = rng.normal(size=(ROWS, DIM))
    y = x @ np.array([2.0, 2.5, 3.0]) + rng.normal(0.0, NOISE_SD, ROWS)
    precision = np.zeros((DIM + 1, DIM + 1))
    precision[:DIM, :DIM] = x.T @ x / NOISE_SD**2 + np.eye(DIM)
    precision[:DIM, DIM] = precision[DIM, :DIM] = -1.0
    precision[DIM, DIM] = DIM + 1.0 / PRIOR_SD**2
    covariance = np.linalg.inv(precision)
    mean = covariance @ np.concatenate([x.T @ y / NOISE_SD**2, [0.0]])
    with pm.Model() as model:
        x_batch, y_batch = pm.Minibatch(x, y, batch_size=BATCH)
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        w = pm.Normal("w", mu, 1.0, shape=DIM)
        pm.Normal("y", x_batch @ w, NOISE_SD, observed=y_batch, total_size=ROWS)
    return model, mean, covariance


def test_control_variates_follow_the_other_steps_variables(shrinkage_regression):
    model, mean, covariance = shrinkage_regression
    with model:
        quiet = {"progressbar": False}
        steps = [
            pmsg.SGHMC([model["w"]], mode_kwargs=quiet),
            pmsg.SGHMC([model["mu"]], mode_kwargs=quiet),
        ]
        idata = pm.sample(
            draws=2000, tune=1000, chains=2, cores=1, step=steps, random_seed=7,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    # Each anchor holds the other block at its value when the anchor was taken.
    assert set(steps[0].anchor.others) == {"mu"} and set(steps[1].anchor.others) == {"w"}
    posterior = idata.posterior
    draws = np.concatenate([posterior["w"].values, posterior["mu"].values[..., None]], axis=-1)
    flat = draws.reshape(-1, DIM + 1)
    sd = np.sqrt(np.diag(covariance))
    ess = np.array([float(az.ess(draws[..., k])) for k in range(DIM + 1)])
    # Tolerances: four Monte Carlo errors of each statistic at its measured ESS.
    np.testing.assert_array_less(np.abs(flat.mean(0) - mean) / sd, 4 / np.sqrt(ess))
    np.testing.assert_array_less(np.abs(flat.std(0) / sd - 1), 4 / np.sqrt(2 * ess))
    exact = covariance[:DIM, DIM] / (sd[:DIM] * sd[DIM])
    sampled = np.corrcoef(flat.T)[:DIM, DIM]
    np.testing.assert_array_less(np.abs(sampled - exact), 4 * (1 - exact**2) / np.sqrt(ess.min()))


def test_pymcs_metropolis_on_a_minibatched_model_compares_two_minibatches(
    shrinkage_regression,
):
    # Why a discrete variable next to pm.Minibatch data is warned about: PyMC's
    # acceptance test evaluates each side on its own random rows, so a point compared
    # with itself gets a log-density difference far from 0 (were PyMC to feed both sides
    # the same rows, this would fail and the warning could go).
    model, _, _ = shrinkage_regression
    with model:
        metropolis = pm.Metropolis([model["mu"]])
    point = model.initial_point() | {"w": np.full(DIM, 2.0)}
    for name, shared in metropolis.shared.items():
        shared.set_value(point[name])
    q = DictToArrayBijection.map({"mu": point["mu"]}).data
    differences = np.array([float(metropolis.delta_logp(q, q)) for _ in range(20)])
    assert np.abs(differences).max() > 10.0, differences


def test_a_discrete_variable_beside_minibatch_data_is_warned_about():
    with switch_model():  # k ~ Bernoulli(0.5) in the minibatched likelihood
        with pytest.warns(RuntimeWarning, match=r"discrete variables \['k'\]") as record:
            pmsg.SGHMC(mode_kwargs={"progressbar": False})
    assert record[0].filename == __file__  # the user's line, not the package's
