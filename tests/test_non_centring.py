"""A centred hierarchy's non-centred twin (``pymc_sgmcmc.sampling.non_centring``).

The twin is the same posterior in other coordinates: ``a = loc(u) + scale(u) z``, so
``log p_twin(u, z) = log p(u, a) + Σ log scale(u)`` at every point (the Jacobian of
``z ↦ a``), and the maps between the two flat points invert each other.
"""

import numpy as np
import pymc as pm
import pytest

from pymc_sgmcmc.sampling.non_centring import centred_normal, non_centred, prior_share

N_GROUPS = 12


def centred_model(rng, *, laplace=False, fixed_scale=False):
    group = np.repeat(np.arange(N_GROUPS), rng.integers(1, 6, size=N_GROUPS))
    size = rng.normal(size=N_GROUPS)  # a group-level predictor
    y = rng.normal(size=group.size)
    with pm.Model(coords={"group": range(N_GROUPS)}) as model:
        observed = pm.Data("y_data", y)
        mu = pm.Normal("mu", 0.0, 5.0)
        slope = pm.Normal("slope", 0.0, 1.0)
        tau = pm.HalfNormal("tau", 2.0)
        loc = mu + slope * size
        if laplace:
            a = pm.Laplace("a", loc, tau, dims="group")
        else:
            a = pm.Normal("a", loc, 1.0 if fixed_scale else tau, dims="group")
        pm.Normal("y", a[group], 2.0, observed=observed)
    return model, loc, tau


def flat(point, vars):
    return np.concatenate([np.ravel(point[v.name]) for v in vars])


def split(position, model, vars):
    out, start = {}, 0
    for v in vars:
        shape = np.shape(model.initial_point()[v.name])
        stop = start + int(np.prod(shape, dtype=int))
        out[v.name] = position[start:stop].reshape(shape)
        start = stop
    return out


def test_the_twin_is_the_same_posterior_in_other_coordinates():
    rng = np.random.default_rng(0)
    model, _, _ = centred_model(rng)
    vars = model.continuous_value_vars
    twin = non_centred(model, vars, {"a"})
    assert twin.names == ("a",)
    assert [v.name for v in twin.vars] == ["a_z" if v.name == "a" else v.name for v in vars]
    assert twin.model.named_vars_to_dims["a_z"] == ("group",)
    # The twin reads the user's data, not a copy: pm.set_data reaches both.
    assert twin.model["y_data"] is model["y_data"]
    logp, twin_logp = model.compile_logp(), twin.model.compile_logp()
    for _ in range(5):
        user = flat(model.initial_point(), vars) + rng.normal(size=sum(
            np.size(model.initial_point()[v.name]) for v in vars
        ))  # fmt: skip
        point = split(user, model, vars)
        sampled = twin.to_sampled(user)
        np.testing.assert_allclose(twin.to_model(sampled), user, rtol=0, atol=1e-12)
        tau = np.exp(point["tau_log__"])
        jacobian = N_GROUPS * np.log(tau)
        np.testing.assert_allclose(
            twin_logp(split(sampled, twin.model, twin.vars)), logp(point) + jacobian, rtol=1e-12
        )


def test_only_a_normal_with_a_sampled_scale_is_centred():
    rng = np.random.default_rng(1)
    model, _, _ = centred_model(rng)
    vars = model.continuous_value_vars
    by_name = {v.name: v for v in vars}
    assert centred_normal(model, by_name["a"], vars) is not None
    assert centred_normal(model, by_name["mu"], vars) is None  # a fixed prior
    # A location that reads a variable this step does not sample.
    without_slope = [v for v in vars if v.name != "slope"]
    assert centred_normal(model, by_name["a"], without_slope) is None
    for options in ({"laplace": True}, {"fixed_scale": True}):
        other, _, _ = centred_model(np.random.default_rng(1), **options)
        values = other.continuous_value_vars
        a = next(v for v in values if v.name == "a")
        assert centred_normal(other, a, values) is None
        assert non_centred(other, values, {"a"}) is None


@pytest.mark.parametrize("name", ["mu", "tau_log__"])
def test_names_that_are_not_centred_locals_are_left_alone(name):
    model, _, _ = centred_model(np.random.default_rng(2))
    assert non_centred(model, model.continuous_value_vars, {name}) is None


def test_the_prior_share_is_each_locals_variance_over_its_prior_one():
    model, _, _ = centred_model(np.random.default_rng(3))
    vars = model.continuous_value_vars
    twin = non_centred(model, vars, {"a"})
    point = split(flat(model.initial_point(), vars), model, vars)
    point["tau_log__"] = np.log(0.5)
    position = flat(point, vars)
    variances = np.full(position.size, 0.01)
    (where,) = twin._slices
    variances[where] = np.linspace(0.0, 0.25, N_GROUPS)  # 0 to 100 % of tau² = 0.25
    expected = np.mean(np.linspace(0.0, 1.0, N_GROUPS))
    assert prior_share(twin, position, variances) == pytest.approx(expected)
    assert prior_share(twin, position, np.diag(variances)) == pytest.approx(expected)
