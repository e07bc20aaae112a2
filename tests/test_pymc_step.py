"""Behaviour of the generic step method (``pymc_sgmcmc.sampling.step``) through ``pm.sample``.

Compiling a trajectory is the expensive part (once per step-method instance), so the
step methods live in module-scoped fixtures and the models are tiny. What every sampler
must do is checked for all of them in ``test_conformance.py``; this file checks the
behaviour in depth on SGLD, SGHMC and SGNHT.
"""

import logging
import math
import subprocess
import sys
import warnings

import arviz as az
import cloudpickle
import numpy as np
import pymc as pm
import pytest
import scipy.stats as st
from helpers import (
    BATCH_SIZE,
    N_ROWS,
    PRIOR_SD,
    compiled,
    draws_of,
    sample,
    standard_error,
    stat,
)
from pymc.exceptions import SamplingError

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.kernels import sghmc as sghmc_kernel
from pymc_sgmcmc.kernels.base import Target
from pymc_sgmcmc.sampling import step as step_module


def full_data_logp(observations, mu):
    """Exact log density of ``minibatch_model`` on all rows."""
    return st.norm(0, PRIOR_SD).logpdf(mu) + st.norm(mu, 1.0).logpdf(observations).sum()


def exact_posterior_of_mu(observations):
    precision = N_ROWS + PRIOR_SD**-2
    return observations.sum() / precision, precision**-0.5


@pytest.fixture(scope="module")
def sghmc(minibatch_model):
    with minibatch_model:
        return compiled(pmsg.SGHMC(step_size=0.01, n_steps=10))


@pytest.fixture(scope="module")
def sgld(minibatch_model):
    with minibatch_model:
        return compiled(pmsg.SGLD(step_size=1e-3, n_steps=10, gradient="minibatch"))


@pytest.fixture(scope="module")
def sgnht(minibatch_model):
    with minibatch_model:
        return compiled(pmsg.SGNHT(step_size=0.01, n_steps=10))


@pytest.fixture(scope="module")
def frozen_sgld_one_batch_per_draw(minibatch_model):
    """An SGLD whose step is so small that the position never moves."""
    with minibatch_model:
        return compiled(
            pmsg.SGLD(step_size=1e-300, n_steps=1, minibatch="trajectory", gradient="minibatch")
        )


