"""Geodesic samplers on spheres through PyMC: SGGMC and gSGNHT (Liu, Zhu & Song,
Algorithms 1 and 2).

The sphere geometry and the pure update rules are checked in ``test_manifolds_sphere.py``
and ``test_dynamics_geodesic.py``; this file builds the step methods and samples.

The statistical tests sample through ``pm.sample`` and compares with exact answers:

* the toy of the slides, a von Mises-Fisher mixture on the circle (κ = 5, weights 1 : 2;
  the two mean directions, 90° apart, are our choice) with gradient noise
  ``N(0, 1000 I)`` injected through the model, by a Kolmogorov-Smirnov test against the
  exact CDF (see ``assert_matches_circle_cdf`` for how the autocorrelation is handled);
* conjugate von Mises-Fisher posteriors on S² and S⁹ with minibatched observations;
* a model that mixes sphere-valued variables (one of them batched) with Euclidean ones.

Every mean is compared with its exact value to ``Z`` Monte Carlo standard errors
(ArviZ's ``mcse``, which accounts for autocorrelation) plus an explicit allowance for
the discretisation bias of the sampler at the step size used. The allowances come from
runs made once while writing these tests: vectorised runs of the same update rules
(thousands of independent chains packed into one flat position as a batch of spheres,
with the exact minibatch noise law) and, for the mixed model, a ``pm.sample`` run twenty
times longer than the test's. They are stated where they are used and are a fraction of
the Monte Carlo part of the tolerance. The mean kinetic temperature ``vᵀv/m`` is checked
too: a wrong noise balance shows there first. All seeds are fixed, so the tests are
deterministic.

Deliberately broken samplers fail here: ignoring B̂ (the mixture's KS test, its mean and
the temperature), doubling the injected noise (the conjugate and mixed models), dropping
the tangent projection (the kinetic temperature everywhere, the mixed model's spheres),
counting d instead of d − 1 dimensions per sphere in gSGNHT's thermostat (every gSGNHT
test, the KS test included).
"""

from __future__ import annotations

import math

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
import scipy.integrate
import scipy.special
import scipy.stats as st
from geodesic_helpers import unit

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.distributions import sample_vmf, sphere_transform

Z = 4.5
"""Tolerance in MCSE units; a Gaussian estimate leaves ±4.5 MCSE with probability ~7e-6,
and the slack covers the error of the ESS estimate behind each MCSE (~10-15%)."""

MIN_ESS = 300
"""A stuck chain has a large MCSE and so a loose tolerance; demanding this ESS keeps each
comparison able to see a small error."""

TEMPERATURE_BIAS = 0.02
"""Allowed deviation of the mean kinetic temperature from 1. The friction-noise part of
the splitting alone gives Cε/sinh(Cε) ≈ 1 − (Cε)²/6 (below 0.2% here); a scalar B̂ that
misjudges the gradient-noise variance V by δV adds εδV/(2C) (about 1% for the noise
table of the mixture, whose covariance eigenvalues are 991 and 1016, not 1000)."""

KS_ALPHA = 1e-3
"""Significance level of each Kolmogorov-Smirnov test."""

SAMPLE_KWARGS = dict(cores=1, progressbar=False, compute_convergence_checks=False)

pytestmark = pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")


def sample(model, step, *, draws, tune, seed, chains=2):
    with model:
        return pm.sample(
            draws=draws, tune=tune, chains=chains, step=step, random_seed=seed, **SAMPLE_KWARGS
        )


class Checks:
    """Collects comparisons with exact values and fails once, listing all of them."""

    def __init__(self, z=Z, min_ess=MIN_ESS):
        self.z, self.min_ess = z, min_ess
        self.failed, self.report = False, []

    def _record(self, ok, text):
        self.failed |= not ok
        self.report.append(f"{'ok  ' if ok else 'FAIL'} {text}")

    def mean(self, draws, exact, label, bias=0.0):
        """``draws`` (chain, draw) has mean ``exact`` to ``z`` MCSE plus ``bias``."""
        draws = np.asarray(draws, dtype=float)
        ess = float(az.ess(draws, method="bulk"))
        mcse = float(az.mcse(draws, method="mean"))
        estimate = float(draws.mean())
        self._check(label, "mean", estimate, exact, mcse, bias, ess)

    def sd(self, draws, exact, label, bias=0.0):
        draws = np.asarray(draws, dtype=float)
        ess = float(az.ess(draws, method="bulk"))
        mcse = float(az.mcse(draws, method="sd"))
        self._check(label, "sd", float(draws.std(ddof=1)), exact, mcse, bias, ess)

    def temperature(self, values, manifold_dim, label, bias=TEMPERATURE_BIAS):
        """The kinetic temperature ``vᵀv/m`` averages 1, with variance 2/m at the target.

        The standard error uses that exact variance and the rank-based ESS, both immune
        to the heavy tails of a broken sampler's velocities (whose own MCSE would be
        huge and hide the error).
        """
        values = np.asarray(values, dtype=float)
        ess = float(az.ess(values, method="bulk"))
        se = math.sqrt(2.0 / manifold_dim / ess)
        self._check(label, "kinetic temperature", float(values.mean()), 1.0, se, bias, ess)

    def _check(self, label, stat, estimate, exact, mcse, bias, ess):
        if not ess >= self.min_ess:
            self._record(False, f"{label}: ESS {ess:.0f} < {self.min_ess}, too few to judge")
        tolerance = self.z * mcse + bias
        self._record(
            abs(estimate - exact) <= tolerance,
            f"{label} {stat}: estimate {estimate:.5f}, exact {exact:.5f}, off by "
            f"{(estimate - exact) / mcse:+.1f} MCSE (MCSE {mcse:.5f}, bias allowance "
            f"{bias:.5f}, tolerance {tolerance:.5f}, ESS {ess:.0f})",
        )

    def condition(self, ok, text):
        self._record(bool(ok), text)

    def assert_all(self):
        assert not self.failed, "draws do not match the exact answer:\n  " + "\n  ".join(
            self.report
        )


