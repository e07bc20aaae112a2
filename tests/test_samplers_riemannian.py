"""RHMC and SGR-NPHMC: the generalized leapfrog's invariants, and draws against exact answers.

The integrator tests run the pure update rules with NumPy on a target with a
non-trivial metric ``G(θ) = diag(exp(θ₁), 1 + θ₀²)``, and the compiled kernels (whose
``∂θH`` comes from ``pytensor.grad``) against them. The statistical tests compare
RHMC's draws with exact posterior moments, and with a long NUTS run on a funnel, at
``Z_MCSE`` Monte Carlo standard errors from the ESS.
"""

from __future__ import annotations

import math
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from helpers import build_graphs_afresh, compiled, draws_of, sample, stat
from test_samplers_statistical import (
    CHAINS,
    CORR_COV,
    CORR_DIRECTIONS,
    CORR_LABELS,
    CORR_MEAN,
    DRAWS,
    NORMAL_MEAN,
    NORMAL_PRECISION,
    TUNE,
    assert_matches_gaussian,
    normal_mean_model,
)

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.dynamics.riemannian import (
    FixedPoint,
    generalized_leapfrog_step,
    nose_poincare_step,
    riemannian_ornstein_uhlenbeck,
)
from pymc_sgmcmc.kernels import riemannian
from pymc_sgmcmc.kernels.base import Target
from pymc_sgmcmc.metrics.riemannian import PositionDependentMetric

Z_MCSE = 4.5
"""Tolerance in MCSE units, as in test_samplers_statistical.py."""

# -- a target with a position-dependent metric, in NumPy and PyTensor -----------------------


def np_metric(theta):
    return np.array([np.exp(theta[1]), 1.0 + theta[0] ** 2])


def np_grad_h(theta, p):
    """∂θH for L = −|θ|²/2 and G = diag(g): −∇L + Σᵢ (½/gᵢ − ½pᵢ²/gᵢ²) ∂gᵢ/∂θ."""
    g = np_metric(theta)
    jac = np.array([[0.0, np.exp(theta[1])], [2.0 * theta[0], 0.0]])  # ∂gᵢ/∂θₖ
    return theta + jac.T @ (0.5 / g - 0.5 * p**2 / g**2)


def np_velocity(theta, p):
    return p / np_metric(theta)


def np_leapfrog(state, eps=0.2, steps=40):
    theta, p = state[:2], state[2:]
    new_theta, new_p, _ = generalized_leapfrog_step(
        theta, p, np_grad_h, np_velocity, eps, FixedPoint(steps)
    )
    return np.concatenate([new_theta, new_p])


START = np.array([0.7, -0.4, 0.9, -1.3])


def test_generalized_leapfrog_is_reversible():
    forward = np_leapfrog(START)
    back = np_leapfrog(np.concatenate([forward[:2], -forward[2:]]))
    error = np.max(np.abs(np.concatenate([back[:2], -back[2:]]) - START))
    assert error < 1e-12, error  # 40 fixed-point iterations: converged to rounding


def test_generalized_leapfrog_preserves_volume():
    h = 1e-5
    jacobian = np.empty((4, 4))
    for k in range(4):
        step = np.zeros(4)
        step[k] = h
        jacobian[:, k] = (np_leapfrog(START + step) - np_leapfrog(START - step)) / (2 * h)
    # Central differences: O(h²) ≈ 1e-10 truncation, O(1e-16/h) ≈ 1e-11 rounding.
    assert abs(np.linalg.det(jacobian) - 1.0) < 1e-7


def pt_metric(position, target):
    return pt.stack([pt.exp(position[1]), 1.0 + position[0] ** 2])


def pt_target():
    def logp(x):
        return -0.5 * (x**2).sum()

    return Target(logp=logp, grad=lambda x: pytensor.grad(logp(x), x))


def test_rhmc_kernel_step_is_the_generalized_leapfrog_with_autodiff_derivatives():
    x, p, eps = pt.vector("x"), pt.vector("p"), pt.scalar("eps")
    params = riemannian.RHMCParams(eps, PositionDependentMetric(pt_metric), FixedPoint(40))
    state = riemannian.RHMCState(x, p)
    new, info = riemannian.rhmc_step(state, pt_target(), None, params)
    f = pytensor.function([x, p, eps], [*new, info["residual"]])
    new_x, new_p, residual = f(START[:2], START[2:], 0.2)
    np.testing.assert_allclose(np.concatenate([new_x, new_p]), np_leapfrog(START), atol=1e-12)
    assert residual < 1e-12


