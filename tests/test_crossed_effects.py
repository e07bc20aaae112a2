"""Shared intercepts beside group vectors, and two grouping factors (crossed effects).

The models are written as PyMC users write them: ``mu + a[g]`` with ``a ~ N(0, s)``
(the intercept outside the groups' prior), and ``mu + a[u] + b[i]`` for crossed
effects. With every scale known, the posterior is Gaussian: its mean and covariance are
solved exactly from the design matrix, and every coordinate of the draws is compared
with it in Monte Carlo errors.
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from helpers import mean_and_variance_errors

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.gradients.grouped import GroupLayout
from pymc_sgmcmc.sampling import translations
from pymc_sgmcmc.sampling.translations import translation_directions
from pymc_sgmcmc.sampling.whole_groups import WholeGroups

N_USERS, N_ITEMS, N_ROWS = 30, 20, 3000
USER_SD, ITEM_SD, NOISE_SD, MU_SD, SLOPE_SD = 1.0, 0.5, 1.0, 10.0, 1.0


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    user = rng.integers(0, N_USERS, N_ROWS).astype("int32")
    item = rng.integers(0, N_ITEMS, N_ROWS).astype("int32")
    x = rng.standard_normal(N_ROWS)
    y = (
        0.5
        + rng.normal(0, USER_SD, N_USERS)[user]
        + rng.normal(0, ITEM_SD, N_ITEMS)[item]
        + 0.3 * x
        + rng.normal(0, NOISE_SD, N_ROWS)
    )
    return user, item, x, y


def crossed_model(user, item, x, y, *, items=True, slope=False):
    with pm.Model() as model:
        user_mb, item_mb, x_mb, y_mb = pm.Minibatch(user, item, x, y, batch_size=300)
        mu = pm.Normal("mu", 0.0, MU_SD)
        a = pm.Normal("a", 0.0, USER_SD, shape=N_USERS)
        mean = mu + a[user_mb]
        if items:
            b = pm.Normal("b", 0.0, ITEM_SD, shape=N_ITEMS)
            mean = mean + b[item_mb]
        if slope:
            beta = pm.Normal("beta", 0.0, SLOPE_SD)
            mean = mean + beta * x_mb
        pm.Normal("y", mean, NOISE_SD, observed=y_mb, total_size=N_ROWS)
    return model


@pytest.fixture(scope="module")
def models(data):
    """Each model built once for the file: a step built on it again reuses its compiled
    functions (a graph that a test changes is compiled anew)."""
    built = {}

    def model(build, **kwargs):
        key = (build, tuple(sorted(kwargs.items())))
        if key not in built:
            built[key] = build(*data, **kwargs)
        return built[key]

    return model


def exact_gaussian(user, item, x, y, *, items=True, slope=False):
    """Mean and covariance of the Gaussian posterior, in the model's variables' order."""
    columns = [np.ones((N_ROWS, 1)), np.eye(N_USERS)[user]]
    prior = [1 / MU_SD**2] + [1 / USER_SD**2] * N_USERS
    if items:
        columns.append(np.eye(N_ITEMS)[item])
        prior += [1 / ITEM_SD**2] * N_ITEMS
    if slope:
        columns.append(x[:, None])
        prior += [1 / SLOPE_SD**2]
    design = np.hstack(columns)
    covariance = np.linalg.inv(design.T @ design / NOISE_SD**2 + np.diag(prior))
    return covariance @ design.T @ y / NOISE_SD**2, covariance


def independent_errors(draws, mean, sd):
    """Worst errors of the means and variances of independent draws, in standard errors."""
    n = draws.shape[0]
    z_mean = np.abs(draws.mean(0) - mean) / (sd / np.sqrt(n))
    # The variance of n independent Gaussian draws has sd σ² √(2/n).
    z_variance = np.abs(draws.var(0) - sd**2) / (sd**2 * np.sqrt(2 / n))
    return float(z_mean.max()), float(z_variance.max())


def errors_in_standard_errors(model, exact, seed=1):
    """Worst errors of the means and variances over every coordinate, in MC errors."""
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC()
        idata = pm.sample(
            draws=1500, tune=1000, chains=2, cores=1, step=step, random_seed=seed,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    posterior = idata.posterior
    names = [v.name for v in model.free_RVs]
    draws = np.concatenate(
        [posterior[n].values.reshape(2, 1500, -1) for n in names], axis=-1
    )  # (chains, draws, coordinates)
    mean, sd = exact[0], np.sqrt(np.diag(exact[1]))
    z_mean, z_variance = mean_and_variance_errors(draws, mean, sd, np.sqrt(2) * sd**2)
    return step, float(z_mean.max()), float(z_variance.max()), float(np.min(az.ess(draws)))


def test_a_direction_is_kept_only_where_the_likelihood_does_not_see_it_and_spans_new_ground():
    # mu (0), beta (1), a (2-4), b (5-6). The likelihood reads mu + a_j + b_k only, so
    # its gradient on mu is the sum of a's and of b's; beta's is its own.
    a_layout = GroupLayout(np.array([0, 1, 2]), 3, np.array([[2], [3], [4]]), 7)
    b_layout = GroupLayout(np.array([0, 1, 1]), 2, np.array([[5], [6]]), 7)
    rng = np.random.default_rng(0)
    gradients = []
    for _ in range(2):
        row_scores, x = rng.standard_normal(3), rng.standard_normal(3)
        gradient = np.zeros(7)
        gradient[0] = row_scores.sum()
        gradient[1] = row_scores @ x
        gradient[2:5] = row_scores
        gradient[5:7] = np.bincount([0, 1, 1], weights=row_scores)
        gradients.append(gradient)
    kept = translation_directions([a_layout, b_layout], np.array([0, 1]), gradients)
    pairs = [(int(np.flatnonzero(v > 0)[0]), int(np.flatnonzero(v < 0)[0])) for v in kept]
    # mu against a and against b; a against b is their difference; beta is seen.
    assert pairs == [(0, 2), (0, 5)]
    assert all(np.sum(v[2:5]) == -3 for v in kept[:1])
    # Without the intercept, a against b is found.
    kept = translation_directions([a_layout, b_layout], np.array([1]), gradients)
    assert [(int(np.flatnonzero(v > 0)[0]), int(np.flatnonzero(v < 0)[0])) for v in kept] == [
        (2, 5)
    ]


def test_two_grouping_factors_are_found_and_a_vector_read_through_both_is_not(data, models):
    with models(crossed_model, items=True, slope=False), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC()
    groups = step.groups
    assert [layout.n_groups for layout in groups.layouts] == [N_USERS, N_ITEMS]
    assert len(groups.secondary_moves) == 1 and groups.global_move is not None
    assert groups.global_move.global_positions.tolist() == [0]  # mu alone

    user, item, _, y = data
    with pm.Model():
        user_mb, item_mb, y_mb = pm.Minibatch(user, item, y, batch_size=300)
        a = pm.Normal("a", 0.0, 1.0, shape=N_USERS)
        pm.Normal("y", a[user_mb] + a[item_mb], 1.0, observed=y_mb, total_size=N_ROWS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            step = pmsg.SGHMC()
    # a[i] is read through two indices: no factor owns it, and rows are drawn.
    assert step.groups is None


@pytest.mark.parametrize(
    ("items", "slope"), [(False, True), (True, False)], ids=["one factor, a slope", "crossed"]
)
def test_an_intercept_outside_the_groups_prior_is_sampled_exactly(data, models, items, slope):
    # Without the translation move: ESS 5-6 in 3,000 draws, means 0.43-0.49 sd off.
    step, z_mean, z_variance, min_ess = errors_in_standard_errors(
        models(crossed_model, items=items, slope=slope),
        exact_gaussian(*data, items=items, slope=slope),
    )
    # mu against the users' intercepts (and the items'); never the slope (the rows see it).
    assert len(step.groups.translations.directions) == (2 if items else 1)
    # 4.5 standard errors over 32-51 coordinates: a false alarm has probability < 4e-4.
    assert z_mean < 4.5 and z_variance < 4.5, (z_mean, z_variance)
    assert min_ess > 500, min_ess


def moved_once(step, positions, rng, after_finding=None):
    """Each position moved once along every direction (found at the first)."""
    step.groups._translate(positions[0].copy(), rng)
    move = step.groups.translations
    if after_finding is not None:
        after_finding(move)
    return move, np.array([move.move(p, rng).position for p in positions])


@pytest.mark.parametrize("every_candidate", [False, True], ids=["unseen ones", "every one"])
def test_a_direction_that_the_likelihood_sees_moved_as_if_it_did_not_is_caught(
    data, models, monkeypatch, every_candidate
):
    # 3,000 exact draws of mu + a[u] + beta x, each moved once: along mu against the
    # intercepts they stay exact; with beta against them too, the moves ignore the rows.
    if every_candidate:
        monkeypatch.setattr(translations, "INVARIANCE_TOLERANCE", np.inf)
    with models(crossed_model, items=False, slope=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC()
    assert [v.name for v in step.vars] == ["mu", "a", "beta"]
    mean, covariance = exact_gaussian(*data, items=False, slope=True)
    rng = np.random.default_rng(5)
    exact = rng.multivariate_normal(mean, covariance, size=3000)
    move, moved = moved_once(step, exact, rng)
    assert len(move.directions) == (2 if every_candidate else 1)
    worst = max(independent_errors(moved, mean, np.sqrt(np.diag(covariance))))
    if every_candidate:
        assert worst > 4.5, worst
    else:
        assert worst < 4.5, worst


def test_without_the_translation_move_the_intercept_is_stuck(data, models, monkeypatch):
    monkeypatch.setattr(WholeGroups, "_translate", lambda self, position, rng: position)
    _, _, _, min_ess = errors_in_standard_errors(
        models(crossed_model, items=False, slope=False), exact_gaussian(*data, items=False)
    )
    assert min_ess < 50, min_ess


def non_centred_model(user, item, x, y):
    with pm.Model() as model:
        user_mb, y_mb = pm.Minibatch(user, y, batch_size=300)
        mu = pm.Normal("mu", 0.0, MU_SD)
        sigma = pm.HalfNormal("sigma", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=N_USERS)
        pm.Normal("y", mu + (sigma * z)[user_mb], NOISE_SD, observed=y_mb, total_size=N_ROWS)
    return model


def translated_exact_draws(data, models, sigma, n_draws=3000, unscaled=False):
    """Exact draws of ``(mu, z)`` given ``sigma``, each moved once along the direction."""
    user, item, x, y = data
    with models(non_centred_model), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        step = pmsg.SGHMC()
    assert [v.name for v in step.vars] == ["mu", "sigma_log__", "z"]
    # y = mu + sigma z_u + noise: Gaussian in (mu, z) given sigma.
    design = np.hstack([np.ones((N_ROWS, 1)), sigma * np.eye(N_USERS)[user]])
    precision = design.T @ design / NOISE_SD**2 + np.diag([1 / MU_SD**2] + [1.0] * N_USERS)
    covariance = np.linalg.inv(precision)
    mean = covariance @ design.T @ y / NOISE_SD**2
    rng = np.random.default_rng(5)
    exact = rng.multivariate_normal(mean, covariance, size=n_draws)
    positions = np.insert(exact, 1, np.log(sigma), axis=1)

    def unscale(move):
        move.per_unit_shift = lambda position: np.ones(position.size)

    move, moved = moved_once(step, positions, rng, unscale if unscaled else None)
    return move, np.delete(moved, 1, axis=1), mean, np.sqrt(np.diag(covariance))


@pytest.mark.parametrize("unscaled", [False, True], ids=["scaled by 1/sigma", "unscaled"])
def test_a_non_centred_intercepts_direction_keeps_the_conditional_given_the_scale(
    data, models, unscaled
):
    # mu + δ and every z_j − δ/sigma leave mu + sigma z_j, and the likelihood, unchanged.
    move, moved, mean, sd = translated_exact_draws(data, models, sigma=0.6, unscaled=unscaled)
    assert len(move.directions) == 1
    worst = max(independent_errors(moved, mean, sd))
    if unscaled:
        # Along mu + δ, z − δ the rows see a shift of δ(1 − sigma): left out, caught.
        assert worst > 4.5, worst
    else:
        assert worst < 4.5, worst


def test_thousands_of_globals_are_checked_without_a_dense_candidate_each():
    # A topic model's global topic weights: 30,000 globals against 20 local columns
    # were 600,000 dense candidates of 30,000 coordinates each (150 GB). mu (0) trades
    # with the intercepts' column; the other globals are read by the likelihood.
    n_globals, n_groups, n_columns = 30_000, 50, 20
    dim = n_globals + n_groups * n_columns
    locals_ = n_globals + np.arange(n_groups * n_columns).reshape(n_groups, n_columns)
    layout = GroupLayout(np.arange(n_groups), n_groups, locals_, dim)
    rng = np.random.default_rng(1)
    gradients = []
    for _ in range(2):
        gradient = rng.standard_normal(dim)
        gradient[0] = gradient[locals_[:, 3]].sum()
        gradients.append(gradient)
    kept = translation_directions([layout], np.arange(n_globals), gradients)
    assert len(kept) == 1
    assert np.flatnonzero(kept[0] > 0).tolist() == [0]
    assert np.array_equal(np.flatnonzero(kept[0] < 0), locals_[:, 3])