# ======================================================================================
# The toy: a von Mises-Fisher mixture on the circle, gradient noise N(0, 1000 I)
# ======================================================================================

MIX_KAPPA = 5.0
MIX_WEIGHTS = np.array([1.0, 2.0]) / 3.0
MIX_ANGLES = np.array([0.0, np.pi / 2])
MIX_MEANS = np.stack([np.cos(MIX_ANGLES), np.sin(MIX_ANGLES)], axis=1)
NOISE_VAR, NOISE_ROWS = 1000.0, 10_000
MIX_CUT = np.pi + MIX_ANGLES.mean()
"""Angles are measured from here, opposite the modes, where the density is ~3e-4 of its
peak: the circle is cut where there is next to no mass."""

MIX_STEP = 0.005
MIX_SETTINGS = {
    # B̂ = εV/2 with V = 1000, the documented estimate: the injected 2(C − B̂)ε plus the
    # ε²V that the noise puts into the velocity make exactly 2Cε.
    "SGGMC": dict(step_size=MIX_STEP, n_steps=100, friction=3.0, noise_estimate=2.5),
    # No estimate: the thermostat absorbs the noise (it settles near C + εV/2 = 3).
    "GSGNHT": dict(step_size=MIX_STEP, n_steps=100, diffusion=0.5, noise_estimate=0.0),
}
MIX_DRAWS, MIX_TUNE = 6000, 100


def noise_table():
    """N rows ~ N(0, 1000 I), centred exactly: their full-data sum is zero."""
    rows = np.random.default_rng(2016).normal(scale=math.sqrt(NOISE_VAR), size=(NOISE_ROWS, 2))
    return rows - rows.mean(axis=0)


@pytest.fixture(scope="module")
def mixture_model():
    """x ~ (1/3) vMF(μ₁, 5) + (2/3) vMF(μ₂, 5) on S¹, plus a zero-mean noise term.

    The noise term is a potential ``eᵀx`` with ``e`` one row of the noise table per
    gradient (``pm.Minibatch``, batch size 1, no ``total_size``): each gradient gets
    ``N(0, 1000 I)`` noise, and the full-data term, ``(Σ e)ᵀx = 0``, leaves the target
    untouched. The mixture takes its components' sphere transform by itself.
    """
    with pm.Model() as model:
        x = pm.Mixture(
            "x",
            w=MIX_WEIGHTS,
            comp_dists=[pmsg.VonMisesFisher.dist(mu=m, kappa=MIX_KAPPA) for m in MIX_MEANS],
        )
        e = pm.Minibatch(noise_table(), batch_size=1)
        pm.Potential("gradient_noise", pt.sum(e * x))
    return model


def mixture_density(theta):
    """Exact density of the mixture in the angle (w.r.t. arc length)."""
    log_c = -math.log(2 * math.pi * scipy.special.i0e(MIX_KAPPA)) - MIX_KAPPA
    return sum(
        w * np.exp(log_c + MIX_KAPPA * np.cos(theta - a))
        for w, a in zip(MIX_WEIGHTS, MIX_ANGLES, strict=True)
    )


def mixture_cdf():
    """CDF of the angle measured from ``MIX_CUT``, by numerical integration."""
    grid = np.linspace(0.0, 2 * np.pi, 200_001)
    cdf = scipy.integrate.cumulative_trapezoid(mixture_density(grid + MIX_CUT), grid, initial=0)
    # The normalising constant is exact (Bessel I₀), so the integral must come out as 1.
    assert cdf[-1] == pytest.approx(1.0, abs=1e-10)
    return lambda angle: np.interp(angle, grid, cdf)


def assert_matches_circle_cdf(x, checks, label):
    """Kolmogorov-Smirnov test of the angles of ``x`` (chain, draw, 2) against the exact CDF.

    Autocorrelation. Each draw is already thinned (``n_steps`` = 100 integrator steps),
    but successive draws stay correlated. The KS statistic is a supremum of the
    empirical CDF's deviations, and at each point that deviation is the mean of an
    indicator ``1{θ ≤ q}``; its variance is that of ``n_eff`` independent draws, where
    ``n_eff`` is the ESS of the indicator, i.e. ArviZ's quantile ESS. Using the smallest
    quantile ESS over the deciles as the sample size of the Kolmogorov distribution
    therefore makes every point's variance at most the independent case's: the test is
    conservative. The discretisation bias is negligible here: 2000 parallel chains of
    the same update rule at this step size put the largest deviation of the CDF at
    0.003-0.004, against a KS critical value of ~0.067 at ``n_eff`` ≈ 850 (the draws
    give n_eff ≈ 850 for either sampler). A sampler that ignores B̂, i.e. runs at
    temperature 1 + B̂/C ≈ 1.8, gives a statistic of ~0.06 and p ~ 2e-4.
    """
    angle = np.mod(np.arctan2(x[..., 1], x[..., 0]) - MIX_CUT, 2 * np.pi)
    deciles = np.linspace(0.1, 0.9, 9)
    n_eff = min(float(az.ess(angle, method="quantile", prob=q)) for q in deciles)
    statistic = st.kstest(angle.ravel(), mixture_cdf()).statistic
    p_value = float(st.kstwo.sf(statistic, math.floor(n_eff)))
    checks.condition(n_eff >= MIN_ESS, f"{label}: smallest quantile ESS {n_eff:.0f}")
    checks.condition(
        p_value >= KS_ALPHA,
        f"{label}: KS statistic {statistic:.4f} on {angle.size} draws, n_eff {n_eff:.0f}, "
        f"p = {p_value:.3g} (reject below {KS_ALPHA})",
    )


