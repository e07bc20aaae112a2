"""Default arguments: the adapters of step_size="auto" and the diagnostics that see SG bias."""

import warnings

import numpy as np
import pymc as pm
import pytest
from helpers import sample, stat
from pymc.exceptions import SamplingError

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.adaptation.base import ChainContext, IterationResult
from pymc_sgmcmc.adaptation.step_size import (
    NOISE_TOLERANCE,
    AdaptiveStepSize,
    acceptance_limited_step_size,
    gradient_noise_ratio,
    noise_limited_step_size,
)
from pymc_sgmcmc.adaptation.windowed_mass import (
    WindowedMass,
    adaptation_windows,
    covariance_factor,
    rescaled_covariance,
    whitened,
)
from pymc_sgmcmc.diagnostics import kernel_stein_discrepancy
from pymc_sgmcmc.dynamics.hmc import leapfrog_step
from pymc_sgmcmc.metrics.euclidean import euclidean_metric
from pymc_sgmcmc.sampling.chain_checks import (
    anchor_distance_level,
    kinetic_temperature_departure,
    thermostat_drift,
)
from pymc_sgmcmc.sampling.corrections import runaway_trajectory
from pymc_sgmcmc.sampling.noise import tuned_step_warning

ROWS, BATCH, DIM = 5_000, 50, 3


