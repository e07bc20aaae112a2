"""gradient="saga": the estimate's formula, its table, its variance against the plain
minibatch's, and exact draws on Gaussian posteriors."""

import numpy as np
import pymc as pm
import pytest
from helpers import assert_within_mcse, correlated_regression, sample

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.gradients.saga import saga_correction
from pymc_sgmcmc.sampling import startup


def test_the_estimate_is_unbiased_for_any_table_and_exact_for_a_current_one():
    # prior + (N/n) Σ_B g_i + Σ_j T_j − (N/n) Σ_B T_i, enumerated over every 1-row batch.
    rng = np.random.default_rng(0)
    n_rows, dim = 30, 3
    per_datum, table, prior = rng.normal(size=(n_rows, dim)), rng.normal(size=(n_rows, dim)), 0.3
    full = prior + per_datum.sum(axis=0)

    def estimate(batch, table):
        scaled = n_rows / len(batch) * per_datum[batch].sum(axis=0)
        return prior + scaled + saga_correction(table.sum(axis=0), table[batch], n_rows, len(batch))

    mean = np.mean([estimate(np.array([i]), table) for i in range(n_rows)], axis=0)
    np.testing.assert_allclose(mean, full, rtol=1e-12)
    batch = rng.integers(0, n_rows, size=(4, 7))  # leading axes: one correction per step
    correction = saga_correction(table.sum(axis=0), table[batch], n_rows, 7)
    assert correction.shape == (4, dim)
    np.testing.assert_allclose(estimate(batch[2], per_datum), full, rtol=1e-12)


ROWS = np.random.default_rng(20261129).normal(3.0, 2.0, size=2_000)
PRIOR_SD = 10.0
PRECISION = ROWS.size / 4.0 + PRIOR_SD**-2
MEAN = ROWS.sum() / 4.0 / PRECISION


def _logistic_model(n_rows=4_000, dim=4, batch_size=100):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n_rows, dim))
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-x @ rng.normal(0, 0.5, dim)))).astype(float)
    with pm.Model() as model:
        xb, yb = pm.Minibatch(x, y, batch_size=batch_size)
        w = pm.Normal("w", 0.0, 5.0, shape=dim)
        pm.Bernoulli("y", logit_p=xb @ w, observed=yb, total_size=n_rows)
    return model, x, y


@pytest.fixture(scope="module")
def logistic_run():
    model, x, y = _logistic_model()
    with model:
        step = pmsg.SGHMC(gradient="saga", mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=300, tune=300, chains=1, random_seed=4)
    return step, idata, x, y


def test_the_table_holds_each_datums_gradient_where_it_was_last_refreshed(logistic_run):
    step, _, x, y = logistic_run
    table = step.chain.estimator.table
    [stored], [total] = table.tables, table.sums
    np.testing.assert_allclose(total, stored.sum(axis=0), rtol=1e-9, atol=1e-9)
    position = step.chain.kernel_state.position
    rows = np.array([5, 17, 17, 3000])
    table.pending = [rows[None, :]]
    table.refresh(position)
    residual = y[rows] - 1.0 / (1.0 + np.exp(-x[rows] @ position))
    np.testing.assert_allclose(stored[rows], residual[:, None] * x[rows], rtol=1e-10)
    np.testing.assert_allclose(total, stored.sum(axis=0), rtol=1e-9, atol=1e-9)


def test_saga_shrinks_the_gradient_noise_against_plain_minibatches(logistic_run):
    # At the chain's last draw, with the table the chain built: the whitened variance of
    # the estimate against the plain minibatch's, 40 measurements each.
    step, _, _, _ = logistic_run
    position = step.chain.kernel_state.position
    chain_estimator = step.chain.estimator
    rng = np.random.default_rng(5)
    saga = np.mean([chain_estimator.noise_variance(position, rng, step.n_rows, step.mass)
                    for _ in range(40)], axis=0)  # fmt: skip
    plain_estimator = step.estimator.__class__.__mro__[1]  # MinibatchEstimator
    plain = plain_estimator(step.data_passes, step.estimator.batch_sizes, "SGHMC")
    minibatch = np.mean([plain.noise_variance(position, None, rng, step.n_rows, step.mass)
                         for _ in range(40)], axis=0)  # fmt: skip
    assert np.all(saga < 0.05 * minibatch), saga / minibatch


def test_same_seed_same_draws_and_the_sampling_state_resumes_exactly():
    model, _, _ = _logistic_model(n_rows=500, dim=2)
    with model:
        step = pmsg.SGLD(gradient="saga", step_size=1e-3, mode_kwargs={"progressbar": False})
    first = sample(step, model, draws=20, tune=10, random_seed=7)
    second = sample(step, model, draws=20, tune=10, random_seed=7)
    np.testing.assert_array_equal(first.posterior["w"].values, second.posterior["w"].values)
    step.setup_chain(np.random.default_rng(5), tune=10, draws=30)
    point = model.initial_point()
    for _ in range(15):
        point, _ = step.step(point)
    state = step.sampling_state
    saved = {k: v.copy() for k, v in point.items()}
    ahead = [step.step(point)[0]["w"] for _ in range(1)]
    for _ in range(5):
        ahead.append(step.step({"w": ahead[-1]})[0]["w"])
    step.sampling_state = state
    again = [step.step(saved)[0]["w"]]
    for _ in range(5):
        again.append(step.step({"w": again[-1]})[0]["w"])
    np.testing.assert_array_equal(np.array(ahead), np.array(again))


@pytest.mark.statistical
def test_sgld_with_saga_samples_the_law_of_its_discretised_chain_on_a_normal_mean():
    # In the Laplace metric (the posterior's precision) a step is u ← (1 − η)u + √(2η)ξ:
    # stationary variance 1/(1 − η/2) of the posterior's.
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        batch = pm.Minibatch(ROWS, batch_size=50)
        pm.Normal("y", mu, 2.0, observed=batch, total_size=ROWS.size)
        step = pmsg.SGLD(gradient="saga", mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=4_000, tune=500, chains=2, random_seed=8)
    eta = float(idata.sample_stats["step_size"].values[0, 0])
    chain_sd = (PRECISION * (1.0 - eta / 2.0)) ** -0.5
    assert_within_mcse(idata.posterior["mu"].values[..., None], [MEAN], [chain_sd], 1_000)


@pytest.mark.statistical
def test_sgld_with_saga_samples_a_correlated_gaussian():
    model, mean, covariance = correlated_regression(9)
    with model:
        step = pmsg.SGLD(gradient="saga", mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=3_000, tune=500, chains=2, random_seed=10)
    eta = float(idata.sample_stats["step_size"].values[0, 0])
    # The dense Laplace metric is the exact precision: every direction as the 1-D case.
    chain_sd = np.sqrt(np.diag(covariance) / (1.0 - eta / 2.0))
    assert_within_mcse(idata.posterior["w"].values, mean, chain_sd, 1_000)


def test_saga_is_refused_without_minibatches_and_where_its_tables_would_not_fit(monkeypatch):
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(ValueError, match="no pm.Minibatch data"):
            pmsg.SGLD(gradient="saga")
    model, _, _ = _logistic_model(n_rows=500, dim=2)
    monkeypatch.setattr(startup, "available_memory", lambda: 1_000)
    with model, pytest.raises(MemoryError, match=r"500 rows x 2 coordinates"):
        pmsg.SGLD(gradient="saga", mode_kwargs={"progressbar": False})