def exact_mixture_draws(rng, n, weights=MIX_WEIGHTS):
    """Independent draws of the mixture (or of one with other weights), shape (n, 2)."""
    component = rng.choice(2, size=n, p=weights)
    return sample_vmf(rng, MIX_MEANS[component], MIX_KAPPA)


def test_ks_check_accounts_for_autocorrelation_and_sees_a_wrong_law():
    rng = np.random.default_rng(12)
    # 600 exact draws, each repeated 20 times: chains of 12,000 draws but only ~600
    # independent ones. The KS statistic is that of 600 draws.
    draws = np.repeat(exact_mixture_draws(rng, 600), 20, axis=0).reshape(2, 6000, 2)
    checks = Checks()
    assert_matches_circle_cdf(draws, checks, "exact law, autocorrelated")
    assert not checks.failed, checks.report
    # A test that took the 12,000 draws as independent would reject the exact law.
    angle = np.mod(np.arctan2(draws[..., 1], draws[..., 0]) - MIX_CUT, 2 * np.pi)
    assert st.kstest(angle.ravel(), mixture_cdf()).pvalue < KS_ALPHA
    # The weights swapped (2 : 1 instead of 1 : 2), with the same autocorrelation: rejected.
    wrong = np.repeat(exact_mixture_draws(rng, 600, MIX_WEIGHTS[::-1]), 20, axis=0)
    checks = Checks()
    assert_matches_circle_cdf(wrong.reshape(2, 6000, 2), checks, "swapped weights")
    assert checks.failed, checks.report


@pytest.mark.statistical
@pytest.mark.parametrize("sampler", ["SGGMC", "GSGNHT"])
def test_vmf_mixture_on_the_circle_with_gradient_noise(mixture_model, sampler):
    with mixture_model:
        step = getattr(pmsg, sampler)(**MIX_SETTINGS[sampler])
    idata = sample(mixture_model, step, draws=MIX_DRAWS, tune=MIX_TUNE, seed=20160)
    x = idata.posterior["x"].values
    checks = Checks()
    checks.condition(
        np.max(np.abs(np.linalg.norm(x, axis=-1) - 1.0)) <= 1e-12, "draws lie on the circle"
    )
    assert_matches_circle_cdf(x, checks, sampler)
    # The mean vector Σ w_k A₂(κ) μ_k (A₂ = I₁/I₀): a sharper check of the spread, which
    # gradient noise left uncorrected would inflate.
    a2 = scipy.special.i1e(MIX_KAPPA) / scipy.special.i0e(MIX_KAPPA)
    exact_mean = a2 * MIX_WEIGHTS @ MIX_MEANS
    for i in range(2):
        checks.mean(x[..., i], exact_mean[i], f"{sampler} E[x{i}]")
    checks.temperature(idata.sample_stats["kinetic_temperature"].values, 1, sampler)
    if sampler == "GSGNHT":
        xi = float(idata.sample_stats["thermostat"].values.mean())
        checks.condition(2.0 < xi < 4.0, f"thermostat settles near C + εV/2 = 3: {xi:.2f}")
    checks.assert_all()


# ======================================================================================
# Conjugate von Mises-Fisher posteriors on S² and S⁹, minibatched
# ======================================================================================

# x_i ~ vMF(μ, κ_obs), μ ~ vMF(μ₀, κ₀): μ | x ~ vMF(r/|r|, |r|), r = κ₀μ₀ + κ_obs Σx_i.
# The prior direction is orthogonal to the data's and carries about a tenth of the
# posterior concentration (κ_post ≈ 43 on S², 42 on S⁹), so dropping or mis-weighting it
# moves the mean direction by several MCSE.
N_OBS, BATCH_SIZE, KAPPA0 = 100, 20, 4.0
KAPPA_OBS = {3: 1.0, 10: 2.0}
CONJ_STEP = 0.01
CONJ_DRAWS, CONJ_TUNE = 1000, 300

REL_BIAS = 0.01
"""Allowed relative discretisation bias of E[1 − μ_postᵀμ] (≈ (d−1)/(2κ_post)). Runs of
4000 parallel chains of the update rules at these settings, with the exact minibatch
noise law, found |bias| below 0.3% (d = 3 and 10, both samplers, ±0.2% Monte Carlo
error); a sampler at the wrong temperature T is off by ~(T − 1), i.e. tens of percent
for the errors this test is meant to catch. The MCSE of that mean is ~3% (d = 3) and
~1.5% (d = 10) of it."""


