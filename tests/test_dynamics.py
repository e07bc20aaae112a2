"""Unit tests of the pure update rules, mass matrices and step-size schedules on NumPy.

Nothing here compiles a PyTensor function: the update rules are plain arithmetic, so
they run on NumPy arrays and can be checked against closed-form results.
"""

import math

import numpy as np
import pytest
from scipy import stats

from pymc_sgmcmc.dynamics import (
    kinetic_energy,
    kinetic_temperature,
    sghmc_step,
    sgld_step,
    sgnht_step,
    velocity,
)
from pymc_sgmcmc.dynamics.newton import (
    anchored_block_log_density,
    block_newton_log_density,
    block_newton_proposal,
    curvature_factors,
    dense_newton_log_density,
    dense_newton_proposal,
    newton_log_density,
    newton_proposal,
    per_group_product,
)

# -- helpers ---------------------------------------------------------------------------


def gaussian_grad(variances):
    """Gradient of the log density of N(0, diag(variances))."""
    variances = np.asarray(variances, dtype=float)
    return lambda position: -position / variances


def coupled_anharmonic_grad(position):
    """Gradient of log p(θ) = −(θ₀² + θ₁² + θ₀θ₁)/2 − θ₀⁴/10: a non-linear force."""
    theta0, theta1 = position
    return np.array([-theta0 - 0.5 * theta1 - 0.4 * theta0**3, -theta1 - 0.5 * theta0])


DENSE_INV_MASS = np.array([[1.5, 0.3], [0.3, 0.8]])


def hamiltonian_map(step_size, friction=0.0, grad=coupled_anharmonic_grad, inv_mass=None):
    """SGHMC without injected noise as a map of the concatenated state (θ, r)."""
    inv_mass = DENSE_INV_MASS if inv_mass is None else inv_mass

    def step(state):
        position, momentum = state[:2], state[2:]
        new_position, new_momentum = sghmc_step(
            position,
            momentum,
            grad,
            noise=np.zeros(2),
            step_size=step_size,
            inv_mass=inv_mass,
            friction=friction,
            noise_estimate=friction,  # no injected noise: 2(C − B̂)ε = 0
        )
        return np.concatenate([new_position, new_momentum])

    return step


def numerical_jacobian(function, point, h=1e-6):
    columns = []
    for j in range(point.size):
        offset = np.zeros_like(point)
        offset[j] = h
        columns.append((function(point + offset) - function(point - offset)) / (2 * h))
    return np.stack(columns, axis=1)


# -- SGHMC ---------------------------------------------------------------------------


def test_sghmc_without_friction_or_noise_preserves_volume():
    jacobian = numerical_jacobian(hamiltonian_map(0.3), np.array([0.7, -1.2, 0.4, 0.9]))
    assert np.linalg.det(jacobian) == pytest.approx(1.0, abs=1e-7)


def test_sghmc_friction_contracts_volume_by_one_minus_step_friction_per_dimension():
    # Friction in the metric of the mass (C = cM): ∂r'/∂r = (1 − εc)I + ε²HM⁻¹ and
    # ∂θ'/∂r = εM⁻¹ give det = (1 − εc)^D, whatever the mass.
    step_size, friction = 0.2, 1.5
    jacobian = numerical_jacobian(
        hamiltonian_map(step_size, friction), np.array([0.7, -1.2, 0.4, 0.9])
    )
    assert np.linalg.det(jacobian) == pytest.approx((1 - step_size * friction) ** 2, rel=1e-7)


def test_sghmc_without_friction_or_noise_is_reversible_with_half_step_momentum_flip():
    # Position-first symplectic Euler carries the leapfrog momentum at half steps:
    # r_i = p_{i+1/2}. Flipping the momentum of the *previous* half step,
    # r̃ = −(r_n − ε∇log p(θ_n)), and running n steps again retraces the positions.
    step_size, n_steps = 0.1, 50
    step = hamiltonian_map(step_size)
    start = np.array([0.7, -1.2, 0.4, 0.9])
    state = start
    positions = [state[:2]]
    for _ in range(n_steps):
        state = step(state)
        positions.append(state[:2])
    position, momentum = state[:2], state[2:]
    state = np.concatenate([position, -(momentum - step_size * coupled_anharmonic_grad(position))])
    backward_positions = [state[:2]]
    for _ in range(n_steps):
        state = step(state)
        backward_positions.append(state[:2])
    np.testing.assert_allclose(backward_positions[::-1], positions, atol=1e-12)
    expected_final_momentum = -(start[2:] - step_size * coupled_anharmonic_grad(start[:2]))
    np.testing.assert_allclose(state[2:], expected_final_momentum, atol=1e-12)


