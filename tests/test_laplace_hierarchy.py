"""Locals with a kinked prior: a non-centred Laplace hierarchy against its exact posterior.

``y_i ~ Normal(a_{g_i}, 2)``, ``a_j = mu + tau z_j``, ``z_j ~ Laplace(0, 1)``, ``mu ~
Normal(0, 5)``, ``tau ~ HalfNormal(2)``, over 200 groups of 1-3 rows. Given ``(mu, tau)``
each ``z_j`` has a two-piece Gaussian conditional (the Laplace prior's two halves times
the group mean's Gaussian likelihood), whose normalising constant and moments are
truncated-normal ones in closed form: ``p(mu, tau | y)`` is a grid, and the locals'
moments are averages over it.

The groups' exact moves are Newton proposals: with the Hessian alone, a Laplace prior's
kink was invisible (its curvature is 0 away from it), the proposals jumped several sds
and were refused, and the locals moved with the kernel alone.
"""

import arviz as az
import numpy as np
import pymc as pm
import pytest
from helpers import mean_and_variance_errors, mixture_moments, sample
from scipy.special import log_ndtr, logsumexp
from test_hierarchical_moves import quiet_step

from pymc_sgmcmc.sampling.local_updates import SCORE_SHARE, precision_blocks

N_GROUPS, NOISE_SD, MU_SD, TAU_SCALE = 200, 2.0, 5.0, 2.0


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(2)
    group = np.repeat(np.arange(N_GROUPS), rng.integers(1, 4, size=N_GROUPS))
    intercepts = 0.3 + 0.6 * rng.laplace(size=N_GROUPS)
    return group, intercepts[group] + NOISE_SD * rng.normal(size=group.size)


LAGUERRE_NODES, LAGUERRE_WEIGHTS = np.polynomial.laguerre.laggauss(20)


def positive_normal_moments(alpha):
    """``E[Y^k]``, ``k = 0, ..., 4``, of ``Y ~ N(alpha, 1)`` cut to ``Y > 0``.

    The recursion ``E[Y^k] = alpha E[Y^(k-1)] + (k-1) E[Y^(k-2)]`` cancels in the far tail
    (terms ~|alpha|^k for a result ~k!/|alpha|^k: the fourth moment's relative error is
    2e-5 at alpha = -20 and grows as alpha^8; small group scales reach alpha = -500). There
    ``|alpha| Y`` has the density ``exp(-u - u²/(2 alpha²))``, which 20-point Gauss-Laguerre
    quadrature integrates to 3e-11 from alpha = -3 down (checked against adaptive quadrature).
    Not SciPy's ``truncnorm.moment``: on 20,000 alphas down to -500 it took 17 s against
    0.02 s and its third and fourth moments were off by orders of magnitude in the tail.
    """
    alpha = np.asarray(alpha, dtype=float)
    ratio = np.exp(-0.5 * alpha**2 - 0.5 * np.log(2 * np.pi) - log_ndtr(alpha))  # φ/Φ
    moments = [np.ones_like(alpha), alpha + ratio]
    for k in (2, 3, 4):
        moments.append(alpha * moments[k - 1] + (k - 1) * moments[k - 2])
    moments = np.array(moments)
    tail = alpha < -3.0
    weights = LAGUERRE_WEIGHTS * np.exp(-(LAGUERRE_NODES**2) / (2 * alpha[tail, None] ** 2))
    integrals = weights @ LAGUERRE_NODES[:, None] ** np.arange(5)
    moments[:, tail] = (integrals / integrals[:, :1] / np.abs(alpha[tail, None]) ** np.arange(5)).T
    return moments