@pytest.fixture(scope="module", params=["sgld", "sghmc", "sgnht"])
def any_sampler(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def two_chains(sghmc, minibatch_model):
    return sample(sghmc, minibatch_model, draws=100, tune=20, chains=2, random_seed=3)


# -- reproducibility ------------------------------------------------------------------


def test_same_seed_gives_identical_draws_and_stats(any_sampler, minibatch_model):
    first = sample(any_sampler, minibatch_model, random_seed=42)
    second = sample(any_sampler, minibatch_model, random_seed=42)
    other = sample(any_sampler, minibatch_model, random_seed=43)
    np.testing.assert_array_equal(draws_of(first, "mu"), draws_of(second, "mu"))
    np.testing.assert_array_equal(stat(first, "minibatch_logp"), stat(second, "minibatch_logp"))
    assert not np.array_equal(draws_of(first, "mu"), draws_of(other, "mu"))


@pytest.mark.parametrize(
    "sampler",
    [
        pmsg.SGLD,
        pmsg.SGHMC,
        pmsg.SGNHT,
    ],
)
def test_same_seed_gives_identical_draws_from_a_new_step_method(sampler, gaussian_model):
    with gaussian_model:
        step = sampler(step_size=0.1, n_steps=5)
    first = sample(step, gaussian_model, draws=5, tune=0, random_seed=7)
    second = sample(step, gaussian_model, draws=5, tune=0, random_seed=7)
    np.testing.assert_array_equal(draws_of(first, "theta"), draws_of(second, "theta"))


def test_two_chains_differ(two_chains):
    mu = draws_of(two_chains, "mu")
    assert mu.shape == (2, 100)
    assert not np.allclose(mu[0], mu[1])
    assert not np.allclose(
        stat(two_chains, "minibatch_logp")[0], stat(two_chains, "minibatch_logp")[1]
    )


@pytest.fixture(scope="module")
def parallel_chains(sghmc, minibatch_model):
    # "forkserver" pickles the step method (with its model) into fresh worker processes.
    return sample(
        sghmc,
        minibatch_model,
        draws=20,
        tune=5,
        chains=2,
        cores=2,
        random_seed=5,
        mp_ctx="forkserver",
    )


def test_parallel_chains_in_worker_processes(parallel_chains):
    mu = draws_of(parallel_chains, "mu")
    assert mu.shape == (2, 20)
    assert np.all(np.isfinite(mu))
    assert not np.allclose(mu[0], mu[1])
    assert not stat(parallel_chains, "diverging").any()


FORKSERVER_PROBE = """
import multiprocessing
if __name__ == "__main__":
    import pymc_sgmcmc
    modules = "[m in __import__('sys').modules for m in ('pymc', 'pymc_sgmcmc')]"
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        print(pool.apply(eval, (modules,)))
"""


def test_forkserver_workers_start_with_pymc_and_the_package_imported(tmp_path):
    # The forkserver preloads them, so a worker of pm.sample(cores > 1) forks with them
    # instead of importing them (~3 s a worker at every call). The probe imports the
    # package inside its main block, as a notebook's __main__ holds it: a script that
    # imports it at the top gets it through the forkserver's default preload of
    # __main__ (this test passes then without the preload: checked). eval is pickled by
    # name, so the worker imports nothing to run it.
    script = tmp_path / "probe.py"
    script.write_text(FORKSERVER_PROBE)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[True, True]"


def test_parallel_chains_equal_sequential_chains_with_the_same_seed(
    parallel_chains, sghmc, minibatch_model
):
    sequential = sample(sghmc, minibatch_model, draws=20, tune=5, chains=2, random_seed=5)
    np.testing.assert_array_equal(draws_of(parallel_chains, "mu"), draws_of(sequential, "mu"))


def test_a_pickled_step_computes_what_the_original_does(minibatch_model):
    # Pickled for worker processes, the step links its compiled trajectory again, or
    # compiles it anew where PyTensor will not rebuild the rewritten graph (this model's
    # scan, whose recurrent state has a static length of 1, is one).
    with minibatch_model:
        step = compiled(pmsg.SGHMC(step_size=0.01, n_steps=10))
    inputs = step.trajectory_inputs(np.array([0.3]), 0.01)
    expected = step.trajectory_function.named(**inputs)
    copy = cloudpickle.loads(cloudpickle.dumps(step))
    outputs = copy.trajectory_function.named(**inputs)
    for name, value in expected.items():
        np.testing.assert_array_equal(outputs[name], value, err_msg=name)


def test_a_pickled_step_carries_the_data_and_its_shuffled_copy_once():
    # The compiled trajectory's graph reads the model's data through the same shared
    # variables. (PyMC's own pickle for its workers sends the data by the name of a
    # shared-memory segment instead: tests/test_worker_data.py.)
    rows = np.random.default_rng(3).normal(size=500_000)
    with pm.Model():
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        batch = pm.Minibatch(rows, batch_size=BATCH_SIZE)
        pm.Normal("obs", mu, 1.0, observed=batch, total_size=rows.size)
        step = compiled(pmsg.SGHMC(step_size=0.01, n_steps=5))
    pickled = cloudpickle.dumps(step)
    # The data, and the shuffled copy its minibatches are read from (row_windows).
    assert 2 * rows.nbytes < len(pickled) < 2.25 * rows.nbytes
    copy = cloudpickle.loads(pickled)
    inputs = step.trajectory_inputs(np.array([0.3]), 0.01)
    assert copy.trajectory_function.named(**inputs) is not None


# -- minibatches ----------------------------------------------------------------------


def test_fresh_rows_for_every_gradient_in_step_mode(sgld):
    sgld.setup_chain(np.random.default_rng(0), tune=0, draws=2)
    (first,) = sgld.draw_rows()
    (second,) = sgld.draw_rows()
    assert first.shape == (sgld.n_steps, BATCH_SIZE)
    assert first.dtype == np.int64
    assert first.min() >= 0 and first.max() < N_ROWS
    assert len({tuple(rows) for rows in first}) == sgld.n_steps  # every step its own rows
    assert not np.array_equal(first, second)
    # Rows are drawn with replacement over the whole data set, as pm.Minibatch does
    # (data this small are not read in windows: tests/test_row_windows.py).
    assert sgld.row_orders == [None]
    many = np.concatenate([sgld.draw_rows()[0].ravel() for _ in range(200)])
    assert np.unique(many).size == N_ROWS


def test_one_row_vector_per_draw_in_trajectory_mode(frozen_sgld_one_batch_per_draw):
    step = frozen_sgld_one_batch_per_draw
    step.setup_chain(np.random.default_rng(0), tune=0, draws=2)
    (first,) = step.draw_rows()
    (second,) = step.draw_rows()
    assert first.shape == (BATCH_SIZE,)
    assert not np.array_equal(first, second)


def minibatch_gradient(observations, mu, rows):
    return -mu / PRIOR_SD**2 + N_ROWS / BATCH_SIZE * np.sum(observations[rows] - mu)


def minibatch_logp(observations, mu, rows):
    return (
        st.norm(0, PRIOR_SD).logpdf(mu)
        + N_ROWS / BATCH_SIZE * st.norm(mu, 1.0).logpdf(observations[rows]).sum()
    )


@pytest.mark.parametrize("mode", ["step", "trajectory"])
def test_compiled_trajectory_matches_numpy_sgld_on_the_given_rows(
    mode, sgld, frozen_sgld_one_batch_per_draw, observations
):
    step = sgld if mode == "step" else frozen_sgld_one_batch_per_draw
    rng = np.random.default_rng(4)
    n_steps, step_size = 6, 1e-3  # the number of steps is the number of noise rows
    noise = rng.standard_normal((n_steps, 1))
    if mode == "step":
        rows = rng.integers(0, N_ROWS, size=(n_steps, BATCH_SIZE))
        rows_at = list(rows)
    else:
        rows = rng.integers(0, N_ROWS, size=BATCH_SIZE)
        rows_at = [rows] * n_steps
    # Outputs: the final state (SGLD: the position alone), then the minibatch log density.
    fn = step.trajectory_function
    out = fn.named(
        position=np.array([0.2]),
        **{"params.step_size": np.asarray(step_size)},
        **{f"params.metric.{k}": np.ones(1) for k in ("inverse", "factor")},
        noise=noise,
        rows_0=rows,
    )
    position, logp = out["position"], out["minibatch_logp"]
    mu = 0.2
    for t in range(n_steps):
        mu = (
            mu
            + step_size * minibatch_gradient(observations, mu, rows_at[t])
            + math.sqrt(2 * step_size) * noise[t, 0]
        )
    assert position[0] == pytest.approx(mu, rel=1e-10)
    assert logp == pytest.approx(minibatch_logp(observations, mu, rows_at[-1]), rel=1e-8)


def test_minibatch_logp_at_a_fixed_position_is_an_unbiased_noisy_estimate(
    frozen_sgld_one_batch_per_draw, minibatch_model, observations
):
    draws = 300
    idata = sample(frozen_sgld_one_batch_per_draw, minibatch_model, draws=draws, tune=0)
    np.testing.assert_allclose(draws_of(idata, "mu"), 0.0, atol=1e-100)  # never moves
    values = stat(idata, "minibatch_logp").ravel()
    # A new minibatch every draw: the estimate changes (its sd is about 20 √10 · 0.7).
    assert np.unique(values).size > 0.9 * draws
    assert values.std() > 20
    # ... and averages to the full-data log density: N/B scaling of independent rows.
    assert values.mean() == pytest.approx(
        full_data_logp(observations, 0.0), abs=4 * values.std() / math.sqrt(draws)
    )


def test_pm_minibatch_of_integers_is_refused_as_observed_data():
    # Why pmsg.Minibatch exists: PyMC casts the integer minibatch, and then refuses it.
    counts = np.random.default_rng(0).binomial(1, 0.3, size=100)
    with pm.Model(), pytest.raises(TypeError, match="cannot be used for observed data"):
        p = pm.Beta("p", 1.0, 1.0)
        pm.Bernoulli("y", p, observed=pm.Minibatch(counts, batch_size=10), total_size=100)


def test_integer_minibatch_in_a_bernoulli_likelihood():
    outcomes = np.random.default_rng(1).binomial(1, 0.3, size=2000)
    with pm.Model() as model:
        p = pm.Beta("p", 1.0, 1.0)
        batch = pmsg.Minibatch(outcomes, batch_size=100)
        pm.Bernoulli("y", p, observed=batch, total_size=len(outcomes))
        step = pmsg.SGLD(step_size=1e-4, n_steps=10)
    idata = sample(step, model, draws=400, tune=100)
    posterior = st.beta(1 + outcomes.sum(), 1 + len(outcomes) - outcomes.sum())
    p_draws = draws_of(idata, "p")
    # Posterior sd 0.010; minibatch noise inflates SGLD's spread a little; ESS > 50.
    assert p_draws.mean() == pytest.approx(posterior.mean(), abs=0.02)
    assert 0.5 * posterior.std() < p_draws.std() < 3 * posterior.std()


def test_two_minibatch_calls_of_different_sizes():
    rng = np.random.default_rng(2)
    small, large = rng.normal(-1.0, 1.0, size=300), rng.normal(2.0, 1.0, size=500)
    with pm.Model() as model:
        mu_small = pm.Normal("mu_small", 0.0, 10.0)
        mu_large = pm.Normal("mu_large", 0.0, 10.0)
        pm.Normal(
            "small", mu_small, 1.0, observed=pm.Minibatch(small, batch_size=15), total_size=300
        )
        pm.Normal(
            "large", mu_large, 1.0, observed=pm.Minibatch(large, batch_size=40), total_size=500
        )
        step = pmsg.SGHMC(step_size=0.01, n_steps=10)
    step.setup_chain(np.random.default_rng(0), tune=0, draws=1)
    shapes = sorted(rows.shape for rows in step.draw_rows())
    assert shapes == [(10, 15), (10, 40)]
    idata = sample(step, model, draws=300, tune=100)
    # Posterior sds are 0.058 and 0.045; the tolerance allows minibatch-noise inflation.
    assert draws_of(idata, "mu_small").mean() == pytest.approx(small.mean(), abs=0.1)
    assert draws_of(idata, "mu_large").mean() == pytest.approx(large.mean(), abs=0.1)


# -- statistics, diagnostics, tuning, initial values ----------------------------------

COMMON_STATS = {"step_size", "n_steps", "minibatch_logp", "diverging", "divergences"}
EXPECTED_STATS = {
    "sgld": COMMON_STATS,
    "sghmc": COMMON_STATS | {"kinetic_temperature"},
    "sgnht": COMMON_STATS | {"kinetic_temperature", "thermostat"},
}


@pytest.mark.parametrize("name", ["sgld", "sghmc", "sgnht"])
def test_sample_stats_are_the_documented_ones(name, request, minibatch_model):
    step = request.getfixturevalue(name)
    idata = sample(step, minibatch_model, draws=30, tune=5)
    stats = idata.sample_stats
    assert EXPECTED_STATS[name] <= set(stats.data_vars)
    if name == "sgld":
        assert "kinetic_temperature" not in stats  # no momentum
    np.testing.assert_array_equal(stat(idata, "n_steps"), 10)
    np.testing.assert_array_equal(stat(idata, "step_size"), step.schedule(0))
    assert not stat(idata, "diverging").any()
    np.testing.assert_array_equal(stat(idata, "divergences"), 0)
    assert np.all(np.isfinite(stat(idata, "minibatch_logp")))
    if "kinetic_temperature" in stats:
        assert np.all(stat(idata, "kinetic_temperature") > 0)
    if "thermostat" in stats:
        assert np.all(np.isfinite(stat(idata, "thermostat")))
        assert not np.all(stat(idata, "thermostat") == step.parameters["diffusion"])  # it evolves


def test_arviz_diagnostics_work_on_the_result(two_chains):
    summary = az.summary(two_chains)
    assert "mu" in summary.index
    assert {"mean", "ess_bulk", "r_hat"} <= set(summary.columns)
    ess = float(az.ess(two_chains)["mu"])
    rhat = float(az.rhat(two_chains)["mu"])
    assert ess > 1
    assert 0.9 < rhat < 1.5


def test_kinetic_temperature_and_thermostat_average_to_their_targets(gaussian_model):
    # With exact gradients, p ~ N(0, M) stays stationary (pᵀM⁻¹p/D averages 1) and the
    # SGNHT thermostat settles where friction balances the injected noise, ξ = A.
    with gaussian_model:
        sghmc = pmsg.SGHMC(step_size=0.1, n_steps=10)
        sgnht = pmsg.SGNHT(step_size=0.05, n_steps=10, diffusion=1.0)
    sghmc_stats = sample(sghmc, gaussian_model, draws=500, tune=100)
    sgnht_stats = sample(sgnht, gaussian_model, draws=500, tune=100)
    # D = 2: the temperature is χ²₂/2 per draw (sd 1); 500 draws, se ≈ 0.05.
    assert stat(sghmc_stats, "kinetic_temperature").mean() == pytest.approx(1.0, abs=0.2)
    assert stat(sgnht_stats, "kinetic_temperature").mean() == pytest.approx(1.0, abs=0.2)
    assert stat(sgnht_stats, "thermostat").mean() == pytest.approx(1.0, abs=0.25)


def test_tuning_draws_are_discarded_and_the_schedule_shows_in_step_size(minibatch_model):
    schedule = pmsg.PolynomialDecay(a=1e-3, b=2.0, gamma=0.55)
    with minibatch_model:
        step = pmsg.SGLD(step_size=schedule, n_steps=5)
    tune, draws = 7, 11
    kept = sample(step, minibatch_model, tune=tune, draws=draws)
    assert draws_of(kept, "mu").shape == (1, draws)
    np.testing.assert_allclose(
        stat(kept, "step_size")[0], [schedule(t) for t in range(tune, tune + draws)]
    )
    everything = sample(step, minibatch_model, tune=tune, draws=draws, discard_tuned_samples=False)
    np.testing.assert_allclose(
        everything.warmup_sample_stats["step_size"].values[0],
        [schedule(t) for t in range(tune)],
    )
    assert everything.warmup_posterior["mu"].shape == (1, tune)
    np.testing.assert_array_equal(draws_of(everything, "mu"), draws_of(kept, "mu"))
    assert stat(kept, "step_size")[0, -1] < stat(kept, "step_size")[0, 0]


def test_initvals_are_honoured(frozen_sgld_one_batch_per_draw, minibatch_model):
    idata = sample(
        frozen_sgld_one_batch_per_draw, minibatch_model, draws=3, tune=0, initvals={"mu": 0.5}
    )
    np.testing.assert_allclose(draws_of(idata, "mu"), 0.5, atol=1e-100)


def test_momentum_and_injected_noise_are_drawn_with_the_mass_as_covariance(gaussian_model):
    mass = np.array([[2.0, 0.5], [0.5, 1.0]])
    with gaussian_model:
        step = pmsg.SGHMC(step_size=0.1, n_steps=10, mass=mass)
    step.setup_chain(np.random.default_rng(9), tune=0, draws=1)
    rng, origin = step.rng, np.zeros(2)
    params = step.params
    momenta = np.array(
        [step.kernel.init(origin, rng.standard_normal(2), params).momentum for _ in range(20_000)]
    )
    # The injected noise, read off one SGHMC step from p = 0 on a flat target: there the
    # new momentum is √(2Cε) ξ with ξ the noise, which must be N(0, M).
    flat = Target(logp=lambda x: 0.0, grad=lambda x: np.zeros_like(x))
    start = sghmc_kernel.SGHMCState(origin, origin)
    scale = np.sqrt(2 * step.parameters["friction"] * 0.1)
    noise = np.array(
        [
            sghmc_kernel.step(start, flat, z, params._replace(step_size=0.1)).momentum / scale
            for z in rng.standard_normal((4000, 2))
        ]
    )
    for draws in (noise, momenta):
        assert draws.shape[1] == 2
        covariance = draws.T @ draws / len(draws)
        # Var(x_i x_j) = M_ii M_jj + M_ij² for a centred Gaussian.
        tolerance = np.sqrt((np.outer(np.diag(mass), np.diag(mass)) + mass**2) / len(draws))
        assert np.all(np.abs(covariance - mass) < 4 * tolerance)


# -- sampling state -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sghmc", "sgnht"])
def test_sampling_state_round_trip_resumes_identically(name, request, minibatch_model):
    step = request.getfixturevalue(name)
    step.setup_chain(np.random.default_rng(5), tune=0, draws=20)
    point = minibatch_model.initial_point()
    for _ in range(3):
        point, _ = step.step(point)
    state = step.sampling_state
    saved_point = dict(point)
    assert state.chain.iteration == 3
    assert state.chain.divergence_log.divergences == 0

    def continue_chain(point, n=4):
        positions, stats = [], []
        for _ in range(n):
            point, step_stats = step.step(point)
            positions.append(point["mu"].copy())
            stats.append(step_stats[0])
        return np.array(positions), stats

    first_positions, first_stats = continue_chain(point)
    step.sampling_state = state
    second_positions, second_stats = continue_chain(saved_point)
    np.testing.assert_array_equal(first_positions, second_positions)
    assert first_stats == second_stats
    assert step.chain.iteration == 7
    # Not a trivial equality: continuing from the end of the first run differs.
    third_positions, _ = continue_chain(point)
    assert not np.array_equal(first_positions, third_positions)


# -- divergences ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def exploding_sgld(gaussian_model):
    with gaussian_model:
        return compiled(pmsg.SGLD(step_size=1e200, n_steps=5))


def test_non_finite_trajectories_are_flagged_and_never_drawn(exploding_sgld, gaussian_model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = sample(
            exploding_sgld, gaussian_model, draws=12, tune=0, initvals={"theta": [0.3, -0.2]}
        )
    theta = draws_of(idata, "theta")
    np.testing.assert_array_equal(theta, np.broadcast_to([0.3, -0.2], theta.shape))
    assert stat(idata, "diverging").all()
    np.testing.assert_array_equal(stat(idata, "divergences")[0], np.arange(1, 13))
    assert np.isnan(stat(idata, "minibatch_logp")).all()
    advice = [
        w
        for w in caught
        if issubclass(w.category, RuntimeWarning) and "non-finite" in str(w.message)
    ]
    assert len(advice) == 1  # once per chain, not once per draw
    assert "Reduce step_size" in str(advice[0].message)


def test_twenty_consecutive_divergences_raise_sampling_error(exploding_sgld, gaussian_model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sample(exploding_sgld, gaussian_model, draws=19, tune=0)  # 19 in a row: still going
        with pytest.raises(SamplingError, match="failed 20 times in a row"):
            sample(exploding_sgld, gaussian_model, draws=20, tune=0)


def test_a_finite_trajectory_resets_the_consecutive_divergence_count(
    exploding_sgld, gaussian_model
):
    original = exploding_sgld.schedule
    # Iterations 0, 15, 30, ... are fine; the 14 in between blow up.
    exploding_sgld.schedule = lambda iteration: 1e-2 if iteration % 15 == 0 else 1e200
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            idata = sample(exploding_sgld, gaussian_model, draws=60, tune=0)
    finally:
        exploding_sgld.schedule = original
    diverging = stat(idata, "diverging")[0]
    np.testing.assert_array_equal(diverging, np.arange(60) % 15 != 0)
    assert stat(idata, "divergences")[0, -1] == 56
    theta = draws_of(idata, "theta")[0]
    assert np.all(np.isfinite(theta))
    # A diverging iteration keeps the previous draw; a finite one moves.
    np.testing.assert_array_equal(theta[1:][diverging[1:]], theta[:-1][diverging[1:]])
    assert not np.array_equal(theta[15], theta[14])


# -- several samplers in one model ----------------------------------------------------

OBSERVED_Y = np.array([1.2, 2.0])
SHIFT = 2.0
PRIOR_K = 0.3


def exact_discrete_posterior():
    """P(k = 1 | y) and E[mu | y] for k ~ Bern(0.3), mu ~ N(0, 1), y_j ~ N(mu + 2k, 1)."""
    n = OBSERVED_Y.size
    marginal_covariance = np.eye(n) + np.ones((n, n))  # mu integrated out
    likelihood = np.array(
        [
            st.multivariate_normal(np.full(n, SHIFT * k), marginal_covariance).pdf(OBSERVED_Y)
            for k in (0, 1)
        ]
    )
    weights = np.array([1 - PRIOR_K, PRIOR_K]) * likelihood
    weights /= weights.sum()
    conditional_means = np.array([(OBSERVED_Y - SHIFT * k).sum() / (n + 1) for k in (0, 1)])
    return weights[1], weights @ conditional_means


@pytest.fixture(scope="module")
def mixed_model():
    with pm.Model() as model:
        k = pm.Bernoulli("k", PRIOR_K)
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu + SHIFT * k, 1.0, observed=OBSERVED_Y)
    return model


@pytest.fixture(scope="module")
def mixed_model_sghmc(mixed_model):
    with mixed_model:
        return compiled(pmsg.SGHMC(step_size=0.05, n_steps=20))


def test_sghmc_with_gibbs_on_a_discrete_variable_gives_exact_marginals(
    mixed_model, mixed_model_sghmc
):
    with mixed_model:
        steps = [mixed_model_sghmc, pm.BinaryGibbsMetropolis([mixed_model["k"]])]
    idata = sample(steps, mixed_model, draws=1500, tune=200, chains=2, random_seed=11)
    p_k1, mean_mu = exact_discrete_posterior()
    assert 0.4 < p_k1 < 0.6 and 0.3 < mean_mu < 0.5  # far from k = 0 alone: mu ≈ 1.07
    ess = az.ess(idata)
    k, mu = draws_of(idata, "k"), draws_of(idata, "mu")
    assert float(ess["k"]) > 300 and float(ess["mu"]) > 300
    # 4 Monte Carlo standard errors, plus 0.02 for SGHMC's O(ε) bias without correction.
    assert k.mean() == pytest.approx(p_k1, abs=4 * standard_error(k, ess["k"]) + 0.02)
    assert mu.mean() == pytest.approx(mean_mu, abs=4 * standard_error(mu, ess["mu"]) + 0.02)


def test_discrete_variables_are_left_to_pm_sample_assignment(mixed_model, mixed_model_sghmc):
    assert [v.name for v in mixed_model_sghmc.vars] == ["mu"]
    idata = sample(mixed_model_sghmc, mixed_model, draws=200, tune=50)
    k = draws_of(idata, "k")
    assert set(np.unique(k)) == {0, 1}
    assert "minibatch_logp" in idata.sample_stats


def test_compound_step_with_variable_subsets_updates_the_shared_values():
    # a ~ N(0, 1), b ~ N(a, 1): corr(a, b) = 1/√2 and Var(b) = 2. If either sampler
    # saw a stale value of the other variable, the correlation would vanish.
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0)
        b = pm.Normal("b", a, 1.0)
        steps = [
            pmsg.SGHMC(vars=[a], step_size=0.1, n_steps=10),
            pmsg.SGLD(vars=[b], step_size=0.05, n_steps=10),
        ]
    idata = sample(steps, model, draws=800, tune=100, chains=2, random_seed=3)
    a_draws, b_draws = draws_of(idata, "a").ravel(), draws_of(idata, "b").ravel()
    # ESS ≈ 200: se(corr) ≈ (1 − ρ²)/√200 ≈ 0.035, se(Var b) ≈ 2 √(2/200) = 0.2.
    assert np.corrcoef(a_draws, b_draws)[0, 1] == pytest.approx(1 / math.sqrt(2), abs=0.15)
    assert b_draws.var() == pytest.approx(2.0, abs=0.6)
    assert stat(idata, "step_size").shape[-1] == 2  # one column per sampler


def test_transformed_variable_includes_the_jacobian():
    # Without log|dσ/dz| the density of z = log σ would be improper, exp(−e^{2z}/2),
    # and the chain would drift to σ → 0.
    with pm.Model() as model:
        pm.HalfNormal("sigma", 1.0)
        step = pmsg.SGHMC(step_size=0.1, n_steps=10)
    idata = sample(step, model, draws=1000, tune=100, chains=2, random_seed=3)
    sigma = draws_of(idata, "sigma")
    ess = float(az.ess(idata)["sigma"])
    assert ess > 200
    assert sigma.mean() == pytest.approx(
        math.sqrt(2 / math.pi), abs=4 * standard_error(sigma, ess) + 0.02
    )
    assert sigma.std() == pytest.approx(math.sqrt(1 - 2 / math.pi), rel=0.2)


# -- input validation -----------------------------------------------------------------


@pytest.fixture(scope="module")
def validation_model():
    with pm.Model() as model:
        k = pm.Bernoulli("k", 0.3)
        mu = pm.Normal("mu", 0.0, 1.0, shape=2)
        pm.Normal("y", mu.sum() + k, 1.0, observed=[1.0, 2.0])
    return model


BAD_INPUTS = [
    (pmsg.SGLD, {"step_size": 0.0}, ValueError, "step_size must be positive and finite"),
    (pmsg.SGLD, {"step_size": -1e-3}, ValueError, "step_size must be positive and finite"),
    (pmsg.SGLD, {"step_size": math.nan}, ValueError, "step_size must be positive and finite"),
    (pmsg.SGLD, {"step_size": math.inf}, ValueError, "step_size must be positive and finite"),
    (pmsg.SGLD, {"step_size": "small"}, TypeError, "step_size must be a real number"),
    (pmsg.SGLD, {"step_size": [1e-3]}, TypeError, "step_size must be a real number"),
    (pmsg.SGLD, {"step_size": None}, TypeError, "step_size is required"),
    (pmsg.SGHMC, {"step_size": "large"}, TypeError, "step_size"),
    (pmsg.SGHMC, {"step_size": 0.1, "friction": 0.0}, ValueError, "friction must be positive"),
    (pmsg.SGHMC, {"step_size": 0.1, "friction": -1}, ValueError, "friction must be positive"),
    (pmsg.SGHMC, {"step_size": 0.1, "friction": math.inf}, ValueError, "friction must be"),
    (pmsg.SGHMC, {"step_size": 0.1, "friction": "x"}, TypeError, "friction must be a real"),
    (
        pmsg.SGHMC,
        {"step_size": 0.1, "friction": 1.0, "noise_estimate": 2.0},
        ValueError,
        r"noise_estimate \(2.0\) exceeds friction \(1.0\)",
    ),
    (
        pmsg.SGHMC,
        {"step_size": 0.1, "noise_estimate": -0.5},
        ValueError,
        "noise_estimate must be non-negative",
    ),
    (pmsg.SGNHT, {"step_size": 0.1, "diffusion": 0.0}, ValueError, "diffusion must be positive"),
    (pmsg.SGNHT, {"step_size": 0.1, "diffusion": math.nan}, ValueError, "diffusion must be"),
    (pmsg.SGNHT, {"step_size": 0.1, "diffusion": "x"}, TypeError, "diffusion must be a real"),
    (pmsg.SGLD, {"step_size": 0.1, "n_steps": 0}, ValueError, "n_steps must be a positive int"),
    (pmsg.SGLD, {"step_size": 0.1, "n_steps": -3}, ValueError, "n_steps must be a positive int"),
    (pmsg.SGLD, {"step_size": 0.1, "n_steps": 2.5}, ValueError, "n_steps must be a positive int"),
    (pmsg.SGLD, {"step_size": 0.1, "n_steps": True}, ValueError, "n_steps must be a positive"),
    (pmsg.SGLD, {"step_size": 0.1, "n_steps": "10"}, ValueError, "n_steps must be a positive"),
    (pmsg.SGLD, {"step_size": 0.1, "minibatch": "epoch"}, ValueError, "minibatch must be one of"),
    (pmsg.SGLD, {"step_size": 0.1, "minibatch": None}, ValueError, "minibatch must be one of"),
    (pmsg.SGHMC, {"step_size": 0.1, "mass": 0.0}, ValueError, "mass vector of shape"),
    (pmsg.SGHMC, {"step_size": 0.1, "mass": [1.0, -1.0]}, ValueError, "mass vector of shape"),
    (pmsg.SGHMC, {"step_size": 0.1, "mass": [1.0, 2.0, 3.0]}, ValueError, r"shape \(3,\)"),
    (
        pmsg.SGNHT,
        {"step_size": 0.1, "mass": [[1.0, 2.0], [2.0, 1.0]]},
        ValueError,
        "mass matrix is not positive definite",
    ),
    (
        pmsg.SGHMC,
        {"step_size": 0.1, "mass": [[1.0, 0.5], [0.0, 1.0]]},
        ValueError,
        r"mass matrix of shape \(2, 2\) is not valid",
    ),
]


@pytest.mark.parametrize(
    ("sampler", "kwargs", "error", "match"),
    BAD_INPUTS,
    ids=[f"{s.__name__}-{'-'.join(map(str, kw.items()))}" for s, kw, _, _ in BAD_INPUTS],
)
def test_bad_input_gives_a_clear_error_before_sampling(
    sampler, kwargs, error, match, validation_model
):
    with validation_model, pytest.raises(error, match=match):
        sampler(**kwargs)


@pytest.mark.parametrize("sampler", [pmsg.SGLD, pmsg.SGHMC, pmsg.SGNHT])
def test_discrete_variable_assigned_to_a_gradient_sampler_is_refused(sampler, validation_model):
    with validation_model:
        with pytest.raises(ValueError, match=r"these variables are discrete: \['k'\]"):
            sampler(vars=[validation_model["k"]], step_size=0.1)
        with pytest.raises(ValueError, match="discrete"):
            sampler([validation_model["k"], validation_model["mu"]], step_size=0.1)


@pytest.mark.parametrize("sampler", [pmsg.SGLD, pmsg.SGHMC, pmsg.SGNHT])
def test_model_without_free_variables_is_refused(sampler):
    with pm.Model(), pytest.raises(ValueError, match="no free random variables"):
        sampler(step_size=0.1)
    with pm.Model():
        pm.Data("values", [1.0, 2.0])
        with pytest.raises(ValueError, match="no free random variables"):
            sampler(step_size=0.1)


def test_model_with_only_discrete_variables_is_refused():
    with pm.Model():
        pm.Poisson("count", 3.0)
        with pytest.raises(ValueError, match="samples continuous variables only"):
            pmsg.SGHMC(step_size=0.1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"step_size": "0.1"}, TypeError, "step_size must be a real number"),
        ({"step_size": True}, TypeError, "step_size must be a real number"),
        ({"step_size": 0.1, "friction": True}, TypeError, "friction must be a real number"),
        ({"step_size": 0.1, "mass": "abc"}, ValueError, "mass"),
    ],
)
def test_non_numeric_values_are_refused_by_name(kwargs, error, match, validation_model):
    with validation_model, pytest.raises(error, match=match):
        pmsg.SGHMC(**kwargs)


