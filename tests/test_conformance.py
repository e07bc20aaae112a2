"""What every sampler must do, run on every registered sampler.

A new sampler added to ``pymc_sgmcmc.sampling.SAMPLERS`` is checked here without a test of
its own: reproducibility (a step built afresh: ``test_reproducibility.py``), chains that
differ, worker processes, the ``sampling_state`` round trip, its statistics and their
dtypes, refusal of bad input before sampling, a compound step with PyMC's own samplers,
and no NaN draw after a forced divergence.

The model has a discrete variable, so that ``pm.sample`` assigns it to a Metropolis
sampler next to ours: every ``pm.sample`` here runs a ``CompoundStep``.
"""

import warnings

import numpy as np
import pymc as pm
import pytest
from helpers import (
    build_graphs_afresh,
    compiled,
    draws_of,
    sample,
    settings,
    stat,
    steps_per_draw,
    switch_model,
)

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling import SAMPLERS, StochasticGradientStep, samplers
from pymc_sgmcmc.sampling import step as step_module

N_ROWS = 60

STORED_AS = {"model_logp": "lp"}
"""Statistics that PyMC stores under its own name."""


def test_every_public_sampler_is_registered():
    public = {
        getattr(pmsg, name)
        for name in pmsg.__all__
        if isinstance(getattr(pmsg, name), type)
        and issubclass(getattr(pmsg, name), StochasticGradientStep)
    }
    assert public == set(SAMPLERS)
    # The static list the documentation reads names exactly the registered ones.
    assert sorted(samplers.__all__) == sorted(cls.__name__ for cls in SAMPLERS)


@pytest.fixture(scope="module")
def model():
    return switch_model(N_ROWS)


@pytest.fixture(scope="module", params=SAMPLERS, ids=lambda cls: cls.__name__)
def step(request, model):
    cls = request.param
    if cls.kernel.metric == "position_dependent":
        build_graphs_afresh()  # RHMC's and SGR-NPHMC's scans slow each other's rewrites
    with model:
        return compiled(cls(**settings(cls)))


def test_same_seed_gives_identical_draws_and_stats_and_another_seed_differs(step, model):
    first = sample(step, model, random_seed=42)
    second = sample(step, model, random_seed=42)
    other = sample(step, model, random_seed=43)
    np.testing.assert_array_equal(draws_of(first, "theta"), draws_of(second, "theta"))
    for name in step.stats_dtypes_shapes:
        name = STORED_AS.get(name, name)
        np.testing.assert_array_equal(stat(first, name), stat(second, name), err_msg=name)
    assert not np.array_equal(draws_of(first, "theta"), draws_of(other, "theta"))


@pytest.fixture(scope="module")
def two_chains(step, model):
    return sample(step, model, draws=40, tune=20, chains=2, random_seed=3)


def test_chains_differ_and_draws_are_finite(two_chains):
    theta = draws_of(two_chains, "theta")
    assert theta.shape == (2, 40, 2)
    assert np.all(np.isfinite(theta))
    assert not np.allclose(theta[0], theta[1])


def test_statistics_are_the_declared_ones_with_their_dtypes(step, two_chains):
    stats = two_chains.sample_stats
    for name, (dtype, shape) in step.stats_dtypes_shapes.items():
        name = STORED_AS.get(name, name)
        assert name in stats, name
        values = stats[name].values
        assert values.shape == (2, 40, *shape), name
        assert values.dtype.kind == np.dtype(dtype).kind, (name, values.dtype, dtype)
    np.testing.assert_array_equal(stat(two_chains, "n_steps"), step.n_steps)
    assert step.n_steps == (step.fixed_n_steps or 5)
    assert not stat(two_chains, "diverging").any()
    assert np.all(np.isfinite(stat(two_chains, "minibatch_logp")))


def test_a_compound_step_with_metropolis_moves_both_variables(step, two_chains):
    # pm.sample assigned the discrete k to a Metropolis sampler next to ours.
    assert [v.name for v in step.vars] == ["theta"]
    k = draws_of(two_chains, "k")
    assert set(np.unique(k)) == {0, 1}
    assert len(np.unique(draws_of(two_chains, "theta")[0, :, 0])) > 10