def conjugate_problem(d):
    """Data, prior direction, exact posterior and the minibatch gradient-noise variance."""
    rng = np.random.default_rng(100 + d)
    truth, prior_mean = np.eye(d)[-1], unit(np.eye(d)[0] + np.eye(d)[1])
    data = sample_vmf(rng, truth, KAPPA_OBS[d], size=N_OBS)
    resultant = KAPPA0 * prior_mean + KAPPA_OBS[d] * data.sum(axis=0)
    kappa_post = float(np.linalg.norm(resultant))
    mu_post = resultant / kappa_post
    # pm.Minibatch with total_size: the likelihood's gradient in μ is (N/B) κ_obs Σ_batch x_i
    # with B rows drawn with replacement, covariance (N²/B) κ_obs² Cov(x). Its variance in
    # the tangent plane at μ_post, averaged over directions, is the V of B̂ = εV/2.
    tangent = np.eye(d) - np.outer(mu_post, mu_post)
    cov = tangent @ np.cov(data.T, bias=True) @ tangent
    noise_var = N_OBS**2 / BATCH_SIZE * KAPPA_OBS[d] ** 2 * np.trace(cov) / (d - 1)
    return dict(
        data=data, prior_mean=prior_mean, mu_post=mu_post, kappa_post=kappa_post, V=noise_var
    )


CONJ = {d: conjugate_problem(d) for d in (3, 10)}


def vmf_mean_length(d, kappa):
    """A_d(κ) = I_{d/2}(κ) / I_{d/2−1}(κ), from SciPy's scaled Bessel functions."""
    return scipy.special.ive(d / 2, kappa) / scipy.special.ive(d / 2 - 1, kappa)


def conjugate_model(*, minibatch):
    """Both problems in one model, independent of each other."""
    with pm.Model() as model:
        for d, problem in CONJ.items():
            mu = pmsg.VonMisesFisher(f"mu{d}", mu=problem["prior_mean"], kappa=KAPPA0)
            data = problem["data"]
            pmsg.VonMisesFisher(
                f"x{d}",
                mu=mu,
                kappa=KAPPA_OBS[d],
                observed=pm.Minibatch(data, batch_size=BATCH_SIZE) if minibatch else data,
                total_size=N_OBS if minibatch else None,
            )
    return model


def conjugate_steps(model, sampler):
    """One step method per sphere dimension (a geodesic sampler takes one dimension)."""
    steps = []
    for d, problem in CONJ.items():
        if sampler == "SGGMC":
            settings = dict(friction=10.0, noise_estimate=CONJ_STEP * problem["V"] / 2)
        else:  # the thermostat absorbs the minibatch noise
            settings = dict(diffusion=1.0, noise_estimate=0.0)
        with model:
            steps.append(
                getattr(pmsg, sampler)(
                    vars=[model[f"mu{d}"]], step_size=CONJ_STEP, n_steps=20, **settings
                )
            )
    return steps


def check_vmf_posterior(checks, draws, d, label, rel_bias=0.0):
    """Mean vector, mean direction and mean resultant length against the exact vMF."""
    problem = CONJ[d]
    mu_post, kappa_post = problem["mu_post"], problem["kappa_post"]
    a = vmf_mean_length(d, kappa_post)
    checks.condition(
        np.max(np.abs(np.linalg.norm(draws, axis=-1) - 1.0)) <= 1e-12, f"{label}: unit draws"
    )
    # E[μ] = A_d(κ_post) μ_post, component by component.
    for i in range(d):
        checks.mean(draws[..., i], a * mu_post[i], f"{label} E[mu{d}][{i}]")
    # Mean direction: the part of the sample mean orthogonal to μ_post is d − 1 MCSE-sized
    # Gaussian errors; its norm over A is the angle to μ_post, bounded by the chi-square
    # quantile of probability 1e-5 (there are no discretisation effects on it: the
    # dynamics are symmetric about μ_post).
    orthogonal = draws - (draws @ mu_post)[..., None] * mu_post
    mcse = np.array([float(az.mcse(orthogonal[..., i], method="mean")) for i in range(d)])
    angle = np.linalg.norm(orthogonal.mean(axis=(0, 1))) / a
    bound = math.sqrt(st.chi2.ppf(1 - 1e-5, d - 1)) * np.sqrt(np.mean(mcse**2)) / a
    checks.condition(
        angle <= bound,
        f"{label} mean direction on S^{d - 1}: {np.degrees(angle):.2f}° from the exact one "
        f"(bound {np.degrees(bound):.2f}°)",
    )
    # Mean resultant length E[μ_postᵀμ] = A_d(κ_post), written as 1 − A (the spread
    # around the mean direction) so that the bias allowance is relative to it.
    spread = 1.0 - draws @ mu_post
    checks.mean(spread, 1.0 - a, f"{label} 1 - A_{d}", bias=rel_bias * (1.0 - a))


@pytest.fixture(scope="module")
def conjugate_minibatch_model():
    return conjugate_model(minibatch=True)


@pytest.mark.statistical
@pytest.mark.parametrize("sampler", ["SGGMC", "GSGNHT"])
def test_conjugate_vmf_posterior_on_s2_and_s9_with_minibatches(conjugate_minibatch_model, sampler):
    steps = conjugate_steps(conjugate_minibatch_model, sampler)
    idata = sample(conjugate_minibatch_model, steps, draws=CONJ_DRAWS, tune=CONJ_TUNE, seed=2016)
    checks = Checks()
    # One step method per dimension: PyMC stacks their statistics in step order.
    temperatures = idata.sample_stats["kinetic_temperature"].values
    for k, d in enumerate(CONJ):
        draws = idata.posterior[f"mu{d}"].values
        check_vmf_posterior(checks, draws, d, sampler, rel_bias=REL_BIAS)
        checks.temperature(temperatures[..., k], d - 1, f"{sampler} S^{d - 1}")
    checks.assert_all()


