"""pSGLD: RMSprop's preconditioner (steps c-e of the survey's §3.2), learned while tuning
and held after it, and the exact stationary law of its discretised chain."""

import arviz as az
import numpy as np
import pymc as pm
import pytest
import scipy.linalg
from helpers import sample

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.dynamics.psgld import psgld_step, rmsprop_mean_square, rmsprop_preconditioner
from pymc_sgmcmc.dynamics.sgld import sgld_step
from pymc_sgmcmc.kernels import psgld
from pymc_sgmcmc.kernels.base import Target
from pymc_sgmcmc.metrics.euclidean import euclidean_metric

Z_MCSE = 4.5
"""Tolerance in Monte Carlo standard errors, on top of the discretisation's exact bias."""


def test_rmsprop_mean_square_and_preconditioner_follow_steps_c_and_d():
    mean_square, gradient = np.array([1.0, 4.0, 0.0]), np.array([3.0, -1.0, 2.0])
    updated = rmsprop_mean_square(mean_square, gradient, 0.9, 1.0)
    np.testing.assert_allclose(updated, 0.9 * mean_square + 0.1 * gradient**2)
    np.testing.assert_array_equal(rmsprop_mean_square(mean_square, gradient, 0.9, 0.0), mean_square)
    np.testing.assert_allclose(
        rmsprop_preconditioner(updated, 1e-3), 1.0 / (1e-3 + np.sqrt(updated))
    )


def test_with_a_unit_preconditioner_a_step_is_sglds():
    rng = np.random.default_rng(0)
    position, gradient, noise = rng.normal(size=(3, 4))
    expected = sgld_step(position, lambda x: gradient, noise, 0.05)
    np.testing.assert_allclose(psgld_step(position, gradient, noise, 0.05, np.ones(4)), expected)


def test_the_step_acts_in_the_coordinates_that_whiten_a_diagonal_metric():
    # u = √m θ: the gradient in u is ∇θ/√m, and a step of u maps back by 1/√m.
    rng = np.random.default_rng(1)
    inverse_mass = np.array([0.5, 2.0, 8.0])
    metric = euclidean_metric(1.0 / inverse_mass, 3)
    params = psgld.PSGLDParams(np.asarray(0.05), metric, np.asarray(0.9), np.asarray(1e-5), 1.0)
    precision = np.diag([3.0, 0.4, 0.1])
    target = Target(lambda x: -0.5 * x @ precision @ x, lambda x: -precision @ x)
    state = psgld.init(rng.normal(size=3), None, params)
    noise = rng.normal(size=3)
    new = psgld.step(state, target, noise, params)
    scale = np.sqrt(1.0 / inverse_mass)
    whitened = target.grad(state.position) / scale
    mean_square = 0.9 * 1.0 + 0.1 * whitened**2
    g = 1.0 / (1e-5 + np.sqrt(mean_square))
    expected = (state.position * scale + 0.05 * g * whitened + np.sqrt(0.1 * g) * noise) / scale
    np.testing.assert_allclose(new.position, expected)
    np.testing.assert_allclose(new.mean_square, mean_square)
    held = psgld.step(state, target, noise, params._replace(adapting=0.0))
    np.testing.assert_array_equal(held.mean_square, state.mean_square)


def test_with_a_unit_preconditioner_a_step_is_sglds_in_a_dense_metric():
    # u = Lᵀθ for M = L Lᵀ: with G = 1 the move is η M⁻¹∇ + √(2η) M⁻¹ L ξ, SGLD's.
    rng = np.random.default_rng(2)
    mass = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 0.7]])
    metric = euclidean_metric(mass, 3)
    offset = 1e-5
    params = psgld.PSGLDParams(np.asarray(0.05), metric, np.asarray(0.9), offset, 0.0)
    precision = np.diag([3.0, 0.4, 0.1])
    target = Target(lambda x: -0.5 * x @ precision @ x, lambda x: -precision @ x)
    position, noise = rng.normal(size=(2, 3))
    state = psgld.PSGLDState(position, np.full(3, (1.0 - offset) ** 2))  # G = 1
    new = psgld.step(state, target, noise, params)
    inverse = np.linalg.inv(mass)
    whitened_noise = inverse @ np.linalg.cholesky(mass) @ noise  # ~ N(0, M⁻¹)
    expected = sgld_step(position, lambda x: inverse @ target.grad(x), whitened_noise, 0.05)
    np.testing.assert_allclose(new.position, expected, rtol=1e-12)


def test_bad_decay_and_offset_are_refused():
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(ValueError, match="decay must"):
            pmsg.PSGLD(decay=1.0)
        with pytest.raises(ValueError, match="offset must be positive"):
            pmsg.PSGLD(offset=0.0)