def test_worker_processes_give_the_sequential_draws(step, model):
    # "forkserver" pickles the step method (with its model and its compiled functions)
    # into fresh worker processes, which link the functions again.
    options = {"draws": 10, "tune": 5, "chains": 2, "random_seed": 5}
    parallel = sample(step, model, cores=2, mp_ctx="forkserver", **options)
    sequential = sample(step, model, **options)
    # A worker links the pickled functions with the parent's settings (Numba's fast-math
    # off): linked with PyTensor's defaults they rounded differently (2e-16 apart), and
    # with their data copied rather than their containers they missed the values PyMC
    # sets for the other step method's variables.
    np.testing.assert_array_equal(draws_of(parallel, "theta"), draws_of(sequential, "theta"))


def test_sampling_state_round_trip_resumes_identically(step, model):
    step.setup_chain(np.random.default_rng(5), tune=30, draws=10)
    point = model.initial_point()
    for _ in range(25):  # inside tuning, past the EM samplers' first M steps
        point, _ = step.step(point)
    state = step.sampling_state
    saved = {k: v.copy() for k, v in point.items()}

    def continue_chain(point, n=15):
        positions, stats = [], []
        for _ in range(n):
            point, step_stats = step.step(point)
            positions.append(point["theta"].copy())
            stats.append(step_stats[0])
        return np.array(positions), stats

    first_positions, first_stats = continue_chain(point)
    step.sampling_state = state
    second_positions, second_stats = continue_chain(saved)
    np.testing.assert_array_equal(first_positions, second_positions)
    assert first_stats == second_stats
    third_positions, _ = continue_chain(point)
    assert not np.array_equal(first_positions, third_positions)


def test_a_forced_divergence_never_yields_a_nan_draw(step, model):
    original = step.schedule
    # Every other trajectory blows up: a step size of 1e200 overflows at once.
    step.schedule = lambda iteration: 1e200 if iteration % 2 else original(iteration)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            idata = sample(step, model, draws=12, tune=0, random_seed=9)
    finally:
        step.schedule = original
    theta = draws_of(idata, "theta")[0]
    diverging = stat(idata, "diverging")[0]
    assert np.all(np.isfinite(theta))
    np.testing.assert_array_equal(diverging, np.arange(12) % 2 == 1)
    # A diverging iteration keeps the previous draw.
    np.testing.assert_array_equal(theta[1:][diverging[1:]], theta[:-1][diverging[1:]])
    assert stat(idata, "divergences")[0, -1] == 6
    advice = [w for w in caught if "Reduce step_size" in str(w.message)]
    assert len(advice) == 1  # once per chain


BAD_INPUTS = [
    ({"step_size": 0.0}, ValueError, "step_size must be positive and finite"),
    ({"step_size": "small"}, TypeError, "step_size must be a real number"),
    ({"step_size": None}, TypeError, "step_size is required"),
    ({"n_steps": 0}, ValueError, "n_steps must be a positive integer"),
    ({"minibatch": "epoch"}, ValueError, "minibatch must be one of"),
]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize(("change", "error", "match"), BAD_INPUTS)
def test_bad_input_is_refused_when_the_sampler_is_created(
    model, sampler, change, error, match, monkeypatch
):
    # Refused before the model's graphs are built (and the mode search run on them).
    def too_late(*args, **kwargs):
        raise AssertionError("the arguments were checked after the model's graphs were built")

    monkeypatch.setattr(step_module, "flat_logp", too_late)
    if "n_steps" in change and not steps_per_draw(sampler, 1):
        error, match = TypeError, "it has no n_steps"  # MALA: one step a draw
    with model, pytest.raises(error, match=match):
        sampler(**(settings(sampler) | change))


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda cls: cls.__name__)
def test_discrete_variables_and_empty_models_are_refused(model, sampler):
    with model, pytest.raises(ValueError, match=r"these variables are discrete: \['k'\]"):
        sampler(vars=[model["k"], model["theta"]], **settings(sampler))
    with pm.Model(), pytest.raises(ValueError, match="no free random variables"):
        sampler(**settings(sampler))
