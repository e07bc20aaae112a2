"""Correlated varying effects: rows ``a_j ~ MvNormal(mu, L Lᵀ)`` with an LKJ prior on ``L``.

PyMC's usual varying intercepts and slopes, ``ab[group_mb, 0] + ab[group_mb, 1] * x_mb``.
The step must find the groups through the column indexing, sample the centred form
through its twin ``ab = mu + z @ L.T`` (a centred ``MvNormal`` hierarchy has no joint
mode: the covariance collapses onto a line), and redraw ``(mu, L)`` given every row by the
interweaving move, whose change of variables has Jacobian ``|det L|⁻¹`` per row.
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from helpers import gaussian_raw_moments, mixture_moments

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.dynamics import interweaving
from pymc_sgmcmc.sampling import interweaving as sampling_interweaving
from pymc_sgmcmc.sampling import local_updates
from pymc_sgmcmc.sampling.non_centring import non_centred

N_GROUPS, ROWS, LKJ_ETA, MU_SD = 30, 8, 2.0, 2.0


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    group = np.repeat(np.arange(N_GROUPS), ROWS)
    x = rng.normal(size=group.size)
    effects = rng.normal(size=(N_GROUPS, 2)) @ np.array([[0.8, 0.0], [0.3, 0.5]]).T
    y = effects[group, 0] + (1.0 + effects[group, 1]) * x + rng.normal(size=group.size)
    return group, x, y


def correlated_model(group, x, y, *, form="centred", reading="pair", minibatch=True):
    """``y_i ~ N(a_{g_i} + b_{g_i} x_i, 1)`` with ``(a_j, b_j)`` correlated effects.

    ``form``: ``"centred"`` (``ab ~ MvNormal(mu, chol=L)``) or ``"non-centred"`` (``ab =
    mu + z @ L.T``); ``reading``: ``"pair"`` (``ab[g, 0]``), ``"rows"`` (``ab[g][:, 0]``)
    or ``"transposed"`` (``ba[:, g]`` of a ``2 × J`` matrix: its groups are its columns).
    Without ``minibatch`` the rows are data (a log density that draws no rows).
    """
    with pm.Model() as model:
        if minibatch:
            group_mb, x_mb, y_mb = pm.Minibatch(group, x, y, batch_size=4 * ROWS)
        else:
            group_mb, x_mb, y_mb = group, x, y
        mu = pm.Normal("mu", 0.0, MU_SD, shape=2)
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=LKJ_ETA, sd_dist=pm.HalfNormal.dist(1.0), compute_corr=True
        )
        if form == "centred":
            ab = pm.MvNormal("ab", mu=mu, chol=chol, shape=(N_GROUPS, 2))
        else:
            z = pm.Normal("z", 0.0, 1.0, shape=(N_GROUPS, 2))
            ab = pm.Deterministic("ab", mu + z @ chol.T)
        if reading == "pair":
            a, b = ab[group_mb, 0], ab[group_mb, 1]
        elif reading == "rows":
            a, b = ab[group_mb][:, 0], ab[group_mb][:, 1]
        else:
            a, b = ab.T[:, group_mb][0], ab.T[:, group_mb][1]
        total_size = y.size if minibatch else None
        pm.Normal("y", a + b * x_mb, 1.0, observed=y_mb, total_size=total_size)
    return model


def quiet_step(model, **kwargs):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return pmsg.SGHMC(**kwargs)


@pytest.mark.parametrize("reading", ["pair", "rows"])
def test_a_matrix_of_correlated_effects_read_by_column_is_grouped_row_by_row(data, reading):
    step = quiet_step(correlated_model(*data, form="non-centred", reading=reading))
    assert step.groups is not None
    layout = step.groups.grouping.layout
    assert layout.n_groups == N_GROUPS and layout.local_positions.shape == (N_GROUPS, 2)
    # Each group's two locals are its row of z: consecutive in the flat position.
    assert np.all(np.diff(layout.local_positions, axis=1) == 1)
    (part,) = step.groups.interweaving.hierarchy.parts
    assert part.row_size == 2


def test_a_matrix_whose_groups_are_its_columns_is_not_taken_for_rows(data):
    step = quiet_step(correlated_model(*data, form="non-centred", reading="transposed"))
    assert step.groups is None


def flat(point, vars):
    return np.concatenate([np.ravel(point[v.name]) for v in vars])


def test_the_correlated_twin_is_the_same_posterior_in_other_coordinates(data):
    model = correlated_model(*data, minibatch=False)
    vars = model.continuous_value_vars
    twin = non_centred(model, vars, {"ab"})
    assert twin.names == ("ab",)
    assert [v.name for v in twin.vars] == ["ab_z" if v.name == "ab" else v.name for v in vars]
    logp, twin_logp = model.compile_logp(), twin.model.compile_logp()
    rng = np.random.default_rng(3)
    start = model.initial_point()
    for _ in range(5):
        point = {k: v + rng.normal(size=np.shape(v)) for k, v in start.items()}
        user = flat(point, vars)
        sampled = twin.to_sampled(user)
        np.testing.assert_allclose(twin.to_model(sampled), user, rtol=0, atol=1e-12)
        packed = point["chol_cholesky-cov-packed__"]
        log_det = packed[0] + packed[2]  # log L00 + log L11: the diagonal is stored as logs
        sizes = np.cumsum([np.size(point[v.name]) for v in vars])[:-1]
        twin_point = {v.name: p.reshape(np.shape(point[u.name])) for v, u, p in zip(
            twin.vars, vars, np.split(sampled, sizes), strict=True
        )}  # fmt: skip
        np.testing.assert_allclose(
            twin_logp(twin_point), logp(point) + N_GROUPS * log_det, rtol=1e-12
        )
    # The prior's share of each local's precision is taken given the rest of its row.
    covariance = np.array([[1.0, 0.6], [0.6, 1.0]])
    factor = np.linalg.cholesky(covariance)
    packed = [0.0, factor[1, 0], np.log(factor[1, 1])]
    position = flat(start | {"chol_cholesky-cov-packed__": np.array(packed)}, vars)
    (variances,) = twin.prior_variances(position)
    np.testing.assert_allclose(variances, np.tile(1 / np.diag(np.linalg.inv(covariance)), 30))


def test_a_centred_correlated_hierarchy_is_sampled_through_its_twin(data):
    step = quiet_step(correlated_model(*data))
    assert step.non_centring is not None and step.non_centring.names == ("ab",)
    (part,) = step.groups.interweaving.hierarchy.parts
    assert part.row_size == 2


def test_strong_correlated_groups_are_still_sampled_through_their_twin(caplog):
    # 200 rows a group: the data give most of the locals' precision, so a Normal
    # hierarchy would be sampled as written. A MvNormal's rows have no exact move per
    # group as written; the twin has it, and the interweaving.
    rng = np.random.default_rng(22)
    group = np.repeat(np.arange(N_GROUPS), 200)
    x = rng.normal(size=group.size)
    effects = rng.normal(size=(N_GROUPS, 2)) @ np.array([[0.8, 0.0], [0.3, 0.5]]).T
    y = effects[group, 0] + (1.0 + effects[group, 1]) * x + rng.normal(size=group.size)
    with caplog.at_level("INFO", logger="pymc_sgmcmc"):
        step = quiet_step(correlated_model(group, x, y), mode_kwargs={"progressbar": False})
    assert "rows of correlated effects, which have no exact move per group" in caplog.text
    assert step.non_centring is not None and step.groups.local_move.per_group is not None
    # The model as written is not searched: the twin's own search is the only one.
    assert "the start taken as the mode" not in step.mode.message


def interweaving_moments(data, n_draws=1000):
    """Exact prior draws of ``(mu, L, z)``, each moved once by the interweaving move.

    The move reads no data: it redraws ``(mu, L)`` from ``p(mu, L | ab) ∝ p(mu, L) p(ab |
    mu, L)`` with every ``ab = mu + z Lᵀ`` held, which keeps the prior ``p(mu, L) p(ab |
    mu, L)``, so the moved draws are prior draws again. Returns each moved quantity's
    mean and variance errors against the prior's, in standard errors.
    """
    model = correlated_model(*data, form="non-centred")
    step = quiet_step(model, step_size=0.05, gradient="minibatch")  # no mode search
    move = step.groups.interweaving
    chol_rv = model["chol"]
    mu, packed, z = pm.draw(
        [model["mu"], chol_rv, model["z"]], draws=n_draws, random_seed=np.random.default_rng(4)
    )
    unconstrained = model.rvs_to_transforms[chol_rv].forward(
        pt.as_tensor(packed), *chol_rv.owner.inputs
    )
    names = [v.name for v in step.vars]
    assert names == ["mu", "chol_cholesky-cov-packed__", "z"]
    positions = np.concatenate([mu, unconstrained.eval(), z.reshape(n_draws, -1)], axis=1)
    log_scales = move.initial_log_scales(positions[0])
    rng = np.random.default_rng(5)
    moved = np.array([move.move(p, log_scales, rng)[0] for p in positions])
    sd_a, sd_b = np.exp(moved[:, 2]), np.hypot(moved[:, 3], np.exp(moved[:, 4]))
    correlation = moved[:, 3] / sd_b  # L10 / sqrt(L10² + L11²)
    # The prior's moments, each as (mean, sd, sd of the squared deviations) from its raw
    # moments: the variance's standard error takes the exact spread of the squares, not
    # the draws' own, which is small exactly where the draws missed a tail
    # (helpers.mean_and_variance_errors). mu ~ N(0, 2²); the sds ~ HalfNormal(1), raw
    # moments √(2/π), 1, 2√(2/π), 3; for n = 2 the LKJ(eta) correlation is
    # 2 Beta(eta, eta) − 1: mean 0, variance 1 / (2 eta + 1), fourth moment
    # 3 / ((2 eta + 1)(2 eta + 3)).
    one_part = np.ones(1)
    normal = mixture_moments(one_part, gaussian_raw_moments(0.0, MU_SD**2))
    root = np.sqrt(2 / np.pi)
    half_normal = mixture_moments(one_part, [root, 1.0, 2 * root, 3.0])
    lkj = mixture_moments(
        one_part, [0.0, 1 / (2 * LKJ_ETA + 1), 0.0, 3 / ((2 * LKJ_ETA + 1) * (2 * LKJ_ETA + 3))]
    )
    exact = [
        (moved[:, 0], normal), (moved[:, 1], normal), (sd_a, half_normal), (sd_b, half_normal),
        (correlation, lkj),
    ]  # fmt: skip
    errors = []
    for values, (mean, sd, sd_of_squares) in exact:
        squares = (values - mean) ** 2
        errors.append(abs(values.mean() - mean) / (sd / np.sqrt(n_draws)))
        errors.append(abs(squares.mean() - sd**2) / (sd_of_squares / np.sqrt(n_draws)))
    # Every row's effects stay where they were.
    np.testing.assert_allclose(effects(moved), effects(positions), rtol=0, atol=1e-10)
    return np.array(errors)


def effects(positions):
    """``ab = mu + z Lᵀ`` of each flat position ``(mu, packed log-Cholesky, z)``."""
    factor = np.zeros((len(positions), 2, 2))
    factor[:, 0, 0], factor[:, 1, 0] = np.exp(positions[:, 2]), positions[:, 3]
    factor[:, 1, 1] = np.exp(positions[:, 4])
    z = positions[:, 5:].reshape(len(positions), -1, 2)
    return positions[:, None, :2] + z @ factor.transpose(0, 2, 1)


def test_interweaving_of_correlated_rows_keeps_their_prior(data):
    errors = interweaving_moments(data)
    # 4 standard errors over 10 independent-draw statistics: a false alarm has p < 1e-3.
    # Measured 2026-12-07: 2.3 at most (the variance of the first sd).
    assert errors.max() < 4.0, errors


def test_interweaving_of_correlated_rows_without_the_jacobian_is_caught(data, monkeypatch):
    recentred_rows = interweaving.recentred_rows
    monkeypatch.setattr(
        sampling_interweaving,
        "recentred_rows",
        lambda a, location, factor: (recentred_rows(a, location, factor)[0], 0.0 * factor.sum()),
    )
    errors = interweaving_moments(data)
    # Measured 2026-12-07: the sds' means 31 and 32 standard errors off, their variances 49
    # and 55 (14 with the draws' own spread of squares, the statistic used before).
    assert errors.max() > 10.0, errors


# -- each group's two locals moved together: precision blocks --------------------------


def held_globals(data):
    """The local move of the non-centred model, the globals it holds and the conditionals.

    The globals are ``mu`` and the packed log-Cholesky factor; each group's exact
    conditional there comes from :func:`gaussian_conditionals`.
    """
    step = quiet_step(
        correlated_model(*data, form="non-centred"), step_size=0.05, gradient="minibatch"
    )
    mu, factor = np.array([0.2, 0.9]), np.array([[0.8, 0.0], [0.3, 0.5]])
    packed = np.array([np.log(factor[0, 0]), factor[1, 0], np.log(factor[1, 1])])
    mean, precision = gaussian_conditionals(data, mu, factor)
    return step.groups.local_move, np.concatenate([mu, packed]), mean, precision


def gaussian_conditionals(data, mu, factor):
    """Each group's ``z_j`` given ``(mu, L)``: mean ``(J, 2)`` and precision ``(J, 2, 2)``.

    ``y_i = d_iᵀ(mu + L z_j) + ε`` with ``d_i = (1, x_i)``, ``ε ~ N(0, 1)``, ``z_j ~ N(0,
    I)``: precision ``I + Lᵀ D_jᵀ D_j L``, mean its inverse times ``Lᵀ D_jᵀ (y_j − D_j mu)``.
    """
    group, x, y = data
    design = np.stack([np.ones_like(x), x], axis=1) @ factor  # rows d_iᵀ L
    residual = y - np.stack([np.ones_like(x), x], axis=1) @ mu
    precision = np.stack(
        [np.eye(2) + design[group == j].T @ design[group == j] for j in range(N_GROUPS)]
    )
    shift = np.stack([design[group == j].T @ residual[group == j] for j in range(N_GROUPS)])
    return np.linalg.solve(precision, shift[..., None])[..., 0], precision


def block_move_errors(data, kind, n_sweeps=2000, diagonal_density=False):
    """The locals' moves alone with precision blocks, globals held: errors of each group's
    mean, variances and covariance, in Monte Carlo standard errors.

    ``kind``: ``"anchored"`` (from a centre one conditional sd off each mean) or ``"fixed"``
    (the Newton move from the chain's point); both with 0.8 times the exact precision
    blocks: proposals that do not match must still give the exact conditional. With
    ``diagonal_density`` the tests read the proposal's density with the blocks'
    correlation left out (a wrong Hastings ratio).
    """
    move, globals_, mean, precision = held_globals(data)
    at = move.layout.local_positions
    position = np.concatenate([globals_, np.zeros(2 * N_GROUPS)])
    centre = position.copy()
    centre[at] = mean + np.sqrt(1 / np.diagonal(precision, axis1=1, axis2=2))
    curvature = 0.8 * precision
    if diagonal_density:
        factors = local_updates.factors_of(curvature, move.layout)
        whitening = np.sqrt(np.diagonal(precision * 0.8, axis1=1, axis2=2))[..., None] * np.eye(2)
        curvature = factors._replace(whitening=whitening)
    rng = np.random.default_rng(6)
    draws = []
    for _ in range(n_sweeps):
        for chunk in move.sweep_chunks():
            if kind == "anchored":
                position = move.anchored_move(position, chunk, rng, curvature, centre).position
            else:
                position = move.newton_move(position, chunk, rng, curvature).position
        draws.append(position[at])
    draws = np.array(draws)  # (sweeps, J, 2)
    covariance = np.linalg.inv(precision)
    deviations = draws - mean
    statistics = [
        (draws[..., 0], mean[:, 0]), (draws[..., 1], mean[:, 1]),
        (deviations[..., 0] ** 2, covariance[:, 0, 0]),
        (deviations[..., 1] ** 2, covariance[:, 1, 1]),
        (deviations[..., 0] * deviations[..., 1], covariance[:, 0, 1]),
    ]  # fmt: skip
    errors = [
        np.abs(values.mean(0) - exact) / (values.std(0) / np.sqrt(az.ess(values[None])))
        for values, exact in statistics
    ]
    return float(np.max(errors))


def test_the_fitted_precision_block_of_a_gaussian_conditional_is_exact(data):
    move, globals_, _, precision = held_globals(data)
    position = np.concatenate([globals_, np.random.default_rng(7).normal(size=2 * N_GROUPS)])
    (chunk,) = move.sweep_chunks()
    result = move.newton_move(position, chunk, np.random.default_rng(8))
    np.testing.assert_allclose(result.curvature, precision[chunk.groups], rtol=1e-9)
    # Off the diagonal the conditional correlates each group's two locals.
    correlation = precision[:, 0, 1] / np.sqrt(precision[:, 0, 0] * precision[:, 1, 1])
    assert np.abs(correlation).max() > 0.3
    # With the exact blocks the Newton move from anywhere is an exact draw: every group
    # accepts. With their diagonals alone it is not.
    exact = move.newton_move(position, chunk, np.random.default_rng(9), precision)
    assert exact.accept == pytest.approx(1.0, abs=1e-9)
    diagonal = precision * np.eye(2)
    assert move.newton_move(position, chunk, np.random.default_rng(9), diagonal).accept < 0.99


@pytest.mark.parametrize("kind", ["anchored", "fixed"])
def test_block_moves_draw_each_groups_correlated_locals_from_their_conditional(data, kind):
    worst = block_move_errors(data, kind)
    # 4.5 standard errors over 150 statistics: a false alarm has probability < 1e-3.
    assert worst < 4.5, worst


def test_a_block_move_whose_density_leaves_out_the_correlation_is_caught(data):
    worst = block_move_errors(data, "anchored", diagonal_density=True)
    assert worst > 10.0, worst


# -- end to end: pmsg.SGHMC() with its defaults against NUTS -----------------------------


@pytest.fixture(scope="module")
def nuts_reference(data):
    """Draws of 4 NUTS chains x 2,500 on all rows (their MCSEs enter the tolerance)."""
    with correlated_model(*data, minibatch=False):
        idata = pm.sample(
            draws=2500, tune=1000, chains=4, cores=1, random_seed=5, progressbar=False,
            compute_convergence_checks=False,
        )  # fmt: skip
    return summaries(idata)


def summaries(idata):
    """``mu``, the two sds, the correlation and every group's effects: ``(chain, draw, 65)``."""
    posterior = idata.posterior
    sds, correlation = posterior["chol_stds"].values, posterior["chol_corr"].values[..., 0, 1]
    ab = posterior["ab"].values
    return np.concatenate(
        [posterior["mu"].values, sds, correlation[..., None], ab.reshape(*ab.shape[:2], -1)],
        axis=-1,
    )


@pytest.mark.statistical
def test_sghmc_defaults_match_nuts_on_correlated_varying_intercepts_and_slopes(
    data, nuts_reference
):
    model = correlated_model(*data)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC()
        idata = pm.sample(
            draws=1000, tune=1000, chains=2, cores=1, step=step, random_seed=6,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    assert step.non_centring is not None and step.groups.interweaving is not None
    ours, nuts = summaries(idata), nuts_reference
    pooled = nuts.reshape(-1, nuts.shape[-1])
    mean, sd = pooled.mean(0), pooled.std(0)

    def standard_errors(draws):
        # Of the mean and of the mean squared deviation from the reference's mean.
        squares = (draws - mean) ** 2
        flat = draws.reshape(-1, draws.shape[-1])
        return (
            flat.std(0) / np.sqrt(az.ess(draws)),
            squares.reshape(-1, draws.shape[-1]).std(0) / np.sqrt(az.ess(squares)),
        )

    (ours_mean, ours_var), (nuts_mean, nuts_var) = standard_errors(ours), standard_errors(nuts)
    flat = ours.reshape(-1, ours.shape[-1])
    z_mean = np.abs(flat.mean(0) - mean) / np.hypot(ours_mean, nuts_mean)
    z_var = np.abs(((flat - mean) ** 2).mean(0) - sd**2) / np.hypot(ours_var, nuts_var)
    # 4.5 combined standard errors over 65 quantities: a false alarm has p < 5e-4.
    assert z_mean.max() < 4.5 and z_var.max() < 4.5, (z_mean.max(), z_var.max())