# -- the support of the model ----------------------------------------------------------


@pytest.fixture(scope="module")
def untransformed_scale_model():
    y = np.random.default_rng(3).normal(0.0, 1.0, size=N_ROWS)
    with pm.Model() as model:
        scale = pm.HalfNormal("scale", 1.0, default_transform=None)
        mu = pm.Normal("mu", 0.0, 1.0)
        batch = pmsg.Minibatch(y, batch_size=BATCH_SIZE)
        pm.Normal("y", mu, scale, observed=batch, total_size=N_ROWS)
    return model


@pytest.mark.parametrize("sampler", ["SGLD", "HMC"])
def test_a_step_out_of_the_support_is_a_rejected_move_not_an_exception(
    sampler, untransformed_scale_model
):
    # PyMC's samplers read a violated parameter check (scale > 0) as log density -inf; so
    # must ours: the chain stays where it was and flags the iteration.
    with untransformed_scale_model:
        step = getattr(pmsg, sampler)(step_size=1e-3, n_steps=3)
    step.setup_chain(np.random.default_rng(1), tune=0, draws=1)
    start = {"scale": np.array(-0.5), "mu": np.array(0.2)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        point, stats = step.step(start)
    assert float(point["scale"]) == -0.5 and float(point["mu"]) == 0.2
    assert stats[0]["diverging"]


def test_hmc_full_data_density_of_a_transformed_variable():
    # The full-data density is rebuilt from a copy of the model; its value variables must
    # be matched by name, and "sigma_log__" is no name the model can be indexed with.
    y = np.random.default_rng(4).normal(1.0, 2.0, size=N_ROWS)
    with pm.Model():
        sigma = pm.HalfNormal("sigma", 5.0)
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        pm.Normal(
            "y", mu, sigma, observed=pmsg.Minibatch(y, batch_size=BATCH_SIZE), total_size=N_ROWS
        )
        step = pmsg.HMC(step_size=1e-3, n_steps=1)
    step.setup_chain(np.random.default_rng(2), tune=0, draws=1)
    position = np.array([0.3, 0.7])  # [sigma_log__, mu] in the step's order
    fn = step.trajectory_function
    inputs = step.trajectory_inputs(position, 1e-3)
    assert inputs["position"].ndim == 1
    order = [v.name for v in step.vars]
    logp_start = fn.named(**inputs)["logp_start"]
    point = dict(zip(order, position, strict=True))
    log_sigma, mu_value = point["sigma_log__"], point["mu"]
    expected = (
        st.halfnorm(scale=5.0).logpdf(np.exp(log_sigma))
        + log_sigma  # Jacobian of the log transform
        + st.norm(0.0, PRIOR_SD).logpdf(mu_value)
        + st.norm(mu_value, np.exp(log_sigma)).logpdf(y).sum()
    )
    np.testing.assert_allclose(logp_start, expected, rtol=1e-9)


# -- interruption ---------------------------------------------------------------------


def test_an_interrupted_run_hands_back_the_draws_so_far(gaussian_model):
    # Ctrl-C in pm.sample: as with NUTS, the draws made so far come back, usable.
    with gaussian_model:
        step = pmsg.SGHMC(step_size=0.1, n_steps=5)
    iterations = []

    def interrupt_after_40(trace, draw):
        iterations.append(draw)
        if len(iterations) == 40:
            raise KeyboardInterrupt

    idata = sample(step, gaussian_model, draws=100, tune=20, callback=interrupt_after_40)
    theta = draws_of(idata, "theta")
    assert theta.shape == (1, 20, 2)  # 20 tuning iterations, then 20 kept draws
    assert np.all(np.isfinite(theta)) and len(np.unique(theta[0, :, 0])) == 20
    assert stat(idata, "diverging").shape == (1, 20)
    assert az.summary(idata).shape[0] == 2


def test_the_set_up_is_timed_and_logged_with_the_rows_it_read(minibatch_model, caplog):
    with minibatch_model, caplog.at_level(logging.INFO, logger="pymc_sgmcmc"):
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
    assert step.mode_seconds > 0 and step.setup_seconds >= step.mode_seconds
    passes = step.rows_touched_by_setup / N_ROWS
    [record] = [r for r in caplog.records if r.name == "pymc_sgmcmc"]
    assert record.getMessage() == (
        f"SGHMC: set-up took {step.setup_seconds:.1f} s (mode search "
        f"{step.mode_seconds:.1f} s; rows read: {passes:.1f}× the data)"
    )


def test_a_long_first_draw_is_logged_once(minibatch_model, caplog, monkeypatch):
    # Compiling happens at the first draw, after the set-up the step reports: a long
    # first draw is said once, with its time.
    monkeypatch.setattr(step_module, "FIRST_DRAW_REPORT_SECONDS", 0.0)
    with minibatch_model:
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
    assert step.first_draw_seconds is None
    with caplog.at_level(logging.INFO, logger="pymc_sgmcmc"):
        sample(step, minibatch_model, draws=5, tune=5)
    messages = [r.getMessage() for r in caplog.records if "first draw" in r.getMessage()]
    assert step.first_draw_seconds > 0
    assert messages == [
        f"SGHMC: the first draw took {step.first_draw_seconds:.1f} s (functions compiled "
        "at first use: the trajectory and the moves that follow it)"
    ]