ROWS = np.random.default_rng(20261129).normal(3.0, 2.0, size=5_000)
PRIOR_SD = 10.0
PRECISION = ROWS.size / 4.0 + PRIOR_SD**-2
MEAN = ROWS.sum() / 4.0 / PRECISION
STEP = 0.05


@pytest.fixture(scope="module")
def normal_mean_run():
    # The mass is the posterior precision, so the step acts in units of the posterior's
    # sd; control variates make the gradient of this linear model exact.
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        batch = pm.Minibatch(ROWS, batch_size=50)
        pm.Normal("y", mu, 2.0, observed=batch, total_size=ROWS.size)
        step = pmsg.PSGLD(step_size=STEP, mass=PRECISION, mode_kwargs={"progressbar": False})
    return sample(
        step, model, draws=8_000, tune=1_000, chains=2, random_seed=11,
        discard_tuned_samples=False,
    )  # fmt: skip


def test_the_preconditioner_learns_while_tuning_and_is_held_after(normal_mean_run):
    tuning = normal_mean_run.warmup_sample_stats["preconditioner_min"].values
    kept = normal_mean_run.sample_stats["preconditioner_min"].values
    assert np.all(np.ptp(tuning, axis=1) > 0.01)
    np.testing.assert_array_equal(kept, kept[:, :1].repeat(kept.shape[1], axis=1))
    np.testing.assert_array_equal(kept, normal_mean_run.sample_stats["preconditioner_max"].values)


@pytest.mark.statistical
def test_psgld_samples_the_exact_law_of_its_discretised_chain(normal_mean_run):
    # With G held, a step is u ← u − ηG(u − ū) + √(2ηG) ξ in the posterior's units: a
    # linear recursion whose stationary variance is 1/(1 − ηG/2) (of the posterior's);
    # the two chains hold their own G, so the pooled draws have the mean of the two.
    mu = normal_mean_run.posterior["mu"].values
    held = normal_mean_run.sample_stats["preconditioner_min"].values[:, 0]
    variance = np.mean(1.0 / (1.0 - STEP * held / 2.0)) / PRECISION
    assert float(az.ess(mu, method="bulk")) > 2_000
    mean_error = abs(mu.mean() - MEAN)
    assert mean_error <= Z_MCSE * float(az.mcse(mu, method="mean")), mean_error
    sd_error = abs(mu.std(ddof=1) - np.sqrt(variance))
    assert sd_error <= Z_MCSE * float(az.mcse(mu, method="sd")), (mu.std(ddof=1), variance**0.5)
    # The allowance is small: a sampler off by more than it (and the MC error) fails.
    assert np.sqrt(variance * PRECISION) - 1.0 < 0.02


@pytest.mark.statistical
def test_psgld_samples_a_correlated_gaussian_within_its_discretisation_bias():
    cov = np.array([[1.0, 0.8, 0.1], [0.8, 4.0, -0.5], [0.1, -0.5, 0.25]])
    mean = np.array([1.0, -2.0, 0.5])
    precision = np.linalg.inv(cov)
    with pm.Model() as model:
        pm.MvNormal("x", mu=mean, cov=cov)
        step = pmsg.PSGLD(step_size=STEP, mass=np.diag(precision))
    idata = sample(step, model, draws=10_000, tune=1_000, chains=2, random_seed=12)
    x = idata.posterior["x"].values
    low = idata.sample_stats["preconditioner_min"].values.min()
    high = idata.sample_stats["preconditioner_max"].values.max()
    # The discretised chain's covariance, u = √m θ: Σ = F Σ Fᵀ + 2ηG, F = I − ηG P_u,
    # for G at either end of the range the chains held (its sds move monotonically).
    scale = np.sqrt(np.diag(precision))
    whitened_precision = precision / np.outer(scale, scale)

    def chain_sd(g):
        transition = np.eye(3) - STEP * g * whitened_precision
        chain_cov = scipy.linalg.solve_discrete_lyapunov(transition, 2.0 * STEP * g * np.eye(3))
        return np.sqrt(np.diag(chain_cov)) / scale

    exact_sd = np.sqrt(np.diag(cov))
    allowance = np.maximum(abs(chain_sd(low) - exact_sd), abs(chain_sd(high) - exact_sd))
    assert np.all(allowance < 0.05 * exact_sd)
    for k in range(3):
        xk = x[..., k]
        assert float(az.ess(xk, method="bulk")) > 1_000
        assert abs(xk.mean() - mean[k]) <= Z_MCSE * float(az.mcse(xk, method="mean"))
        sd_tolerance = Z_MCSE * float(az.mcse(xk, method="sd")) + allowance[k]
        assert abs(xk.std(ddof=1) - exact_sd[k]) <= sd_tolerance, (k, xk.std(ddof=1))
