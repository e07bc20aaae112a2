"""Metrics: the Euclidean mass and the position-dependent metric ``G(θ)``."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_sgmcmc.kernels.base import Target
from pymc_sgmcmc.metrics import (
    EuclideanMetric,
    PositionDependentMetric,
    euclidean_metric,
    metric_from_inverse,
    softabs_diagonal_hessian,
)

make_mass = euclidean_metric

FAST = "FAST_COMPILE"
"""Small graphs compiled without the Numba JIT (seconds per graph, for nothing here)."""


def test_make_mass_default_scalar_vector_and_dense():
    identity = make_mass(None, 3)
    np.testing.assert_array_equal(identity.inverse, np.ones(3))
    assert not identity.is_dense
    scalar = make_mass(4.0, 2)
    np.testing.assert_allclose(scalar.inverse, [0.25, 0.25])
    np.testing.assert_allclose(scalar.factor, [2.0, 2.0])
    vector = make_mass([1.0, 4.0, 9.0], 3)
    np.testing.assert_allclose(vector.inverse, [1.0, 0.25, 1 / 9])
    matrix = np.array([[2.0, 0.6], [0.6, 1.0]])
    dense = make_mass(matrix, 2)
    assert dense.is_dense
    np.testing.assert_allclose(dense.inverse @ matrix, np.eye(2), atol=1e-12)
    np.testing.assert_allclose(dense.factor @ dense.factor.T, matrix)
    assert make_mass(None, 2, dtype="float32").inverse.dtype == np.float32


@pytest.mark.parametrize(
    ("mass", "match"),
    [
        (0.0, "mass vector of shape"),
        (-1.0, "mass vector of shape"),
        (np.nan, "mass vector of shape"),
        ([1.0, 2.0], r"mass vector of shape \(2,\) is not valid"),
        ([1.0, -2.0, 3.0], "mass vector of shape"),
        ([1.0, np.inf, 3.0], "mass vector of shape"),
        (np.eye(2), r"mass matrix of shape \(2, 2\) is not valid"),
        ([[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], "mass matrix of shape"),
        ([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]], "not positive definite"),
        (np.ones((3, 3, 3)), "got 3 dimensions"),
    ],
)
def test_make_mass_rejects_invalid_masses_with_the_accepted_forms(mass, match):
    with pytest.raises(ValueError, match=match) as error:
        make_mass(mass, 3)
    assert "symmetric positive-definite 3x3 matrix" in str(error.value)


@pytest.mark.parametrize(
    "matrix",
    [np.diag([0.5, 2.0, 4.0]), np.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]])],
    ids=["diagonal-as-matrix", "dense"],
)
def test_draw_momentum_has_covariance_equal_to_the_mass(matrix):
    rng = np.random.default_rng(11)
    n_draws = 40_000
    for mass in (make_mass(matrix, 3), make_mass(np.diag(matrix), 3)):
        if not mass.is_dense and np.count_nonzero(matrix - np.diag(np.diag(matrix))):
            continue  # a vector mass cannot represent off-diagonal terms
        draws = np.array([mass.draw_momentum(rng) for _ in range(n_draws)])
        covariance = draws.T @ draws / n_draws
        # Var(p_i p_j) = M_ii M_jj + M_ij² for a centred Gaussian.
        standard_error = np.sqrt((np.outer(np.diag(matrix), np.diag(matrix)) + matrix**2) / n_draws)
        assert np.all(np.abs(covariance - matrix) < 4 * standard_error)


def test_metric_from_inverse_round_trips_the_mass():
    matrix = np.array([[2.0, 0.6], [0.6, 1.0]])
    dense = metric_from_inverse(np.linalg.inv(matrix))
    np.testing.assert_allclose(dense.factor @ dense.factor.T, matrix)
    diagonal = metric_from_inverse(np.array([0.5, 4.0]))
    np.testing.assert_allclose(diagonal.factor**2, [2.0, 0.25])


@pytest.mark.parametrize(
    "mass", [np.array([0.5, 2.0]), np.array([[2.0, 0.6], [0.6, 1.0]])], ids=["diag", "dense"]
)
def test_euclidean_metric_gives_the_same_numbers_symbolically(mass):
    # The kernels call the metric inside the compiled trajectory: its methods must give
    # with PyTensor what they give with NumPy.
    metric = euclidean_metric(mass, 2)
    p, z = np.array([0.3, -1.2]), np.array([1.1, 0.4])
    inverse = pt.tensor("inverse", shape=(None,) * metric.inverse.ndim)
    factor = pt.tensor("factor", shape=(None,) * metric.factor.ndim)
    p_, z_ = pt.vector("p"), pt.vector("z")
    symbolic = EuclideanMetric(inverse, factor)
    outputs = [
        symbolic.momentum(None, z_),
        symbolic.velocity(None, p_),
        symbolic.kinetic_energy(None, p_),
        symbolic.kinetic_temperature(None, p_),
    ]
    fn = pytensor.function([inverse, factor, p_, z_], outputs, mode=FAST)
    got = fn(metric.inverse, metric.factor, p, z)
    expected = [
        metric.momentum(None, z),
        metric.velocity(None, p),
        metric.kinetic_energy(None, p),
        metric.kinetic_temperature(None, p),
    ]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    dense_mass = mass if mass.ndim == 2 else np.diag(mass)
    np.testing.assert_allclose(expected[1], np.linalg.solve(dense_mass, p))
    assert expected[2] == pytest.approx(0.5 * p @ np.linalg.solve(dense_mass, p))


# -- position-dependent metrics ----------------------------------------------------------


def quadratic_diagonal(position, target):
    """G(θ) = diag(1 + θ²), a simple positive metric that varies with the position."""
    return 1.0 + position**2


def quadratic_dense(position, target):
    """G(θ) = I + θθᵀ, dense and positive definite."""
    eye = np.eye(2) if isinstance(position, np.ndarray) else pt.eye(2)
    outer = (
        np.outer(position, position)
        if isinstance(position, np.ndarray)
        else pt.outer(position, position)
    )
    return eye + outer


@pytest.mark.parametrize("function", [quadratic_diagonal, quadratic_dense], ids=["diag", "dense"])
def test_position_dependent_metric_matches_the_matrix_it_is_built_from(function):
    metric = PositionDependentMetric(function)
    theta, p = np.array([0.5, -2.0]), np.array([0.3, 1.4])
    g = function(theta, None)
    g = g if g.ndim == 2 else np.diag(g)
    np.testing.assert_allclose(metric.velocity(theta, p), np.linalg.solve(g, p))
    sign, logdet = np.linalg.slogdet(g)
    assert metric.log_det(theta) == pytest.approx(logdet)
    assert metric.kinetic_energy(theta, p) == pytest.approx(
        0.5 * p @ np.linalg.solve(g, p) + 0.5 * logdet
    )
    assert metric.kinetic_temperature(theta, p) == pytest.approx(p @ np.linalg.solve(g, p) / 2)
    # p ~ N(0, G(θ)): the covariance of many draws at one θ is G(θ).
    rng = np.random.default_rng(3)
    draws = np.array([metric.momentum(theta, z) for z in rng.standard_normal((40_000, 2))])
    covariance = draws.T @ draws / len(draws)
    tolerance = np.sqrt((np.outer(np.diag(g), np.diag(g)) + g**2) / len(draws))
    assert np.all(np.abs(covariance - g) < 4 * tolerance)
    # The same numbers symbolically, where a Riemannian kernel differentiates them.
    theta_, p_ = pt.vector("theta"), pt.vector("p")
    energy = metric.kinetic_energy(theta_, p_)
    fn = pytensor.function([theta_, p_], [energy, pt.grad(energy, theta_)], mode=FAST)
    value, gradient = fn(theta, p)
    assert value == pytest.approx(metric.kinetic_energy(theta, p), rel=1e-12)
    h = 1e-6
    numeric = [
        (metric.kinetic_energy(theta + h * e, p) - metric.kinetic_energy(theta - h * e, p))
        / (2 * h)
        for e in np.eye(2)
    ]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6)


def gaussian_target(precision):
    """The target of log p(θ) = −θᵀPθ/2, symbolic."""

    def logp(x):
        return -0.5 * (x * (pt.as_tensor(precision) @ x)).sum()

    return Target(logp=logp, grad=lambda x: pt.grad(logp(x), x))


def test_softabs_diagonal_hessian_is_the_absolute_curvature_and_stays_positive():
    metric = softabs_diagonal_hessian(sharpness=1e3)
    theta = pt.vector("theta")
    precision = np.array([[4.0, 1.0], [1.0, 0.0]])  # zero curvature in the second axis
    fn = pytensor.function([theta], metric.matrix(theta, gaussian_target(precision)), mode=FAST)
    g = fn(np.array([0.3, -0.7]))
    assert g[0] == pytest.approx(4.0, rel=1e-12)  # |h| where α|h| ≫ 1
    assert g[1] == pytest.approx(1e-3)  # 1/α where the curvature vanishes
    negative = pytensor.function(
        [theta], metric.matrix(theta, gaussian_target(-precision)), mode=FAST
    )
    np.testing.assert_allclose(negative(np.array([0.3, -0.7])), g)  # SoftAbs: |h|
    with pytest.raises(ValueError, match="sharpness must be positive"):
        softabs_diagonal_hessian(sharpness=0.0)
