"""A centred hierarchy whose joint density has no mode, and which has no non-centred twin.

``y_i ~ Poisson(λ_{g_i})``, ``λ_j ~ Gamma(r, r/m)`` (mean ``m``, concentration ``r``),
``r ~ HalfStudentT(10, 5)``, ``m ~ Gamma(2, 1)``, over 40 groups of 1-5 rows whose rates
are nearly equal. As ``r`` grows every ``λ_j`` can join ``m``, and each of their densities
grows like ``√r``: the joint density grows like ``r^{J/2}`` against a prior tail of
``r^{-11}``, without bound, so there is no mode to start from. The posterior is proper and
known: each group's counts integrate ``λ_j`` out to a negative binomial, so ``p(r, m | y)``
is a grid, and each ``λ_j`` given ``(r, m)`` is ``Gamma(r + s_j, r/m + n_j)``.
"""

import logging
import warnings

import numpy as np
import pymc as pm
import pytest
from helpers import mixture_moments, sample
from scipy.special import gammaln, logsumexp
from test_hierarchical_moves import standard_errors

import pymc_sgmcmc as pmsg

N_GROUPS = 40


@pytest.fixture(scope="module")
def counts():
    rng = np.random.default_rng(1)
    group = np.repeat(np.arange(N_GROUPS), rng.integers(1, 6, size=N_GROUPS))
    rates = rng.gamma(400.0, 3.0 / 400.0, size=N_GROUPS)
    return group, rng.poisson(rates[group]).astype(float)


@pytest.fixture(scope="module")
def model(counts):
    group, y = counts
    with pm.Model() as model:
        group_mb, y_mb = pm.Minibatch(group, y, batch_size=20)
        r = pm.HalfStudentT("r", nu=10, sigma=5.0)
        m = pm.Gamma("m", 2.0, 1.0)
        rates = pm.Gamma("rates", alpha=r, beta=r / m, shape=N_GROUPS)
        pm.Poisson("y", rates[group_mb.astype("int64")], observed=y_mb, total_size=y.size)
    return model


@pytest.fixture(scope="module")
def exact_posterior(counts):
    """Means and sds of ``r``, ``m`` and every rate, from a grid in ``(log r, log m)``."""
    group, y = counts
    n = np.bincount(group, minlength=N_GROUPS)[:, None, None]
    s = np.bincount(group, y, minlength=N_GROUPS)[:, None, None]
    log_r = np.linspace(-1.0, 6.0, 351)[:, None]
    log_m = np.linspace(0.0, 2.0, 201)[None, :]
    r, m = np.exp(log_r), np.exp(log_m)
    b = r / m
    marginal = r * np.log(b) + gammaln(r + s) - gammaln(r) - (r + s) * np.log(n + b)
    logp = (
        marginal.sum(0)
        - 5.5 * np.log1p((r / 5.0) ** 2 / 10)  # HalfStudentT(10, 5)
        + np.log(m) - m  # Gamma(2, 1)
        + log_r + log_m  # the grid's Jacobian
    )  # fmt: skip
    weights = np.exp(logp - logsumexp(logp))
    assert weights[[0, -1]].sum() + weights[:, [0, -1]].sum() < 1e-12  # the grid holds it

    def moments(raw):
        return mixture_moments(weights, raw, axis=(-2, -1))

    # Each rate's conditional is Gamma(shape, rate): E[x^k] = shape (shape+1) ... / rate^k.
    shape, rate = r + s, b + n
    gamma = np.cumprod([(shape + k) / rate for k in range(4)], axis=0)
    return {
        "r": moments([r**k + 0 * m for k in range(1, 5)]),
        "m": moments([m**k + 0 * r for k in range(1, 5)]),
        "rates": moments(list(gamma)),
    }


@pytest.mark.statistical
def test_sghmc_defaults_match_the_exact_posterior_without_a_mode(model, exact_posterior, caplog):
    # Before, the defaults refused this model: the mode search followed r out of the
    # posterior (a Hessian that is not finite there).
    with model, warnings.catch_warnings(), caplog.at_level(logging.INFO, "pymc_sgmcmc"):
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
        idata = pm.sample(
            draws=2000, tune=1000, chains=2, cores=1, step=step, random_seed=3,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    assert step.without_mode == ("rates",)
    assert "the joint density has no mode" in caplog.text
    posterior = idata.posterior
    for name, exact in exact_posterior.items():
        for chain in posterior[name].values:  # each chain on its own: both must be right
            z_mean, z_variance = standard_errors(chain.reshape(len(chain), -1), *exact)
            # 4.5 standard errors over 2 x 42 quantities: a false alarm, p < 6e-4.
            # Measured: means 1.6, variances 2.0 at most. Twice the grouped step
            # (GROUPED_STEP_SHARE 1.0) fails it: r's mean 5.3 standard errors off.
            assert np.max(z_mean) < 4.5, (name, np.max(z_mean))
            assert np.max(z_variance) < 4.5, (name, np.max(z_variance))


def test_without_a_mode_chains_start_around_the_initial_point_at_its_scale(model):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
    start = step.mode
    assert not start.converged
    initial = np.concatenate([np.ravel(model.initial_point()[v.name]) for v in step.vars])
    np.testing.assert_array_equal(start.position, initial)
    # 1 / max(|curvature|, 1): a scale of at most 1, PyMC's jitter of initial points.
    assert np.all(start.covariance <= 1.0) and np.all(start.covariance > 0)
    # The rates' curvature at their initial point is that of Gamma(r, r/m) and of their
    # Poisson rows: about r plus the group's counts, so their scale is below 1 there.
    assert np.all(start.covariance[2:] < 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 30 draws: far from equilibrium
        idata = sample(step, model, draws=30, tune=30, chains=2)
    first = idata.posterior["m"].values[:, 0]
    assert first[0] != first[1]  # the chains start apart


@pytest.mark.parametrize("given", [None, 300])
def test_a_twinless_hierarchys_search_is_cut_short(model, monkeypatch, given):
    # Without a mode the search runs until its iterations run out (1,000 L-BFGS steps
    # took minutes on a topic model), and the step starts without a mode anyway.
    from pymc_sgmcmc.sampling import startup

    asked = []
    search = startup.search_mode

    def spy(*args, **kwargs):
        asked.append(kwargs["maxiter"])
        return search(*args, **kwargs)

    monkeypatch.setattr(startup, "search_mode", spy)
    options = {"progressbar": False} | ({} if given is None else {"maxiter": given})
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC(mode_kwargs=options)
    assert asked == [startup.TWINLESS_SEARCH_ITERATIONS if given is None else given]
    assert step.without_mode == ("rates",)
    assert step.mode_seconds > step.mode.seconds  # the failed search is counted


def test_steps_built_afresh_without_a_mode_give_the_same_draws(model):
    # The start's scale is differenced with a fixed seed, and each chain's jitter comes
    # from its own generator: one random_seed, one answer.
    draws = []
    for _ in range(2):
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
            draws.append(sample(step, model, draws=20, tune=20, chains=2, random_seed=7))
    for name in ("r", "m", "rates"):
        np.testing.assert_array_equal(draws[0].posterior[name], draws[1].posterior[name])