@pytest.fixture(scope="module")
def np_step_function():
    """SGR-NPHMC's generalized leapfrog (eq. 3, no noise) compiled on that target, and H_N."""
    names = ("x", "p", "s", "q", "h0", "eps")
    x, p, s, q, h0, eps = (pt.vector(n) if n in ("x", "p") else pt.scalar(n) for n in names)
    metric = PositionDependentMetric(pt_metric)
    one = pt.constant(1.0)
    params = riemannian.NPParams(eps, metric, FixedPoint(12), one, one, one, one * 0)
    g = pt.constant(2.0)
    derivatives = riemannian.np_derivatives(params, pt_target(), h0, g)
    new = nose_poincare_step(x, p, s, q, derivatives, eps, params.solver)
    step = pytensor.function([x, p, s, q, h0, eps], list(new))
    nose = riemannian.nose_energy(x, p, s, q, metric, pt_target(), 1.0, g)
    return step, pytensor.function([x, p, s, q], nose)


def energy_drift(functions, eps, time=20.0):
    step, nose = functions
    x, p, s, q = START[:2], START[2:], 1.0, 0.3
    h0 = float(nose(x, p, s, q))  # H = s (H_N − H₀) = 0 at the start
    largest = 0.0
    for _ in range(round(time / eps)):
        x, p, s, q, residual = step(x, p, s, q, h0, eps)
        largest = max(largest, abs(float(s * (nose(x, p, s, q) - h0))))
    return largest, float(residual)


def test_sgrnphmc_without_noise_conserves_its_hamiltonian_to_second_order(np_step_function):
    coarse, residual = energy_drift(np_step_function, 0.1)
    fine, _ = energy_drift(np_step_function, 0.05)
    # A second-order integrator: max |H| over a fixed time is C ε² + O(ε⁴), so halving ε
    # divides it by 4 (1 ± O(ε²) ≈ ±5%; ±20% leaves room for the constant of ε⁴).
    assert coarse < 0.05
    assert 3.2 < coarse / fine < 4.8, coarse / fine
    assert residual < 1e-10


def test_sgrnphmc_leapfrog_is_reversible(np_step_function):
    step, _ = np_step_function
    x, p, s, q, h0 = START[:2], START[2:], 1.3, 0.3, 0.7
    x1, p1, s1, q1, _ = step(x, p, s, q, h0, 0.1)
    x2, p2, s2, q2, _ = step(x1, -p1, s1, -q1, h0, 0.1)
    error = np.max(np.abs(np.concatenate([x2 - x, -p2 - p, [s2 - s, -q2 - q]])))
    assert error < 1e-10, error


def test_riemannian_ornstein_uhlenbeck_keeps_the_conditional_laws():
    # Given θ, p̃ ~ N(0, kT G) and q ~ N(0, kT |G|) must be invariant.
    rng = np.random.default_rng(4)
    g, kT, n = np.array([0.5, 4.0]), 1.5, 400_000
    p = np.sqrt(kT * g) * rng.standard_normal((n, 2))
    q = np.sqrt(kT * g.prod()) * rng.standard_normal(n)
    for _ in range(3):
        p, q = riemannian_ornstein_uhlenbeck(
            p,
            q,
            np.sqrt(g) * rng.standard_normal((n, 2)),
            rng.standard_normal(n),
            np.log(g).sum(),
            0.3,
            1.0,
            2.0,
            kT,
        )
    # Relative sd of a variance estimate from n normal draws: √(2/n) ≈ 0.0022.
    np.testing.assert_allclose(p.var(axis=0), kT * g, rtol=0.012)
    np.testing.assert_allclose(q.var(), kT * g.prod(), rtol=0.012)


# -- statistical tests ---------------------------------------------------------------------

N_DATA, SIGMA, PRIOR_SD = 20, 2.0, 3.0
RHO = 0.9


@pytest.fixture(scope="module")
def gaussian_model():
    """μ ~ N(0, 3²), yᵢ ~ N(μ, 2²) (conjugate), and an independent 2-D Gaussian, ρ = 0.9."""
    y = np.random.default_rng(0).normal(1.0, SIGMA, size=N_DATA)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        pm.Normal("y", mu, SIGMA, observed=y)
        pm.MvNormal("z", mu=np.zeros(2), cov=np.array([[1.0, RHO], [RHO, 1.0]]))
    precision = 1 / PRIOR_SD**2 + N_DATA / SIGMA**2
    exact = {"mu": (y.sum() / SIGMA**2 / precision, 1 / math.sqrt(precision))}
    return model, exact


def run(step, model, draws=1500, tune=500, seed=1):
    with model:
        return pm.sample(
            step=step,
            draws=draws,
            tune=tune,
            chains=2,
            cores=1,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )


def check_moments(values, mean, sd):
    """Mean within Z MCSE, sd within Z MCSE of an sd (≈ sd/√(2 ESS)), ESS from ArviZ."""
    ess = float(az.ess(values))
    mcse_mean = sd / math.sqrt(ess)
    mcse_sd = sd / math.sqrt(2 * ess)
    assert ess > 200, ess
    assert abs(values.mean() - mean) < Z_MCSE * mcse_mean, (values.mean(), mean, ess)
    assert abs(values.std() - sd) < Z_MCSE * mcse_sd, (values.std(), sd, ess)


@pytest.fixture(scope="module")
def funnel_model():
    """v ~ N(0, 1), x ~ N(0, exp(v)): the scale of x changes by e² over v's ±2 sd."""
    with pm.Model() as model:
        v = pm.Normal("v", 0.0, 1.0)
        pm.Normal("x", 0.0, pm.math.exp(v / 2))
    return model


@pytest.fixture(scope="module")
def funnel_reference(funnel_model):
    """A long NUTS run on the funnel (its x has no closed-form MCSE-friendly moments)."""
    with funnel_model:
        return pm.sample(
            draws=4000,
            tune=1000,
            chains=2,
            cores=1,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )


def check_funnel(idata, reference):
    # v's law is N(0, 1); x is compared with NUTS' estimate, whose own MCSE is added in
    # quadrature (its exact sd, exp(1/4), is a check of the reference).
    check_moments(draws_of(idata, "v"), 0.0, 1.0)
    x, x_ref = draws_of(idata, "x"), draws_of(reference, "x")
    ess, ess_ref = float(az.ess(x)), float(az.ess(x_ref))
    sd_ref = float(x_ref.std())
    assert abs(sd_ref - math.exp(0.25)) < 0.1
    mcse = math.hypot(sd_ref / math.sqrt(2 * ess), sd_ref / math.sqrt(2 * ess_ref))
    # sd of x is heavy-tailed (its 4th moment is large), so its MCSE is about twice
    # the Gaussian one: the factor 2 below.
    assert abs(float(x.std()) - sd_ref) < 2 * Z_MCSE * mcse, (x.std(), sd_ref, ess)
    assert abs(float(x.mean())) < Z_MCSE * sd_ref / math.sqrt(ess)


@pytest.mark.statistical
def test_sgrnphmc_with_defaults_matches_nuts_on_a_funnel(funnel_model, funnel_reference):
    with funnel_model:
        step = pmsg.SGRNPHMC(mode_kwargs={"progressbar": False})
    check_funnel(run(step, funnel_model, draws=1000, seed=2), funnel_reference)


@pytest.fixture(scope="module")
def gaussians_model():
    """A minibatched normal mean ``mu`` beside a correlated 2-D Gaussian ``x``.

    Independent blocks with exact posteriors, in one model so that SGR-NPHMC's trajectory
    (~15 s to compile) is compiled once for both and for the wrong-temperature
    check: the diagonal metric treats each coordinate on its own, and the one step size
    is set by the harder block.
    """
    model = normal_mean_model(minibatch=True)
    with model:
        pm.MvNormal("x", mu=CORR_MEAN, cov=CORR_COV)
    return model


def sgrnphmc_gaussians(model, **settings):
    with model:
        step = pmsg.SGRNPHMC(mode_kwargs={"progressbar": False}, **settings)
    idata = sample(step, model, draws=DRAWS, tune=TUNE, chains=CHAINS, random_seed=12)
    mu, x = draws_of(idata, "mu")[..., None], draws_of(idata, "x")
    exact_sd = np.sqrt(np.einsum("ki,ij,kj->k", CORR_DIRECTIONS, CORR_COV, CORR_DIRECTIONS))
    assert_matches_gaussian(
        np.concatenate([mu, x @ CORR_DIRECTIONS.T], axis=-1),
        np.concatenate([[NORMAL_MEAN], CORR_DIRECTIONS @ CORR_MEAN]),
        np.concatenate([[NORMAL_PRECISION**-0.5], exact_sd]),
        labels=["mu", *CORR_LABELS],
    )


@pytest.mark.statistical
def test_sgrnphmc_with_defaults_matches_a_minibatched_mean_and_a_correlated_gaussian(
    gaussians_model,
):
    sgrnphmc_gaussians(gaussians_model)


@pytest.mark.statistical
def test_the_check_rejects_sgrnphmc_at_the_wrong_temperature(gaussians_model):
    # kT = 2 samples p(θ)^(1/2): every sd √2 too wide.
    with pytest.raises(AssertionError, match="FAIL x major axis sd"):
        sgrnphmc_gaussians(gaussians_model, temperature=2.0)