@pytest.mark.statistical
def test_conjugate_vmf_posterior_with_nuts_through_the_transform():
    model = conjugate_model(minibatch=False)
    with model:
        idata = pm.sample(
            draws=1000, tune=500, chains=2, random_seed=7, nuts_sampler="pymc", **SAMPLE_KWARGS
        )
    checks = Checks()
    for d in CONJ:
        check_vmf_posterior(checks, idata.posterior[f"mu{d}"].values, d, "NUTS")
    divergences = int(idata.sample_stats["diverging"].sum())
    checks.condition(divergences <= 20, f"NUTS divergences: {divergences}")
    checks.assert_all()


# ======================================================================================
# Mixed models: several sphere variables, a batch of spheres, Euclidean variables
# ======================================================================================

# Three independent blocks in one model, sampled by one geodesic step method:
#   kappa ~ Gamma(2, 0.2), mu ~ vMF(m0, 2) on S², x_i ~ vMF(mu, kappa): unknown
#       concentration (positive, log-transformed: a Euclidean coordinate) next to a
#       sphere; exact marginals by one-dimensional quadrature over kappa.
#   axes ~ vMF(m_k, 2), shape (3, 3): three spheres in one variable, each with its own
#       conjugate data y_{ik} ~ vMF(axes_k, 2).
#   loc ~ N(0, 3), z_i ~ N(loc, 1): a conjugate normal mean.
# The variables are created in an order that interleaves sphere and Euclidean
# coordinates in the flat position.
MIXED_N = 20
MIXED_SETTINGS = {
    "SGGMC": dict(step_size=0.02, n_steps=20, friction=5.0),
    "GSGNHT": dict(step_size=0.02, n_steps=20, diffusion=5.0),
}
MIXED_DRAWS, MIXED_TUNE = 1000, 200
MIXED_SD_BIAS = 0.03
"""Allowed relative discretisation bias of a posterior sd. At this step size (a sixth of
the smallest posterior sd, that of mu's angle) a run of 20 times as many draws found
every mean within 0.4% and the sds within 0.6% of the exact ones; a 30% error in the
temperature moves the sds by ~15%."""


def log_c3(kappa):
    """log of the vMF normaliser on S², κ / (4π sinh κ), written to avoid overflow."""
    return np.log(kappa) - math.log(2 * math.pi) - kappa - np.log1p(-np.exp(-2 * kappa))


def a3(kappa):
    """A₃(κ) = coth κ − 1/κ."""
    return 1.0 / np.tanh(kappa) - 1.0 / kappa


@pytest.fixture(scope="module")
def mixed_problem():
    rng = np.random.default_rng(31)
    m0 = np.array([0.0, 1.0, 0.0])
    x = sample_vmf(rng, unit([1.0, 0.0, 1.0]), 5.0, size=MIXED_N)
    axes_prior = np.eye(3)
    axes_truth = unit([[1.0, 1.0, 0.0], [0.0, 1.0, -1.0], [1.0, 0.0, 1.0]])
    y = sample_vmf(rng, axes_truth, 2.0, size=(MIXED_N, 3))  # (n, 3 spheres, 3)
    z = rng.normal(1.5, 1.0, size=30)

    # kappa and mu: p(κ | x) ∝ Gamma(κ; 2, 0.2) C₃(κ)^n C₃(2) / C₃(|2 m0 + κ S|), and
    # given κ, mu ~ vMF with parameter vector 2 m0 + κ S (S = Σ x_i).
    total = x.sum(axis=0)
    kappa = np.linspace(1e-3, 40.0, 40_001)
    r_vec = 2.0 * m0 + kappa[:, None] * total
    r = np.linalg.norm(r_vec, axis=1)
    log_post = st.gamma(2.0, scale=5.0).logpdf(kappa) + MIXED_N * log_c3(kappa) - log_c3(r)
    weight = np.exp(log_post - log_post.max())
    weight /= scipy.integrate.trapezoid(weight, kappa)

    def expect(f):
        w = weight.reshape(-1, *[1] * (np.ndim(f) - 1))
        return scipy.integrate.trapezoid(w * f, kappa, axis=0)

    kappa_mean = expect(kappa)
    exact = {
        "kappa_mean": kappa_mean,
        "kappa_sd": math.sqrt(expect((kappa - kappa_mean) ** 2)),
        "mu_mean": expect((a3(r) / r)[:, None] * r_vec),
    }
    # axes: conjugate sphere by sphere
    r_axes = 2.0 * axes_prior + 2.0 * y.sum(axis=0)
    kappa_axes = np.linalg.norm(r_axes, axis=1)
    exact["axes_mean"] = (a3(kappa_axes) / kappa_axes)[:, None] * r_axes
    exact["axes_spread"] = 1.0 - a3(kappa_axes)  # E[1 − m_kᵀ axes_k], m_k the mean direction
    exact["axes_direction"] = r_axes / kappa_axes[:, None]
    # loc: conjugate normal
    precision = z.size + 1 / 9
    exact["loc_mean"], exact["loc_sd"] = z.sum() / precision, precision**-0.5

    with pm.Model() as model:
        kappa_rv = pm.Gamma("kappa", alpha=2.0, beta=0.2)
        mu = pmsg.VonMisesFisher("mu", mu=m0, kappa=2.0)
        loc = pm.Normal("loc", 0.0, 3.0)
        axes = pmsg.VonMisesFisher("axes", mu=axes_prior, kappa=2.0)
        pmsg.VonMisesFisher("x", mu=mu, kappa=kappa_rv, observed=x)
        pmsg.VonMisesFisher("y", mu=axes, kappa=2.0, observed=y)
        pm.Normal("z", loc, 1.0, observed=z)
    return model, exact


