"""SGFS: Algorithm 1's lines 6-9, the rows' gradients it learns from, and exactness on
Gaussian posteriors whatever the step size and the gradient's noise."""

import numpy as np
import pymc as pm
import pytest
import scipy.linalg
from helpers import assert_within_mcse, correlated_regression, sample

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.adaptation.fisher_scoring import FisherScoring
from pymc_sgmcmc.dynamics.sgfs import (
    fisher_scoring_basis,
    fisher_scoring_step,
    gradient_covariance,
    positive_definite,
    running_mean,
)
from pymc_sgmcmc.gradients.per_datum import PerDatumGradients
from pymc_sgmcmc.sampling.model_graph import flat_logp, row_logp


def _spd(rng, dim, scale=1.0):
    a = rng.normal(size=(dim, dim))
    return scale * (a @ a.T + dim * np.eye(dim))


def test_lines_6_and_7_are_the_rows_covariance_and_its_running_mean():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(50, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 2.0, 0.3], [0, 0, 1]])
    np.testing.assert_allclose(gradient_covariance(rows), np.cov(rows, rowvar=False))
    measured = rng.normal(size=(6, 3, 3))
    mean = measured[0]
    for t in range(2, 7):
        mean = running_mean(mean, measured[t - 1], t)
    np.testing.assert_allclose(mean, measured.mean(axis=0))  # κ_t = 1/t: the plain mean