def harmonic_energy_errors(step_size, total_time=200.0):
    """|H − H₀| along a noiseless, frictionless SGHMC path on a 2-D harmonic oscillator."""
    variances = np.array([1.0, 0.25])  # angular frequencies 1 and 2
    grad = gaussian_grad(variances)
    position, momentum = np.array([1.0, -0.5]), np.array([0.3, 0.8])

    def energy(position, momentum):
        return 0.5 * np.sum(position**2 / variances) + kinetic_energy(np.ones(2), momentum)

    initial = energy(position, momentum)
    errors = []
    for _ in range(int(round(total_time / step_size))):
        position, momentum = sghmc_step(
            position, momentum, grad, np.zeros(2), step_size, np.ones(2), 0.0, 0.0
        )
        errors.append(abs(energy(position, momentum) - initial))
    return np.array(errors)


def test_sghmc_energy_error_on_harmonic_oscillator_is_bounded_and_first_order():
    coarse = harmonic_energy_errors(0.05)
    fine = harmonic_energy_errors(0.025)
    # Bounded: no drift over ~30 periods of the slow mode (second half ≈ first half).
    half = coarse.size // 2
    assert coarse[half:].max() < 1.2 * coarse[:half].max()
    # O(ε): the initial energy is 0.8; the error is a few ε, and halving ε halves it.
    assert coarse.max() < 3 * 0.05
    assert coarse.max() / fine.max() == pytest.approx(2.0, rel=0.15)


def test_sghmc_momentum_at_zero_gradient_is_ar1_with_friction_and_noise_estimate():
    # With ∇log p = 0: r' = (1 − εC) r + √(2(C − B̂)ε) z, per chain (vectorised chains).
    rng = np.random.default_rng(7)
    n_chains, step_size, friction, noise_estimate = 200_000, 0.1, 2.0, 0.5
    momentum = np.full(n_chains, 1.5)
    _, new_momentum = sghmc_step(
        np.zeros(n_chains),
        momentum,
        lambda position: np.zeros_like(position),
        rng.standard_normal(n_chains),
        step_size,
        np.ones(n_chains),
        friction,
        noise_estimate,
    )
    expected_mean = (1 - step_size * friction) * 1.5
    expected_variance = 2 * (friction - noise_estimate) * step_size
    standard_error = math.sqrt(expected_variance / n_chains)
    assert abs(new_momentum.mean() - expected_mean) < 4 * standard_error
    assert new_momentum.var() == pytest.approx(
        expected_variance, abs=4 * expected_variance * math.sqrt(2 / n_chains)
    )


def test_sghmc_friction_acts_on_the_momentum_itself_whatever_the_mass():
    # C = cM: with no gradient and no injected noise, r' = (1 − εc) r exactly.
    momentum = np.array([1.0, -2.0])
    _, new_momentum = sghmc_step(
        np.zeros(2),
        momentum,
        lambda position: np.zeros_like(position),
        np.zeros(2),
        0.1,
        DENSE_INV_MASS,
        1.5,
        1.5,
    )
    np.testing.assert_allclose(new_momentum, (1 - 0.1 * 1.5) * momentum)


