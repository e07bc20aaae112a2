"""Unit tests of Monte Carlo EM mass learning: the M step, its step sequence, the E-step
sample-size rule and its test functions. Pure NumPy, no sampling.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM":
eq. 5 (the M step), §3.2 (the sample-size rule), §3.3 (κ_k).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.special
import scipy.stats

from pymc_sgmcmc.adaptation import mass_em
from pymc_sgmcmc.adaptation.mass_em import (
    SHRINKAGE_PSEUDO_COUNT,
    condition_number,
    curvature_estimate,
    estimate_inverse_mass,
    geometric_mean_eigenvalue,
    online_inverse_mass_update,
    regularized_covariance,
    step_sequence,
    stiffness,
)
from pymc_sgmcmc.adaptation.sample_size import (
    SampleSizeRule,
    fixed_offsets,
    grow_sample_size,
    hmc_test_function,
    inside_interval,
    monte_carlo_interval,
    sgnht_test_function,
    subsample_offsets,
)
from pymc_sgmcmc.metrics import metric_from_inverse as mass_from_inverse

Z_95 = 1.959963984540054
"""z_(1 − α/2) for α = 0.05, written out so the interval is checked by hand."""


def random_spd(dim, seed, low=0.5, high=20.0):
    """A symmetric positive-definite matrix with eigenvalues spread over [low, high]."""
    rng = np.random.default_rng(seed)
    rotation = scipy.stats.ortho_group.rvs(dim, random_state=rng)
    eigenvalues = np.geomspace(low, high, dim)
    matrix = rotation @ np.diag(eigenvalues) @ rotation.T
    return 0.5 * (matrix + matrix.T)


def gaussian_samples(cov, n, seed, mean=None):
    rng = np.random.default_rng(seed)
    mean = np.zeros(len(cov)) if mean is None else mean
    return rng.multivariate_normal(mean, cov, size=n)


def is_spd(matrix):
    return np.allclose(matrix, matrix.T, rtol=0, atol=1e-12 * np.abs(matrix).max()) and bool(
        np.linalg.eigvalsh(0.5 * (matrix + matrix.T))[0] > 0
    )


def sqrtm_spd(matrix):
    eigenvalues, vectors = np.linalg.eigh(matrix)
    return vectors @ np.diag(np.sqrt(eigenvalues)) @ vectors.T


# -- the M step recovers a known covariance --------------------------------------------

N_SAMPLES = 40_000
DIM = 5
COV = random_spd(DIM, seed=11)
# Sampling error of the estimates, in whitened coordinates: the entries of the sample
# covariance of n standard normal vectors have sd 1/√n (off the diagonal) and √(2/n) (on
# it); the unit-determinant normalisation and the inverse move them by the same order.
# Tolerance: 5 such sds (the shrinkage bias, c/n ≈ 1e-4 relative, is far below it).
TOLERANCE = 5 * math.sqrt(2 / N_SAMPLES)


@pytest.fixture(scope="module")
def samples():
    # A large offset: the estimate must not depend on the location.
    return gaussian_samples(COV, N_SAMPLES, seed=12, mean=np.linspace(-100.0, 50.0, DIM))


def test_position_estimator_dense_is_the_covariance_at_unit_determinant(samples):
    estimate = estimate_inverse_mass(samples, "position", "dense")
    expected = COV / np.linalg.det(COV) ** (1 / DIM)
    assert estimate.shape == (DIM, DIM)
    assert is_spd(estimate)
    assert math.isclose(np.linalg.det(estimate), 1.0, rel_tol=1e-10)
    root_inverse = np.linalg.inv(sqrtm_spd(expected))
    whitened = root_inverse @ estimate @ root_inverse
    np.testing.assert_allclose(whitened, np.eye(DIM), atol=TOLERANCE)
    # Not a trivial pass: the unnormalised covariance and the inverse are far off.
    assert np.abs(root_inverse @ COV @ root_inverse - np.eye(DIM)).max() > 10 * TOLERANCE


def test_position_estimator_diag_is_the_variances_at_unit_geometric_mean(samples):
    estimate = estimate_inverse_mass(samples, "position", "diag")
    variances = np.diag(COV)
    expected = variances / np.exp(np.mean(np.log(variances)))
    assert estimate.shape == (DIM,)
    assert math.isclose(np.prod(estimate), 1.0, rel_tol=1e-10)
    np.testing.assert_allclose(estimate / expected, 1.0, atol=TOLERANCE)


def test_momentum_estimator_dense_is_the_inverse_covariance(samples):
    # Momenta p ~ N(0, M) have covariance M, so the estimate of M_I = M⁻¹ is Σ⁻¹.
    estimate = estimate_inverse_mass(samples, "momentum", "dense")
    assert is_spd(estimate)
    root = sqrtm_spd(COV)
    np.testing.assert_allclose(root @ estimate @ root, np.eye(DIM), atol=TOLERANCE)


def test_momentum_estimator_diag_is_the_inverse_variances(samples):
    estimate = estimate_inverse_mass(samples, "momentum", "diag")
    np.testing.assert_allclose(estimate * np.diag(COV), 1.0, atol=TOLERANCE)


def test_diag_estimate_is_the_diagonal_of_the_dense_one(samples):
    few = samples[:50]
    dense = regularized_covariance(few, "dense")
    diag = regularized_covariance(few, "diag")
    np.testing.assert_allclose(diag, np.diag(dense), rtol=1e-12)


def test_regularized_covariance_is_the_stated_shrinkage():
    x = gaussian_samples(COV, 30, seed=13)
    n, c = len(x), SHRINKAGE_PSEUDO_COUNT
    sample_cov = np.cov(x, rowvar=False)
    target = np.trace(sample_cov) / DIM * np.eye(DIM)
    expected = n / (n + c) * sample_cov + c / (n + c) * target
    np.testing.assert_allclose(regularized_covariance(x, "dense"), expected, rtol=1e-12)
    np.testing.assert_allclose(regularized_covariance(x, "diag"), np.diag(expected), rtol=1e-12)


@pytest.mark.parametrize("structure", ["diag", "dense"])
def test_estimates_are_scale_free(structure):
    x = gaussian_samples(COV, 30, seed=14)
    scale = 7.3
    np.testing.assert_allclose(
        regularized_covariance(scale * x, structure),
        scale**2 * regularized_covariance(x, structure),
        rtol=1e-12,
    )
    # The position estimate is normalised, so it does not see the overall scale.
    np.testing.assert_allclose(
        estimate_inverse_mass(scale * x, "position", structure),
        estimate_inverse_mass(x, "position", structure),
        rtol=1e-10,
    )


def test_fewer_than_two_samples_are_refused():
    with pytest.raises(ValueError, match="at least 2 samples"):
        regularized_covariance(np.ones((1, 3)), "dense")


# -- rank-deficient and degenerate input ------------------------------------------------


def rank_deficient_inputs():
    rng = np.random.default_rng(15)
    basis = rng.standard_normal((2, 10))
    return {
        "n<D": rng.standard_normal((3, 10)),
        "n=2": rng.standard_normal((2, 10)),
        "2-D subspace": rng.standard_normal((200, 2)) @ basis,
        "one constant coordinate": np.column_stack(
            [rng.standard_normal((50, 4)), np.full(50, 3.0)]
        ),
        "all samples equal": np.tile(rng.standard_normal(6), (20, 1)),
    }


@pytest.mark.parametrize("case", list(rank_deficient_inputs()))
@pytest.mark.parametrize("estimator", ["position", "momentum"])
def test_rank_deficient_samples_still_give_a_positive_definite_estimate(case, estimator):
    x = rank_deficient_inputs()[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback needed: shrinkage suffices
        dense = estimate_inverse_mass(x, estimator, "dense")
        diag = estimate_inverse_mass(x, estimator, "diag")
    assert dense.shape == (x.shape[1], x.shape[1])
    assert is_spd(dense)
    assert np.all(np.isfinite(dense))
    assert diag.shape == (x.shape[1],)
    assert np.all(diag > 0) and np.all(np.isfinite(diag))
    assert np.isfinite(condition_number(dense))


@pytest.mark.parametrize("seed", range(5))
def test_shrinkage_bounds_the_condition_number(seed):
    # λ_min ≥ c/(n + c)·tr(Σ)/D and λ_max ≤ tr(Σ) + that, so cond ≤ 1 + nD/c: the
    # ill-conditioning fallback can only trigger for non-finite input at the default
    # threshold.
    rng = np.random.default_rng(seed)
    n, dim = rng.integers(2, 40), rng.integers(2, 12)
    x = rng.standard_normal((n, 1)) @ rng.standard_normal((1, dim)) * 1e6
    x += 1e-9 * rng.standard_normal((n, dim))
    cov = regularized_covariance(x, "dense")
    assert condition_number(cov) <= 1 + n * dim / SHRINKAGE_PSEUDO_COUNT + 1e-6


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings(
    "ignore:M step. the sample covariance is ill-conditioned:RuntimeWarning"
)
def test_non_finite_samples_skip_the_m_step_with_a_warning():
    x = np.random.default_rng(16).standard_normal((20, 4))
    x[3, 1] = np.nan
    for structure in ["diag", "dense"]:
        with pytest.warns(RuntimeWarning, match="M step skipped"):
            assert estimate_inverse_mass(x, "position", structure) is None
    x[3, 1] = np.inf
    with pytest.warns(RuntimeWarning, match="M step skipped"):
        assert estimate_inverse_mass(x, "momentum", "dense") is None


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings(
    "ignore:M step. the sample covariance is ill-conditioned:RuntimeWarning"
)
def test_overflowing_samples_skip_the_m_step_with_a_warning():
    x = np.random.default_rng(17).standard_normal((20, 4)) * 1e200
    with pytest.warns(RuntimeWarning, match="M step skipped"):
        assert estimate_inverse_mass(x, "position", "dense") is None


def test_ill_conditioned_dense_estimate_falls_back_to_its_diagonal(monkeypatch):
    # At the default threshold shrinkage keeps every finite estimate well conditioned
    # (see above), so lower the threshold to reach the fallback.
    monkeypatch.setattr(mass_em, "MAX_CONDITION", 50.0)
    correlated = np.array([[1.0, 0.999], [0.999, 1.0]])
    x = gaussian_samples(correlated, 5000, seed=18)
    assert condition_number(regularized_covariance(x, "dense")) > 50
    with pytest.warns(RuntimeWarning, match="using its diagonal"):
        estimate = estimate_inverse_mass(x, "position", "dense")
    assert estimate.shape == (2, 2)
    assert estimate[0, 1] == 0.0 and estimate[1, 0] == 0.0
    assert math.isclose(np.linalg.det(estimate), 1.0, rel_tol=1e-10)
    # When even the diagonal is beyond the threshold, the M step is skipped.
    wide = gaussian_samples(np.diag([1.0, 1e4]), 5000, seed=19)
    with pytest.warns(RuntimeWarning, match="M step skipped"):
        assert estimate_inverse_mass(wide, "momentum", "diag") is None


# -- eq. 5 and its step sequence ---------------------------------------------------------


def test_online_update_is_the_convex_combination_of_eq_5():
    old, new = random_spd(4, seed=20), random_spd(4, seed=21)
    for kappa in [1e-3, 0.3, 0.5, 1.0]:
        updated = online_inverse_mass_update(old, new, kappa)
        np.testing.assert_allclose(updated, (1 - kappa) * old + kappa * new, rtol=1e-14)
    np.testing.assert_array_equal(online_inverse_mass_update(old, new, 1.0), new)
    old_diag, new_diag = np.array([1.0, 2.0, 4.0]), np.array([3.0, 0.5, 4.0])
    np.testing.assert_allclose(
        online_inverse_mass_update(old_diag, new_diag, 0.25), [1.5, 1.625, 4.0], rtol=1e-14
    )


def test_online_update_keeps_symmetric_positive_definite():
    rng = np.random.default_rng(22)
    inverse = np.eye(6)
    for k in range(1, 60):
        # Estimates with condition numbers up to 1e6 in changing orientations.
        estimate = random_spd(6, seed=100 + k, low=1e-3, high=1e3)
        inverse = online_inverse_mass_update(inverse, estimate, step_sequence(k))
        assert is_spd(inverse)
        diag = online_inverse_mass_update(rng.uniform(1e-4, 1e4, 6), rng.uniform(1e-4, 1e4, 6), 0.7)
        assert np.all(diag > 0)


@pytest.mark.parametrize("kappa", [0.0, -0.1, 1.5, math.nan])
def test_online_update_refuses_kappa_outside_0_1(kappa):
    with pytest.raises(ValueError, match="kappa must lie in"):
        online_inverse_mass_update(np.eye(2), np.eye(2), kappa)


def test_kappa_one_over_k_makes_the_running_mean_of_the_estimates():
    estimates = [random_spd(3, seed=200 + k) for k in range(1, 9)]
    inverse = np.eye(3)  # replaced by the first estimate since κ_1 = 1
    for k, estimate in enumerate(estimates, start=1):
        inverse = online_inverse_mass_update(inverse, estimate, step_sequence(k, exponent=1.0))
    np.testing.assert_allclose(inverse, np.mean(estimates, axis=0), rtol=1e-12)


@pytest.mark.parametrize("exponent", [0.51, 0.7, 1.0])
def test_step_sequence_properties(exponent):
    kappas = np.array([step_sequence(k, exponent) for k in range(1, 20_001)])
    assert kappas[0] == 1.0
    assert np.all(np.diff(kappas) < 0)
    assert np.all((kappas > 0) & (kappas <= 1))
    np.testing.assert_allclose(kappas, np.arange(1, 20_001) ** -exponent, rtol=1e-14)
    # Σ κ² converges: every partial sum stays below ζ(2·exponent).
    assert np.sum(kappas**2) < scipy.special.zeta(2 * exponent)
    # Σ κ diverges: partial sums beat the integral ((K + 1)^(1 − e) − 1) / (1 − e),
    # or log(K + 1) for e = 1, which grows without bound.
    k_max = len(kappas)
    lower = (
        math.log(k_max + 1)
        if exponent == 1.0
        else ((k_max + 1) ** (1 - exponent) - 1) / (1 - exponent)
    )
    assert np.sum(kappas) >= lower


def test_step_sequence_default_exponent_and_validation():
    assert step_sequence(1) == 1.0
    assert math.isclose(step_sequence(10), 10**-0.7)
    for bad in [0, -3]:
        with pytest.raises(ValueError, match="counted from 1"):
            step_sequence(bad)


# -- small helpers -------------------------------------------------------------------------


def test_geometric_mean_eigenvalue_and_condition_number_by_hand():
    assert math.isclose(geometric_mean_eigenvalue(np.array([1.0, 4.0, 16.0])), 4.0)
    matrix = random_spd(4, seed=23, low=2.0, high=50.0)
    assert math.isclose(
        geometric_mean_eigenvalue(matrix), np.prod(np.linalg.eigvalsh(matrix)) ** 0.25
    )
    assert math.isclose(condition_number(np.array([0.5, 2.0, 1.0])), 4.0)
    assert math.isclose(condition_number(matrix), 25.0)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mass_from_inverse_dense(dtype):
    inverse = random_spd(5, seed=24)
    mass = mass_from_inverse(inverse, dtype)
    assert mass.inverse.dtype == dtype and mass.factor.dtype == dtype
    rtol = 1e-10 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(mass.inverse, inverse, rtol=rtol)
    np.testing.assert_allclose(mass.factor, np.tril(mass.factor))  # lower triangular
    factor = mass.factor.astype(float)
    np.testing.assert_allclose(factor @ factor.T @ inverse, np.eye(5), atol=100 * rtol)


def test_mass_from_inverse_symmetrises_a_slightly_asymmetric_inverse():
    inverse = random_spd(4, seed=25)
    skew = 1e-9 * np.triu(np.ones((4, 4)), 1)
    mass = mass_from_inverse(inverse + skew, "float64")
    np.testing.assert_array_equal(mass.inverse, mass.inverse.T)
    np.testing.assert_allclose(mass.factor @ mass.factor.T @ inverse, np.eye(4), atol=1e-7)


def test_mass_from_inverse_diag_and_its_momentum_draws():
    inverse = np.array([0.25, 1.0, 16.0])
    mass = mass_from_inverse(inverse, "float64")
    np.testing.assert_allclose(mass.factor, [2.0, 1.0, 0.25])
    np.testing.assert_allclose(mass.factor**2 * inverse, 1.0)
    # p ~ N(0, M): the momentum variances are 1 / M_I (sd of a variance estimate from
    # 20000 draws: √(2/20000) = 1%; tolerance 5%).
    rng = np.random.default_rng(26)
    momenta = np.array([mass.draw_momentum(rng) for _ in range(20_000)])
    np.testing.assert_allclose(momenta.var(axis=0) * inverse, 1.0, atol=0.05)


# -- the E-step sample-size rule (§3.2) -------------------------------------------------------


def test_monte_carlo_interval_by_hand():
    q = np.array([[1.0, 10.0], [2.0, 10.0], [3.0, 10.0], [4.0, 10.0]])
    mean, half_width = monte_carlo_interval(q)
    np.testing.assert_allclose(mean, [2.5, 10.0])
    # v_S is the (biased) sample variance, 1.25 here; the spread is √(v_S / S).
    np.testing.assert_allclose(half_width, [Z_95 * math.sqrt(1.25 / 4), 0.0])
    _, narrower = monte_carlo_interval(q, alpha=0.5)
    assert math.isclose(narrower[0], scipy.stats.norm.ppf(0.75) * math.sqrt(1.25 / 4))


def test_inside_interval_needs_every_component():
    mean, half = np.array([0.0, 1.0]), np.array([0.5, 0.1])
    assert inside_interval([0.49, 1.09], mean, half)
    assert inside_interval([-0.49, 0.91], mean, half)
    assert not inside_interval([0.51, 1.0], mean, half)
    assert not inside_interval([0.0, 1.11], mean, half)


def test_grow_sample_size():
    assert grow_sample_size(100, 4) == 125
    assert grow_sample_size(8, 4) == 10
    assert grow_sample_size(3, 4) == 4  # at least one more
    assert grow_sample_size(100, 1) == 200


def old_and_new_q(shift_in_half_widths, component=0, n=40, seed=27):
    """q under the old mass, and q under the new mass whose mean sits at
    ``mean + shift · half_width`` in one component (the others unchanged)."""
    q_old = np.random.default_rng(seed).normal(size=(n, 3)) * [1.0, 5.0, 0.1]
    mean, half_width = monte_carlo_interval(q_old)
    shift = np.zeros(3)
    shift[component] = shift_in_half_widths * half_width[component]
    q_new = q_old + shift  # same rows, so the new mean is the old one plus the shift
    np.testing.assert_allclose(q_new.mean(axis=0), mean + shift)
    return q_old, q_new


@pytest.mark.parametrize("component", [0, 1, 2])
def test_sample_size_grows_exactly_when_the_new_mean_is_inside(component):
    rule = SampleSizeRule()
    for sign in [1, -1]:
        inside = old_and_new_q(sign * 0.999, component)
        outside = old_and_new_q(sign * 1.001, component)
        assert rule.next_sample_size(100, *inside) == 125
        assert rule.next_sample_size(100, *outside) == 100
    assert rule.next_sample_size(100, *old_and_new_q(0.0)) == 125


def test_sample_size_rule_constants():
    inside = old_and_new_q(0.5)
    assert SampleSizeRule(increment_divisor=2).next_sample_size(100, *inside) == 150
    assert SampleSizeRule(adaptive=False).next_sample_size(100, *inside) == 100
    assert SampleSizeRule(max_sample_size=110).next_sample_size(100, *inside) == 110
    assert SampleSizeRule(max_sample_size=110).next_sample_size(110, *inside) == 110
    # A larger α gives a narrower interval: 0.8 half widths of α = 0.05 is outside
    # the α = 0.5 interval (z = 0.674 instead of 1.960).
    assert SampleSizeRule(alpha=0.5).next_sample_size(100, *old_and_new_q(0.8)) == 100
    # Fewer than two subsamples: no interval, S unchanged.
    q_old, q_new = old_and_new_q(0.0)
    assert SampleSizeRule().next_sample_size(100, q_old[:1], q_new[:1]) == 100


# -- subsample offsets ----------------------------------------------------------------------


@pytest.mark.parametrize(("n", "nu", "d"), [(100, 1.0, 0.5), (737, 1.0, 0.5), (50, 3.0, 0.0)])
def test_subsample_offsets_are_increasing_iterations_of_the_e_step(n, nu, d):
    rng = np.random.default_rng(28)
    for _ in range(200):
        offsets = subsample_offsets(n, rng, nu, d)
        assert offsets.dtype.kind == "i"
        assert len(offsets) >= 1
        assert offsets[0] >= 0 and offsets[-1] < n
        assert np.all(np.diff(offsets) >= 1)


def test_subsample_offset_gaps_follow_the_poisson_law_and_grow():
    # x_i = gap before the i-th offset (t_0 = −1), x_i − 1 ~ Poisson(ν i^d): mean 1 + ν i^d.
    rng = np.random.default_rng(29)
    nu, d, n_rep = 1.0, 0.5, 4000
    # n = 300 leaves room for 20 gaps (their sum has mean ~80 and sd ~8).
    gaps = [np.diff(subsample_offsets(300, rng, nu, d), prepend=-1)[:20] for _ in range(n_rep)]
    gaps = np.array(gaps, dtype=float)
    i = np.arange(1, 21)
    expected = 1 + nu * i**d
    # Standard error of each mean gap: √(ν i^d / n_rep) ≤ 0.035; tolerance 5 of them.
    np.testing.assert_allclose(
        gaps.mean(axis=0), expected, atol=5 * math.sqrt(expected[-1] / n_rep)
    )
    assert gaps[:, 10:].mean() > gaps[:, :10].mean() + 1.0
    # d = 0 keeps the mean gap constant; ν = 0 evaluates every iteration.
    np.testing.assert_array_equal(subsample_offsets(30, rng, nu=0.0), np.arange(30))
    flat = np.array(
        [np.diff(subsample_offsets(300, rng, 1.0, 0.0), prepend=-1)[:20] for _ in range(n_rep)]
    )
    np.testing.assert_allclose(flat.mean(axis=0), 2.0, atol=5 * math.sqrt(1 / n_rep))


def test_subsample_offsets_edge_cases():
    rng = np.random.default_rng(30)
    assert len(subsample_offsets(0, rng)) == 0
    with pytest.raises(ValueError, match="non-negative"):
        subsample_offsets(10, rng, nu=-1.0)
    with pytest.raises(ValueError, match="non-negative"):
        subsample_offsets(10, rng, d=-0.5)
    a = subsample_offsets(500, np.random.default_rng(31))
    b = subsample_offsets(500, np.random.default_rng(31))
    np.testing.assert_array_equal(a, b)


def test_fixed_offsets():
    np.testing.assert_array_equal(fixed_offsets(100, 5), [0, 25, 50, 74, 99])
    np.testing.assert_array_equal(fixed_offsets(3, 30), [0, 1, 2])
    offsets = fixed_offsets(737, 30)
    assert len(offsets) == 30 and np.all(np.diff(offsets) > 0) and offsets[-1] == 736


# -- test functions ---------------------------------------------------------------------------


def hand_q(inverse_mass, momenta, gradients, thermostats=None):
    """The test functions of §3.2, one row at a time with explicit loops."""
    dense = inverse_mass if inverse_mass.ndim == 2 else np.diag(inverse_mass)
    rows = []
    for k, (p, g) in enumerate(zip(momenta, gradients, strict=True)):
        v = [sum(dense[i, j] * p[j] for j in range(len(p))) for i in range(len(p))]
        if thermostats is None:
            rows.append([*v, *g])
        else:
            xi = thermostats[k]
            quadratic = sum(p[i] * v[i] for i in range(len(p)))
            rows.append([*v, *(g[i] + xi * v[i] for i in range(len(p))), quadratic])
    return np.array(rows)


@pytest.mark.parametrize("structure", ["diag", "dense"])
def test_test_functions_match_hand_computation(structure):
    rng = np.random.default_rng(32)
    inverse = random_spd(3, seed=33) if structure == "dense" else rng.uniform(0.1, 5.0, 3)
    momenta, gradients = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    thermostats = rng.normal(size=6)
    q = hmc_test_function(inverse, momenta, gradients)
    assert q.shape == (6, 6)
    np.testing.assert_allclose(q, hand_q(inverse, momenta, gradients), rtol=1e-12)
    q = sgnht_test_function(inverse, momenta, gradients, thermostats)
    assert q.shape == (6, 7)
    np.testing.assert_allclose(q, hand_q(inverse, momenta, gradients, thermostats), rtol=1e-12)


# -- the stiffness guard of the M step ---------------------------------------------------


def gaussian_path(precision, n, rng, drift=0.0, noise_sd=0.0):
    """Positions of a drifting walk and the gradients of N(0, precision⁻¹) there."""
    d = precision.shape[0]
    steps = rng.standard_normal((n, d)) + drift
    positions = np.cumsum(steps, axis=0) * 0.1
    gradients = -positions @ precision + noise_sd * rng.standard_normal((n, d))
    return positions, gradients


@pytest.fixture(scope="module")
def precision():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((4, 4))
    return a @ a.T + 0.5 * np.eye(4)


@pytest.mark.parametrize("drift", [0.0, 3.0])
def test_curvature_of_a_gaussian_is_recovered_exactly_from_any_path(precision, drift):
    # The regression of gradients on positions needs no equilibrium: a burn-in drift
    # (drift=3 makes the path run off in one direction) changes nothing.
    positions, gradients = gaussian_path(precision, 400, np.random.default_rng(0), drift)
    dense = curvature_estimate(positions, gradients, "dense")
    np.testing.assert_allclose(dense, precision, rtol=1e-10)


def test_diag_curvature_is_the_per_coordinate_slope(precision):
    diagonal = np.diag(np.diag(precision))
    positions, gradients = gaussian_path(diagonal, 400, np.random.default_rng(1))
    estimate = curvature_estimate(positions, gradients, "diag")
    np.testing.assert_allclose(estimate, np.diag(precision), rtol=1e-10)


def test_minibatch_noise_averages_out_of_the_curvature(precision):
    # Gradient noise 10x the signal's sd: Cov(∇) would be inflated ~100-fold; the
    # cross-covariance stays unbiased.
    positions, gradients = gaussian_path(precision, 20_000, np.random.default_rng(2), noise_sd=10.0)
    estimate = curvature_estimate(positions, gradients, "dense")
    assert np.abs(estimate - precision).max() < 0.1 * np.abs(precision).max()


def test_stiffness_is_the_step_times_the_root_of_the_largest_frequency(precision):
    rng = np.random.default_rng(3)
    b = rng.standard_normal((4, 4))
    inverse_mass = b @ b.T + np.eye(4)
    largest = np.linalg.eigvals(inverse_mass @ precision).real.max()
    assert stiffness(0.1, inverse_mass, precision) == pytest.approx(0.1 * np.sqrt(largest))
    diag_inverse, diag_curvature = np.array([1.0, 4.0]), np.array([9.0, 1.0])
    assert stiffness(0.5, diag_inverse, diag_curvature) == pytest.approx(0.5 * 3.0)
    # A diagonal mass against a dense curvature is the dense computation.
    assert stiffness(0.1, np.diag(inverse_mass), precision) == pytest.approx(
        stiffness(0.1, np.diag(np.diag(inverse_mass)), precision)
    )


def test_precondition_starts_from_the_laplace_precision_in_the_structure_it_implies():
    from pymc_sgmcmc.adaptation.em import MassEM

    covariance = np.array([[2.0, 1.2], [1.2, 1.0]])
    auto = MassEM()
    auto.precondition(covariance)
    assert auto.structure == "dense"
    np.testing.assert_allclose(auto.initial_mass, np.linalg.inv(covariance))
    chosen = MassEM(mass_structure="diag")
    chosen.precondition(covariance)
    assert chosen.structure == "diag"
    np.testing.assert_allclose(chosen.initial_mass, [0.5, 1.0])
    diagonal = MassEM()
    diagonal.precondition(np.array([4.0, 0.25]))
    assert diagonal.structure == "diag"
    np.testing.assert_allclose(diagonal.initial_mass, [0.25, 4.0])
    given = MassEM(initial_mass=[1.0, 1.0])
    given.precondition(covariance)
    assert given.structure == "dense"
    np.testing.assert_array_equal(given.initial_mass, [1.0, 1.0])
    assert MassEM(initial_mass=np.eye(2)).structure == "dense"
