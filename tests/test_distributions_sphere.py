"""Sphere-valued distributions: density, normaliser, Wood's sampler, transform and NUTS.

Statistical checks accept a difference of at most ``Z`` Monte Carlo standard errors: the
plain standard error for independent draws (Wood's sampler), ArviZ's ``mcse`` (which
accounts for autocorrelation) for NUTS. All seeds are fixed, so the tests are
deterministic; ``Z`` is wide enough that they would pass for almost every seed.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.integrate
import scipy.stats as st
from pymc.distributions.mixture import MixtureTransformWarning
from pymc.logprob.utils import ParameterValueError
from scipy.special import gammaln, ive, logsumexp

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.distributions import (
    SphereTransform,
    log_sphere_area,
    log_vmf_normaliser,
    sample_vmf,
    sphere_transform,
    vmf_mean_resultant_length,
)

Z = 4.5
"""Tolerance in standard errors; each comparison leaves it with probability ~7e-6."""

SAMPLE_KWARGS = dict(
    chains=2,
    cores=1,
    nuts_sampler="pymc",
    progressbar=False,
    compute_convergence_checks=False,
)

pytestmark = pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")


def unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def log_normaliser_by_series(d, kappa):
    """Reference: -log|S^{d-1}| - log 0F1(; d/2; kappa^2/4), the series summed term by term.

    Independent of the implementation (no Bessel functions, no branches); enough terms are
    summed to pass the peak of the terms, near k = kappa / 2, by many of their widths.
    """
    nu, x = d / 2 - 1, kappa**2 / 4
    k = np.arange(int(4 * kappa + 200 + 20 * np.sqrt(kappa + 1)))
    with np.errstate(divide="ignore"):
        terms = k * np.log(x) - gammaln(k + 1) - gammaln(nu + 1 + k) + gammaln(nu + 1)
    terms[0] = 0.0
    return -log_sphere_area(d) - logsumexp(terms)


def cosine_cdf(d, kappa):
    """CDF of t = mu^T x, density proportional to exp(kappa t) (1 - t^2)^((d-3)/2)."""
    if d == 3:
        return lambda t: np.expm1(kappa * (np.asarray(t) + 1)) / np.expm1(2 * kappa)
    # In the angle theta = arccos t the density, exp(kappa cos theta) sin^(d-2) theta, is
    # smooth on [0, pi] for every d, so a fine trapezoidal rule is accurate.
    theta = np.linspace(0.0, np.pi, 20001)
    density = np.exp(kappa * (np.cos(theta) - 1)) * np.sin(theta) ** (d - 2)
    cdf_theta = scipy.integrate.cumulative_trapezoid(density, theta, initial=0.0)
    cdf_theta /= cdf_theta[-1]
    return lambda t: 1.0 - np.interp(np.arccos(np.clip(t, -1, 1)), theta, cdf_theta)


# -- the normaliser and the mean resultant length ----------------------------------------


@pytest.fixture(scope="module")
def vmf_logp():
    """pm.logp of VonMisesFisher compiled once, with d, mu and kappa all symbolic."""
    mu, kappa, value = pt.dvector("mu"), pt.dscalar("kappa"), pt.dmatrix("value")
    logp = pm.logp(pmsg.VonMisesFisher.dist(mu=mu, kappa=kappa, shape=value.shape), value)
    return pytensor.function([mu, kappa, value], logp)


@pytest.mark.parametrize("d", [2, 3, 5, 10])
@pytest.mark.parametrize("kappa", [0.1, 1.0, 5.0, 50.0, 700.0])
def test_logpdf_matches_scipy(vmf_logp, d, kappa):
    rng = np.random.default_rng(d * 1000 + int(kappa * 10))
    mu = unit(rng.normal(size=d))
    x = unit(rng.normal(size=(6, d)))
    x[0] = mu  # the mode, where the density is largest
    reference = st.vonmises_fisher(mu, kappa).logpdf(x)
    np.testing.assert_allclose(vmf_logp(mu, kappa, x), reference, rtol=1e-12, atol=1e-12)


def test_logp_does_not_need_unit_mu(vmf_logp):
    mu = np.array([0.0, 3.0, 4.0])
    x = unit([[1.0, 2.0, 2.0]])
    reference = st.vonmises_fisher(unit(mu), 2.0).logpdf(x)
    np.testing.assert_allclose(vmf_logp(mu, 2.0, x), reference, rtol=1e-12)


@pytest.mark.parametrize("kappa", [0.0, 0.5, 5.0, 50.0, 500.0])
def test_density_integrates_to_one_on_the_circle(kappa):
    log_c = log_vmf_normaliser(2, kappa)
    mu_angle = 0.7

    def density(theta):
        return np.exp(log_c + kappa * np.cos(theta - mu_angle))

    # Split at the mode so that quad resolves the narrow peak of large kappa.
    total = sum(
        scipy.integrate.quad(density, a, b, limit=200)[0]
        for a, b in [(mu_angle - np.pi, mu_angle), (mu_angle, mu_angle + np.pi)]
    )
    assert total == pytest.approx(1.0, abs=1e-10)


@pytest.mark.parametrize("kappa", [0.0, 0.5, 5.0, 50.0])
def test_density_integrates_to_one_on_the_sphere(kappa):
    # Full two-dimensional quadrature in spherical coordinates, with mu off the pole so
    # that both angles matter.
    mu = unit([0.3, -0.5, 0.8])
    log_c = log_vmf_normaliser(3, kappa)

    def integrand(theta, phi):
        x = np.array([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)])
        return np.exp(log_c + kappa * mu @ x) * np.sin(theta)

    total, _ = scipy.integrate.dblquad(integrand, 0.0, 2 * np.pi, 0.0, np.pi, epsabs=1e-11)
    assert total == pytest.approx(1.0, abs=1e-8)


@pytest.mark.parametrize("d", [2, 3, 10, 100, 1000, 4000])
@pytest.mark.parametrize("kappa", [1e-3, 0.5, 5.0, 50.0, 500.0, 5000.0])
def test_log_normaliser_matches_its_series_in_every_regime(d, kappa):
    # The grid covers all three branches: the series (small kappa), ive, and Debye's
    # expansion (d = 4000, kappa = 500, where ive underflows).
    reference = log_normaliser_by_series(d, kappa)
    assert log_vmf_normaliser(d, kappa) == pytest.approx(reference, rel=1e-13, abs=1e-12)


@pytest.mark.parametrize("d", [2, 3, 10, 100])
def test_kappa_zero_is_the_uniform_density(d):
    uniform = -log_sphere_area(d)
    assert log_vmf_normaliser(d, 0.0) == pytest.approx(uniform, rel=1e-15)
    # Continuous into kappa > 0: log C_d(kappa) = -log|S| - kappa^2 / (2d) + O(kappa^4).
    for kappa in [1e-300, 1e-12, 1e-6]:
        expected = uniform - kappa**2 / (2 * d)
        assert log_vmf_normaliser(d, kappa) == pytest.approx(expected, rel=1e-15)
    assert vmf_mean_resultant_length(d, 0.0) == 0.0
    assert vmf_mean_resultant_length(d, 1e-8) == pytest.approx(1e-8 / d, rel=1e-12)


def hankel_log_iv(nu, kappa, terms=12):
    """log I_nu(kappa) for large kappa (DLMF 10.40.1), the reference for large kappa.

    Returns the leading part ``kappa - log(2 pi kappa)/2`` and ``log`` of the correction
    series separately, the latter through ``log1p`` of its tail so that differences between
    orders keep their relative precision.
    """
    mu4 = 4 * nu**2
    tail, term = 0.0, 1.0
    for k in range(1, terms):
        term *= -(mu4 - (2 * k - 1) ** 2) / (k * 8 * kappa)
        tail += term
    return kappa - 0.5 * np.log(2 * np.pi * kappa), np.log1p(tail)


@pytest.mark.parametrize(("d", "kappa"), [(100, 1e4), (3, 1e6), (2, 1e10), (10, 1e12)])
def test_large_kappa_is_finite_and_matches_the_asymptotic_expansion(d, kappa):
    # (2, 1e10) and (10, 1e12) are beyond the range where scipy's ive returns numbers.
    nu = d / 2 - 1
    leading, correction = hankel_log_iv(nu, kappa)
    expected = nu * np.log(kappa) - d / 2 * np.log(2 * np.pi) - leading - correction
    ours = log_vmf_normaliser(d, kappa)
    assert np.isfinite(ours)
    assert ours == pytest.approx(expected, rel=1e-14)
    # A_d = I_{nu+1} / I_nu: the leading parts cancel, leaving the corrections.
    one_minus_a = -np.expm1(hankel_log_iv(nu + 1, kappa)[1] - correction)
    assert one_minus_a == pytest.approx((d - 1) / (2 * kappa), rel=0.1)  # the textbook limit
    # A itself is a double near 1, so 1 - A is known to about 1e-16 absolute.
    assert 1 - vmf_mean_resultant_length(d, kappa) == pytest.approx(
        one_minus_a, rel=1e-12, abs=3e-16
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_large_dimension_is_finite_where_the_bessel_formula_fails():
    # Here I_{d/2-1}(kappa) e^{-kappa} underflows, so the usual log-space formula (SciPy's)
    # returns inf, but the log normaliser is an ordinary number; compare with the series.
    for d, kappa in [(1000, 100.0), (4000, 500.0)]:
        mu = np.eye(d)[0]
        assert not np.isfinite(st.vonmises_fisher(mu, kappa).logpdf(mu))
    for d, kappa in [(1000, 100.0), (4000, 500.0), (20000, 3000.0)]:
        ours = log_vmf_normaliser(d, kappa)
        assert ours == pytest.approx(log_normaliser_by_series(d, kappa), rel=1e-13)


@pytest.mark.parametrize("d", [2, 3, 10, 100])
def test_mean_resultant_length_is_the_bessel_ratio(d):
    kappa = np.array([0.01, 0.3, 3.0, 30.0, 300.0, 3000.0])
    expected = ive(d / 2, kappa) / ive(d / 2 - 1, kappa)
    np.testing.assert_allclose(vmf_mean_resultant_length(d, kappa), expected, rtol=1e-13)


def test_symbolic_helpers_match_numpy_and_give_minus_a_as_gradient():
    # The graph that NUTS differentiates, compiled with the default (Numba) backend: d and
    # kappa symbolic, kappa spanning the series, ive and Debye branches.
    d = pt.lscalar("d")
    kappa = pt.dvector("kappa")
    log_c = log_vmf_normaliser(d, kappa)
    grad = pytensor.grad(log_c.sum(), kappa)
    f = pytensor.function([d, kappa], [log_c, vmf_mean_resultant_length(d, kappa), grad])
    for dim in [2, 3, 50, 4000]:
        k = np.array([0.0, 1e-6, 0.7, 7.0, 70.0, 700.0, 7e5, 7e10])
        values, a, g = f(dim, k)
        np.testing.assert_allclose(values, log_vmf_normaliser(dim, k), rtol=1e-14)
        np.testing.assert_allclose(a, vmf_mean_resultant_length(dim, k), rtol=1e-13, atol=1e-300)
        assert np.all(np.isfinite(g))
        # d log C / d kappa = -A_d(kappa)
        np.testing.assert_allclose(-g, vmf_mean_resultant_length(dim, k), rtol=1e-10, atol=1e-300)


def test_numeric_helpers_refuse_bad_parameters():
    with pytest.raises(ValueError, match="kappa"):
        log_vmf_normaliser(3, -1.0)
    with pytest.raises(ValueError, match="d must be >= 2"):
        vmf_mean_resultant_length(1, 1.0)


# -- Wood's sampler ----------------------------------------------------------------------


def assert_vmf_draws(x, mu, kappa):
    """Unit norm; mean along mu equal to A_d(kappa); mean orthogonal to mu equal to 0."""
    d = x.shape[-1]
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-14)
    n = x.shape[0]
    t = x @ mu
    a = vmf_mean_resultant_length(d, kappa)
    assert abs(t.mean() - a) <= Z * t.std() / np.sqrt(n), (d, kappa, t.mean(), a)
    orthogonal = x - t[:, None] * mu
    se = orthogonal.std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(orthogonal.mean(axis=0)) <= Z * se + 1e-15), (d, kappa)


@pytest.mark.parametrize(
    ("d", "kappa"), [(2, 1.0), (2, 30.0), (3, 0.0), (3, 5.0), (3, 200.0), (10, 2.0), (10, 40.0)]
)
def test_wood_sampler_mean_resultant_length_and_direction(d, kappa):
    rng = np.random.default_rng(100 * d + int(kappa))
    mu = unit(rng.normal(size=d))
    x = sample_vmf(rng, mu, kappa, size=20000)
    assert x.shape == (20000, d)
    assert_vmf_draws(x, mu, kappa)


@pytest.mark.parametrize(("d", "kappa"), [(3, 0.5), (3, 8.0), (3, 100.0), (2, 3.0), (10, 15.0)])
def test_wood_sampler_cosine_has_the_exact_law(d, kappa):
    rng = np.random.default_rng(7 * d + int(kappa))
    mu = unit(rng.normal(size=d))
    t = sample_vmf(rng, mu, kappa, size=5000) @ mu
    result = st.kstest(np.clip(t, -1, 1), cosine_cdf(d, kappa))
    assert result.pvalue > 1e-3, result


def test_wood_sampler_chi_square_of_the_cosine_on_the_sphere():
    # On S^2 the cosine t has the closed-form CDF (e^{kappa(t+1)} - 1)/(e^{2 kappa} - 1);
    # 20 bins of equal probability.
    kappa, n, bins = 3.0, 10000, 20
    t = sample_vmf(np.random.default_rng(5), [0.0, 1.0, 0.0], kappa, size=n)[:, 1]
    counts = np.bincount(np.minimum((cosine_cdf(3, kappa)(t) * bins).astype(int), bins - 1))
    assert st.chisquare(counts, np.full(bins, n / bins)).pvalue > 1e-3


def test_wood_sampler_is_exact_for_huge_kappa():
    # As kappa -> infinity, kappa (1 - t) -> Gamma((d-1)/2, 1). At kappa = 1e16, 1 - t is
    # about 1e-16, below the spacing of doubles near 1: the sampler must form 1 - t (and
    # the tangential part) without ever subtracting from 1, and so must this check.
    d, kappa = 5, 1e16
    x = sample_vmf(np.random.default_rng(3), np.eye(d)[0], kappa, size=4000)
    gap = kappa * (x[:, 1:] ** 2).sum(axis=1) / (1 + x[:, 0])  # kappa (1 - t^2) / (1 + t)
    assert st.kstest(gap, st.gamma((d - 1) / 2).cdf).pvalue > 1e-3


def test_wood_sampler_batches_and_sizes():
    rng = np.random.default_rng(11)
    mu = unit(rng.normal(size=(3, 4)))
    kappa = np.array([0.5, 5.0, 50.0])
    assert sample_vmf(rng, mu, kappa).shape == (3, 4)
    assert sample_vmf(rng, mu[0], kappa).shape == (3, 4)
    assert sample_vmf(rng, mu, 1.0, size=(2, 3)).shape == (2, 3, 4)
    with pytest.raises(ValueError):
        sample_vmf(rng, mu, kappa, size=(2,))  # a batch of 3 cannot broadcast to 2
    for bad in [dict(mu=[1.0], kappa=1.0), dict(mu=[0.0, 0.0], kappa=1.0)]:
        with pytest.raises(ValueError, match="mu"):
            sample_vmf(rng, **bad)
    with pytest.raises(ValueError, match="kappa"):
        sample_vmf(rng, [1.0, 0.0], -1.0)


def test_pm_draw_of_batched_spheres():
    # mu of shape (K, d) gives K independent spheres; kappa broadcasts over K.
    rng = np.random.default_rng(12)
    mu = unit(rng.normal(size=(3, 4)))
    kappa = np.array([0.5, 5.0, 50.0])
    rv = pmsg.VonMisesFisher.dist(mu=mu, kappa=kappa)
    assert tuple(rv.shape.eval()) == (3, 4)
    draws = pm.draw(rv, draws=8000, random_seed=13)
    assert draws.shape == (8000, 3, 4)
    for k in range(3):
        assert_vmf_draws(draws[:, k], mu[k], kappa[k])
    # A shared mean direction with a batch of concentrations.
    rv = pmsg.VonMisesFisher.dist(mu=mu[0], kappa=kappa)
    assert pm.draw(rv, random_seed=1).shape == (3, 4)


# -- the distributions in a model -------------------------------------------------------


def test_transform_is_the_default_and_detectable():
    with pm.Model() as model:
        x = pmsg.VonMisesFisher("x", mu=[0.0, 3.0, 4.0], kappa=2.0)
        u = pmsg.SphereUniform("u", shape=(2, 4))
    for rv in (x, u):
        transform = model.rvs_to_transforms[rv]
        assert transform is sphere_transform
        assert isinstance(transform, SphereTransform)
        assert model.rvs_to_values[rv].name == f"{rv.name}_sphere__"
    point = model.initial_point()
    np.testing.assert_allclose(point["x_sphere__"], [0.0, 0.6, 0.8])
    np.testing.assert_allclose(point["u_sphere__"], [[1.0, 0.0, 0.0, 0.0]] * 2)


def test_transform_makes_the_uniform_a_standard_normal_in_the_value_space():
    # p(x) = 1/|S| times the radial factor must be exactly the N(0, I) density of z: this
    # checks backward, the log density, and that log_jac_det is normalised.
    with pm.Model() as model:
        pmsg.SphereUniform("u", shape=(2, 3))
    logp = model.compile_logp(mode="FAST_COMPILE")
    z = np.random.default_rng(0).normal(size=(2, 3)) * 1.7
    assert logp({"u_sphere__": z}) == pytest.approx(st.norm.logpdf(z).sum(), rel=1e-13)
    x = sphere_transform.backward(pt.as_tensor(z)).eval()
    np.testing.assert_allclose(x, unit(z), rtol=1e-15)
    np.testing.assert_array_equal(sphere_transform.forward(pt.as_tensor(x)).eval(), x)


@pytest.mark.parametrize("radial_sd", [None, 0.1, 0.5])
@pytest.mark.parametrize("d", [2, 3, 7])
def test_radial_factor_integrates_to_one_along_the_rays(radial_sd, d):
    # int_0^inf exp(log_jac_det(r e)) r^(d-1) dr = 1: integrated along each ray, the value
    # variable's density gives back the density on the sphere, unscaled.
    r = pt.dscalar("r")
    transform = SphereTransform(radial_sd=radial_sd)
    log_radial = pytensor.function(
        [r], transform.log_jac_det(r * pt.as_tensor(np.eye(d)[0])), mode="FAST_COMPILE"
    )
    total, _ = scipy.integrate.quad(
        lambda x: np.exp(log_radial(x) + (d - 1) * np.log(x)), 0.0, np.inf, epsabs=1e-12
    )
    assert total == pytest.approx(1.0, rel=1e-8)
    with pytest.raises(ValueError, match="radial_sd"):
        SphereTransform(radial_sd=0.0)


def test_vmf_logp_through_the_transform_is_the_vmf_density_plus_the_radial_factor():
    with pm.Model() as model:
        pmsg.VonMisesFisher("x", mu=[0.0, 0.0, 1.0], kappa=4.0)
    z = np.array([0.3, -1.2, 2.0])
    expected = st.vonmises_fisher([0, 0, 1.0], 4.0).logpdf(unit(z)) + (
        -0.5 * z @ z - 1.5 * np.log(2 * np.pi) + np.log(4 * np.pi)
    )
    assert model.compile_logp(mode="FAST_COMPILE")({"x_sphere__": z}) == pytest.approx(expected)


def log_c3(kappa):
    """log of the vMF normaliser on S², κ / (4π sinh κ)."""
    return np.log(kappa / (4 * np.pi * np.sinh(kappa)))


def test_mixture_of_sphere_distributions_is_sphere_valued_with_the_mixture_density():
    # pm.Mixture passes its components' default transform on only for transforms PyMC
    # lists as safe in mixtures, and otherwise warns and leaves the mixture on all of R^d.
    # The sphere transform is on that list, so the plain mixture lives on the sphere.
    means = unit([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]])
    kappas, weights = np.array([4.0, 9.0]), np.array([0.3, 0.7])
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixtureTransformWarning)
        with pm.Model() as model:
            x = pm.Mixture(
                "x",
                w=weights,
                comp_dists=[
                    pmsg.VonMisesFisher.dist(mu=m, kappa=k)
                    for m, k in zip(means, kappas, strict=True)
                ],
            )
            u = pm.Mixture(
                "u",
                w=[0.25, 0.75],
                comp_dists=[
                    pmsg.VonMisesFisher.dist(mu=means[1], kappa=2.0),
                    pmsg.SphereUniform.dist(d=3),
                ],
            )
    for rv in (x, u):
        assert model.rvs_to_transforms[rv] is sphere_transform
        assert model.rvs_to_values[rv].name == f"{rv.name}_sphere__"

    def log_x(points):  # log Σ_k w_k C₃(κ_k) exp(κ_k μ_kᵀ x), by hand
        terms = np.log(weights) + log_c3(kappas) + kappas * (points @ means.T)
        return logsumexp(terms, axis=-1)

    def log_u(points):
        vmf = np.log(0.25) + log_c3(2.0) + 2.0 * points @ means[1]
        return np.logaddexp(vmf, np.log(0.75) - np.log(4 * np.pi))

    points = unit(np.random.default_rng(3).normal(size=(6, 3)))
    points[0] = means[1]  # at a mode, where the second component dominates
    value = pt.dvector("value")
    for rv, expected in ((x, log_x), (u, log_u)):
        logp = pytensor.function([value], pm.logp(rv, value), mode="FAST_COMPILE")
        np.testing.assert_allclose([logp(p) for p in points], expected(points), rtol=1e-12)

    # In the value space: the mixture density of z/|z| times the chi radial factor.
    z = {"x_sphere__": np.array([0.3, -1.2, 2.0]), "u_sphere__": np.array([-0.5, 0.1, 0.4])}
    radial = sum(-0.5 * v @ v - 1.5 * np.log(2 * np.pi) + np.log(4 * np.pi) for v in z.values())
    total = log_x(unit(z["x_sphere__"])) + log_u(unit(z["u_sphere__"])) + radial
    assert model.compile_logp(mode="FAST_COMPILE")(z) == pytest.approx(total, rel=1e-12)

    # The samplers see two spheres: geodesic ones move on them, Euclidean ones refuse.
    with model:
        assert pmsg.SGGMC(step_size=0.1).layout.n_spheres == 2
        with pytest.raises(ValueError, match=r"live on spheres: \['x_sphere__', 'u_sphere__'\]"):
            pmsg.SGHMC(step_size=0.1)


def test_sphere_uniform_dimension_from_d_shape_dims_or_observed():
    with pm.Model(coords={"axis": range(3), "xyz": range(4)}):
        assert tuple(pmsg.SphereUniform("a", d=5).shape.eval()) == (5,)
        assert tuple(pmsg.SphereUniform("b", dims=("axis", "xyz")).shape.eval()) == (3, 4)
        c = pmsg.SphereUniform("c", observed=unit(np.ones((2, 3))))
        assert tuple(c.shape.eval()) == (2, 3)
    with pytest.raises(ValueError, match="dimension"):
        pmsg.SphereUniform.dist()
    with pytest.raises(ValueError, match=">= 2"):
        pmsg.SphereUniform.dist(d=1)
    np.testing.assert_allclose(
        pm.logp(pmsg.SphereUniform.dist(d=4), unit(np.ones(4))).eval(), -np.log(2 * np.pi**2)
    )


def test_vmf_parameter_validation():
    with pytest.raises(ValueError, match=">= 2"):
        pmsg.VonMisesFisher.dist(mu=[1.0], kappa=1.0)
    with pytest.raises(ValueError, match="kappa"):
        pmsg.VonMisesFisher.dist(mu=[0.0, 1.0], kappa=-1.0)
    kappa = pytensor.shared(-1.0)
    rv = pmsg.VonMisesFisher.dist(mu=[0.0, 1.0], kappa=kappa)
    with pytest.raises(ParameterValueError, match="kappa >= 0"):
        pm.logp(rv, np.array([0.0, 1.0])).eval()


def test_prior_predictive_draws():
    data = sample_vmf(np.random.default_rng(1), [0.0, 0.0, 1.0], 20.0, size=10)
    with pm.Model():
        mu = pmsg.SphereUniform("mu", d=3)
        pmsg.VonMisesFisher("x", mu=mu, kappa=20.0, observed=data)
        prior = pm.sample_prior_predictive(draws=500, random_seed=2)
    mu_draws = prior.prior["mu"].values[0]
    x_draws = prior.prior_predictive["x"].values[0]
    assert mu_draws.shape == (500, 3) and x_draws.shape == (500, 10, 3)
    np.testing.assert_allclose(np.linalg.norm(x_draws, axis=-1), 1.0, atol=1e-14)
    # The uniform prior: mean 0; each x around its own mu: mean cosine A_3(20).
    assert np.all(np.abs(mu_draws.mean(axis=0)) <= Z * np.sqrt(1 / 3 / 500))
    t = np.einsum("nd,nkd->nk", mu_draws, x_draws).ravel()
    assert abs(t.mean() - vmf_mean_resultant_length(3, 20.0)) <= Z * t.std() / np.sqrt(t.size)


# -- NUTS through the transform ----------------------------------------------------------


def assert_within_mcse(draws, exact, label):
    """draws: (chain, draw); exact: scalar."""
    mcse = float(az.mcse(draws, method="mean"))
    estimate = draws.mean()
    assert abs(estimate - exact) <= Z * mcse, f"{label}: {estimate} vs {exact}, mcse {mcse}"


@pytest.mark.statistical
def test_nuts_on_a_vmf_prior():
    mu, kappa = unit([1.0, -1.0, 0.5]), 5.0
    with pm.Model():
        pmsg.VonMisesFisher("x", mu=mu, kappa=kappa)
        idata = pm.sample(draws=1000, tune=500, random_seed=1, **SAMPLE_KWARGS)
    x = idata.posterior["x"].values
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)
    assert int(idata.sample_stats["diverging"].sum()) == 0
    assert_within_mcse(x @ mu, vmf_mean_resultant_length(3, kappa), "mean resultant length")
    orthogonal = x - (x @ mu)[..., None] * mu
    for i in range(3):
        assert_within_mcse(orthogonal[..., i], 0.0, f"orthogonal mean {i}")


def conjugate_vmf_model(n, transform=None, seed=21):
    """x_i ~ vMF(mu, 3), mu ~ vMF(mu0, 4), n observations drawn around (0, 0, 1).

    Returns the model and the exact posterior of mu: vMF with parameter vector
    kappa0 mu0 + kappa_obs sum_i x_i, whose norm is the posterior concentration.
    """
    kappa0, kappa_obs = 4.0, 3.0
    mu0 = unit([1.0, 1.0, 0.0])
    data = sample_vmf(np.random.default_rng(seed), [0.0, 0.0, 1.0], kappa_obs, size=n)
    resultant = kappa0 * mu0 + kappa_obs * data.sum(axis=0)
    kappa_post = np.linalg.norm(resultant)
    with pm.Model() as model:
        kwargs = {} if transform is None else dict(default_transform=transform)
        mu = pmsg.VonMisesFisher("mu", mu=mu0, kappa=kappa0, **kwargs)
        pmsg.VonMisesFisher("x", mu=mu, kappa=kappa_obs, observed=data)
    return model, resultant / kappa_post, kappa_post


def assert_matches_vmf_posterior(draws, mu_post, kappa_post):
    """The mean vector A_3(kappa_post) mu_post, component by component and along mu_post."""
    np.testing.assert_allclose(np.linalg.norm(draws, axis=-1), 1.0, atol=1e-12)
    a_post = vmf_mean_resultant_length(3, kappa_post)
    for i in range(3):
        assert_within_mcse(draws[..., i], a_post * mu_post[i], f"posterior mean {i}")
    assert_within_mcse(draws @ mu_post, a_post, "mean resultant length")


@pytest.mark.statistical
def test_nuts_on_a_conjugate_vmf_model():
    model, mu_post, kappa_post = conjugate_vmf_model(n=15)  # kappa_post = 25.9
    with model:
        idata = pm.sample(draws=1000, tune=500, random_seed=2, **SAMPLE_KWARGS)
        predictive = pm.sample_posterior_predictive(idata, random_seed=3, progressbar=False)
    draws = idata.posterior["mu"].values
    assert_matches_vmf_posterior(draws, mu_post, kappa_post)
    # The ambient transform is a funnel (see SphereTransform): at this concentration NUTS
    # diverges in about 0.5% of the transitions (5-12 of 2000 over seven seeds); allow 2%.
    assert int(idata.sample_stats["diverging"].sum()) <= 40
    # Posterior predictive: each replicated x_i lies around the drawn mu, cosine A_3(3).
    x_rep = predictive.posterior_predictive["x"].values
    assert x_rep.shape == (2, 1000, 15, 3)
    t = np.einsum("cdk,cdnk->cdn", draws, x_rep).ravel()
    assert abs(t.mean() - vmf_mean_resultant_length(3, 3.0)) <= Z * t.std() / np.sqrt(t.size)


@pytest.mark.statistical
def test_nuts_on_a_concentrated_posterior_with_a_narrow_radial_law():
    # kappa_post = 288: with the default chi radius NUTS diverges in about 4% of the
    # transitions here; a log-normal radius of sd 0.1 removes the funnel.
    model, mu_post, kappa_post = conjugate_vmf_model(
        n=150, transform=SphereTransform(radial_sd=0.1)
    )
    assert kappa_post > 250
    with model:
        idata = pm.sample(draws=1000, tune=500, random_seed=5, **SAMPLE_KWARGS)
    assert int(idata.sample_stats["diverging"].sum()) == 0
    assert_matches_vmf_posterior(idata.posterior["mu"].values, mu_post, kappa_post)


@pytest.mark.statistical
def test_nuts_on_batched_uniform_spheres():
    d = 4
    with pm.Model():
        pmsg.SphereUniform("u", shape=(2, d))
        idata = pm.sample(draws=1000, tune=500, random_seed=4, **SAMPLE_KWARGS)
    u = idata.posterior["u"].values  # (chain, draw, 2, d)
    np.testing.assert_allclose(np.linalg.norm(u, axis=-1), 1.0, atol=1e-12)
    assert int(idata.sample_stats["diverging"].sum()) == 0
    for k in range(2):
        for i in range(d):
            assert_within_mcse(u[..., k, i], 0.0, f"mean [{k}, {i}]")
            for j in range(i, d):  # E[x x^T] = I / d
                exact = 1.0 / d if i == j else 0.0
                assert_within_mcse(u[..., k, i] * u[..., k, j], exact, f"second moment {i}{j}")