def test_sghmc_keeps_momentum_law_n0m_up_to_second_order_with_noise_in_the_mass_metric():
    # r ~ N(0, M), ξ ~ N(0, M): r' = (1 − εc) r + √(2cε) ξ has covariance (1 + ε²c²) M.
    # Columns are independent chains (a dense M⁻¹ multiplies from the left).
    rng = np.random.default_rng(8)
    mass = np.linalg.inv(DENSE_INV_MASS)
    factor = np.linalg.cholesky(mass)
    n_chains, step_size, friction = 200_000, 0.1, 2.0
    momentum = factor @ rng.standard_normal((2, n_chains))
    noise = factor @ rng.standard_normal((2, n_chains))
    _, new_momentum = sghmc_step(
        np.zeros((2, n_chains)),
        momentum,
        lambda position: np.zeros_like(position),
        noise,
        step_size,
        DENSE_INV_MASS,
        friction,
        0.0,
    )
    covariance = new_momentum @ new_momentum.T / n_chains
    expected = (1 + (step_size * friction) ** 2) * mass
    standard_error = np.sqrt(
        (np.outer(np.diag(expected), np.diag(expected)) + expected**2) / n_chains
    )
    assert np.all(np.abs(covariance - expected) < 4 * standard_error)


# -- SGNHT ---------------------------------------------------------------------------


def test_sgnht_thermostat_update_is_step_times_kinetic_temperature_minus_one():
    rng = np.random.default_rng(0)
    dimension, step_size, thermostat = 3, 0.05, 0.7
    a = rng.normal(size=(dimension, dimension))
    inv_mass = a @ a.T + dimension * np.eye(dimension)
    position, momentum = rng.normal(size=dimension), rng.normal(size=dimension)
    new_position, new_momentum, new_thermostat = sgnht_step(
        position,
        momentum,
        thermostat,
        gaussian_grad(np.ones(dimension)),
        rng.normal(size=dimension),
        step_size,
        inv_mass,
        diffusion=1.3,
    )
    temperature = new_momentum @ inv_mass @ new_momentum / dimension
    assert new_thermostat == pytest.approx(thermostat + step_size * (temperature - 1.0), rel=1e-12)
    np.testing.assert_allclose(new_position, position + step_size * inv_mass @ momentum)


def test_sgnht_thermostat_of_a_held_step_reads_the_moving_coordinates_alone():
    # Minibatches of whole groups: coordinates 1 and 3 are held (zero momentum in, state
    # restored by the caller). Their new momenta (gradient and noise) must not reach ξ.
    rng = np.random.default_rng(1)
    inv_mass = np.array([0.5, 2.0, 1.5, 3.0])
    moving = np.array([1.0, 0.0, 1.0, 0.0])
    momentum = rng.normal(size=4) * moving
    arguments = (np.zeros(4), momentum, 0.7, gaussian_grad(np.ones(4)), rng.normal(size=4))
    new_position, new_momentum, new_thermostat = sgnht_step(*arguments, 0.05, inv_mass, 1.3, moving)
    temperature = (new_momentum**2 * inv_mass)[[0, 2]].sum() / 2
    assert new_thermostat == pytest.approx(0.7 + 0.05 * (temperature - 1.0), rel=1e-12)
    np.testing.assert_array_equal(new_position[[1, 3]], 0.0)  # no momentum: no drift
    # All coordinates moving: the plain step.
    everything = sgnht_step(*arguments, 0.05, inv_mass, 1.3, np.ones(4))
    np.testing.assert_allclose(everything[2], sgnht_step(*arguments, 0.05, inv_mass, 1.3)[2])


def test_sgnht_friction_acts_on_the_momentum_itself_whatever_the_mass():
    # Friction in the metric of the mass: with no gradient or noise, p' = (1 − εξ) p.
    momentum = np.array([1.0, -2.0])
    _, new_momentum, _ = sgnht_step(
        np.zeros(2),
        momentum,
        0.8,
        lambda position: np.zeros_like(position),
        np.zeros(2),
        0.1,
        DENSE_INV_MASS,
        diffusion=1.0,
    )
    np.testing.assert_allclose(new_momentum, (1 - 0.1 * 0.8) * momentum)


def test_sgnht_gradient_is_taken_at_the_new_position():
    evaluated_at = []

    def recording_grad(position):
        evaluated_at.append(position.copy())
        return np.zeros_like(position)

    new_position, _, _ = sgnht_step(
        np.array([1.0, 2.0]),
        np.array([0.5, -0.5]),
        0.0,
        recording_grad,
        np.zeros(2),
        0.1,
        np.ones(2),
        1.0,
    )
    assert len(evaluated_at) == 1
    np.testing.assert_array_equal(evaluated_at[0], new_position)