def test_layout_of_a_mixed_model(mixed_problem):
    model, _ = mixed_problem
    with model:
        step = pmsg.SGGMC(step_size=0.02)
    # Flat order is the model's: kappa_log__ (1), mu (3), loc (1), axes (3 × 3).
    assert [v.name for v in step.vars] == ["kappa_log__", "mu_sphere__", "loc", "axes_sphere__"]
    layout = step.layout
    np.testing.assert_array_equal(
        layout.sphere_rows, [[1, 2, 3], [5, 6, 7], [8, 9, 10], [11, 12, 13]]
    )
    np.testing.assert_array_equal(layout.euclidean, [0, 4])
    # Contiguous runs: kappa | mu | loc | axes (mu is one sphere, axes three).
    assert layout.runs == ((0, 1, False), (1, 4, True), (4, 5, False), (5, 14, True))
    assert layout.d == 3 and layout.n_spheres == 4
    assert step.manifold_dim == 4 * 2 + 2


@pytest.fixture(scope="module")
def mixed_steps(mixed_problem):
    """Both samplers on the mixed model, compiled once for the tests that share them."""
    model, _ = mixed_problem
    steps = {}
    with model:
        for name, settings in MIXED_SETTINGS.items():
            steps[name] = getattr(pmsg, name)(**settings)
            steps[name].trajectory_function  # noqa: B018
    return steps


@pytest.mark.statistical
@pytest.mark.parametrize("sampler", ["SGGMC", "GSGNHT"])
def test_mixed_sphere_and_euclidean_model(mixed_problem, mixed_steps, sampler):
    model, exact = mixed_problem
    step = mixed_steps[sampler]
    idata = sample(model, step, draws=MIXED_DRAWS, tune=MIXED_TUNE, seed=77)
    post = idata.posterior
    checks = Checks()
    kappa = post["kappa"].values
    checks.mean(kappa, exact["kappa_mean"], f"{sampler} kappa")
    checks.sd(kappa, exact["kappa_sd"], f"{sampler} kappa", bias=MIXED_SD_BIAS * exact["kappa_sd"])
    mu = post["mu"].values
    for i in range(3):
        checks.mean(mu[..., i], exact["mu_mean"][i], f"{sampler} E[mu][{i}]")
    axes = post["axes"].values  # (chain, draw, 3, 3)
    checks.condition(
        np.max(np.abs(np.linalg.norm(axes, axis=-1) - 1.0)) <= 1e-12
        and np.max(np.abs(np.linalg.norm(mu, axis=-1) - 1.0)) <= 1e-12,
        "sphere draws are unit vectors",
    )
    for k in range(3):
        for i in range(3):
            checks.mean(axes[..., k, i], exact["axes_mean"][k, i], f"{sampler} E[axes][{k},{i}]")
        spread = 1.0 - axes[..., k, :] @ exact["axes_direction"][k]
        checks.mean(spread, exact["axes_spread"][k], f"{sampler} axes[{k}] 1 - A")
    loc = post["loc"].values
    checks.mean(loc, exact["loc_mean"], f"{sampler} loc")
    checks.sd(loc, exact["loc_sd"], f"{sampler} loc", bias=MIXED_SD_BIAS * exact["loc_sd"])
    checks.temperature(idata.sample_stats["kinetic_temperature"].values, step.manifold_dim, sampler)
    checks.assert_all()


@pytest.mark.parametrize("sampler", ["SGGMC", "GSGNHT"])
def test_same_seed_gives_identical_draws_and_stats(mixed_problem, mixed_steps, sampler):
    model, _ = mixed_problem
    step = mixed_steps[sampler]
    first, second, other = (
        sample(model, step, draws=20, tune=5, seed=seed, chains=1) for seed in (5, 5, 6)
    )
    for name in ("mu", "axes", "kappa", "loc"):
        np.testing.assert_array_equal(first.posterior[name].values, second.posterior[name].values)
    for name in first.sample_stats.data_vars:
        np.testing.assert_array_equal(
            first.sample_stats[name].values, second.sample_stats[name].values
        )
    assert not np.array_equal(first.posterior["mu"].values, other.posterior["mu"].values)


@pytest.mark.parametrize("sampler", ["SGGMC", "GSGNHT"])
def test_sample_stats_and_a_start_off_the_sphere(mixed_problem, mixed_steps, sampler):
    model, _ = mixed_problem
    step = mixed_steps[sampler]
    # The sphere transform's forward map is the identity, so this starts at |z| = 5.
    with model:
        idata = pm.sample(
            draws=10,
            tune=0,
            chains=1,
            step=step,
            random_seed=3,
            initvals={"mu": np.array([0.0, 0.0, 5.0])},
            **SAMPLE_KWARGS,
        )
    np.testing.assert_allclose(np.linalg.norm(idata.posterior["mu"].values, axis=-1), 1.0)
    expected = {"step_size", "n_steps", "minibatch_logp", "diverging", "divergences"}
    expected |= {"kinetic_temperature"} | ({"thermostat"} if sampler == "GSGNHT" else set())
    assert expected <= set(idata.sample_stats.data_vars)
    stats = idata.sample_stats
    assert np.all(stats["kinetic_temperature"].values > 0)
    assert not stats["diverging"].values.any()
    np.testing.assert_array_equal(stats["n_steps"].values, MIXED_SETTINGS[sampler]["n_steps"])