@pytest.fixture(scope="module")
def exact_posterior(data):
    """Mean, sd and sd of squared deviations of ``mu``, ``tau`` and every ``z_j``, from a
    grid in ``(mu, tau)``."""
    group, y = data
    n = np.bincount(group, minlength=N_GROUPS)
    means = np.bincount(group, y, minlength=N_GROUPS) / n
    mu = np.linspace(-1.0, 1.6, 261)[:, None]
    tau = (np.arange(500) + 0.5)[None, :] * 2.5 / 500  # midpoints: tau's density at 0 is finite

    def halves(j, mu, tau):
        # z > 0 and z < 0: exp(∓z) N(ȳ_j; mu + tau z, s²) is a Gaussian in z of
        # precision tau²/s² and mean (d ∓ s²/tau)/tau, d = ȳ_j − mu; each half's log mass.
        s2 = NOISE_SD**2 / n[j]
        d = means[j] - mu
        sd = np.sqrt(s2) / tau
        upper, lower = (d - s2 / tau) / tau, (d + s2 / tau) / tau
        log_upper = upper**2 / (2 * sd**2) - d**2 / (2 * s2) + log_ndtr(upper / sd)
        log_lower = lower**2 / (2 * sd**2) - d**2 / (2 * s2) + log_ndtr(-lower / sd)
        return sd, upper, lower, log_upper, log_lower

    logp = -(mu**2) / (2 * MU_SD**2) - tau**2 / (2 * TAU_SCALE**2)
    for j in range(N_GROUPS):
        *_, log_upper, log_lower = halves(j, mu, tau)
        logp = logp + np.logaddexp(log_upper, log_lower) - np.log(tau)
    weights = np.exp(logp - logsumexp(logp))
    assert weights[[0, -1]].sum() + weights[:, -1].sum() < 1e-12  # the grid holds it

    # The points that carry the mass: the rest hold 1e-20 of it between them.
    keep = weights > 1e-25
    assert weights[~keep].sum() < 1e-20
    mu, tau = np.broadcast_arrays(mu, tau)
    mu, tau, weights = mu[keep], tau[keep], weights[keep]
    exact = {
        name: mixture_moments(weights, [value**k for k in range(1, 5)])
        for name, value in (("mu", mu), ("tau", tau))
    }
    z = []
    for j in range(N_GROUPS):
        sd, upper, lower, log_upper, log_lower = halves(j, mu, tau)
        share = np.exp(log_upper - np.logaddexp(log_upper, log_lower))
        # z = sd Y on the upper half, -sd Y on the lower one, Y a normal cut to Y > 0.
        up = positive_normal_moments(upper / sd)
        low = positive_normal_moments(-lower / sd)
        raw = [sd**k * (share * up[k] + (1 - share) * (-1) ** k * low[k]) for k in range(1, 5)]
        z.append(mixture_moments(weights, raw))
    exact["z"] = tuple(np.array(column) for column in zip(*z, strict=True))
    return exact


@pytest.mark.statistical
def test_sghmc_defaults_match_a_laplace_hierarchy(data, exact_posterior):
    group, y = data
    with pm.Model() as model:
        group_mb, y_mb = pm.Minibatch(group, y, batch_size=20)
        mu = pm.Normal("mu", 0.0, MU_SD)
        tau = pm.HalfNormal("tau", TAU_SCALE)
        z = pm.Laplace("z", 0.0, 1.0, shape=N_GROUPS)
        pm.Normal("y", (mu + tau * z)[group_mb], NOISE_SD, observed=y_mb, total_size=y.size)
    step = quiet_step(model, mode_kwargs={"progressbar": False})
    idata = sample(step, model, draws=2000, tune=1000, chains=2, random_seed=5)
    for name, (mean, sd, sd_of_squares) in exact_posterior.items():
        draws = idata.posterior[name].values.reshape(2, 2000, -1)
        z_mean, z_variance = mean_and_variance_errors(draws, mean, sd, sd_of_squares)
        # 4.5 standard errors over 2 x 202 quantities: a false alarm, p < 6e-4. With the
        # draws' own spread of squares in the variances' errors (mean_and_variance_errors
        # says why not) this seed read 4.54 and failed; 3.39 with the exact spread. For
        # independent exact draws of this posterior, 100 runs of 4,000, the largest of the
        # 200 variances' errors was 2.9 / 3.5 / 4.0 at the median / 90th / 99th centile,
        # as for 200 Gaussians.
        # Measured with seeds 5 and 13-21: means 4.1, variances 3.4 at most, the locals' ESS
        # 443-632. With the Hessian alone (SCORE_SHARE 0) the locals' ESS is 7-11 with
        # seeds 5-7, which the last assertion refuses.
        assert np.max(z_mean) < 4.5, (name, np.max(z_mean))
        assert np.max(z_variance) < 4.5, (name, np.max(z_variance))
    assert np.min(az.ess(idata, var_names=["z"])["z"].values) > 150


def test_precision_blocks_take_the_larger_of_hessian_and_scores_in_each_direction():
    hessian = np.array([[[0.2]], [[3.0]], [[1.0]]])
    scores = np.array([[[1.2]], [[2.0]], [[np.nan]]])  # the last group never fitted
    blocks = precision_blocks(hessian, scores)
    np.testing.assert_allclose(blocks[:, 0, 0], [SCORE_SHARE * 1.2, 3.0, 1.0])
    # Two locals: a Hessian flat along (1, 1)/√2 where the scores are not.
    rotation = np.array([[1.0, 1.0], [1.0, -1.0]]) / np.sqrt(2.0)
    hessian = rotation @ np.diag([0.0, 4.0]) @ rotation.T
    scores = rotation @ np.diag([2.0, 4.0]) @ rotation.T
    blocks = precision_blocks(hessian[None], scores[None])[0]
    np.testing.assert_allclose(
        rotation.T @ blocks @ rotation, np.diag([SCORE_SHARE * 2.0, 4.0]), atol=1e-12
    )
    np.testing.assert_array_equal(precision_blocks(hessian[None], None)[0], hessian)