def test_sgnht_without_noise_drives_kinetic_temperature_to_one_on_average():
    # Σ ε (K_i − 1) = ξ_n − ξ_0 exactly, so a bounded thermostat forces the long-run
    # average of K = pᵀM⁻¹p/D to 1, whatever the starting temperature.
    dimension, step_size, n_steps = 20, 0.02, 20_000
    variances = np.linspace(0.5, 2.0, dimension)
    inv_mass = np.linspace(0.5, 1.5, dimension)
    grad = gaussian_grad(variances)
    position = np.ones(dimension)
    momentum = np.full(dimension, 3.0) / np.sqrt(inv_mass)  # K = 9 at the start: hot
    thermostat = initial_thermostat = 0.0
    temperatures = np.empty(n_steps)
    for i in range(n_steps):
        position, momentum, thermostat = sgnht_step(
            position,
            momentum,
            thermostat,
            grad,
            np.zeros(dimension),
            step_size,
            inv_mass,
            diffusion=1.0,
        )
        temperatures[i] = kinetic_temperature(inv_mass, momentum)
    assert temperatures[0] > 5
    assert temperatures.mean() == pytest.approx(
        1.0 + (thermostat - initial_thermostat) / (n_steps * step_size), rel=1e-9
    )
    assert temperatures[n_steps // 2 :].mean() == pytest.approx(1.0, abs=0.05)


def test_sgnht_with_noise_samples_the_gaussian_and_thermostat_settles_at_diffusion():
    # With exact gradients, the friction ξ that balances injected noise A is ξ = A.
    rng = np.random.default_rng(3)
    dimension, step_size, n_steps, diffusion = 50, 0.05, 20_000, 1.5
    variances = np.linspace(0.5, 2.0, dimension)
    grad = gaussian_grad(variances)
    position, momentum, thermostat = np.zeros(dimension), np.zeros(dimension), diffusion
    standardised_squares, thermostats = [], []
    for i in range(n_steps):
        position, momentum, thermostat = sgnht_step(
            position,
            momentum,
            thermostat,
            grad,
            rng.standard_normal(dimension),
            step_size,
            np.ones(dimension),
            diffusion,
        )
        if i >= n_steps // 5:
            standardised_squares.append(np.mean(position**2 / variances))
            thermostats.append(thermostat)
    # E[θ²/σ²] = 1 up to an O(ε) discretisation bias (about −0.05 at ε = 0.05).
    assert np.mean(standardised_squares) == pytest.approx(1.0, abs=0.1)
    assert np.mean(thermostats) == pytest.approx(diffusion, abs=0.15)


# -- SGLD ----------------------------------------------------------------------------


def sgld_ar1(step_size, variance):
    """Coefficient and stationary variance of SGLD on N(0, variance).

    θ' = (1 − ε/σ²) θ + √(2ε) z, so Var∞ = 2ε / (1 − (1 − ε/σ²)²) = σ² / (1 − ε/(2σ²)).
    """
    coefficient = 1.0 - step_size / variance
    return coefficient, 2.0 * step_size / (1.0 - coefficient**2)


def test_sgld_one_step_has_exact_gaussian_mean_and_variance():
    rng = np.random.default_rng(1)
    n_chains, step_size, variance, start = 400_000, 0.2, 2.0, 1.5
    new_position = sgld_step(
        np.full(n_chains, start),
        gaussian_grad(variance),
        rng.standard_normal(n_chains),
        step_size,
    )
    coefficient, _ = sgld_ar1(step_size, variance)
    one_step_variance = 2.0 * step_size
    assert abs(new_position.mean() - coefficient * start) < 4 * math.sqrt(
        one_step_variance / n_chains
    )
    assert new_position.var() == pytest.approx(
        one_step_variance, abs=4 * one_step_variance * math.sqrt(2 / n_chains)
    )


def test_sgld_long_run_variance_matches_the_ar1_stationary_variance():
    # ε = 0.5, σ² = 1: Var∞ = 4/3, far from the posterior's 1 (the discretisation bias
    # that decreasing step sizes remove); 100 000 chains give a 1 % standard error.
    rng = np.random.default_rng(2)
    n_chains, n_steps, step_size, variance = 100_000, 60, 0.5, 1.0
    position = np.zeros(n_chains)
    for _ in range(n_steps):
        position = sgld_step(
            position, gaussian_grad(variance), rng.standard_normal(n_chains), step_size
        )
    coefficient, stationary = sgld_ar1(step_size, variance)
    expected = stationary * (1 - coefficient ** (2 * n_steps))
    assert stationary == pytest.approx(4 / 3)
    assert position.var() == pytest.approx(expected, abs=4 * expected * math.sqrt(2 / n_chains))
    assert abs(position.var() - variance) > 0.25


# -- kinetic energy, velocity, mass --------------------------------------------------


def test_velocity_and_kinetic_temperature_agree_for_diagonal_and_dense_inverse_mass():
    diagonal = np.array([0.5, 2.0, 3.0])
    momentum = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(velocity(diagonal, momentum), velocity(np.diag(diagonal), momentum))
    np.testing.assert_allclose(velocity(diagonal, momentum), [0.5, -4.0, 1.5])
    expected_energy = 0.5 * (0.5 * 1.0 + 2.0 * 4.0 + 3.0 * 0.25)
    assert kinetic_energy(diagonal, momentum) == pytest.approx(expected_energy)
    assert kinetic_energy(np.diag(diagonal), momentum) == pytest.approx(expected_energy)
    assert kinetic_temperature(diagonal, momentum) == pytest.approx(2 * expected_energy / 3)
    assert kinetic_temperature(np.diag(diagonal), momentum) == pytest.approx(
        2 * expected_energy / 3
    )


def test_kinetic_energy_with_dense_inverse_mass_is_the_quadratic_form():
    inv_mass = np.array([[2.0, 0.5], [0.5, 1.0]])
    momentum = np.array([1.0, -3.0])
    assert kinetic_energy(inv_mass, momentum) == pytest.approx(0.5 * momentum @ inv_mass @ momentum)


# -- Newton proposals: detailed balance on a Gaussian ------------------------------------


def test_a_newton_proposal_is_reversible_for_a_gaussian_target():
    # π = N(m, 1/h) per coordinate, fitted exactly at every point (g = h(m − θ)): the
    # Hastings ratio π(θ')q(θ | θ') / π(θ)q(θ' | θ) is 1 for any θ, θ'.
    rng = np.random.default_rng(0)
    m, h = rng.normal(size=6), rng.uniform(0.5, 4.0, size=6)
    groups = np.arange(6).reshape(3, 2)

    def log_target(theta):
        return (-0.5 * h * (theta - m) ** 2)[groups].sum(axis=1)

    theta = rng.normal(size=6)
    proposal = newton_proposal(theta, h * (m - theta), h, rng.normal(size=6))
    log_ratio = (
        log_target(proposal)
        - log_target(theta)
        + newton_log_density(theta, proposal, h * (m - proposal), h, groups)
        - newton_log_density(proposal, theta, h * (m - theta), h, groups)
    )
    np.testing.assert_allclose(log_ratio, 0.0, atol=1e-12)


def test_an_anchored_block_proposal_is_students_t_at_the_newton_step_from_its_centre():
    # For a Gaussian target fitted at the centre, c + H⁻¹g is the target's mean whatever
    # c. Each group has two correlated coordinates: whitened by Lᵀ (H = LLᵀ) the proposal
    # is a pair of independent t's, so its log density differs from SciPy's sum of t
    # densities of the whitened deviations by a constant per group.
    rng = np.random.default_rng(1)
    n_groups, nu = 3, 8.0
    roots = rng.normal(size=(n_groups, 2, 2))
    precision = roots @ roots.transpose(0, 2, 1) + np.eye(2)
    m, centre = rng.normal(size=(n_groups, 2)), rng.normal(size=(n_groups, 2))
    gradient = per_group_product(precision, m - centre)
    shift, spread, whitening = curvature_factors(precision, 1e-8)
    np.testing.assert_allclose(shift, np.linalg.inv(precision), rtol=1e-12)
    np.testing.assert_allclose(spread @ whitening, np.eye(2)[None].repeat(3, 0), atol=1e-12)
    np.testing.assert_allclose(
        block_newton_proposal(centre, gradient, shift, spread, np.zeros((3, 2))), m
    )
    # The draws' covariance is ν/(ν − 2) H⁻¹ (100,000 draws per group: ~1 % error).
    n = 100_000
    repeated = [np.repeat(a, n, axis=0) for a in (centre, gradient, shift, spread)]
    t = rng.standard_t(nu, size=(n_groups * n, 2))
    draws = block_newton_proposal(*repeated, t).reshape(n_groups, n, 2) - m[:, None, :]
    covariance = np.einsum("gni,gnj->gij", draws, draws) / n
    expected = nu / (nu - 2) * np.linalg.inv(precision)
    np.testing.assert_allclose(covariance, expected, rtol=0.05, atol=0.02 * expected.max())
    a, b = rng.normal(size=(n_groups, 2)), rng.normal(size=(n_groups, 2))
    ours = anchored_block_log_density(a, centre, gradient, shift, whitening, nu) - (
        anchored_block_log_density(b, centre, gradient, shift, whitening, nu)
    )

    def reference(x):
        whitened = np.einsum("gij,gj->gi", np.linalg.cholesky(precision).transpose(0, 2, 1), x - m)
        return stats.t.logpdf(whitened, nu).sum(axis=1)

    np.testing.assert_allclose(ours, reference(a) - reference(b), rtol=1e-12)


def test_a_block_newton_proposal_is_reversible_for_a_gaussian_target():
    # π = N(m_j, H_j⁻¹) per group, fitted exactly at every point (g = H(m − θ)): the
    # Hastings ratio is 1 for any θ, θ'.
    rng = np.random.default_rng(3)
    roots = rng.normal(size=(4, 3, 3))
    precision = roots @ roots.transpose(0, 2, 1) + np.eye(3)
    m = rng.normal(size=(4, 3))
    shift, spread, whitening = curvature_factors(precision, 1e-8)

    def log_target(theta):
        deviation = theta - m
        return -0.5 * (deviation * per_group_product(precision, deviation)).sum(axis=1)

    def gradient(theta):
        return per_group_product(precision, m - theta)

    theta = rng.normal(size=(4, 3))
    proposal = block_newton_proposal(theta, gradient(theta), shift, spread, rng.normal(size=(4, 3)))
    log_ratio = (
        log_target(proposal)
        - log_target(theta)
        + block_newton_log_density(theta, proposal, gradient(proposal), shift, whitening)
        - block_newton_log_density(proposal, theta, gradient(theta), shift, whitening)
    )
    np.testing.assert_allclose(log_ratio, 0.0, atol=1e-10)


def test_curvature_factors_floor_a_block_that_is_not_positive_definite():
    blocks = np.array([[[1.0, 2.0], [2.0, 1.0]]])  # eigenvalues 3 and -1
    shift, _, whitening = curvature_factors(blocks, 0.5)
    precision = whitening.transpose(0, 2, 1) @ whitening  # L Lᵀ
    np.testing.assert_allclose(np.linalg.eigvalsh(precision[0]), [0.5, 3.0])
    np.testing.assert_allclose(shift[0], np.linalg.inv(precision[0]))


def test_a_dense_newton_proposal_is_reversible_for_a_gaussian_target():
    rng = np.random.default_rng(2)
    root = rng.normal(size=(4, 4))
    precision = root @ root.T + 4 * np.eye(4)
    factor = np.linalg.cholesky(precision)
    m = rng.normal(size=4)

    def log_target(theta):
        return -0.5 * (theta - m) @ precision @ (theta - m)

    theta = rng.normal(size=4)
    proposal = dense_newton_proposal(theta, precision @ (m - theta), factor, rng.normal(size=4))
    # For the exact precision the proposal is N(m, A⁻¹) whatever θ: an independent draw.
    np.testing.assert_allclose(
        dense_newton_proposal(theta + 1.0, precision @ (m - theta - 1.0), factor, np.zeros(4)), m
    )
    log_ratio = (
        log_target(proposal)
        - log_target(theta)
        + dense_newton_log_density(theta, proposal, precision @ (m - proposal), factor)
        - dense_newton_log_density(proposal, theta, precision @ (m - theta), factor)
    )
    assert abs(log_ratio) < 1e-10
