"""Kernels: the contract every kernel keeps, and invariants of their steps in NumPy.

Euclidean kernels are arithmetic only, so the same functions the compiled trajectory
runs can be checked here with NumPy arrays and a NumPy target.
"""

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.kernels import hmc, sghmc, sgld, sgnht, sgnphmc
from pymc_sgmcmc.kernels.base import Kernel, Target, tree_flatten, tree_replace
from pymc_sgmcmc.manifolds.simplex import SimplexLayout
from pymc_sgmcmc.manifolds.sphere import SphereLayout
from pymc_sgmcmc.metrics import euclidean_metric
from pymc_sgmcmc.sampling import SAMPLERS

PRECISION = np.array([[3.0, 1.0], [1.0, 2.0]])


def gaussian_target(precision=PRECISION):
    """log p(θ) = −θᵀPθ/2 with NumPy."""
    return Target(logp=lambda x: -0.5 * x @ precision @ x, grad=lambda x: -precision @ x)


def params_for(kernel, step_size=0.1, dim=2):
    """Parameters of ``kernel`` with NumPy values."""
    values = {
        "step_size": step_size,
        "friction": 1.0,
        "noise_estimate": 0.0,
        "diffusion": 1.0,
        "thermostat_mass": 0.0,  # 0: the dimension
        "temperature": 1.0,
        "degrees_of_freedom": 0.0,
        "decay": 0.99,
        "offset": 1e-5,
        "adapting": 1.0,
        "metric": euclidean_metric(np.array([1.0, 2.0]), dim),
        "layout": SphereLayout.from_blocks([(dim, None)]),
        # the whole position one simplex of K = dim + 1 categories
        "simplices": SimplexLayout.from_blocks([(dim, dim + 1)]),
        "simplex_shape": np.array([5.0]),
        "integrator": "gamma",
        # SGFS: F = diag(1, 2) with no gradient noise, in its basis W = F^(-1/2).
        "basis": np.diag([1.0, 0.5**0.5]),
        "noise_eigenvalues": np.zeros(dim),
    }
    return kernel.params_type(**{f: values[f] for f in kernel.params_type._fields})


class Inner(NamedTuple):
    inverse: object
    name: object


class Outer(NamedTuple):
    step_size: object
    inner: Inner
    flag: object


def test_tree_flatten_lists_array_leaves_by_path_and_keeps_static_ones():
    tree = Outer(0.1, Inner(np.ones(2), "static"), True)
    leaves = tree_flatten(tree)
    assert [path for path, _ in leaves] == ["step_size", "inner.inverse"]
    replaced = tree_replace(tree, {"inner.inverse": np.zeros(2), "step_size": 0.5})
    assert replaced.step_size == 0.5 and replaced.inner.name == "static" and replaced.flag
    np.testing.assert_array_equal(replaced.inner.inverse, np.zeros(2))


def test_a_kernel_must_put_position_and_step_size_first():
    class Backwards(NamedTuple):
        momentum: object
        position: object

    with pytest.raises(TypeError, match="first field must be 'position'"):
        dataclasses.replace(sghmc.KERNEL, state_type=Backwards)
    with pytest.raises(TypeError, match="first field must be 'step_size'"):
        dataclasses.replace(sghmc.KERNEL, params_type=sghmc.SGHMCState)


SYMBOLIC_ONLY = {"rhmc", "sgrnphmc"}
"""Kernels whose step differentiates a position-dependent metric with PyTensor; their
compiled step is checked against a NumPy generalized leapfrog in
test_samplers_riemannian.py."""


KERNELS = {cls.kernel.name: cls.kernel for cls in SAMPLERS}


@pytest.mark.parametrize("name", sorted(set(KERNELS) - SYMBOLIC_ONLY))
def test_every_kernel_steps_with_numpy_and_keeps_its_state_shapes(name):
    kernel: Kernel = KERNELS[name]
    rng = np.random.default_rng(0)
    params = params_for(kernel)
    state = kernel.init(np.array([0.5, -0.3]), rng.standard_normal(2), params)
    assert isinstance(state, kernel.state_type)
    target = gaussian_target()
    if kernel.prepare is not None:
        state = kernel.prepare(state, target, params)
    noise = rng.standard_normal(2 + kernel.extra_normals(params)) if kernel.step_noise else None
    new, info = kernel.step_with_info(state, target, noise, params)
    assert type(new) is kernel.state_type
    assert set(info) == set(kernel.step_info)
    for old_field, new_field in zip(state, new, strict=True):
        assert np.shape(old_field) == np.shape(new_field)
    assert not np.array_equal(new.position, state.position)
    stats = kernel.stats(new, info, params)
    assert set(stats) == set(kernel.stats_dtypes)
    assert all(np.ndim(value) == 0 and np.isfinite(value) for value in stats.values())


