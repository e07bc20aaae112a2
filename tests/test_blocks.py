"""Blocks of draws: after tuning, several draws in one compiled call, the same draws.

With ``draws_per_call > 1`` a step's trajectory is a scan over draws: after tuning it
computes up to ``draws_per_call`` draws per call and hands them to ``pm.sample`` one at a
time. ``draws_per_call=1`` compiles the single-draw trajectory, whose draws the blocks'
equal bit for bit. The randomness of each
draw comes from the chain's generator in the order single draws take it, so a seed gives
the same draws whatever the block's length, through divergences and points moved from
outside.
"""

import itertools
import warnings

import numpy as np
import pymc as pm
import pytest
from helpers import draws_of, sample, stat

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling import corrections

N_ROWS = 400
QUIET = {"mode_kwargs": {"progressbar": False}}


def regression_model():
    """theta ~ N(0, 10² I₃), y_i ~ N(x_iᵀθ, 1), seen 20 rows at a time."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N_ROWS, 3))
    y = X @ np.array([0.5, -1.0, 2.0]) + rng.standard_normal(N_ROWS)
    with pm.Model() as model:
        X_batch, y_batch = pm.Minibatch(X, y, batch_size=20)
        theta = pm.Normal("theta", 0.0, 10.0, shape=3)
        pm.Normal("y", X_batch @ theta, 1.0, observed=y_batch, total_size=N_ROWS)
    return model


@pytest.fixture(scope="module")
def model():
    return regression_model()


CASES = {
    # control variates, fresh rows at every step, the default
    "SGHMC": (pmsg.SGHMC, {}),
    # one set of rows per trajectory, the plain estimator, no noise probes
    "SGLD": (pmsg.SGLD, {"minibatch": "trajectory", "gradient": "minibatch"}),
    # an anchor that moves every 30 draws: the blocks end before each move
    "SGNHT": (pmsg.SGNHT, {"gradient": "svrg", "anchor_every": 30}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_blocks_give_the_draws_and_statistics_of_single_draws(model, case):
    cls, options = CASES[case]
    runs = {}
    for k in (1, 7, 20):
        with model:
            step = cls(draws_per_call=k, **QUIET, **options)
        assert step.trajectory_function.over_draws == (k > 1)
        runs[k] = sample(step, model, draws=150, tune=50, chains=2)
    for k in (7, 20):
        np.testing.assert_array_equal(draws_of(runs[k], "theta"), draws_of(runs[1], "theta"))
        for name in ("step_size", "minibatch_logp", "diverging"):
            np.testing.assert_array_equal(stat(runs[k], name), stat(runs[1], name))


def test_a_chain_after_tuning_makes_its_draws_in_blocks_that_end_at_each_noise_probe(model):
    with model:
        step = pmsg.SGHMC(draws_per_call=20, **QUIET)
    compiled = step.trajectory_function
    function, lengths = compiled.function, []
    at = compiled.slots["params.step_size"]

    def counted(*inputs):
        lengths.append(len(inputs[at]))
        return function(*inputs)

    compiled.function = counted
    sample(step, model, draws=200, tune=40)
    # Tuning: one draw per call. After it a probe every 20 draws (from iteration 40)
    # ends each block: ten blocks of 20.
    assert lengths == [1] * 40 + [20] * 10
    lengths.clear()
    step.draws_per_call = 7  # read when the next chain starts
    sample(step, model, draws=40, tune=0)
    assert lengths == [7, 7, 6] * 2


def test_a_divergence_inside_a_block_restarts_the_chain_as_a_single_draw_would(model, monkeypatch):
    # Three trajectories after tuning flagged as runaways (the 3rd, 12th and 13th draws
    # after 50 of tuning): each restarts the chain with a fresh momentum.
    flagged = {52, 61, 62}
    original = corrections.runaway_trajectory
    runs = {}
    for k in (1, 20):
        calls = itertools.count()

        def runaway(*args, calls=calls):
            return next(calls) in flagged or original(*args)

        monkeypatch.setattr(corrections, "runaway_trajectory", runaway)
        with model:
            step = pmsg.SGHMC(draws_per_call=k, **QUIET)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            runs[k] = sample(step, model, draws=100, tune=50)
    diverging = stat(runs[20], "diverging")[0]
    assert np.flatnonzero(diverging).tolist() == [2, 11, 12]
    np.testing.assert_array_equal(draws_of(runs[20], "theta"), draws_of(runs[1], "theta"))
    np.testing.assert_array_equal(stat(runs[20], "diverging"), stat(runs[1], "diverging"))


def test_a_point_moved_between_draws_drops_the_block_and_ends_blocks(model):
    moved = {"theta": np.array([0.4, -0.9, 2.1])}
    draws = {}
    for k in (1, 20):
        with model:
            step = pmsg.SGHMC(draws_per_call=k, **QUIET)
        step.setup_chain(np.random.default_rng(5), tune=0, draws=60)
        point, out = model.initial_point(), []
        for i in range(60):
            if i == 25:  # as another sampler of a CompoundStep would
                point = dict(moved)
            point, _ = step.step(point)
            out.append(point["theta"].copy())
        draws[k] = np.array(out)
        assert step.chain.blocks_off == (k > 1)
    np.testing.assert_array_equal(draws[20], draws[1])


def test_a_compound_step_makes_one_draw_per_call():
    with regression_model() as model:
        theta = model["theta"]
        pm.Normal("extra", 0.0, 1.0)
        step = pmsg.SGHMC([theta], draws_per_call=20, **QUIET)
    assert not step.blocks_possible()
    assert not step.trajectory_function.over_draws


def test_draws_per_call_must_be_a_positive_integer(model):
    with model, pytest.raises(ValueError, match="draws_per_call must be a positive integer"):
        pmsg.SGHMC(draws_per_call=0, **QUIET)