# RHMC's trajectories share inner-graph nodes with SGR-NPHMC's and rewrite 2-3x slower
# after them in one process: each RHMC test builds its graphs afresh (helpers.py).


@pytest.fixture(scope="module")
def rhmc_gaussian(gaussian_model):
    model, _ = gaussian_model
    build_graphs_afresh()
    with model:
        step = compiled(pmsg.RHMC(step_size=0.5, n_steps=4))
    return run(step, model)


@pytest.mark.statistical
def test_rhmc_matches_the_conjugate_posterior(rhmc_gaussian, gaussian_model):
    _, exact = gaussian_model
    check_moments(draws_of(rhmc_gaussian, "mu"), *exact["mu"])


@pytest.mark.statistical
def test_rhmc_matches_a_correlated_gaussian(rhmc_gaussian):
    z = draws_of(rhmc_gaussian, "z")
    for k in range(2):
        check_moments(z[..., k], 0.0, 1.0)
    correlation = np.corrcoef(z.reshape(-1, 2).T)[0, 1]
    assert abs(correlation - RHO) < 0.03, correlation
    assert stat(rhmc_gaussian, "fixed_point_residual").max() < 1e-8


@pytest.mark.statistical
def test_rhmc_matches_nuts_on_a_funnel(funnel_model, funnel_reference):
    build_graphs_afresh()
    with funnel_model:
        step = pmsg.RHMC(step_size=0.4, n_steps=5)
    check_funnel(run(step, funnel_model, draws=1000, seed=2), funnel_reference)


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sampler", "change", "error", "match"),
    [
        (pmsg.SGRNPHMC, {"temperature": 0.0}, ValueError, "temperature must be positive"),
        (pmsg.SGRNPHMC, {"diffusion": -1.0}, ValueError, "diffusion must be"),
        (pmsg.SGRNPHMC, {"friction": 0.0}, ValueError, "friction must be"),
        (pmsg.SGRNPHMC, {"degrees_of_freedom": 0.0}, ValueError, "degrees_of_freedom must be"),
        (pmsg.SGRNPHMC, {"mass": 2.0}, TypeError, "pass metric= .* instead of mass="),
        (
            pmsg.SGRNPHMC,
            {"metric": lambda x, t: pt.exp(x + 400.0)},
            ValueError,
            "thermostat mass",
        ),
        (pmsg.RHMC, {"step_size": -0.1}, ValueError, "step_size must be positive"),
        (pmsg.RHMC, {"fixed_point_steps": 0}, ValueError, "fixed_point_steps must be"),
        (pmsg.RHMC, {"metric": "fisher"}, TypeError, "metric must be None"),
        (pmsg.RHMC, {"mass": 2.0}, TypeError, "pass metric= .* instead of mass="),
        (
            pmsg.RHMC,
            {"metric": lambda x, t: pt.ones(3)},
            ValueError,
            r"shape \(3,\), not \(2,\)",
        ),
        (
            pmsg.SGRNPHMC,
            {"metric": lambda x, t: x - 10.0},
            ValueError,
            "not positive definite at the initial point",
        ),
        (
            pmsg.RHMC,
            {"metric": lambda x, t: pt.log(x - 10.0)},
            ValueError,
            "not finite at the initial point",
        ),
    ],
)
def test_bad_input_is_refused_with_the_fix(sampler, change, error, match):
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=2)
        with pytest.raises(error, match=match):
            sampler(**({"step_size": 0.1} | change))


def test_a_dense_user_metric_is_accepted():
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=2)
        step = pmsg.RHMC(step_size=0.1, metric=lambda x, t: pt.eye(2) * (1.0 + x @ x))
    assert step.parameters["metric"].name == "<lambda>"


def test_plain_minibatches_warn_that_the_metric_noise_biases_the_draws():
    x = np.random.default_rng(0).normal(size=(200, 2))
    y = (x[:, 0] > 0).astype(float)
    with pm.Model():
        xb, yb = pm.Minibatch(x, y, batch_size=20)
        w = pm.Normal("w", 0.0, 1.0, shape=2)
        pm.Bernoulli("y", logit_p=xb @ w, observed=yb, total_size=200)
        with pytest.warns(RuntimeWarning, match=r"SGRNPHMC\(gradient='minibatch'\): its metric"):
            pmsg.SGRNPHMC(gradient="minibatch", mode_kwargs={"progressbar": False})
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            pmsg.SGRNPHMC(mode_kwargs={"progressbar": False})