@pytest.mark.parametrize("sampler", ["SGGMC", "GSGNHT"])
def test_a_draw_continues_from_the_last_one_and_a_moved_point_starts_afresh(
    mixed_problem, mixed_steps, sampler
):
    # A trajectory ends on the spheres with a tangent velocity, so the next draw starts
    # there; a point changed in between (by the user, another sampler, a restart) is put
    # back on its spheres and the velocity re-projected, as at the first draw. Both must
    # give what re-normalising before every draw gives.
    #
    # This test used to count the calls of the step method's NumPy re-normalisation
    # (`_on_spheres`), which was skipped when a draw continued from the last one. The
    # kernels removed it: the kernel's `prepare` now puts the point on its spheres and
    # projects the velocity inside the compiled trajectory, at the start of every one, so
    # there are no calls to count. What stays observable, and is checked instead:
    # - the draws and the last velocity are the same whether or not the point is put on
    #   its spheres (and the velocity projected) by hand before every draw;
    # - that re-normalisation by hand is a no-op (beyond rounding) before every draw but
    #   those right after a move off the spheres: a draw continues on the spheres with a
    #   tangent velocity, and the moves really leave them (so the first check is not
    #   trivially true).
    model, _ = mixed_problem
    step = mixed_steps[sampler]
    moves = {
        3: {"mu": lambda x: 3.0 * x},  # off its sphere
        5: {"axes": lambda x: np.concatenate([np.zeros((1, 3)), x[1:]])},  # no direction
        6: {"loc": lambda x: x + 1.0, "mu": lambda x: -x},  # still on the sphere
    }
    off_the_spheres = [3, 5]
    values = {v.name: model.values_to_rvs[v].name for v in step.vars}
    rows = step.layout.sphere_rows

    def flat(point):
        return np.concatenate([np.ravel(point[v.name]) for v in step.vars])

    def unflat(x, like):
        point, start = dict(like), 0
        for v in step.vars:
            size = np.size(like[v.name])
            point[v.name] = x[start : start + size].reshape(np.shape(like[v.name]))
            start += size
        return point

    def renormalised(point):
        """The point on its spheres (a zero vector to the first axis) and the velocity
        projected onto their tangent spaces there, by hand; and how much either moved."""
        x = flat(point)
        spheres = x[rows]
        norm = np.linalg.norm(spheres, axis=-1, keepdims=True)
        first_axis = np.eye(rows.shape[1])[0]
        on = x.copy()
        on[rows] = np.where(norm > 0, spheres / np.where(norm > 0, norm, 1.0), first_axis)
        shift = np.max(np.abs(on - x))
        state = step.chain.kernel_state
        if state is not None:  # the first draw draws its velocity from the position
            velocity = state.velocity.copy()
            v = velocity[rows]
            velocity[rows] = v - on[rows] * np.sum(on[rows] * v, axis=-1, keepdims=True)
            shift = max(shift, np.max(np.abs(velocity - state.velocity)))
            state = state._replace(velocity=velocity)
        return unflat(on, point), state, shift

    def chain(by_hand):
        """Eight draws with the moves; returns them, the last velocity, and the draws
        before which re-normalising by hand changed the point or the velocity."""
        step.setup_chain(np.random.default_rng(4), 0, 8)
        point, draws, changed = model.initial_point(), [], []
        for i in range(8):
            for value, name in values.items():
                if name in moves.get(i, {}):
                    point = {**point, value: moves[i][name](point[value])}
            on_point, on_state, shift = renormalised(point)
            if shift > 1e-12:
                changed.append(i)
            if by_hand:
                point, step.chain.kernel_state = on_point, on_state
            point, stats = step.step(point)
            assert not stats[0]["diverging"]
            draws.append(flat(point))
        return np.array(draws), step.chain.kernel_state.velocity, changed

    draws, velocity, changed = chain(by_hand=False)
    assert changed == off_the_spheres  # only the moved points are off the spheres
    reference, reference_velocity, reference_changed = chain(by_hand=True)
    assert reference_changed == off_the_spheres
    np.testing.assert_allclose(draws, reference, rtol=0, atol=1e-12)
    np.testing.assert_allclose(velocity, reference_velocity, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(draws[:, rows], axis=-1), 1.0, atol=1e-14)
    np.testing.assert_allclose(np.sum(draws[-1, rows] * velocity[rows], axis=-1), 0, atol=1e-13)


# ======================================================================================
# Errors
# ======================================================================================


@pytest.fixture(scope="module")
def sphere_and_normal():
    with pm.Model() as model:
        pmsg.SphereUniform("u", d=3)
        pm.Normal("w", 0.0, 1.0)
    return model


EUCLIDEAN_SAMPLERS = [
    pmsg.SGHMC,
    pmsg.SGLD,
    pmsg.SGNHT,
    pmsg.HMC,
    pmsg.SGHMCEM,
    pmsg.SGNHTEM,
    pmsg.HMCEM,
]


