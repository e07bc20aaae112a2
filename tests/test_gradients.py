"""Gradient estimators, full-data passes and the mode finder.

- Each estimator is unbiased: its mean over many minibatches matches the full-data gradient
  within Monte Carlo error.
- Near the mode, the control-variate estimator's variance is far below the plain one's.
- A full-data pass streamed over chunks equals the log density on all rows at once.
- ``find_mode`` reaches the full-data mode of a logistic regression (Newton's) to 1e-6.
- Anchors of the wrong shape or with a non-finite density are refused before sampling.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.pytensorf import compile as pm_compile
from scipy.special import expit

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.core.compilation import compile_graph
from pymc_sgmcmc.gradients import full_data
from pymc_sgmcmc.gradients.control_variates import ControlVariateGradient, SymbolicAnchor
from pymc_sgmcmc.gradients.estimators import (
    REANCHOR_DISTANCE,
    REANCHOR_Z,
    ChainEstimator,
    ControlVariates,
    TuningWindows,
)
from pymc_sgmcmc.gradients.full_data import Anchor, FullDataPass, SubsampleGradient
from pymc_sgmcmc.gradients.minibatch import MinibatchGradient
from pymc_sgmcmc.sampling.mode import ModeFinder
from pymc_sgmcmc.sampling.model_graph import flat_logp, row_logp

N_LOGISTIC, D_LOGISTIC, BATCH = 20_000, 5, 100


def logistic_data(n=N_LOGISTIC, d=D_LOGISTIC, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (rng.uniform(size=n) < expit(X @ rng.normal(scale=0.5, size=d))).astype(float)
    return X, y


def newton_mode(X, y, prior_sd=10.0):
    w = np.zeros(X.shape[1])
    for _ in range(100):
        p = expit(X @ w)
        grad = X.T @ (y - p) - w / prior_sd**2
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.eye(len(w)) / prior_sd**2
        step = np.linalg.solve(hess, grad)
        w += step
        if np.max(np.abs(step)) < 1e-14:
            break
    return w, np.linalg.inv(hess)


def logistic_model(X, y, batch_size=BATCH):
    with pm.Model() as model:
        Xb, yb = pm.Minibatch(X, y, batch_size=batch_size)
        w = pm.Normal("w", 0.0, 10.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=Xb @ w, observed=yb, total_size=len(y))
    return model


@pytest.fixture(scope="module")
def logistic():
    X, y = logistic_data()
    model = logistic_model(X, y)
    mode, covariance = newton_mode(X, y)
    return X, y, model, mode, covariance


@pytest.fixture(scope="module")
def estimators(logistic):
    """Compiled plain and control-variate gradients on given rows, and a full pass."""
    _, _, model, _, _ = logistic
    vars = model.continuous_value_vars
    point = model.initial_point()
    flat = flat_logp(model, vars, point)
    [group] = flat.groups
    index = pt.vector("index", dtype="int64")
    batch = group.gathered(index)
    plain = MinibatchGradient(flat)
    anchor = SymbolicAnchor(pt.vector("a"), pt.scalar("a_logp"), pt.vector("a_grad"))
    controlled = ControlVariateGradient(plain, anchor).target(batch)
    x = flat.position
    with model:
        plain_fn = pm_compile([x, index], plain.target(batch).grad(x), random_seed=False)
        cv_fn = pm_compile(
            [x, index, *anchor[:3]], controlled.grad(x), random_seed=False, on_unused_input="ignore"
        )
        full = FullDataPass(row_logp(model, flat, vars, point), flat.groups, [group.n_rows()])
    return plain_fn, cv_fn, full


def _mean_and_se(draws):
    draws = np.asarray(draws)
    return draws.mean(0), draws.std(0, ddof=1) / np.sqrt(len(draws))


@pytest.mark.parametrize("estimator", ["minibatch", "control_variates"])
def test_estimator_is_unbiased(logistic, estimators, estimator):
    X, y, _, mode, covariance = logistic
    plain_fn, cv_fn, full = estimators
    rng = np.random.default_rng(1)
    # Away from the anchor, where the control variate does not cancel the noise.
    theta = mode + 3 * np.sqrt(np.diag(covariance)) * rng.choice([-1, 1], size=mode.size)
    anchor = mode + np.sqrt(np.diag(covariance)) * rng.standard_normal(mode.size)
    a_logp, a_grad = full(anchor)
    _, exact = full(theta)
    draws = []
    for _ in range(3000):
        rows = rng.integers(0, len(y), size=BATCH)
        if estimator == "minibatch":
            draws.append(plain_fn(theta, rows))
        else:
            draws.append(cv_fn(theta, rows, anchor, np.asarray(a_logp), a_grad))
    mean, se = _mean_and_se(draws)
    z = (mean - exact) / se
    # 5 coordinates, each |z| < 4 with probability 1 − 6e-5.
    assert np.all(np.abs(z) < 4.0), z


def test_control_variates_cut_the_variance_near_the_mode(logistic, estimators):
    X, y, _, mode, covariance = logistic
    plain_fn, cv_fn, full = estimators
    rng = np.random.default_rng(2)
    a_logp, a_grad = full(mode)
    factors = []
    for _ in range(5):  # typical posterior points
        theta = rng.multivariate_normal(mode, covariance)
        rows = [rng.integers(0, len(y), size=BATCH) for _ in range(500)]
        plain = np.array([plain_fn(theta, r) for r in rows])
        cv = np.array([cv_fn(theta, r, mode, np.asarray(a_logp), a_grad) for r in rows])
        factors.append(np.trace(np.cov(plain.T)) / np.trace(np.cov(cv.T)))
    print(f"variance reduction near the mode: {min(factors):.0f}x to {max(factors):.0f}x")
    assert min(factors) >= 100


def test_full_pass_over_chunks_equals_one_pass(logistic):
    X, y, model, mode, _ = logistic
    vars = model.continuous_value_vars
    point = model.initial_point()
    flat = flat_logp(model, vars, point)
    rows = row_logp(model, flat, vars, point)
    with model:
        chunked = FullDataPass(rows, flat.groups, [len(y)], chunk_rows=3_001)
        whole = FullDataPass(rows, flat.groups, [len(y)], chunk_rows=len(y))
    assert chunked.n_chunks == 7 and whole.n_chunks == 1
    theta = mode + 0.1
    logp_c, grad_c = chunked(theta)
    logp_w, grad_w = whole(theta)
    p = expit(X @ theta)
    exact = np.sum(y * np.log(p) + (1 - y) * np.log1p(-p))
    exact += np.sum(-0.5 * (theta / 10.0) ** 2 - np.log(10.0 * np.sqrt(2 * np.pi)))
    np.testing.assert_allclose(logp_c, exact, rtol=1e-10)
    np.testing.assert_allclose(logp_w, exact, rtol=1e-10)
    np.testing.assert_allclose(grad_c, X.T @ (y - p) - theta / 100.0, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(grad_c, grad_w, rtol=1e-10, atol=1e-9)


def test_subsample_gradient_is_the_scaled_gradient_of_the_rows_it_gathers(logistic):
    X, y, model, mode, _ = logistic
    vars = model.continuous_value_vars
    point = model.initial_point()
    flat = flat_logp(model, vars, point)
    with model:
        subsample = SubsampleGradient(row_logp(model, flat, vars, point), flat.groups)
    index = np.random.default_rng(1).integers(0, len(y), size=500)
    theta = mode + 0.1
    logp, grad = subsample(theta, [index])
    p = expit(X[index] @ theta)
    scale = len(y) / len(index)  # PyMC's total_size scaling of the rows fed
    exact = scale * np.sum(y[index] * np.log(p) + (1 - y[index]) * np.log1p(-p))
    exact += np.sum(-0.5 * (theta / 10.0) ** 2 - np.log(10.0 * np.sqrt(2 * np.pi)))
    np.testing.assert_allclose(logp, exact, rtol=1e-10)
    exact_grad = scale * X[index].T @ (y[index] - p) - theta / 100.0
    np.testing.assert_allclose(grad, exact_grad, rtol=1e-9, atol=1e-9)
    # Rows gathered once give the same numbers at every call.
    gathered = subsample.gather([index])
    for _ in range(2):
        again = subsample.on_rows(theta, gathered)
        assert again[0] == logp and np.array_equal(again[1], grad)


def test_full_passes_and_subsamples_are_one_compiled_function(logistic, monkeypatch):
    # The set-up compiles the model's density on rows once, not once per kind of pass.
    X, y, model, mode, _ = logistic
    compiled = []

    def counted(*args, **kwargs):
        compiled.append(args)
        return compile_graph(*args, **kwargs)

    monkeypatch.setattr(full_data, "compile_graph", counted)
    vars = model.continuous_value_vars
    finder = ModeFinder(model, vars, flat_logp(model, vars, model.initial_point()), [len(y)])
    theta = mode + 0.1
    full = finder.full_pass(theta)
    every_row = finder.subsample_pass(theta, [np.arange(len(y))])
    some_rows = finder.subsample_pass(theta, [np.arange(100)])
    assert len(compiled) == 1
    # All rows once: PyMC's scaling is 1 and the estimate is the full-data density.
    np.testing.assert_allclose(every_row[0], full[0], rtol=1e-12)
    np.testing.assert_allclose(every_row[1], full[1], rtol=1e-10, atol=1e-10)
    assert not np.isclose(some_rows[0], full[0])


def test_find_mode_reaches_the_full_data_mode(logistic):
    _, _, model, mode, covariance = logistic
    found = pmsg.find_mode(model, curvature=True, progressbar=False, random_seed=0)
    assert found.converged
    assert np.max(np.abs(found["w"] - mode)) / np.max(np.abs(mode)) < 1e-6
    np.testing.assert_allclose(found.covariance, covariance, rtol=1e-4, atol=1e-12)
    np.testing.assert_allclose(found.position, found["w"])
    assert found.rows_touched > 0 and found.seconds > 0
    diagonal = pmsg.find_mode(model, curvature="diagonal", progressbar=False, random_seed=0)
    # 1/(−H_ii) from random probes: close to the exact reciprocal diagonal of the Hessian.
    np.testing.assert_allclose(
        diagonal.covariance, 1 / np.diag(np.linalg.inv(covariance)), rtol=0.1
    )


def test_on_large_data_the_mode_is_reached_by_newton_steps_from_a_subsample(monkeypatch):
    from pymc_sgmcmc.sampling import mode as mode_search

    X, y = logistic_data(n=mode_search.SUBSAMPLE_FIRST_ROWS, d=3, seed=1)
    model = logistic_model(X, y)
    exact, covariance = newton_mode(X, y)
    full_passes = []
    counted = ModeFinder.full_pass

    def count(self, position):
        full_passes[-1] += 1
        return counted(self, position)

    monkeypatch.setattr(ModeFinder, "full_pass", count)
    found = {}
    for path, threshold in (("subsample first", len(y)), ("full-data L-BFGS", len(y) + 1)):
        monkeypatch.setattr(mode_search, "SUBSAMPLE_FIRST_ROWS", threshold)
        full_passes.append(0)
        found[path] = pmsg.find_mode(model, curvature=True, progressbar=False, random_seed=0)
        assert found[path].converged, path
        sd = np.sqrt(np.diag(covariance))
        assert np.max(np.abs(found[path]["w"] - exact) / sd) < 1e-6, path
    assert found["subsample first"].message == "Newton steps on full-data passes converged"
    # Measured: 5 passes against 7 here, 7 against 11 on 2 × 10⁶ rows × 20.
    assert full_passes[0] < full_passes[1], full_passes


def test_find_mode_from_far_away_with_flat_prior():
    X, y = logistic_data(n=5_000, d=3, seed=3)
    X = X * np.array([1.0, 100.0, 0.01])  # raw-scale predictors
    with pm.Model() as model:
        Xb, yb = pm.Minibatch(X, y, batch_size=200)
        w = pm.Flat("w", shape=3)
        pm.Bernoulli("y", logit_p=Xb @ w, observed=yb, total_size=len(y))
    found = pmsg.find_mode(model, progressbar=False, random_seed=0)
    exact, _ = newton_mode(X, y, prior_sd=np.inf)
    np.testing.assert_allclose(found["w"], exact, rtol=1e-6)


def test_find_mode_refuses_a_start_outside_the_support():
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, observed=np.ones(3))
        pm.HalfNormal("s", 1.0)
    with pytest.raises(ValueError, match="not finite at the start"):
        pmsg.find_mode(model, start={"s_log__": np.array(np.inf)}, progressbar=False)


# -- the samplers' gradient options: errors before sampling ---------------------------


def test_anchor_of_the_wrong_shape_is_refused(logistic):
    _, _, model, _, _ = logistic
    with model, pytest.raises(ValueError, match=r"anchor\['w'\] has shape \(3,\)"):
        pmsg.SGHMC(step_size=0.01, anchor={"w": np.zeros(3)})


def test_anchor_with_non_finite_density_is_refused(logistic):
    _, _, model, _, _ = logistic
    with model, pytest.raises(ValueError, match="not finite at the anchor"):
        pmsg.SGHMC(step_size=0.01, anchor={"w": np.full(D_LOGISTIC, np.nan)})


def test_control_variates_without_minibatches_are_refused(gaussian_model):
    with gaussian_model, pytest.raises(ValueError, match="no pm.Minibatch data"):
        pmsg.SGLD(step_size=0.1, gradient="control_variates")


def test_bad_gradient_options_are_refused(logistic):
    _, _, model, _, _ = logistic
    with model:
        with pytest.raises(ValueError, match="gradient"):
            pmsg.SGLD(step_size=0.1, gradient="cv")
        with pytest.raises(ValueError, match="anchor_every"):
            pmsg.SGLD(step_size=0.1, gradient="svrg", anchor_every=0)
        with pytest.raises(TypeError, match="anchor="):
            pmsg.SGLD(step_size=0.1, anchor=[0.0] * D_LOGISTIC)


def test_default_sampler_finds_the_mode_and_starts_chains_around_it(logistic):
    _, _, model, mode, covariance = logistic
    with model:
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
        assert step.gradient == "control_variates"
        np.testing.assert_allclose(step.mode.position, mode, rtol=1e-6)
        np.testing.assert_allclose(step.mass.inverse, covariance, rtol=1e-3, atol=1e-12)
        idata = pm.sample(
            draws=200,
            tune=100,
            chains=2,
            cores=1,
            step=step,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    draws = idata.posterior["w"].values
    sd = np.sqrt(np.diag(covariance))
    # Both chains start near the mode (within a few sds), at different points.
    assert np.all(np.abs(draws[:, 0] - mode) < 6 * sd)
    assert not np.allclose(draws[0, 0], draws[1, 0])
    pooled = draws.reshape(-1, mode.size)
    assert np.all(np.abs(pooled.mean(0) - mode) < 0.3 * sd)
    assert np.all(np.abs(pooled.std(0) / sd - 1) < 0.25)


def test_tuning_windows_give_each_windows_mean_of_its_finite_draws():
    windows = TuningWindows([(2, 14), (14, 30)])
    means = []
    for iteration in range(30):
        diverged = iteration == 5
        position = None if diverged else np.array([float(iteration), -float(iteration)])
        means.append(windows.observe(position, iteration))
    closed = {i: m for i, m in enumerate(means) if m is not None}
    assert list(closed) == [13, 29]  # the last draw of each window closes it
    first = [i for i in range(2, 14) if i != 5]  # before the window and divergent: out
    np.testing.assert_allclose(closed[13], [np.mean(first), -np.mean(first)])
    np.testing.assert_allclose(closed[29], [np.mean(range(14, 30)), -np.mean(range(14, 30))])
    assert windows.observe(np.zeros(2), 30) is None  # after the last window


def test_a_window_of_fewer_than_ten_draws_moves_nothing():
    windows = TuningWindows([(0, 9)])
    assert all(windows.observe(np.ones(1), i) is None for i in range(9))


class QuadraticPasses:
    """Full-data passes of ``log p(θ) = -|θ|²/2``, not finite where ``|θ₀| > 5``."""

    def full_pass(self, position):
        if abs(position[0]) > 5:
            return np.nan, np.full_like(position, np.nan)
        return -0.5 * float(position @ position), -position

    def others(self):
        return {}  # the step samples every variable


def test_a_chain_estimator_moves_its_anchor_to_each_windows_finite_mean():
    estimator = ControlVariates(QuadraticPasses(), batch_sizes=[10], sampler="SGHMC")
    estimator.initial_anchor = Anchor(np.zeros(2), 0.0, np.zeros(2))
    tune = 200
    chain = ChainEstimator(estimator, dim=2, tune=tune)
    assert chain.anchor is estimator.initial_anchor
    first_end = chain.windows.windows[0][1]
    chain.noise.add(np.ones(2))
    moves = []
    for iteration in range(tune):
        # Draws at 1 until the first window ends, then at 9, where the pass is not finite.
        value = 1.0 if iteration < first_end else 9.0
        before = chain.anchor
        chain.follow_tuning(np.full(2, value), iteration, np.float64)
        if chain.anchor is not before:
            moves.append(iteration)
    # Only the first window's mean moved it; the later means are not finite there, and
    # the last finite anchor stays.
    assert moves == [first_end - 1]
    np.testing.assert_array_equal(chain.anchor.position, [1.0, 1.0])
    np.testing.assert_array_equal(chain.anchor.gradient, [-1.0, -1.0])
    assert chain.anchor.logp == -1.0
    assert chain.noise.probes == 0  # measured about the old anchor: forgotten
    assert chain.inputs()["anchor.position"] is chain.anchor.position


class CountedPasses(QuadraticPasses):
    """:class:`QuadraticPasses` that count their full-data passes."""

    def __init__(self):
        self.count = 0

    def full_pass(self, position):
        self.count += 1
        return super().full_pass(position)


def test_a_window_mean_near_the_anchor_leaves_it_without_a_pass():
    # A move costs a full-data pass and gains little where the anchor is already within
    # REANCHOR_DISTANCE posterior sds of the window's mean in every coordinate, beyond
    # the mean's own error, REANCHOR_Z / sqrt(draws) sds.
    passes = CountedPasses()
    estimator = ControlVariates(passes, batch_sizes=[10], sampler="SGHMC")
    estimator.initial_anchor = Anchor(np.zeros(2), 0.0, np.zeros(2))
    sd = np.array([1.0, 0.1])
    tune = 200
    chain = ChainEstimator(estimator, dim=2, tune=tune)
    windows = chain.windows.windows
    ends = [end for _, end in windows]
    reach = [REANCHOR_DISTANCE + REANCHOR_Z / np.sqrt(end - start) for start, end in windows]
    near = 0.9 * reach[0] * sd  # within the first window's reach in both coordinates
    far = np.array([0.9, 1.1]) * reach[1] * sd  # beyond the second's in the second
    moves = []
    for iteration in range(tune):
        value = near if iteration < ends[0] else far
        before = chain.anchor
        chain.follow_tuning(value, iteration, np.float64, posterior_sd=sd)
        if chain.anchor is not before:
            moves.append(iteration)
    # The first window stays; the second moves the anchor to `far`, and the later
    # windows' means are `far` itself.
    assert moves == [ends[1] - 1]
    assert passes.count == 1
    np.testing.assert_allclose(chain.anchor.position, far)
    # Without the sds (no constant metric) every window moves it, as before.
    plain = ChainEstimator(estimator, dim=2, tune=tune)
    for iteration in range(ends[0]):
        plain.follow_tuning(near, iteration, np.float64)
    np.testing.assert_allclose(plain.anchor.position, near)


def test_a_grouped_hessian_is_differenced_whole_in_one_pair_per_kind_of_parameter():
    from pymc_sgmcmc.sampling.optimize import grouped_hessian_by_differences

    # A hierarchy's shape: 2 globals coupled to everything, 30 groups of 2 locals each,
    # locals coupled within their group and to the globals only; negative definite.
    rng = np.random.default_rng(3)
    n_groups, dim = 30, 2 + 60
    locals_ = 2 + np.arange(60).reshape(n_groups, 2)
    hessian = np.zeros((dim, dim))
    hessian[:2, :] = 0.3 * rng.normal(size=(2, dim))
    for block in locals_:
        hessian[np.ix_(block, block)] = 0.3 * rng.normal(size=(2, 2))
    hessian = hessian + hessian.T - 4.0 * np.eye(dim)
    scale = rng.uniform(0.5, 2.0, dim)
    position = rng.normal(size=dim)
    calls = []

    def gradient(x):
        calls.append(1)
        return hessian @ x

    grouped = grouped_hessian_by_differences(gradient, position, scale, locals_)
    assert len(calls) == 2 * (2 + 2)  # two locals per group, two globals
    np.testing.assert_allclose(grouped.diagonal(), np.diag(hessian), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(grouped.columns, hessian[:, :2], rtol=1e-8, atol=1e-8)
    for j, block in enumerate(locals_):
        np.testing.assert_allclose(grouped.blocks[j], hessian[np.ix_(block, block)], atol=1e-8)
    assert np.all(np.linalg.eigvalsh(hessian) < 0) and grouped.negative_definite()
    g = rng.normal(size=dim)
    np.testing.assert_allclose(grouped.newton_step(g), -np.linalg.solve(hessian, g), atol=1e-9)
    # Each diagonal entry still negative, the whole not: a global coupled too strongly.
    saddle = hessian.copy()
    saddle[0, 2:] = saddle[2:, 0] = 3.0
    assert np.all(np.diag(saddle) < 0) and np.any(np.linalg.eigvalsh(saddle) > 0)
    assert not grouped_hessian_by_differences(
        lambda x: saddle @ x, position, scale, locals_
    ).negative_definite()
    # Locals of two groups that interact are not what the differences assume.
    coupled = hessian.copy()
    coupled[2, 4] = coupled[4, 2] = 1.0
    wrong = grouped_hessian_by_differences(lambda x: coupled @ x, position, scale, locals_)
    assert not np.allclose(wrong.diagonal(), np.diag(coupled), rtol=1e-3)


def test_the_forward_difference_hessian_is_exact_on_a_quadratic_and_first_order_otherwise():
    from pymc_sgmcmc.sampling.optimize import hessian_by_differences

    rng = np.random.default_rng(4)
    dim = 6
    root = rng.normal(size=(dim, dim))
    quadratic = -(root @ root.T) - np.eye(dim)
    position, scale = rng.normal(size=dim), rng.uniform(0.5, 2.0, dim)
    calls = []

    def gradient(x):
        calls.append(1)
        return quadratic @ x

    at = gradient(position)
    calls.clear()
    estimate = hessian_by_differences(gradient, position, scale, forward=True, at=at)
    assert len(calls) == dim  # the gradient at the point is not computed again
    np.testing.assert_allclose(estimate, quadratic, rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(estimate, estimate.T)

    # A logistic regression's log density: the error is h/2 times the third
    # derivative, so it halves with the step.
    X = rng.normal(size=(200, dim))
    y = (rng.random(200) < 0.5).astype(float)

    def logistic_gradient(w):
        return X.T @ (y - 1 / (1 + np.exp(-X @ w))) - w

    p = 1 / (1 + np.exp(-X @ position))
    exact = -(X.T * (p * (1 - p))) @ X - np.eye(dim)
    sd = 1 / np.sqrt(-np.diag(exact))
    errors = [
        np.max(np.abs(hessian_by_differences(logistic_gradient, position, s, forward=True) - exact))
        for s in (1e2 * sd, 5e1 * sd)  # steps of a hundredth and a two-hundredth of an sd
    ]
    assert 1.8 < errors[0] / errors[1] < 2.2
    assert errors[0] < 1e-2 * np.max(np.abs(exact))
