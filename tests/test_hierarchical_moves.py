"""The moves that follow each trajectory of a grouped step, and what they do together.

A normal hierarchy with unknown mean and scale, ``mu ~ N(0, 5²)``, ``tau ~ HalfNormal(2)``,
``a_j = mu + tau z_j`` (non-centred), ``z_j ~ N(0, 1)``, ``y_i ~ N(a_{g_i}, 2²)``, over 40
groups of very unequal sizes (1 to 80 rows). Exact answers:

- given every ``a``, the globals' conditional is ``p(mu) p(tau) Π N(a_j | mu, tau)``, on a
  grid;
- given ``mu`` and ``tau``, each ``z_j`` is Gaussian in closed form;
- the posterior: the intercepts integrate out (a group's mean row is
  ``N(mu, tau² + 4/n_j)``), so ``p(mu, tau | y)`` is a grid, and each intercept's mean and
  sd are grid averages of its conditional ones.
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from helpers import gaussian_raw_moments, mean_and_variance_errors, mixture_moments, sample, stat
from scipy.special import logsumexp

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.dynamics import interweaving
from pymc_sgmcmc.sampling import global_updates, local_updates
from pymc_sgmcmc.sampling import interweaving as sampling_interweaving
from pymc_sgmcmc.sampling.groups import GroupLogDensities
from pymc_sgmcmc.sampling.interweaving import adapted_log_scales
from pymc_sgmcmc.sampling.whole_groups import WholeGroups

N_GROUPS, NOISE_SD, MU_SD, TAU_SCALE, BETA_SD = 40, 2.0, 5.0, 2.0, 10.0


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    sizes = np.minimum(1 + rng.zipf(1.6, size=N_GROUPS), 80)
    group = np.repeat(np.arange(N_GROUPS), sizes)
    intercepts = 0.3 + 0.6 * rng.normal(size=N_GROUPS)
    return group, intercepts[group] + NOISE_SD * rng.normal(size=group.size)


def model_of(group, y, centred=False, batch_size=60):
    n_groups = int(group.max()) + 1
    with pm.Model() as model:
        group_mb, y_mb = pm.Minibatch(group, y, batch_size=batch_size)
        mu = pm.Normal("mu", 0.0, MU_SD)
        tau = pm.HalfNormal("tau", TAU_SCALE)
        if centred:
            a = pm.Normal("a", mu, tau, shape=n_groups)
        else:
            a = pm.Deterministic("a", mu + tau * pm.Normal("z", 0.0, 1.0, shape=n_groups))
        pm.Normal("y", a[group_mb], NOISE_SD, observed=y_mb, total_size=y.size)
    return model


@pytest.fixture(scope="module")
def model(data):
    """The non-centred model, shared: a step built on it again reuses its compiled
    functions (a graph that a test changes is compiled anew)."""
    return model_of(*data)


def grid_weights(log_density):
    """``mu`` and ``tau`` on a grid and normalised weights of ``log_density(mu, tau)``.

    The grid is in ``log tau`` (its Jacobian is added), 400 × 600 points over wide ranges.
    """
    mu = np.linspace(-4.0, 4.0, 400)[:, None]
    log_tau = np.linspace(np.log(1e-3), np.log(8.0), 600)[None, :]
    logp = log_density(mu, np.exp(log_tau)) + log_tau
    return mu, np.exp(log_tau), np.exp(logp - logsumexp(logp))


def moments(weights, value):
    """Mean, sd and sd of squared deviations of ``value`` on the grid."""
    return mixture_moments(weights, [value**k for k in range(1, 5)])


def log_prior(mu, tau):
    return -0.5 * (mu / MU_SD) ** 2 - 0.5 * (tau / TAU_SCALE) ** 2


def conditional_moments_given(a):
    """Mean and sd of ``mu`` and of ``tau`` given every intercept ``a``, on the grid.

    ``p(mu, tau | a) ∝ p(mu) p(tau) Π N(a_j | mu, tau)``: the data enter only through ``a``.
    """
    _, _, weights = grid_weights(
        lambda mu, tau: (
            log_prior(mu, tau)
            - 0.5 * (((a - mu[..., None]) / tau[..., None]) ** 2).sum(-1)
            - N_GROUPS * np.log(tau)
        )
    )
    mu_grid, tau_grid, _ = grid_weights(lambda mu, tau: 0 * mu * tau)
    return [moments(weights, grid) for grid in (mu_grid + 0 * tau_grid, tau_grid + 0 * mu_grid)]


@pytest.fixture(scope="module")
def exact_posterior(data):
    """Means and sds of ``mu``, ``tau`` and the intercepts (the module's docstring)."""
    group, y = data
    sizes = np.bincount(group)
    means = np.bincount(group, y) / sizes

    def marginal(mu, tau):
        variance = tau[..., None] ** 2 + NOISE_SD**2 / sizes
        deviation = (means - mu[..., None]) ** 2 / variance
        return log_prior(mu, tau) - 0.5 * (np.log(variance) + deviation).sum(-1)

    mu, tau, weights = grid_weights(marginal)
    variance = 1 / (1 / tau[..., None] ** 2 + sizes / NOISE_SD**2)
    mean = variance * (mu[..., None] / tau[..., None] ** 2 + sizes * means / NOISE_SD**2)
    a = mixture_moments(weights[..., None], gaussian_raw_moments(mean, variance), axis=(0, 1))
    return {"mu": moments(weights, mu), "tau": moments(weights, tau), "a": a}


def standard_errors(draws, mean, sd, sd_of_squares):
    """Errors of one chain's means and variances, each in its Monte Carlo standard errors.

    Draws are (draws, coordinates) from a chain (:func:`helpers.mean_and_variance_errors`
    for the rest). The variance's error uses the ESS of the squared deviations: a chain can
    be antithetic in ``x`` (ESS above the draws, as a short Hamiltonian trajectory makes it)
    and still correlated in ``x²``.
    """
    return mean_and_variance_errors(draws[None], mean, sd, sd_of_squares)


def quiet_step(model, cls=pmsg.SGHMC, **kwargs):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return cls(**kwargs)


def flat_point(step, **values):
    return np.concatenate([np.ravel(values[v.name]) for v in step.vars]).astype(float)


def unflattened(step, position):
    sizes = [np.size(step._initial_point[v.name]) for v in step.vars]
    parts = np.split(position, np.cumsum(sizes)[:-1])
    return {v.name: part for v, part in zip(step.vars, parts, strict=True)}


def test_the_non_centred_form_is_found_and_the_centred_one_is_not(data, model):
    step = quiet_step(model)
    assert step.groups.interweaving is not None and step.groups.local_move is not None
    marked = unflattened(step, np.arange(step.dim))
    expected = sorted(int(marked[name][0]) for name in ("mu", "tau_log__"))
    assert sorted(step.groups.interweaving.hierarchy.global_coordinates) == expected
    # Without a mode search (which would fail and turn the model non-centred).
    centred = quiet_step(model_of(*data, centred=True), step_size=0.05, gradient="minibatch")
    assert centred.non_centring is None
    assert centred.groups.interweaving is None and centred.groups.local_move is not None


def run_interweaving(step, position, n_moves, seed):
    """The interweaving move alone from ``position``: draws of ``(mu, tau)`` and ``a``."""
    move, rng = step.groups.interweaving, np.random.default_rng(seed)
    log_scales = move.initial_log_scales(position)
    draws, intercepts = [], []
    for t in range(n_moves):
        position, acceptance = move.move(position, log_scales, rng)
        if t < n_moves // 4:  # adapted during the first quarter, then frozen and dropped
            log_scales = adapted_log_scales(log_scales, acceptance, t)
            continue
        point = unflattened(step, position)
        mu, tau = float(point["mu"][0]), float(np.exp(point["tau_log__"][0]))
        draws.append((mu, tau))
        intercepts.append(mu + tau * point["z"])
    return np.array(draws), np.array(intercepts)


def interweaving_errors(model, n_moves=4000):
    """Mean errors of ``(mu, tau)`` in Monte Carlo standard errors, and the drift of ``a``."""
    step = quiet_step(model)
    z = np.random.default_rng(0).normal(size=N_GROUPS)
    position = flat_point(step, mu=0.4, tau_log__=np.log(0.5), z=z)
    a = 0.4 + 0.5 * z
    draws, intercepts = run_interweaving(step, position, n_moves, seed=1)
    errors = []
    for k, (mean, *_) in enumerate(conditional_moments_given(a)):
        mcse = draws[:, k].std() / np.sqrt(az.ess(draws[:, k].reshape(1, -1)))
        errors.append(abs(draws[:, k].mean() - mean) / mcse)
    return np.array(errors), float(np.abs(intercepts - a).max())


def test_interweaving_keeps_every_intercept_and_draws_the_globals_given_them(model):
    errors, drift = interweaving_errors(model)
    assert drift < 1e-10
    # 4 standard errors on two quantities: a false alarm has probability < 2e-4.
    assert errors.max() < 4.0, errors


def test_interweaving_without_the_jacobian_is_caught(model, monkeypatch):
    # The change of variables z -> a has Jacobian 1/tau per group: left out, the move
    # draws tau from p(mu, tau) Π N(z_j) instead of the conditional given a.
    recentred = interweaving.recentred
    monkeypatch.setattr(
        sampling_interweaving,
        "recentred",
        lambda a, location, scale: (recentred(a, location, scale)[0], 0.0 * scale.sum()),
    )
    errors, _ = interweaving_errors(model)
    assert errors.max() > 10.0, errors


def local_move_errors(
    data, model, per_group=True, fixed_curvature=False, n_moves=6000, whole_sweep=False
):
    """The local move alone, 10 of the 40 groups each time, globals held: z's errors.

    ``fixed_curvature``: the Newton proposal with a given curvature, 0.7 times each
    conditional's precision (a proposal that does not match must still be exact).
    ``whole_sweep``: every group at each move, in the step's own chunks (several, each
    reading its rows in place), as a step's sweep moves them.
    """
    group, y = data
    step = quiet_step(model)
    move = step.groups.local_move
    assert move.per_group is not None
    if not per_group:
        move.per_group = None  # one test for all the drawn groups, as for a tied prior
    mu, tau = 0.4, 0.5
    position = flat_point(step, mu=mu, tau_log__=np.log(tau), z=np.zeros(N_GROUPS))
    rng = np.random.default_rng(2)
    inv_mass = np.ones(position.size)
    z_at = step.groups.grouping.layout.local_positions[:, 0]
    # z_j | mu, tau, y ~ N(m_j, v_j): precision 1 + n_j tau²/σ², shift tau Σ (y − mu)/σ².
    sizes = np.bincount(group)
    variance = 1 / (1 + sizes * tau**2 / NOISE_SD**2)
    mean = variance * tau * np.bincount(group, y - mu) / NOISE_SD**2
    curvature = None
    if fixed_curvature:
        curvature = np.ones(position.size)
        curvature[z_at] = 0.7 / variance
    draws = []
    for _ in range(n_moves):
        if whole_sweep:
            for chunk in move.sweep_chunks():
                position = move.newton_move(position, chunk, rng, curvature).position
        else:
            groups = rng.permutation(N_GROUPS)[:10]
            position = move.move(position, groups, inv_mass, 0.3, rng, curvature).position
        draws.append(position[z_at])
    draws = np.array(draws)
    z_mean, z_variance = standard_errors(draws, mean, np.sqrt(variance), np.sqrt(2) * variance)
    return float(z_mean.max()), float(z_variance.max())


@pytest.mark.parametrize(
    "per_group, fixed_curvature",
    [(True, False), (True, True), (False, False)],
    ids=["a test per group", "a test per group, fixed curvature", "one test"],
)
def test_the_local_move_draws_the_locals_given_the_globals(data, model, per_group, fixed_curvature):
    worst_mean, worst_variance = local_move_errors(data, model, per_group, fixed_curvature)
    # 4.5 standard errors over 40 coordinates: a false alarm has probability < 3e-4.
    assert worst_mean < 4.5 and worst_variance < 4.5, (worst_mean, worst_variance)


def test_the_sweep_in_chunks_read_in_place_draws_the_locals_given_the_globals(
    data, model, monkeypatch
):
    # Chunks of about 100 rows: several compiled calls, each reading a slice of the data.
    monkeypatch.setattr(local_updates, "ROWS_PER_CALL", 100)
    worst_mean, worst_variance = local_move_errors(data, model, n_moves=3000, whole_sweep=True)
    assert worst_mean < 4.5 and worst_variance < 4.5, (worst_mean, worst_variance)


def sweep_of(group, y):
    """A step's sweep chunks on the data in the given row order."""
    return quiet_step(model_of(group, y)).groups.local_move


def test_rows_sorted_by_group_are_read_in_place_and_give_the_same_move(data, monkeypatch):
    monkeypatch.setattr(local_updates, "ROWS_PER_CALL", 100)
    group, y = data
    sizes = np.bincount(group)
    rng = np.random.default_rng(3)
    # The groups' blocks in another order than their index: still consecutive rows.
    order = rng.permutation(N_GROUPS)
    blocks = np.concatenate([np.flatnonzero(group == j) for j in order])
    shuffled = rng.permutation(group.size)
    for rows, in_place in ((np.arange(group.size), True), (blocks, True), (shuffled, False)):
        move = sweep_of(group[rows], y[rows])
        if rows is blocks:
            blocks_move = move
        chunks = move.sweep_chunks()
        assert len(chunks) >= 3
        assert np.array_equal(np.sort(np.concatenate([c.groups for c in chunks])), np.arange(40))
        assert all(isinstance(c.rows, slice) == in_place for c in chunks)
        read = np.concatenate(
            [np.arange(c.rows.start, c.rows.stop) if in_place else c.rows for c in chunks]
        )
        assert np.array_equal(np.sort(read), np.arange(group.size))
    # The same chunk read in place and gathered: the same move, from the same numbers.
    move = blocks_move
    chunk = move.sweep_chunks()[1]
    gathered = chunk._replace(rows=np.arange(chunk.rows.start, chunk.rows.stop))
    position = np.random.default_rng(4).normal(size=move.layout.dim)
    curvature = np.full(position.size, 2.0)
    for fixed in (None, curvature):
        a = move.newton_move(position, chunk, np.random.default_rng(5), fixed)
        b = move.newton_move(position, gathered, np.random.default_rng(5), fixed)
        np.testing.assert_allclose(a.position, b.position, rtol=1e-13, atol=1e-13)
        assert a.accept == pytest.approx(b.accept, rel=1e-12)
        assert not np.array_equal(a.position, position)
        assert sizes[chunk.groups].sum() == chunk.rows.stop - chunk.rows.start


def test_a_local_move_with_pymcs_minibatch_scaling_is_caught(data, model, monkeypatch):
    # Rows weighted N/n, as PyMC weights a minibatch, instead of 1: too narrow.
    monkeypatch.setattr(GroupLogDensities, "row_weight", lambda self, rows, dtype: 1.0)
    _, worst_variance = local_move_errors(data, model)
    assert worst_variance > 10.0, worst_variance


def slope_model(group, y, x):
    """The centred hierarchy with a shared slope: ``y_i ~ N(a_{g_i} + beta x_i, 2²)``."""
    with pm.Model() as model:
        group_mb, x_mb, y_mb = pm.Minibatch(group, x, y, batch_size=60)
        mu = pm.Normal("mu", 0.0, MU_SD)
        tau = pm.HalfNormal("tau", TAU_SCALE)
        a = pm.Normal("a", mu, tau, shape=N_GROUPS)
        beta = pm.Normal("beta", 0.0, BETA_SD)
        pm.Normal("y", a[group_mb] + beta * x_mb, NOISE_SD, observed=y_mb, total_size=y.size)
    return model


def global_move_errors(data, n_moves=4000, precision_factor=0.7):
    """The globals' move alone, every ``a`` held: errors of ``mu``, ``tau``, ``beta``.

    Given ``a``, ``(mu, tau)`` have the grid conditional ``p(mu) p(tau) Π N(a_j | mu, tau)``
    and ``beta`` is Gaussian: precision ``1/BETA_SD² + Σx²/σ²``, mean ``Σx(y − a_g)/σ²``
    over it. The proposal's precision is ``precision_factor`` times the one differenced
    at the start: a proposal that does not match must still be exact.
    """
    group, y = data
    x = np.random.default_rng(3).normal(size=y.size)
    y = y + 0.7 * x
    step = quiet_step(slope_model(group, y, x), step_size=0.05, gradient="minibatch")
    move = step.groups.global_move
    assert move is not None
    a = 0.3 + 0.6 * np.random.default_rng(4).normal(size=N_GROUPS)
    position = flat_point(step, mu=0.4, tau_log__=np.log(0.5), a=a, beta=0.5)
    assert sorted(move.global_positions) == sorted(
        int(unflattened(step, np.arange(step.dim))[name][0]) for name in ("mu", "tau_log__", "beta")
    )
    precision = move.fitted_precision(position, np.ones(move.global_positions.size))
    factor = np.linalg.cholesky(precision_factor * precision)
    rng = np.random.default_rng(5)
    draws, accepted = [], []
    for _ in range(n_moves):
        result = move.move(position, factor, rng)
        position = result.position
        accepted.append(result.accept)
        point = unflattened(step, position)
        assert np.array_equal(point["a"], a)
        draws.append((point["mu"][0], np.exp(point["tau_log__"][0]), point["beta"][0]))
    draws = np.array(draws)
    beta_precision = 1 / BETA_SD**2 + (x**2).sum() / NOISE_SD**2
    beta = (
        (x * (y - a[group])).sum() / NOISE_SD**2 / beta_precision,
        beta_precision**-0.5,
        np.sqrt(2) / beta_precision,
    )
    exact = np.array([*conditional_moments_given(a), beta]).T
    z_mean, z_variance = standard_errors(draws, *exact)
    return float(z_mean.max()), float(z_variance.max()), float(np.mean(accepted))


def test_the_global_move_draws_the_globals_given_the_locals(data):
    worst_mean, worst_variance, acceptance = global_move_errors(data)
    # 4.5 standard errors on three quantities: a false alarm has probability < 1e-4.
    assert worst_mean < 4.5 and worst_variance < 4.5, (worst_mean, worst_variance)
    assert acceptance > 0.5, acceptance


def test_a_global_move_without_the_hastings_correction_is_caught(data, monkeypatch):
    # The proposal's densities left out: a Newton proposal of the wrong spread is then
    # kept as if it were symmetric.
    monkeypatch.setattr(global_updates, "dense_newton_log_density", lambda *args: 0.0)
    _, worst_variance, _ = global_move_errors(data)
    assert worst_variance > 10.0, worst_variance


def test_a_grouped_model_with_many_globals_leaves_them_to_the_kernel(data, monkeypatch):
    # 240 shared slopes: the grouped Hessian (a D × G array, 2(r + G) full passes) and the
    # globals' dense Newton move are not made; the step still samples every variable.
    group, y = data
    n_slopes = 240
    x = np.random.default_rng(3).normal(size=(y.size, n_slopes))

    def no_grouped_hessian(*args, **kwargs):
        raise AssertionError("the grouped Hessian was differenced")

    monkeypatch.setattr(
        "pymc_sgmcmc.sampling.mode.grouped_hessian_by_differences", no_grouped_hessian
    )
    with pm.Model() as model:
        group_mb, x_mb, y_mb = pm.Minibatch(group, x, y, batch_size=60)
        mu = pm.Normal("mu", 0.0, MU_SD)
        tau = pm.HalfNormal("tau", TAU_SCALE)
        a = mu + tau * pm.Normal("z", 0.0, 1.0, shape=N_GROUPS)
        beta = pm.Normal("beta", 0.0, 0.1, shape=n_slopes)
        pm.Normal("y", a[group_mb] + x_mb @ beta, NOISE_SD, observed=y_mb, total_size=y.size)
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
    assert step.groups is not None and step.groups.global_move is None
    idata = sample(step, model, tune=20, draws=20)
    assert np.all(np.isfinite(idata.posterior["beta"].values))


@pytest.mark.statistical
def test_sghmc_defaults_match_the_exact_posterior_of_an_unbalanced_hierarchy(
    model, exact_posterior
):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        idata = pm.sample(
            draws=1500, tune=1500, chains=2, cores=1, step=pmsg.SGHMC(), random_seed=4,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    posterior = idata.posterior
    for name in ("mu", "tau", "a"):
        values = posterior[name].values
        exact = exact_posterior[name]
        for chain in values:  # each chain on its own: both must be right
            z_mean, z_variance = standard_errors(chain.reshape(len(chain), -1), *exact)
            # 4.5 standard errors over 2 x 42 quantities: a false alarm, p < 6e-4.
            assert np.max(z_mean) < 4.5, (name, np.max(z_mean))
            assert np.max(z_variance) < 4.5, (name, np.max(z_variance))
    # Measured: 589 here; 57 without the moves that follow each trajectory.
    ess = float(az.ess(posterior)["tau"])
    assert ess > 200, ess


def test_a_centred_hierarchy_without_a_mode_is_sampled_as_its_non_centred_twin(data, model):
    # 40 groups, half of them with 1-3 rows: the centred joint density grows without
    # bound as tau -> 0, and the search ends in the funnel's neck (tau 5e-9, a Hessian
    # that is not finite). The step samples a = mu + tau * a_z instead, which is the
    # hand-written non-centred model: the same draws for the same seed, up to rounding.
    # That one matches the exact posterior (the test above). The two graphs round
    # differently at 1e-16, which the interweaving move's finite-difference scales
    # amplify: measured, the draws agree to 3e-7.
    draws = {}
    for centred in (True, False):
        on = model_of(*data, centred=True) if centred else model
        step = quiet_step(on)
        assert (step.non_centring is not None) == centred
        if centred:
            assert step.non_centring.names == ("a",)
            assert [v.name for v in step.non_centring.vars] == ["mu", "tau_log__", "a_z"]
        idata = sample(step, on, draws=60, tune=60, random_seed=9)
        draws[centred] = {k: idata.posterior[k].values for k in ("mu", "tau", "a")}
    for name in ("mu", "tau", "a"):
        np.testing.assert_allclose(draws[True][name], draws[False][name], rtol=0, atol=1e-5)
    assert np.std(draws[True]["tau"]) > 0


def county_model(n_counties, log_rows, seed):
    """A radon-like centred model: county intercepts, a shared slope, unknown noise.

    County sizes are lognormal with log-mean ``log_rows`` and log-sd 1.3.
    """
    rng = np.random.default_rng(seed)
    sizes = np.maximum(np.ceil(rng.lognormal(log_rows, 1.3, size=n_counties)), 1)
    county = np.repeat(np.arange(n_counties), sizes.astype(int))
    floor = (rng.uniform(size=county.size) < 0.2).astype(float)
    y = (1.5 + 0.35 * rng.normal(size=n_counties))[county] - 0.6 * floor
    y = y + 0.75 * rng.normal(size=county.size)
    with pm.Model() as model:
        county_mb, floor_mb, y_mb = pm.Minibatch(county, floor, y, batch_size=100)
        mu = pm.Normal("mu", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        slope = pm.Normal("b", 0.0, 2.0)
        sigma_y = pm.HalfNormal("sigma_y", 2.0)
        a = pm.Normal("a", mu, sigma_a, shape=n_counties)
        pm.Normal("y", a[county_mb] + slope * floor_mb, sigma_y, observed=y_mb,
                  total_size=y.size)  # fmt: skip
    return model


@pytest.mark.parametrize(
    ("n_counties", "log_rows", "non_centred"), [(386, 0.8, True), (120, 5.0, False)]
)
def test_a_centred_hierarchy_is_sampled_non_centred_where_its_prior_dominates(
    n_counties, log_rows, non_centred, caplog
):
    # With 386 counties of a few rows (232 of them with 1-3), the mode search stops in the
    # funnel's neck (measured: a group scale of 1.5e-8), where the centred chains did not
    # move (errors of 25 sds) while the twin was within 0.18 sd. The grouped Hessian there
    # is not negative definite (no joint mode); before it was differenced whole, its
    # diagonal alone was finite and the twin was chosen because each intercept's precision
    # was ~100 % prior. With ~200 rows a county the data give most of it and the model is
    # sampled as written.
    with caplog.at_level("INFO", logger="pymc_sgmcmc"):
        step = quiet_step(county_model(n_counties, log_rows, seed=3))
    assert (step.non_centring is not None) is non_centred
    if non_centred:
        assert "has no joint mode; sampled non-centred" in caplog.text
        # The trace still holds the user's intercepts, mapped back from the twin's.
        z = np.random.default_rng(0).normal(size=step.dim)
        assert np.allclose(step.non_centring.to_sampled(step.non_centring.to_model(z)), z)


def weak_logistic_groups(n_groups=200, mean_rows=100, seed=3):
    """Centred logistic intercepts, lognormal group sizes (log-sd 2): many weak groups."""
    rng = np.random.default_rng(seed)
    intercepts = rng.normal(-1.0, 1.0, size=n_groups)
    log_mean = np.log(mean_rows) - 2.0
    sizes = np.ceil(np.random.default_rng(seed + 2).lognormal(log_mean, 2.0, size=n_groups))
    group = np.repeat(np.arange(n_groups), sizes.astype(int))
    x = rng.normal(size=group.size)
    logit = intercepts[group] + 0.5 * x
    y = (rng.uniform(size=group.size) < 1 / (1 + np.exp(-logit))).astype(float)
    with pm.Model() as model:
        group_mb, x_mb, y_mb = pm.Minibatch(group, x, y, batch_size=200)
        mu = pm.Normal("mu", 0.0, 5.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        a = pm.Normal("a", mu, sigma, shape=n_groups)
        b = pm.Normal("b", 0.0, 2.0)
        pm.Bernoulli("y", logit_p=a[group_mb] + b * x_mb, observed=y_mb, total_size=y.size)
    return model


def test_a_twin_chosen_at_the_centred_mode_takes_that_mode_as_its_own(caplog):
    # The centred mode exists, but its prior gives more than half of the locals'
    # precision: the twin is sampled. Its own joint mode is no guide (on 2,000 such groups
    # a group scale of 13.4 against a posterior of 1.0, after 1,108 passes' worth of
    # rows); the centred mode, mapped, is taken instead, with its curvature alone.
    model = weak_logistic_groups()
    with caplog.at_level("INFO", logger="pymc_sgmcmc"):
        step = quiet_step(model, mode_kwargs={"progressbar": False})
    assert step.non_centring is not None
    assert "has its mode where the prior gives" in caplog.text
    assert step.mode.message == "the start taken as the mode (search=False)"
    assert step.mode.covariance is not None and np.all(step.mode.covariance > 0)
    # The centred mode found again by find_mode (L-BFGS, where the step took grouped
    # Newton steps): the two searches agree to ~1e-5.
    centred = pmsg.find_mode(model=model, progressbar=False)
    flat = np.concatenate([np.ravel(centred[v.name]) for v in model.continuous_value_vars])
    np.testing.assert_allclose(step.non_centring.to_model(step.mode.position), flat, atol=1e-4)


def test_a_centred_hierarchy_that_cannot_be_non_centred_is_told_to_write_it_so():
    # A centred Laplace hierarchy has the same funnel and no non-centred twin here. Started
    # without a mode (as a Gamma hierarchy is, tests/test_without_mode.py) its chains fell
    # into the funnel (the location 6.9 sds off, ESS 3), so it is refused with the fix.
    rng = np.random.default_rng(5)
    group = np.repeat(np.arange(300), np.minimum(1 + rng.zipf(1.6, size=300), 400))
    y = 0.3 + 0.6 * rng.normal(size=300)[group] + NOISE_SD * rng.normal(size=group.size)
    with pm.Model(), warnings.catch_warnings():
        group_mb, y_mb = pm.Minibatch(group, y, batch_size=500)
        mu = pm.Normal("mu", 0.0, MU_SD)
        tau = pm.HalfNormal("tau", TAU_SCALE)
        a = pm.Laplace("a", mu, tau, shape=300)
        pm.Normal("y", a[group_mb], NOISE_SD, observed=y_mb, total_size=y.size)
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match=r"non-centred, e\.g\. a = mu \+ sigma \* z"):
            pmsg.SGHMC(mode_kwargs={"progressbar": False})


# A Poisson random-intercept model (log-rates of 30 sites with 1-12 yearly counts each, a
# shared trend), against a long NUTS run on the full data: no closed form.
N_SITES = 30


@pytest.fixture(scope="module")
def counts():
    rng = np.random.default_rng(11)
    site = np.repeat(np.arange(N_SITES), rng.integers(1, 13, size=N_SITES))
    year = rng.normal(size=site.size)
    log_rate = 1.0 + 0.5 * rng.normal(size=N_SITES)[site] + 0.3 * year
    return site, year, rng.poisson(np.exp(log_rate)).astype(np.int32)


def poisson_model(site, year, y, batch_size=None):
    with pm.Model() as model:
        if batch_size is None:
            site_data, year_data, y_data, total = site, year, y, None
        else:
            site_data, year_data, y_data = pm.Minibatch(site, year, y, batch_size=batch_size)
            total = y.size
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        trend = pm.Normal("trend", 0.0, 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=N_SITES)
        log_rate = pm.Deterministic("a", mu + sigma * z)[site_data] + trend * year_data
        pm.Poisson("y", pm.math.exp(log_rate), observed=y_data, total_size=total)
    return model


@pytest.fixture(scope="module")
def nuts_reference(counts):
    """Per quantity: draws of 4 NUTS chains x 2,500 (their MCSEs enter the tolerance)."""
    with poisson_model(*counts):
        idata = pm.sample(
            draws=2500, tune=1000, chains=4, cores=1, random_seed=5, progressbar=False,
            compute_convergence_checks=False,
        )  # fmt: skip
    return {name: idata.posterior[name].values for name in ("mu", "sigma", "trend", "a")}


@pytest.fixture(scope="module")
def minibatched_counts(counts):
    """Shared by the two tests below: the second compiles only the move it changes."""
    return poisson_model(*counts, batch_size=40)


def poisson_errors(model, reference, seed=6):
    """Worst mean and variance errors of pmsg.SGHMC() against NUTS, in combined MCSEs."""
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC()
        idata = pm.sample(
            draws=2000, tune=2000, chains=2, cores=1, step=step, random_seed=seed,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    assert step.groups is not None and step.groups.interweaving is not None
    worst_mean = worst_variance = 0.0
    for name, nuts in reference.items():
        ours = idata.posterior[name].values
        ours, nuts = (v.reshape(*v.shape[:2], -1) for v in (ours, nuts))
        pooled_nuts = nuts.reshape(-1, nuts.shape[-1])
        mean, sd = pooled_nuts.mean(0), pooled_nuts.std(0)

        def mcse(draws, centre):
            # Of the mean and of the mean squared deviation from ``centre``.
            squares = (draws - centre) ** 2
            return (
                draws.reshape(-1, draws.shape[-1]).std(0) / np.sqrt(az.ess(draws)),
                squares.reshape(-1, draws.shape[-1]).std(0) / np.sqrt(az.ess(squares)),
            )

        ours_mean_se, ours_var_se = mcse(ours, mean)
        nuts_mean_se, nuts_var_se = mcse(nuts, mean)
        flat = ours.reshape(-1, ours.shape[-1])
        z_mean = np.abs(flat.mean(0) - mean) / np.hypot(ours_mean_se, nuts_mean_se)
        z_var = np.abs(((flat - mean) ** 2).mean(0) - sd**2) / np.hypot(ours_var_se, nuts_var_se)
        worst_mean = max(worst_mean, float(z_mean.max()))
        worst_variance = max(worst_variance, float(z_var.max()))
    return worst_mean, worst_variance


@pytest.mark.statistical
def test_sghmc_defaults_match_nuts_on_a_poisson_random_intercept_model(
    minibatched_counts, nuts_reference
):
    worst_mean, worst_variance = poisson_errors(minibatched_counts, nuts_reference)
    # 4.5 combined standard errors over 33 quantities: a false alarm has p < 3e-4.
    assert worst_mean < 4.5 and worst_variance < 4.5, (worst_mean, worst_variance)


@pytest.mark.statistical
def test_interweaving_without_the_jacobian_is_caught_on_the_poisson_model(
    minibatched_counts, nuts_reference, monkeypatch
):
    recentred = interweaving.recentred
    monkeypatch.setattr(
        sampling_interweaving,
        "recentred",
        lambda a, location, scale: (recentred(a, location, scale)[0], 0.0 * scale.sum()),
    )
    worst_mean, worst_variance = poisson_errors(minibatched_counts, nuts_reference)
    assert worst_mean > 4.5 or worst_variance > 4.5, (worst_mean, worst_variance)


def test_a_grouped_steps_gradient_noise_is_measured_on_whole_groups(model):
    # Drawn groups' locals get their exact gradient, undrawn ones do not move: the noise
    # that caps the step is the globals' alone (it was measured on rows of every group,
    # whose noise in the intercepts capped the step far lower).
    step = quiet_step(model)
    position = flat_point(step, mu=0.4, tau_log__=np.log(0.5), z=np.zeros(N_GROUPS))
    variance = step.gradient_noise_variance(position, rng=np.random.default_rng(0))
    local = step.groups.grouping.layout.is_local
    assert np.all(variance[local] == 0.0) and np.all(variance[~local] > 0.0)


def test_groups_per_step_grow_until_their_noise_no_longer_caps_the_step(monkeypatch):
    # 300 groups of 20 rows, minibatches of 20 rows: one group per step, whose noise in
    # the globals caps the step far below the default. The per-group local move reads
    # every row at every draw anyway, so the step draws more groups instead, up to a
    # trajectory's worth of rows equal to the data's.
    rng = np.random.default_rng(3)
    group = np.repeat(np.arange(300), 20)
    y = (0.3 + 0.6 * rng.normal(size=300))[group] + NOISE_SD * rng.normal(size=group.size)
    model = model_of(group, y, batch_size=20)
    results = {}
    for widen in (True, False):
        step = quiet_step(model)
        if not widen:
            monkeypatch.setattr(WholeGroups, "widen", lambda self, *args: False)
        assert step.groups.groups_per_step == 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            idata = sample(step, model, tune=20, draws=5)
        results[widen] = step.groups.groups_per_step, stat(idata, "step_size")[0, -1]
        bound = 300 // (step.n_steps + 1)
    # Here the globals' noise still caps the step at that bound (measured: 27 groups),
    # and the step grows as the noise falls, ~ (J − K)/K: 30x.
    (widened, widened_step), (kept, kept_step) = results[True], results[False]
    assert kept == 1 and widened == bound
    assert widened_step > 10 * kept_step