@pytest.mark.parametrize("sampler", EUCLIDEAN_SAMPLERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("which", ["default", "explicit"])
def test_euclidean_samplers_refuse_sphere_variables(sphere_and_normal, sampler, which):
    model = sphere_and_normal
    kwargs = {} if which == "default" else {"vars": [model["u"]]}
    with model, pytest.raises(ValueError, match=r"live on spheres: \['u_sphere__'\].*SGGMC"):
        sampler(step_size=0.1, **kwargs)


def test_euclidean_sampler_next_to_a_geodesic_one_is_accepted(sphere_and_normal):
    model = sphere_and_normal
    with model:
        euclidean = pmsg.SGHMC(vars=[model["w"]], step_size=0.1)
        geodesic = pmsg.SGGMC(vars=[model["u"]], step_size=0.1)
    assert [v.name for v in euclidean.vars] == ["w"]
    assert [v.name for v in geodesic.vars] == ["u_sphere__"]
    np.testing.assert_array_equal(geodesic.layout.sphere_rows, [[0, 1, 2]])
    assert geodesic.layout.euclidean.size == 0 and geodesic.manifold_dim == 2


@pytest.mark.parametrize("sampler", ["SGGMC", "GSGNHT"])
def test_spheres_of_different_dimensions_are_refused_when_the_sampler_is_created(sampler):
    with pm.Model() as model:
        pmsg.SphereUniform("small", d=3)
        pmsg.SphereUniform("large", shape=(2, 10))
        pmsg.VonMisesFisher("also_small", mu=[0.0, 0.0, 1.0], kappa=1.0)
    cls = getattr(pmsg, sampler)
    # The error names the dimensions, the variables of each, and the fix.
    expected = (
        rf"{sampler}: all sphere-valued variables of one geodesic sampler must share their "
        r"dimension, got \[3, 10\] \(d=3 for \['small', 'also_small'\], d=10 for "
        r"\['large'\]\)\. Give each dimension its own sampler: "
        rf"step=\[pmsg\.{sampler}\(vars=\[small, also_small\], \.\.\.\), "
        rf"pmsg\.{sampler}\(vars=\[large\], \.\.\.\)\]\.$"
    )
    with model, pytest.raises(ValueError, match=expected):
        cls(step_size=0.1)
    with model, pytest.raises(ValueError, match=r"got \[3, 10\]"):
        cls(vars=[model["large"], model["small"]], step_size=0.1)
    # The fix it gives samples: one sampler per dimension.
    with model:
        steps = [
            cls(vars=[model["small"], model["also_small"]], step_size=0.1, n_steps=2),
            cls(vars=[model["large"]], step_size=0.1, n_steps=2),
        ]
    assert [s.layout.d for s in steps] == [3, 10]
    idata = sample(model, steps, draws=3, tune=0, seed=1, chains=1)
    for name in ("small", "large", "also_small"):
        np.testing.assert_allclose(np.linalg.norm(idata.posterior[name], axis=-1), 1.0)


def test_a_mixture_on_spheres_without_the_sphere_transform_is_refused():
    # Without the transform the mixture's value would move through R³, where its density
    # exp(κ μᵀx) is not normalised: the geodesic samplers refuse it and say what to do.
    with pm.Model() as model:
        components = [pmsg.VonMisesFisher.dist(mu=m, kappa=2.0) for m in np.eye(3)[:2]]
        pm.Mixture("x", w=[0.5, 0.5], comp_dists=components, default_transform=None)
        pm.Normal("w", 0.0, 1.0, shape=3)  # an ordinary vector next to it is fine
    with (
        model,
        pytest.raises(
            ValueError, match=r"SGGMC: 'x' mixes distributions on a sphere.*Leave out default_tr"
        ),
    ):
        pmsg.SGGMC(step_size=0.1)
    with model:
        assert pmsg.SGGMC(vars=[model["w"]], step_size=0.1).layout.n_spheres == 0


def test_a_sphere_valued_variable_without_an_embedding_axis_is_refused():
    # S⁰ = {−1, 1} is two points: there is no geodesic to move along.
    with pm.Model() as model:
        pm.Normal("s", 0.0, 1.0, shape=(4, 1), default_transform=sphere_transform)
    with (
        model,
        pytest.raises(
            ValueError, match=r"GSGNHT: the sphere-valued variable 's' has shape \(4, 1\).*d >= 2"
        ),
    ):
        pmsg.GSGNHT(step_size=0.1)


@pytest.mark.parametrize(
    ("sampler", "kwargs", "error", "match"),
    [
        ("SGGMC", dict(friction=0.0), ValueError, "friction must be positive"),
        ("SGGMC", dict(friction=-1.0), ValueError, "friction must be positive"),
        ("SGGMC", dict(friction=math.nan), ValueError, "friction must be positive"),
        ("SGGMC", dict(friction=math.inf), ValueError, "friction must be positive"),
        ("SGGMC", dict(friction="1"), TypeError, "friction must be a real number"),
        ("SGGMC", dict(noise_estimate=-0.1), ValueError, "noise_estimate must be non-negative"),
        ("SGGMC", dict(friction=1.0, noise_estimate=1.5), ValueError, "exceeds friction"),
        ("GSGNHT", dict(diffusion=0.0), ValueError, "diffusion must be positive"),
        ("GSGNHT", dict(diffusion=-2.0), ValueError, "diffusion must be positive"),
        ("GSGNHT", dict(diffusion=None), TypeError, "diffusion must be a real number"),
        ("GSGNHT", dict(noise_estimate=math.nan), ValueError, "noise_estimate must be non"),
        ("GSGNHT", dict(diffusion=1.0, noise_estimate=2.0), ValueError, "exceeds diffusion"),
        ("SGGMC", dict(n_steps=0), ValueError, "n_steps must be a positive integer"),
    ],
)
def test_bad_parameters_are_refused(sphere_and_normal, sampler, kwargs, error, match):
    with sphere_and_normal, pytest.raises(error, match=match):
        getattr(pmsg, sampler)(step_size=0.1, **kwargs)
