"""The minibatch replacement: from a PyMC model to a log density of (position, rows)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.stats as st
from helpers import draws_of, sample
from pymc.data import MinibatchOp
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.type import RandomGeneratorType

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling.model_graph import find_minibatch_groups, flat_logp

N_ROWS = 40
# PyMC evaluates some normalising constants in lower precision than SciPy (a few 1e-8
# absolute here); a wrong scaling or a missing term would be off by order one.


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=N_ROWS)
    y = 0.5 + 2.0 * x + rng.normal(size=N_ROWS)
    z = rng.normal(3.0, 1.0, size=2 * N_ROWS)
    return x, y, z


def logp_of_position_and_rows(flat):
    """Compile the detached log density as a function of (position, *row indices)."""
    indices = [pt.lvector(f"rows_{k}") for k in range(len(flat.groups))]
    replace = {
        placeholder: fed
        for group, rows in zip(flat.groups, indices, strict=True)
        for placeholder, fed in group.fed(group.gathered(rows)).items()
    }
    # The Python backend compiles in milliseconds; these graphs are evaluated a few times.
    return pytensor.function(
        [flat.position, *indices], graph_replace(flat.logp, replace), mode="FAST_COMPILE"
    )


def test_single_minibatch_logp_is_scaled_minibatch_likelihood_plus_prior_and_jacobian(data):
    x, _, _ = data
    batch_size = 5
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal(
            "obs", mu, sigma, observed=pm.Minibatch(x, batch_size=batch_size), total_size=N_ROWS
        )
    value_vars = [model.rvs_to_values[mu], model.rvs_to_values[sigma]]
    flat = flat_logp(model, value_vars, model.initial_point())
    assert len(flat.groups) == 1
    assert flat.groups[0].batch_size == batch_size
    assert flat.groups[0].n_rows() == N_ROWS
    assert flat.shared == {}
    logp = logp_of_position_and_rows(flat)

    def expected(mu_value, log_sigma, rows):
        sigma_value = np.exp(log_sigma)
        prior = st.norm(0, 10).logpdf(mu_value) + st.halfnorm(scale=2).logpdf(sigma_value)
        jacobian = log_sigma  # log|dσ/d log σ|
        likelihood = st.norm(mu_value, sigma_value).logpdf(x[rows]).sum()
        return prior + jacobian + N_ROWS / batch_size * likelihood

    rows_rng = np.random.default_rng(1)
    for mu_value, log_sigma in [(0.0, 0.0), (1.3, -0.4), (-2.0, 0.9)]:
        rows = rows_rng.integers(0, N_ROWS, size=batch_size)
        value = logp(np.array([mu_value, log_sigma]), rows)
        assert value == pytest.approx(expected(mu_value, log_sigma, rows), rel=1e-8)
    # Repeated rows count repeatedly (sampling with replacement, as pm.Minibatch).
    rows = np.array([3, 3, 3, 7, 7])
    assert logp(np.array([0.2, 0.1]), rows) == pytest.approx(expected(0.2, 0.1, rows))


def test_a_model_changed_after_a_step_was_built_gets_its_new_terms(data):
    # PyMC's per-variable terms are built once per model structure and reused by later
    # steps on the same model; a variable added since is a new structure.
    x, _, z = data
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("obs", mu, 1.0, observed=pm.Minibatch(x, batch_size=5), total_size=N_ROWS)
    first = flat_logp(model, [model.rvs_to_values[mu]], model.initial_point())
    again = flat_logp(model, [model.rvs_to_values[mu]], model.initial_point())
    assert again.groups[0].batches == first.groups[0].batches  # the same graphs, reused
    rows = np.arange(5)
    before = logp_of_position_and_rows(first)(np.array([0.7]), rows)
    assert logp_of_position_and_rows(again)(np.array([0.7]), rows) == before
    with model:
        tau = pm.Normal("tau", 0.0, 2.0)
        pm.Potential("pull", -0.5 * (mu - tau) ** 2)
    value_vars = [model.rvs_to_values[mu], model.rvs_to_values[tau]]
    changed = flat_logp(model, value_vars, model.initial_point())
    after = logp_of_position_and_rows(changed)(np.array([0.7, -0.4]), rows)
    expected = before + st.norm(0, 2).logpdf(-0.4) - 0.5 * (0.7 + 0.4) ** 2
    assert after == pytest.approx(expected, rel=1e-10)


def test_detached_logp_has_no_minibatch_op_and_no_random_generator(data):
    x, _, _ = data
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("obs", mu, observed=pm.Minibatch(x, batch_size=4), total_size=N_ROWS)
    original = model.logp()
    assert any(
        v.owner is not None and isinstance(v.owner.op, MinibatchOp) for v in ancestors([original])
    )
    flat = flat_logp(model, model.value_vars, model.initial_point())
    remaining = list(ancestors([flat.logp]))
    assert not any(v.owner is not None and isinstance(v.owner.op, MinibatchOp) for v in remaining)
    assert not any(isinstance(v.type, RandomGeneratorType) for v in remaining)
    assert flat.groups[0].batches[0] in remaining


def test_one_group_per_minibatch_call_with_its_own_scaling(data):
    x, y, z = data
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 5.0)
        slope = pm.Normal("slope", 0.0, 5.0)
        centre = pm.Normal("centre", 0.0, 5.0)
        x_batch, y_batch = pm.Minibatch(x, y, batch_size=6)
        pm.Normal("y", intercept + slope * x_batch, 1.0, observed=y_batch, total_size=N_ROWS)
        pm.Normal("z", centre, 1.0, observed=pm.Minibatch(z, batch_size=9), total_size=len(z))
    flat = flat_logp(model, model.value_vars, model.initial_point())
    groups = {group.batch_size: group for group in flat.groups}
    assert sorted(groups) == [6, 9]
    assert len(groups[6].data) == len(groups[6].batches) == 2  # x and y share their rows
    assert len(groups[9].data) == len(groups[9].batches) == 1
    np.testing.assert_array_equal(groups[6].data[0].data, x)
    np.testing.assert_array_equal(groups[6].data[1].data, y)
    assert groups[9].n_rows() == len(z)
    logp = logp_of_position_and_rows(flat)

    rows_rng = np.random.default_rng(2)
    position = np.array([0.4, 1.7, 2.5])  # order of model.value_vars
    rows = {6: rows_rng.integers(0, N_ROWS, 6), 9: rows_rng.integers(0, len(z), 9)}
    value = logp(position, *[rows[group.batch_size] for group in flat.groups])
    a, b, c = position
    expected = (
        st.norm(0, 5).logpdf(position).sum()
        + N_ROWS / 6 * st.norm(a + b * x[rows[6]], 1).logpdf(y[rows[6]]).sum()
        + len(z) / 9 * st.norm(c, 1).logpdf(z[rows[9]]).sum()
    )
    assert value == pytest.approx(expected, rel=1e-8)


def test_find_minibatch_groups_is_empty_without_minibatch():
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("obs", mu, observed=np.array([0.5, 1.5]))
    assert find_minibatch_groups(model.logp()) == []
    flat = flat_logp(model, model.value_vars, model.initial_point())
    value = pytensor.function([flat.position], flat.logp, mode="FAST_COMPILE")(np.array([0.3]))
    expected = st.norm().logpdf(0.3) + st.norm(0.3).logpdf([0.5, 1.5]).sum()
    assert value == pytest.approx(expected)


def test_variables_not_sampled_are_read_from_shared_values(data):
    x, _, _ = data
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("obs", mu, sigma, observed=pm.Minibatch(x, batch_size=5), total_size=N_ROWS)
    sigma_value_var = model.rvs_to_values[sigma]
    flat = flat_logp(model, [model.rvs_to_values[mu]], model.initial_point())
    assert list(flat.shared) == [sigma_value_var]
    logp = logp_of_position_and_rows(flat)
    rows = np.arange(5)
    for log_sigma in (0.0, 0.7):
        flat.shared[sigma_value_var].set_value(np.asarray(log_sigma))
        sigma_value = np.exp(log_sigma)
        expected = (
            st.norm(0, 10).logpdf(1.0)
            + st.halfnorm(scale=2).logpdf(sigma_value)
            + log_sigma
            + N_ROWS / 5 * st.norm(1.0, sigma_value).logpdf(x[rows]).sum()
        )
        assert logp(np.array([1.0]), rows) == pytest.approx(expected, rel=1e-8)


def test_integer_minibatch_is_gathered_as_floats_and_scaled(data):
    counts = np.random.default_rng(5).poisson(3.0, size=N_ROWS)
    with pm.Model() as model:
        rate = pm.Gamma("rate", 2.0, 1.0)
        pm.Poisson("counts", rate, observed=pmsg.Minibatch(counts, batch_size=8), total_size=N_ROWS)
    flat = flat_logp(model, model.value_vars, model.initial_point())
    logp = logp_of_position_and_rows(flat)
    rows = np.random.default_rng(6).integers(0, N_ROWS, 8)
    log_rate = 0.9
    expected = (
        st.gamma(2.0, scale=1.0).logpdf(np.exp(log_rate))
        + log_rate
        + N_ROWS / 8 * st.poisson(np.exp(log_rate)).logpmf(counts[rows]).sum()
    )
    assert logp(np.array([log_rate]), rows) == pytest.approx(expected, rel=1e-8)


def test_minibatch_of_data_container_rereads_rows_after_set_data():
    with pm.Model() as model:
        values = pm.Data("values", np.arange(10.0))
        mu = pm.Normal("mu")
        pm.Normal("obs", mu, observed=pm.Minibatch(values, batch_size=3), total_size=10)
        step = pmsg.SGLD(step_size=0.01)
        assert step.n_rows == [10]
        pm.set_data({"values": np.arange(25.0)})
        step.setup_chain(np.random.default_rng(0), tune=0, draws=1)
    assert step.n_rows == [25]
    (rows,) = step.draw_rows()
    assert rows.max() < 25
    assert model["values"].get_value().shape == (25,)


def test_data_outside_the_minibatches_set_after_the_step_is_built_reaches_the_trajectory():
    # PyMC's model copy deep-copies pm.Data: a trajectory built on the copy kept the
    # shift of 0 it had when the step was built.
    y = np.random.default_rng(7).normal(size=N_ROWS)
    with pm.Model() as model:
        shift = pm.Data("shift", 0.0)
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("obs", mu + shift, 1.0, observed=pm.Minibatch(y, batch_size=8), total_size=N_ROWS)
        built_before = pmsg.SGLD(step_size=0.01, gradient="minibatch")
        pm.set_data({"shift": 3.0})
        built_after = pmsg.SGLD(step_size=0.01, gradient="minibatch")
    before = sample(built_before, model, draws=20, tune=0)
    after = sample(built_after, model, draws=20, tune=0)
    np.testing.assert_array_equal(draws_of(before, "mu"), draws_of(after, "mu"))
    # The two steps have the same graph, so the second reused the first's compiled function.
    assert built_before.trajectory_function.function is built_after.trajectory_function.function
