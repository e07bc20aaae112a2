"""Extra moves for the groups whose locals mix slowly under one per-group Newton move.

After tuning, a grouped step measures each local coordinate's lag-1 autocorrelation on the
second half of its tuning draws and gives a group ``k`` more moves at every draw, the fewest
with ``ρ^(1 + k)`` at most the target. Checked here: the estimate on autoregressions of
known ``ρ``; the count of moves; that the extra moves keep each group's exact conditional (a
non-centred normal hierarchy whose conditionals are known in closed form, rows in order
and shuffled); and that a step picks the slow groups out.
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling import local_updates
from pymc_sgmcmc.sampling.local_updates import (
    MOST_EXTRA_MOVES,
    TARGET_AUTOCORRELATION,
    extra_moves,
    lag_one_autocorrelation,
    updated_moments,
)

N_GROUPS, NOISE_SD = 30, 2.0


def autoregression(rho, n_draws, seed):
    """``x_t = ρ x_{t−1} + sqrt(1 − ρ²) ε_t``, one column per ``ρ``, started stationary."""
    rng = np.random.default_rng(seed)
    rho = np.asarray(rho, dtype=float)
    x = np.empty((n_draws, rho.size))
    x[0] = rng.normal(size=rho.size)
    for t in range(1, n_draws):
        x[t] = rho * x[t - 1] + np.sqrt(1 - rho**2) * rng.normal(size=rho.size)
    return x


def test_the_lag_one_autocorrelation_of_autoregressions():
    rho = np.array([0.0, 0.3, 0.6, 0.9])
    n_draws = 20_000
    moments = None
    for draw in autoregression(rho, n_draws, seed=1):
        moments = updated_moments(moments, draw)
    estimate = lag_one_autocorrelation(moments)
    # The estimate's sd is about sqrt((1 − ρ²)/n) (Bartlett), ~0.007 here, more where the
    # variance itself is estimated from correlated draws: 5 such sds, times 2.
    tolerance = 10 * np.sqrt((1 - rho**2) / n_draws) + 2e-3
    np.testing.assert_array_less(np.abs(estimate - rho), tolerance)
    # A coordinate that never moves has no autocorrelation to act on.
    flat = None
    for _ in range(5):
        flat = updated_moments(flat, np.zeros(2))
    np.testing.assert_array_equal(lag_one_autocorrelation(flat), 0.0)


def test_extra_moves_are_the_fewest_that_reach_the_target():
    rho = np.linspace(-0.5, 0.99, 300)
    moves = extra_moves(rho)
    # Antithetic draws (ρ < 0) and those below the target need no more.
    assert np.all(moves[rho <= TARGET_AUTOCORRELATION] == 0)
    positive = np.maximum(rho, 0.0)
    reached = positive ** (1 + moves) <= TARGET_AUTOCORRELATION + 1e-12
    capped = moves == MOST_EXTRA_MOVES
    assert np.all(reached | capped)
    # One move fewer would not have reached it.
    fewer = positive**moves > TARGET_AUTOCORRELATION
    assert np.all(fewer[moves > 0])
    assert extra_moves(np.array([0.5]))[0] == 2  # 0.5³ = 0.125


def hierarchy_data(shuffled):
    rng = np.random.default_rng(11)
    sizes = 1 + rng.poisson(6, size=N_GROUPS)
    group = np.repeat(np.arange(N_GROUPS), sizes)
    y = 0.3 + 0.8 * rng.normal(size=N_GROUPS)[group] + NOISE_SD * rng.normal(size=group.size)
    if shuffled:
        order = rng.permutation(group.size)
        group, y = group[order], y[order]
    return group, y


def hierarchy_step(group, y):
    with pm.Model() as model:
        group_mb, y_mb = pm.Minibatch(group, y, batch_size=20)
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 2.0)
        a = mu + tau * pm.Normal("z", 0.0, 1.0, shape=N_GROUPS)
        pm.Normal("y", a[group_mb], NOISE_SD, observed=y_mb, total_size=y.size)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return pmsg.SGHMC()


def extra_move_errors(shuffled, n_moves=3000):
    """Only the extra moves, globals held: every ``z_j``'s mean and variance errors.

    The moves per group are 0-3 in a pattern, in calls of about 10 rows, each gathering
    its groups' rows.
    """
    group, y = hierarchy_data(shuffled)
    step = hierarchy_step(group, y)
    move = step.groups.local_move
    assert move.per_group is not None
    mu, tau = 0.4, 0.9
    names = [v.name for v in step.vars]
    values = {"mu": mu, "tau_log__": np.log(tau), "z": np.zeros(N_GROUPS)}
    position = np.concatenate([np.ravel(values[n]) for n in names])
    z_at = step.groups.grouping.layout.local_positions[:, 0]
    # z_j | mu, tau, y ~ N(m_j, v_j): precision 1 + n_j tau²/σ², shift tau Σ (y − mu)/σ².
    sizes = np.bincount(group, minlength=N_GROUPS)
    variance = 1 / (1 + sizes * tau**2 / NOISE_SD**2)
    mean = variance * tau * np.bincount(group, y - mu, N_GROUPS) / NOISE_SD**2
    moves = np.arange(N_GROUPS) % (MOST_EXTRA_MOVES + 1)
    passes = move.extra_chunks(moves)
    assert len(passes) == MOST_EXTRA_MOVES
    moved = np.zeros(N_GROUPS, dtype=int)
    for chunks in passes:
        for chunk in chunks:
            moved[chunk.groups] += 1
    assert np.array_equal(moved, moves)
    curvature = np.ones(position.size)
    curvature[z_at] = 0.8 / variance  # a proposal that does not match must still be exact
    rng = np.random.default_rng(5)
    draws = []
    for _ in range(n_moves):
        for chunks in passes:
            for chunk in chunks:
                position = move.newton_move(position, chunk, rng, curvature).position
        draws.append(position[z_at])
    draws = np.array(draws)[:, moved > 0]
    mean, sd = mean[moved > 0], np.sqrt(variance[moved > 0])
    ess = az.ess(draws[None])
    z_mean = np.abs(draws.mean(0) - mean) / (draws.std(0) / np.sqrt(ess))
    squares = (draws - mean) ** 2
    z_variance = np.abs(squares.mean(0) - sd**2) / (squares.std(0) / np.sqrt(az.ess(squares[None])))
    return float(z_mean.max()), float(z_variance.max())


@pytest.mark.parametrize("shuffled", [False, True], ids=["rows in order", "rows shuffled"])
def test_the_extra_moves_draw_each_group_from_its_conditional(shuffled, monkeypatch):
    monkeypatch.setattr(local_updates, "ROWS_PER_CALL", 10)
    worst_mean, worst_variance = extra_move_errors(shuffled)
    # 4.5 standard errors over at most 30 coordinates: a false alarm has probability < 2e-4.
    assert worst_mean < 4.5 and worst_variance < 4.5, (worst_mean, worst_variance)


def test_a_step_gives_extra_moves_to_the_groups_whose_draws_are_correlated():
    group, y = hierarchy_data(shuffled=False)
    step = hierarchy_step(group, y)
    groups = step.groups
    is_local = groups.is_local
    layout = groups.grouping.layout
    # Tuning draws of the locals: group j's autocorrelation is 0.5 for j < 5, else 0.
    rho = np.zeros(N_GROUPS)
    rho[:5] = 0.5
    local_rank = np.cumsum(is_local) - 1
    column_rho = np.zeros(is_local.sum())
    column_rho[local_rank[layout.local_positions[:, 0]]] = rho
    for draw in autoregression(column_rho, 20_000, seed=3):
        groups.draw_moments = updated_moments(groups.draw_moments, draw)
    (passes,) = groups._slow_groups_chunks([groups.local_move])
    assert len(passes) == 2  # 0.5³ ≤ 0.15 < 0.5²
    for chunks in passes:
        moved = np.concatenate([c.groups for c in chunks])
        assert set(moved) == set(range(5)), moved
