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
from helpers import sample
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


def truncated_moments(mean, sd, side):
    """``E[x]`` and ``E[x²]`` of ``N(mean, sd²)`` cut to ``side * x > 0``."""
    alpha = side * mean / sd
    ratio = np.exp(-0.5 * alpha**2 - 0.5 * np.log(2 * np.pi) - log_ndtr(alpha))  # φ/Φ
    first = mean + side * sd * ratio
    return first, sd**2 * (1 - alpha * ratio - ratio**2) + first**2


@pytest.fixture(scope="module")
def exact_posterior(data):
    """Means and sds of ``mu``, ``tau`` and every ``z_j``, from a grid in ``(mu, tau)``."""
    group, y = data
    n = np.bincount(group, minlength=N_GROUPS)
    means = np.bincount(group, y, minlength=N_GROUPS) / n
    mu = np.linspace(-1.0, 1.6, 261)[:, None]
    tau = (np.arange(500) + 0.5)[None, :] * 2.5 / 500  # midpoints: tau's density at 0 is finite

    def halves(j):
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
        *_, log_upper, log_lower = halves(j)
        logp = logp + np.logaddexp(log_upper, log_lower) - np.log(tau)
    weights = np.exp(logp - logsumexp(logp))
    assert weights[[0, -1]].sum() + weights[:, -1].sum() < 1e-12  # the grid holds it

    def moments(first, second):
        mean = (weights * first).sum()
        return mean, np.sqrt((weights * second).sum() - mean**2)

    zero = 0.0 * mu * tau
    exact = {"mu": moments(mu + zero, mu**2 + zero), "tau": moments(tau + zero, tau**2 + zero)}
    z = []
    for j in range(N_GROUPS):
        sd, upper, lower, log_upper, log_lower = halves(j)
        share = np.exp(log_upper - np.logaddexp(log_upper, log_lower))
        up, up2 = truncated_moments(upper, sd, 1.0)
        low, low2 = truncated_moments(lower, sd, -1.0)
        z.append(moments(share * up + (1 - share) * low, share * up2 + (1 - share) * low2))
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
    for name, (mean, sd) in exact_posterior.items():
        draws = idata.posterior[name].values.reshape(2, 2000, -1)
        ess = az.ess(draws)
        z_mean = np.abs(draws.mean((0, 1)) - mean) / (draws.std((0, 1)) / np.sqrt(ess))
        squares = (draws - mean) ** 2
        mcse = squares.std((0, 1)) / np.sqrt(az.ess(squares))
        z_variance = np.abs(squares.mean((0, 1)) - sd**2) / mcse
        # 4.5 standard errors over 2 x 202 quantities: a false alarm, p < 6e-4. Measured
        # with seeds 5, 6, 7: means 3.6, variances 3.9 at most, the locals' ESS 574-682.
        # With the Hessian alone (SCORE_SHARE 0) the locals' ESS was 44 with this seed
        # (11-23 with seeds 5-7 and the proposal's former 8 degrees of freedom, whose
        # variances were then 5.0-7.7 standard errors off with seeds 6 and 7).
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