def leapfrog_energy_error(step_size, n_steps):
    """Largest |H − H₀| along a noise-free HMC kernel trajectory of fixed length."""
    kernel, target = hmc.KERNEL, gaussian_target()
    params = params_for(kernel, step_size)
    state = kernel.prepare(
        hmc.HMCState(np.array([1.0, -0.5]), np.array([0.3, 0.8]), None), target, params
    )
    start = kernel.energy(state, target, params)
    errors = []
    for _ in range(n_steps):
        state = kernel.step(state, target, None, params)
        errors.append(abs(kernel.energy(state, target, params) - start))
    return max(errors)


def test_hmc_kernel_conserves_energy_to_second_order():
    coarse = leapfrog_energy_error(0.1, 100)
    fine = leapfrog_energy_error(0.05, 200)
    assert 3.6 < coarse / fine < 4.4  # O(ε²): halving ε quarters the error
    assert coarse < 0.05


def test_hmc_kernel_is_reversible_under_a_momentum_flip():
    kernel, target = hmc.KERNEL, gaussian_target()
    params = params_for(kernel, 0.2)
    start = kernel.prepare(
        hmc.HMCState(np.array([1.0, -0.5]), np.array([0.3, 0.8]), None), target, params
    )
    state = start
    for _ in range(25):
        state = kernel.step(state, target, None, params)
    state = state._replace(momentum=-state.momentum)
    for _ in range(25):
        state = kernel.step(state, target, None, params)
    np.testing.assert_allclose(state.position, start.position, atol=1e-12)
    np.testing.assert_allclose(-state.momentum, start.momentum, atol=1e-12)


def test_refresh_draws_momentum_from_the_metric_and_keeps_the_rest():
    params = params_for(sgnht.KERNEL)
    state = sgnht.SGNHTState(np.zeros(2), np.ones(2), np.array(0.7))
    refreshed = sgnht.KERNEL.refresh(state, gaussian_target(), np.array([1.0, -1.0]), params)
    np.testing.assert_allclose(refreshed.momentum, params.metric.factor * [1.0, -1.0])
    assert refreshed.thermostat == 0.7 and refreshed.position is state.position


def test_sgld_kernel_is_the_langevin_update():
    params = params_for(sgld.KERNEL, 0.01)
    target = gaussian_target()
    position, noise = np.array([0.4, 0.2]), np.array([0.5, -1.0])
    new = sgld.KERNEL.step(sgld.SGLDState(position), target, noise, params)
    # The metric of params_for is M = diag(1, 2): drift ε M⁻¹∇, noise N(0, 2ε M⁻¹).
    inverse = params.metric.inverse
    expected = position + 0.01 * inverse * target.grad(position) + np.sqrt(0.02 * inverse) * noise
    np.testing.assert_allclose(new.position, expected)


def test_kernel_statistics_are_compiled_from_the_trajectorys_end_and_its_step_info(
    gaussian_model,
):
    """SGNPHMC's statistics, output by the compiled trajectory, against a NumPy replay.

    Its energy drift is the sum of the steps' energy errors (step info reduced by
    "sum"), its kinetic temperature and ``s`` those of the end state: no state field
    carries them between trajectories.
    """
    assert "energy_drift" not in sgnphmc.SGNPHMCState._fields
    with gaussian_model:
        step = pmsg.SGNPHMC(step_size=0.2, n_steps=7, start="initial_point")
    step.setup_chain(np.random.default_rng(3), tune=0, draws=1)
    position = np.array([0.4, -1.1])
    inputs = step.trajectory_inputs(position, 0.2)
    outputs = step.trajectory_function.named(**inputs)

    params = step.params._replace(step_size=0.2)
    identity = gaussian_target(np.eye(2))
    state = sgnphmc.KERNEL.init(position, np.zeros(2), params)
    state = state._replace(**{n: inputs[f"state.{n}"] for n in sgnphmc.KERNEL.resamples})
    state = sgnphmc.KERNEL.prepare(state, identity, params)
    errors = []
    for noise in inputs["noise"]:
        state, info = sgnphmc.KERNEL.step_with_info(state, identity, noise, params)
        errors.append(info["energy_error"])
    np.testing.assert_allclose(outputs["position"], state.position, rtol=1e-10)
    assert outputs["stats.energy_drift"] == pytest.approx(sum(errors), rel=1e-8, abs=1e-14)
    assert abs(outputs["stats.energy_drift"]) > 0  # a discretised step has an error
    expected = sgnphmc.KERNEL.stats(state, {"energy_error": sum(errors)}, params)
    for name in ("kinetic_temperature", "control", "control_momentum"):
        assert outputs[f"stats.{name}"] == pytest.approx(expected[name], rel=1e-10)


def test_step_info_reductions_and_refresh_first_are_checked():
    with pytest.raises(ValueError, match="step_info reductions"):
        dataclasses.replace(sghmc.KERNEL, step_info={"error": "mean"})
    with pytest.raises(TypeError, match="refresh_first needs a refresh"):
        dataclasses.replace(sgld.KERNEL, refresh_first=True)
