"""Bad data and mis-specified minibatches are caught before sampling, with the fix named."""

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling.data_checks import non_finite_rows

N = 100


def normal_mean(data, *, batch_size=10, total_size=N, extra=None):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        batch = pm.Minibatch(data, batch_size=batch_size)
        pm.Normal("obs", mu, 1.0, observed=batch, total_size=total_size)
    return model


@pytest.fixture(scope="module")
def clean():
    return np.random.default_rng(0).normal(1.0, 1.0, size=N)


def test_non_finite_rows_are_found_in_chunks():
    array = np.zeros((200_000, 3))
    array[[5, 70_000, 199_999], [0, 2, 1]] = [np.nan, np.inf, -np.inf]
    np.testing.assert_array_equal(non_finite_rows(array), [5, 70_000, 199_999])
    assert non_finite_rows(np.arange(10)).size == 0  # integers cannot hold NaN
    masked = np.ma.masked_invalid(np.array([1.0, np.nan, 3.0]))  # what pm.Data makes of NaN
    np.testing.assert_array_equal(non_finite_rows(masked), [1])


@pytest.mark.parametrize("sampler", [pmsg.SGLD, pmsg.SGHMC, pmsg.HMC])
def test_a_nan_in_minibatched_data_is_refused_with_its_rows(clean, sampler):
    data = clean.copy()
    data[[3, 41]] = [np.nan, np.inf]
    with normal_mean(data), pytest.raises(ValueError, match=r"2 of 100 rows") as error:
        sampler(step_size=1e-3)
    message = str(error.value)
    assert "['obs']" in message and "rows 3, 41" in message
    assert "Drop those rows" in message and "impute" in message


def test_a_nan_in_the_predictors_is_refused_too():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(N, 3)), rng.integers(0, 2, size=N).astype(float)
    X[17, 2] = np.nan
    with pm.Model():
        Xb, yb = pm.Minibatch(X, y, batch_size=10)
        w = pm.Normal("w", 0.0, 1.0, shape=3)
        pm.Bernoulli("y", logit_p=Xb @ w, observed=yb, total_size=N)
        with pytest.raises(ValueError, match=r"array 0 of the pm.Minibatch call .*rows 17\)"):
            pmsg.SGHMC(step_size=1e-3)


def test_data_replaced_with_set_data_is_checked_again_when_a_chain_starts(clean):
    with pm.Model():
        values = pm.Data("values", clean)
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("obs", mu, 1.0, observed=pm.Minibatch(values, batch_size=10), total_size=N)
        step = pmsg.SGLD(step_size=1e-3)
        bad = clean.copy()
        bad[7] = np.nan
        pm.set_data({"values": bad})
    with pytest.raises(ValueError, match=r"rows 7\)"):
        step.setup_chain(np.random.default_rng(0), tune=0, draws=1)


@pytest.mark.filterwarnings("ignore:total_size not provided:UserWarning")
def test_a_missing_total_size_is_refused_unless_asked_for(clean):
    model = normal_mean(clean, total_size=None)
    with model, pytest.raises(ValueError, match="has no total_size") as error:
        pmsg.SGHMC(step_size=1e-3)
    message = str(error.value)
    assert "'obs'" in message and "total_size=100" in message
    assert "allow_missing_total_size=True" in message and "3.2 times too wide" in message
    with model:
        pmsg.SGHMC(step_size=1e-3, allow_missing_total_size=True)  # the user opted in


def test_a_total_size_other_than_the_number_of_rows_warns(clean):
    with normal_mean(clean, total_size=1_000), pytest.warns(UserWarning, match="total_size=1000"):
        step = pmsg.SGLD(step_size=1e-3)
    assert step.allow_missing_total_size is False
    with normal_mean(clean), warnings.catch_warnings():
        warnings.simplefilter("error")
        pmsg.SGLD(step_size=1e-3)  # the right total_size: no word


def test_a_batch_as_large_as_the_data_warns(clean):
    with pytest.warns(UserWarning, match=r"batch_size=100\) feeding \['obs'\] draws at least"):
        with normal_mean(clean, batch_size=100):
            pmsg.SGLD(step_size=1e-3)