@pytest.fixture(scope="module")
def regression():
    """Linear regression with known noise and flat priors: an exact Gaussian posterior."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(ROWS, DIM)) * np.array([1.0, 3.0, 0.3])
    y = x @ np.array([1.0, -0.5, 2.0]) + 5.0 + rng.normal(size=ROWS)
    design = np.column_stack([np.ones(ROWS), x])
    covariance = np.linalg.inv(design.T @ design)
    return x, y, covariance @ design.T @ y, covariance


def regression_model(x, y, batch_size=BATCH):
    with pm.Model() as model:
        xb, yb = pm.Minibatch(x, y, batch_size=batch_size)
        intercept = pm.Flat("intercept")
        beta = pm.Flat("beta", shape=DIM)
        pm.Normal("y", intercept + xb @ beta, 1.0, observed=yb, total_size=len(y))
    return model


def posterior_error(idata, mean, covariance):
    draws = np.column_stack(
        [
            idata.posterior["intercept"].values.reshape(-1, 1),
            idata.posterior["beta"].values.reshape(-1, DIM),
        ]
    )
    sd = np.sqrt(np.diag(covariance))
    return np.abs(draws.mean(0) - mean) / sd, draws.std(0) / sd


# -- the step size ---------------------------------------------------------------------


def test_noise_limited_step_size_puts_the_noise_ratio_at_its_tolerance():
    variance = np.array([0.5, 40.0, 3.0])
    for damping in (1.0, 0.3):
        step = noise_limited_step_size(variance, damping, 0.1)
        assert gradient_noise_ratio(step, variance, damping) == pytest.approx(0.1)
    assert noise_limited_step_size(np.zeros(3), 1.0) == np.inf


def test_acceptance_limited_step_size_gives_the_target_acceptance_to_noisy_leapfrog():
    # Leapfrog on N(0, I) with gradients of noise variance v per coordinate, at the
    # predicted cap: the mean Metropolis acceptance is the target. The noise is large, so
    # the step is small and the integrator's own error is nil (the noise's alone is left);
    # the dimension is large enough for the energy error to be close to normal.
    rng = np.random.default_rng(3)
    trajectories, dim, n_steps = 20_000, 50, 10
    variance = np.geomspace(1e3, 2e4, dim)
    for target in (0.6, 0.8, 0.9):
        step = acceptance_limited_step_size(variance, n_steps, target)

        def noisy_gradient(theta):
            return -theta + np.sqrt(variance) * rng.normal(size=theta.shape)

        position = rng.normal(size=(trajectories, dim))
        momentum = rng.normal(size=(trajectories, dim))
        start = (position**2 + momentum**2).sum(1) / 2
        gradient = noisy_gradient(position)
        for _ in range(n_steps):
            position, momentum, gradient = leapfrog_step(
                position, momentum, gradient, noisy_gradient, step, np.ones(dim)
            )
        end = (position**2 + momentum**2).sum(1) / 2
        acceptance = np.minimum(1.0, np.exp(start - end))
        standard_error = acceptance.std() / np.sqrt(trajectories)
        assert abs(acceptance.mean() - target) < 4 * standard_error
    assert acceptance_limited_step_size(np.zeros(3), 10, 0.8) == np.inf


def test_dual_averaging_reaches_the_target_acceptance_on_a_gaussian():
    with pm.Model() as model:
        pm.Normal("x", 0.0, np.array([0.01, 1.0, 30.0, 5.0]))
    idata = sample(pmsg.HMC(model=model), model, tune=600, draws=600, chains=2)
    accept = stat(idata, "accept")
    # Dual averaging targets 0.8; the final step is the averaged one, so the kept
    # draws' mean acceptance lands near it (PyMC's NUTS checks the same way).
    assert abs(accept.mean() - 0.8) < 0.08
    # Fixed after tuning, up to HMC's default jitter of ±15 % per trajectory.
    steps = stat(idata, "step_size")
    assert np.all(steps.max(axis=1) / steps.min(axis=1) <= 1.15 / 0.85 + 1e-9)


def test_the_sg_step_size_settles_where_the_measured_noise_is_at_its_tolerance(regression):
    x, y, mean, covariance = regression
    model = regression_model(x, y)
    with model:
        step = pmsg.SGLD(gradient="minibatch", mode_kwargs={"progressbar": False})
    idata = sample(step, model, tune=300, draws=300, chains=1)
    # After tuning the noise is measured afresh at the frozen step: it sits at the
    # tolerance (the worst coordinate), within the measurement's noise.
    ratio = stat(idata, "gradient_noise")[0, -1]
    assert 0.5 * NOISE_TOLERANCE < ratio < 1.6 * NOISE_TOLERANCE
    assert stat(idata, "step_size")[0, -1] < 0.1 * pmsg.SGLD.kernel.default_step_size


def test_gradient_noise_variance_is_the_exact_minibatch_variance(regression):
    x, y, mean, covariance = regression
    model = regression_model(x, y)
    with model:
        step = pmsg.SGLD(gradient="minibatch", step_size=1e-5, mass=2.0)
    point = mean + np.array([0.0, 0.1, -0.2, 0.05])
    # A fixed seed: the step's own generator is unseeded here, and the probes are heavy
    # tailed (squared differences of products of normals), so an unlucky draw of 4,000
    # lands a coordinate ~5 standard errors off now and then (seen once in CI; twelve
    # seeds gave |z| <= 2.2, centred on 0).
    rng = np.random.default_rng(0)
    probes = np.array([step.gradient_noise_variance(point, rng=rng) for _ in range(4000)])
    # Per-row gradients of the likelihood; the minibatch sum of B rows drawn with
    # replacement, scaled by N/B, has variance (N²/B) Var_n(g_n) per coordinate.
    design = np.column_stack([np.ones(ROWS), x])
    per_row = design * (y - design @ point)[:, None]
    exact = ROWS**2 / BATCH * per_row.var(axis=0) / 2.0  # whitened by M = 2
    measured = probes.mean(axis=0)
    standard_error = probes.std(axis=0) / np.sqrt(len(probes))
    assert np.all(np.abs(measured - exact) < 4 * standard_error)


def test_a_divergence_during_tuning_halves_the_sg_step_and_is_not_fatal():
    adapter = AdaptiveStepSize(0.2, metropolis=False)
    chain = ChainContext(np.random.default_rng(0), 2, np.dtype("float64"), "SGHMC", 100)
    adapter.init_chain(chain)
    result = IterationResult(0, True, np.zeros(2), None, None, 0.2, True, 1.0)
    for expected in (0.1, 0.05):
        adapter.update(result, chain)
        assert adapter.nominal(1) == pytest.approx(expected)
    adapter.finalize()
    assert adapter.nominal(10) == pytest.approx(0.05)


def test_tuning_stops_once_divergences_halved_the_sg_step_thirty_times():
    adapter = AdaptiveStepSize(0.2, metropolis=False)
    chain = ChainContext(np.random.default_rng(0), 2, np.dtype("float64"), "SGHMC", 100)
    adapter.init_chain(chain)
    result = IterationResult(0, True, np.zeros(2), None, None, 0.2, True, 1.0)
    for _ in range(29):
        adapter.update(result, chain)
    assert adapter.nominal(1) == pytest.approx(0.2 * 0.5**29)
    with pytest.raises(SamplingError, match=r"SGHMC: divergences during tuning halved"):
        adapter.update(result, chain)


def test_a_step_tuned_far_below_its_start_is_named_with_its_cause():
    within = tuned_step_warning("SGHMC", start=0.2, tuned=0.0021, shrink=1.0, noise_cap=0.0021)
    assert within is None  # 95x
    noisy = tuned_step_warning("SGHMC", start=0.2, tuned=1e-4, shrink=0.5, noise_cap=1e-4)
    assert "2,000x below the 0.2" in noisy and "gradient noise capped it" in noisy
    halved = tuned_step_warning("SGLD", start=0.1, tuned=0.1 / 256, shrink=1 / 256, noise_cap=1.0)
    assert "8 divergences during tuning halved it" in halved


def test_a_chain_whose_tuning_shrank_the_step_warns_when_tuning_ends(monkeypatch):
    model = standard_normal_model()
    update = AdaptiveStepSize.update

    def eight_early_divergences(self, result, chain):
        if result.iteration < 8:
            result = result._replace(diverging=True)
        return update(self, result, chain)

    monkeypatch.setattr(AdaptiveStepSize, "update", eight_early_divergences)
    step = pmsg.SGLD(model=model, mode_kwargs={"progressbar": False})
    with pytest.warns(RuntimeWarning, match=r"tuning ended with the step size at .* 256x below"):
        sample(step, model, tune=20, draws=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same step without the divergences: silent
        monkeypatch.setattr(AdaptiveStepSize, "update", update)
        sample(step, model, tune=20, draws=5)


def test_tuning_survives_divergences_that_would_stop_a_fixed_step():
    # A stiff, badly scaled target from PyMC's initial point: dual averaging's first
    # large steps diverge, which during tuning only shrinks the step.
    with pm.Model() as model:
        pm.Normal("x", 100.0, np.array([1e-3, 1e3]))
    idata = sample(pmsg.HMC(model=model), model, tune=300, draws=200, chains=1)
    assert not stat(idata, "diverging").any()
    mean = idata.posterior["x"].values.reshape(-1, 2).mean(0)
    assert np.all(np.abs(mean - 100.0) / np.array([1e-3, 1e3]) < 0.5)
    with pytest.raises(SamplingError, match="times in a row"):
        sample(pmsg.SGLD(step_size=5.0, model=model), model, tune=0, draws=50)


def test_a_finite_runaway_trajectory_is_a_divergence():
    metric = euclidean_metric(np.array([1.0, 4.0, 100.0, 1.0]), 4)
    start = np.zeros(4)
    # 10 stable steps of 0.01 move about 10 · 0.1 · 2 = 2 units of the metric.
    assert not runaway_trajectory(metric, start, np.full(4, 0.5), 0.01, 10)
    # The bound (10x that) is in the metric's units: 3 units along the stiff coordinate
    # are 30 of them.
    assert runaway_trajectory(metric, start, np.array([0.0, 0.0, 3.0, 0.0]), 0.01, 10)
    assert runaway_trajectory(metric, start, np.array([1e14, 0.0, 0.0, 0.0]), 0.01, 10)


def test_an_unstable_langevin_chain_never_returns_a_runaway_state():
    # SGLD at ε = 4.5 on N(0, I) multiplies the position by −1.25 per step: finite for
    # hundreds of steps, but each state beyond the first few is meaningless. The chain
    # stops with the divergence error instead of returning them.
    model = standard_normal_model()
    step = pmsg.SGLD(step_size=4.5, model=model)
    with pytest.raises(SamplingError, match="times in a row"):
        sample(step, model, tune=0, draws=200, chains=1)
    assert np.abs(step.chain.kernel_state.position).max() < 1e3


# -- the mass ----------------------------------------------------------------------------


def test_adaptation_windows_follow_stans_schedule():
    assert adaptation_windows(1000) == [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    assert adaptation_windows(10) == []
    windows = adaptation_windows(100)
    assert windows[0][0] == 15 and windows[-1][1] == 90


def test_rescaled_covariance_sets_the_whitened_variances():
    covariance = np.array([[4.0, 1.2], [1.2, 1.0]])
    factor = covariance_factor(covariance)
    rescaled = rescaled_covariance(factor, np.array([1.0, 9.0]))
    in_old_coordinates = whitened(whitened(rescaled, factor).T, factor)
    assert in_old_coordinates == pytest.approx(np.diag([1.0, 9.0]))
    assert rescaled_covariance(covariance_factor(np.array([4.0])), np.array([9.0])) == [36.0]


def correlated_gaussian(dim: int, condition: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    eigenvalues = np.geomspace(1.0, 1.0 / condition, dim)
    return (rotation * eigenvalues) @ rotation.T


def test_windowed_mass_keeps_an_exact_correlated_metric_conditioned():
    # The Laplace fit is exact; the windows see 1,000 independent draws. The metric must
    # stay near the posterior's: in the posterior's whitened coordinates its condition
    # number stays near 1 (per-coordinate rescaling D Σ D reached 15 here).
    covariance = correlated_gaussian(100, 1e4, seed=3)
    rng = np.random.default_rng(4)
    tune = 1000
    adapter = WindowedMass(covariance)
    chain = ChainContext(rng, 100, np.dtype("float64"), "SGLD", tune)
    adapter.init_chain(chain)
    draws = rng.multivariate_normal(np.zeros(100), covariance, size=tune)
    for t, position in enumerate(draws):
        adapter.update(IterationResult(t, True, position, None, None, 0.1, False, 1.0), chain)
    factor = covariance_factor(covariance)
    relative = whitened(whitened(adapter.inverse, factor).T, factor)
    eigenvalues = np.linalg.eigvalsh(relative)
    # 500 draws in the last window: whitened variances within 1 ± 4·sqrt(2/500).
    assert eigenvalues.max() / eigenvalues.min() < (1.26 / 0.74)


@pytest.mark.parametrize("dense", [False, True])
def test_windowed_mass_approaches_the_posterior_covariance(dense):
    rng = np.random.default_rng(5)
    sd = np.array([0.01, 1.0, 20.0])
    correlation = np.array([[1.0, 0.5, 0.0], [0.5, 1.0, -0.3], [0.0, -0.3, 1.0]])
    covariance = sd[:, None] * correlation * sd[None, :]
    # A wrong start: the right correlations (as a Laplace fit gives), scales 5x off.
    start = covariance * 25.0 if dense else np.diag(covariance) / 25.0
    adapter = WindowedMass(start)
    tune = 1000
    chain = ChainContext(rng, 3, np.dtype("float64"), "SGHMC", tune)
    adapter.init_chain(chain)
    draws = rng.multivariate_normal(np.zeros(3), covariance, size=tune)
    for t, position in enumerate(draws):
        adapter.update(IterationResult(t, True, position, None, None, 0.1, False, 1.0), chain)
    assert adapter.mass_updates == len(adaptation_windows(tune))
    learned = adapter.inverse if adapter.inverse.ndim == 1 else np.diag(adapter.inverse)
    # The last window holds 500 independent draws: variances within ~4 standard errors
    # (sqrt(2/500) = 6 %), up to the shrinkage toward the previous window.
    assert learned / np.diag(covariance) == pytest.approx(np.ones(3), rel=0.3)
    if dense:
        # The correlation is learned from the draws too: 500 draws, standard error
        # (1 - 0.5²)/sqrt(500) = 0.034.
        correlation = adapter.inverse[0, 1] / np.sqrt(learned[0] * learned[1])
        assert correlation == pytest.approx(0.5, abs=0.1)


# -- diagnostics -------------------------------------------------------------------------


def test_stein_discrepancy_of_one_point_at_the_mode_is_known():
    # n = 1, x at the mode (score 0): k₀(x, x) = −2βd c^(2β−2) = 1 for β = −1/2, c = d = 1.
    assert kernel_stein_discrepancy(np.zeros((1, 1)), np.zeros((1, 1))) == pytest.approx(1.0)


def test_stein_discrepancy_separates_right_from_wrong_draws():
    rng = np.random.default_rng(0)
    exact = rng.standard_normal((400, 3))
    wide = 1.5 * rng.standard_normal((400, 3))
    shifted = rng.standard_normal((400, 3)) + 0.5
    right = kernel_stein_discrepancy(exact, -exact)
    assert kernel_stein_discrepancy(wide, -wide) > 2 * right
    assert kernel_stein_discrepancy(shifted, -shifted) > 2 * right
    more = rng.standard_normal((1600, 3))
    assert kernel_stein_discrepancy(more, -more) < 0.75 * right  # ~1/sqrt(n)


def test_kinetic_temperature_and_thermostat_checks_on_synthetic_series():
    rng = np.random.default_rng(1)
    good = 1.0 + 0.1 * rng.standard_normal(2000)
    assert not kinetic_temperature_departure(good)[1]
    assert kinetic_temperature_departure(good + 0.3)[1]
    steady = 2.0 + 0.1 * rng.standard_normal(2000)
    assert not thermostat_drift(steady)[1]
    assert thermostat_drift(steady + np.linspace(0.0, 1.0, 2000))[1]


def standard_normal_model():
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=4)
    return model


def test_a_good_chain_passes_every_check():
    model = standard_normal_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idata = sample(
            pmsg.SGHMC(step_size=0.1, model=model), model, tune=200, draws=1000, chains=2
        )
        table = pmsg.diagnostics(idata, model, max_draws=200)
    assert table["ok"].all()
    # Outside the model's context and without model=: the chain checks, no Stein column.
    with pytest.warns(UserWarning, match="no model was given .* Pass model="):
        without = pmsg.diagnostics(idata)
    assert "stein" not in without and without["ok"].all()


def test_a_step_ten_times_too_large_triggers_the_temperature_warning():
    model = standard_normal_model()
    # At ε = 1 (10x the 0.1 of the good chain) the scheme's position variance doubles.
    with pytest.warns(RuntimeWarning, match=r"kinetic temperature is (1\.9|2)"):
        idata = sample(
            pmsg.SGHMC(step_size=1.0, model=model), model, tune=200, draws=1000, chains=1
        )
    with pytest.warns(RuntimeWarning, match="kinetic temperature"):
        table = pmsg.diagnostics(idata, model, max_draws=200)
    assert not table["kinetic_temperature_ok"].all()


@pytest.mark.parametrize("sampler", ["SGHMC", "SGLD", "HMC"])
def test_plain_minibatch_noise_that_caps_the_step_warns_before_sampling(regression, sampler):
    # Batches of 5 rows of 5,000: the whitened gradient noise is ~1,000 per coordinate,
    # which caps the step far below the default (noise-injecting kernels: the temperature
    # bound; HMC: the acceptance target). The control-variate default builds silently.
    x, y, _, _ = regression
    model = regression_model(x, y, batch_size=5)
    options = {"mode_kwargs": {"progressbar": False}, "model": model}
    with pytest.warns(RuntimeWarning, match=r"limits the step size .*gradient='control_var"):
        plain = getattr(pmsg, sampler)(gradient="minibatch", **options)
    assert plain.minibatch_slowdown > 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default = getattr(pmsg, sampler)(**options)
    assert default.gradient == "control_variates"
    assert default.minibatch_slowdown is None


def test_friction_below_the_gradient_noise_triggers_its_warning(regression):
    x, y, mean, covariance = regression
    model = regression_model(x, y)
    with model:
        good = pmsg.SGHMC(gradient="minibatch", mode_kwargs={"progressbar": False})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idata = sample(good, model, tune=300, draws=300, chains=1)
    ratio = stat(idata, "gradient_noise")[0, -1]
    # The same sampler and metric with a step 5x larger: B̂ = εV/2 exceeds C/2. (At 20x
    # the chain heats to kinetic temperatures of thousands and stops as divergent.)
    with model:
        hot = pmsg.SGHMC(
            gradient="minibatch",
            step_size=5 * float(stat(idata, "step_size")[0, -1]),
            mass=np.linalg.inv(covariance),
            noise_estimate=0.0,
        )
    with pytest.warns(RuntimeWarning, match="gradient noise is"):
        hot_idata = sample(hot, model, tune=0, draws=300, chains=1)
    assert stat(hot_idata, "gradient_noise")[0, -1] > 10 * ratio
    table = pmsg.diagnostics(hot_idata, model, stein=False, warn=False)
    assert not table["gradient_noise_ok"].all()


def test_anchor_distance_check_on_synthetic_series():
    assert anchor_distance_level([0.9, 1.1, 1.0]) == (pytest.approx(1.0, abs=0.01), False)
    level, fails = anchor_distance_level([np.nan, 4.0, 4.0])
    assert level == pytest.approx(4.0) and fails
    assert np.isnan(anchor_distance_level([np.nan])[0])


def test_draws_far_from_the_anchor_trigger_its_warning(regression):
    x, y, mean, covariance = regression
    model = regression_model(x, y)
    options = {"mode_kwargs": {"progressbar": False}, "model": model}
    # The default anchor follows the tuning draws: the kept draws sit at ~1 posterior sd
    # (root mean square per coordinate), as draws of the posterior around its mean do.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idata = sample(pmsg.SGHMC(**options), model, tune=300, draws=300, chains=1)
    distance = stat(idata, "anchor_distance")[0]
    assert 0.7 < np.sqrt(np.mean(distance**2)) < 1.5
    # An anchor 10 posterior sds off in every coordinate, kept there: an unbiased
    # estimate, but used far from where its noise is small.
    far = mean + 10.0 * np.sqrt(np.diag(covariance))
    anchor = {"intercept": far[0], "beta": far[1:]}
    with pytest.warns(RuntimeWarning, match=r"posterior sds .* from the control variates"):
        far_idata = sample(
            pmsg.SGHMC(anchor=anchor, **options), model, tune=300, draws=300, chains=1
        )
    table = pmsg.diagnostics(far_idata, model, stein=False, warn=False)
    assert table["anchor_distance"].iloc[0] > 8 and not table["anchor_distance_ok"].any()