def test_the_basis_whitens_the_curvature_and_diagonalises_the_noise():
    rng = np.random.default_rng(1)
    curvature, noise = _spd(rng, 4), _spd(rng, 4, 0.3)
    basis, q = fisher_scoring_basis(curvature, noise)
    np.testing.assert_allclose(basis.T @ curvature @ basis, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(basis.T @ noise @ basis, np.diag(q), atol=1e-12)
    diagonal_basis, diagonal_q = fisher_scoring_basis(np.diag(curvature), np.diag(noise))
    np.testing.assert_allclose(diagonal_basis, 1.0 / np.sqrt(np.diag(curvature)))
    np.testing.assert_allclose(diagonal_q, np.diag(noise) / np.diag(curvature))


def test_an_indefinite_curvature_is_floored_below_its_largest_eigenvalue():
    floored = positive_definite(np.diag([4.0, -1.0, 0.0]), floor=1e-3)
    np.testing.assert_allclose(np.linalg.eigvalsh(floored), [4e-3, 4e-3, 4.0])


@pytest.mark.parametrize("step_size", [0.3, 1.0, 1.8])
def test_a_step_is_line_9_with_c_holding_the_noise(step_size):
    # θ + 2C⁻¹(g + ζ), C = 2F/h + Q, ζ = √(2/h − 1) W⁻ᵀξ ~ N(0, (2/h − 1)F).
    rng = np.random.default_rng(2)
    curvature, noise = _spd(rng, 3), _spd(rng, 3, 0.5)
    basis, q = fisher_scoring_basis(curvature, noise)
    position, gradient, xi = rng.normal(size=(3, 3))
    moved = fisher_scoring_step(position, gradient, xi, step_size, basis, q)
    c = 2.0 * curvature / step_size + noise
    zeta = np.sqrt(2.0 / step_size - 1.0) * np.linalg.solve(basis.T, xi)
    np.testing.assert_allclose(moved, position + 2.0 * np.linalg.solve(c, gradient + zeta))
    spread = np.linalg.inv(basis.T)  # ζ's covariance is (2/h − 1) W⁻ᵀW⁻¹ = (2/h − 1) F
    np.testing.assert_allclose(spread @ spread.T, curvature, rtol=1e-12)


def _stationary_covariance(step_size, curvature, noise, basis, q):
    """The exact stationary covariance of the step on the Gaussian of precision F (mean 0)
    whose gradient −Fθ carries N(0, Q) noise, from the step function itself (it is linear)."""
    dim = len(curvature)
    zero = np.zeros(dim)

    def step(position, gradient, xi):
        return fisher_scoring_step(position, gradient, xi, step_size, basis, q)

    through_gradient = np.column_stack([step(zero, e, zero) for e in np.eye(dim)])
    through_noise = np.column_stack([step(zero, zero, e) for e in np.eye(dim)])
    transition = np.eye(dim) - through_gradient @ curvature
    spread = through_gradient @ noise @ through_gradient.T + through_noise @ through_noise.T
    return scipy.linalg.solve_discrete_lyapunov(transition, spread)


@pytest.mark.parametrize("step_size", [0.1, 0.5, 1.0, 1.9])
def test_a_gaussian_posterior_is_exact_at_any_step_size_despite_the_gradient_noise(step_size):
    rng = np.random.default_rng(3)
    curvature, noise = _spd(rng, 3), _spd(rng, 3, 2.0)  # noise larger than the curvature
    basis, q = fisher_scoring_basis(curvature, noise)
    covariance = _stationary_covariance(step_size, curvature, noise, basis, q)
    np.testing.assert_allclose(covariance, np.linalg.inv(curvature), rtol=1e-9, atol=1e-12)
    # Without the noise in C (plain preconditioned Langevin noise) the chain is too wide.
    unaware = _stationary_covariance(step_size, curvature, noise, *fisher_scoring_basis(
        curvature, np.zeros_like(noise)))  # fmt: skip
    assert np.all(np.diag(unaware) > 1.05 * np.diag(np.linalg.inv(curvature)))


def test_the_rows_gradients_and_the_priors_hessian_of_a_logistic_model():
    rng = np.random.default_rng(4)
    n_rows, dim = 500, 3
    x = rng.normal(size=(n_rows, dim))
    y = (rng.random(n_rows) < 0.4).astype(float)
    with pm.Model() as model:
        xb, yb = pm.Minibatch(x, y, batch_size=50)
        w = pm.Normal("w", 0.0, 2.0, shape=dim)
        s = pm.HalfNormal("s", 1.0)  # log-transformed: its Jacobian reads no rows
        pm.Bernoulli("y", logit_p=(xb @ w) * s, observed=yb, total_size=n_rows)
    vars, point = model.continuous_value_vars, model.initial_point()
    flat = flat_logp(model, vars, point)
    gradients = PerDatumGradients(row_logp(model, flat, vars, point, elementwise=True))
    position = np.array([0.3, -0.2, 0.5, np.log(1.5)])
    rows = rng.integers(0, n_rows, 40)
    result = gradients(position, [x[rows], y[rows]])
    [per_row] = result.per_row
    eta = x[rows] @ position[:3]
    residual = y[rows] - 1.0 / (1.0 + np.exp(-1.5 * eta))
    scale = n_rows / 40  # PyMC's total_size scaling for 40 rows fed
    expected = scale * np.column_stack([residual[:, None] * 1.5 * x[rows], residual * 1.5 * eta])
    np.testing.assert_allclose(per_row, expected, rtol=1e-10, atol=1e-12)
    # prior: −w²/8 − e^{2u}/2 + u (HalfNormal on u = log s, with its Jacobian).
    hessian = np.diag([-0.25, -0.25, -0.25, -2.0 * 1.5**2])
    np.testing.assert_allclose(result.prior_hessian, hessian, rtol=1e-10, atol=1e-12)


ROWS = np.random.default_rng(20261129).normal(3.0, 2.0, size=1_000)
PRIOR_SD = 10.0
PRECISION = ROWS.size / 4.0 + PRIOR_SD**-2
MEAN = ROWS.sum() / 4.0 / PRECISION


def _normal_mean_model(batch_size=100):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        batch = pm.Minibatch(ROWS, batch_size=batch_size)
        pm.Normal("y", mu, 2.0, observed=batch, total_size=ROWS.size)
    return model


@pytest.mark.parametrize("gradient", ["minibatch", "control_variates"])
def test_the_measured_curvature_and_noise_are_the_fisher_information_and_the_estimates_error(
    gradient,
):
    model = _normal_mean_model()
    with model:
        step = pmsg.SGFS(gradient=gradient, mode_kwargs={"progressbar": False})
    step.setup_chain(np.random.default_rng(0), tune=10, draws=10)
    measure = step.mass_adapter.measure
    rng = np.random.default_rng(1)
    measured = [measure(np.array([2.9]), rng) for _ in range(400)]
    curvature = np.mean([f for f, _ in measured])
    noise = np.mean([q for _, q in measured])
    # A datum's score (x − μ)/4 has variance var(x)/16; the data's Fisher is N times it.
    fisher = ROWS.size * ROWS.var() / 16.0 + PRIOR_SD**-2
    assert abs(curvature / fisher - 1.0) < 0.02, curvature / fisher
    if gradient == "minibatch":
        # The sum of 100 rows scaled by N/100: (N²/100) var(score).
        assert abs(noise / (ROWS.size**2 / 100 * ROWS.var() / 16.0) - 1.0) < 0.02
    else:
        # Each row's term of ∇c_i(μ) − ∇c_i(μ̂) is (N/n)(μ̂ − μ)/4: the same for every row.
        assert noise < 1e-20


@pytest.mark.statistical
def test_sgfs_on_plain_minibatches_samples_a_normal_mean_exactly():
    # Gradient noise 10 times the curvature (N/n): the paper's regime, exact at h = 0.5.
    model = _normal_mean_model()
    with model:
        step = pmsg.SGFS(gradient="minibatch", mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=4_000, tune=500, chains=2, random_seed=21,
                   discard_tuned_samples=False)  # fmt: skip
    noise = idata.sample_stats["fisher_noise_max"].values
    assert np.all((noise > 7.0) & (noise < 13.0))  # ≈ N/n = 10 in units of F
    np.testing.assert_array_equal(noise, noise[:, :1].repeat(noise.shape[1], axis=1))
    assert np.ptp(idata.warmup_sample_stats["fisher_noise_max"].values) > 0.0
    mu = idata.posterior["mu"].values[..., None]
    assert_within_mcse(mu, [MEAN], [PRECISION**-0.5], min_ess=1_000)


@pytest.mark.statistical
@pytest.mark.parametrize("gradient", ["control_variates", "saga"])
def test_sgfs_samples_the_law_its_held_curvature_implies_on_a_correlated_gaussian(gradient):
    # A linear regression with known noise and correlated features: a Gaussian posterior.
    # Its empirical Fisher is not its precision (here 6-10 % below: the residuals' sample
    # variance weighted by x xᵀ), so the chain is exact for the Gaussian whose precision
    # it holds only in the limit h → 0; at the default step its exact stationary law
    # (the linear recursion with the held F and Q) is what the draws must match. With
    # SAGA, Q is its table's error (measured: taken as the plain minibatch's, the sds came
    # out 0.27-0.30 of the posterior's).
    model, mean, covariance = correlated_regression(22)
    precision = np.linalg.inv(covariance)
    with model:
        step = pmsg.SGFS(gradient=gradient, mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=6_000, tune=500, chains=1, random_seed=23)
    step_size = float(idata.sample_stats["step_size"].values[0, 0])
    params, held = step.params, step.mass_adapter
    assert not np.allclose(np.diag(held.curvature), np.diag(precision), rtol=0.05)
    chain_covariance = _stationary_covariance(
        step_size, precision, held.noise, params.basis, params.noise_eigenvalues
    )
    chain_sd = np.sqrt(np.diag(chain_covariance))
    assert_within_mcse(idata.posterior["w"].values, mean, chain_sd, 1_000)
    # The allowance is small at the default step: a sampler off by more than it fails.
    assert np.all(np.abs(chain_sd / np.sqrt(np.diag(covariance)) - 1.0) < 0.02)


def test_bad_arguments_are_refused_before_sampling():
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(ValueError, match="step_size must be below 2"):
            pmsg.SGFS(step_size=2.0)
        with pytest.raises(TypeError, match="takes no mass="):
            pmsg.SGFS(mass=1.0)
        with pytest.raises(ValueError, match="fisher_structure must be one of"):
            pmsg.SGFS(fisher_structure="full")


def test_a_diagonal_structure_keeps_the_diagonals():
    model = _normal_mean_model()
    with model:
        pm.Normal("other", 0.0, 1.0, shape=2)
        step = pmsg.SGFS(fisher_structure="diagonal", mode_kwargs={"progressbar": False})
    assert isinstance(step.mass_adapter, FisherScoring)
    assert step.params.basis.shape == (3,) and step.params.noise_eigenvalues.shape == (3,)
    idata = sample(step, model, draws=200, tune=100, chains=1, random_seed=3)
    assert np.all(np.isfinite(idata.posterior["mu"].values))


def test_a_flat_prior_adds_no_curvature():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(400, 2))
    y = x @ np.array([1.0, -1.0]) + rng.normal(size=400)
    with pm.Model() as model:
        xb, yb = pm.Minibatch(x, y, batch_size=40)
        w = pm.Flat("w", shape=2)
        pm.Normal("y", xb @ w, 1.0, observed=yb, total_size=400)
    vars, point = model.continuous_value_vars, model.initial_point()
    rows = row_logp(model, flat_logp(model, vars, point), vars, point, elementwise=True)
    result = PerDatumGradients(rows)(np.zeros(2), [x[:40], y[:40]])
    np.testing.assert_array_equal(result.prior_hessian, np.zeros((2, 2)))
    assert result.per_row[0].shape == (40, 2)
