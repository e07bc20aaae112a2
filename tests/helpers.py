"""Helpers shared by the test files (imported as ``helpers``; tests/ is on sys.path)."""

import math

import arviz as az
import numpy as np
import pymc as pm
from pytensor.graph.basic import FrozenApply

from pymc_sgmcmc.adaptation.em import MassEM

N_ROWS = 200
BATCH_SIZE = 10
PRIOR_SD = 10.0
"""The shared minibatch model (conftest's ``minibatch_model``): its data and prior."""


def sample(step, model, **kwargs):
    """``pm.sample`` with short, quiet, reproducible defaults; keyword arguments override."""
    options = {
        "draws": 50,
        "tune": 10,
        "chains": 1,
        "cores": 1,
        "random_seed": 1,
        "progressbar": False,
        "compute_convergence_checks": False,
    }
    with model:
        return pm.sample(step=step, **(options | kwargs))


def draws_of(idata, name):
    """The posterior draws of ``name`` as an array ``(chain, draw, ...)``."""
    return idata.posterior[name].values


def stat(idata, name, group="sample_stats"):
    """A sampler statistic as an array ``(chain, draw)``."""
    return idata[group][name].values


def build_graphs_afresh():
    """Empty PyTensor's table of interned inner-graph nodes, as in a fresh process.

    PyTensor interns the nodes of frozen inner graphs (``FrozenApply``) in a global weak
    table, and its rewriters hold every op they have rewritten (an unbounded
    ``functools.cache`` in ``OpToRewriterTracker``), so the table keeps the scans of every
    trajectory the process has compiled, and how long a later rewrite takes depends on
    them. Measured on a 2-D funnel: SGR-NPHMC's trajectory rewrites in ~50 s in a fresh
    process and in ~105 s after an RHMC trajectory (its inner graphs come out 1.3-2.7x
    larger), RHMC's in ~50 s fresh and ~145 s after SGR-NPHMC's; emptying the table first
    restores the fresh times (measured when the trajectories' loops still copied one
    another; now each compiles in 10-16 s fresh). A trajectory of the same structure as
    one compiled before rewrites faster (20 s against ~100 s), so tests that share a
    structure do not call this between them. A user's script builds one or two samplers;
    the suite builds hundreds in two processes.
    """
    FrozenApply._cache.clear()


def compiled(step):
    """Compile ``step``'s trajectory now, so every test sharing the fixture shares it."""
    step.trajectory_function  # noqa: B018
    return step


def standard_error(values, ess):
    """Monte Carlo standard error of a mean from ``ess`` effective draws."""
    return float(np.std(values)) / math.sqrt(float(ess))


def steps_per_draw(cls, n_steps):
    """``{"n_steps": n_steps}`` where ``cls`` takes it (MALA fixes one step a draw)."""
    return {"n_steps": n_steps} if cls.fixed_n_steps is None else {}


def settings(cls):
    """A sampler's settings on the conformance model (5 steps per draw where it has them).

    A fixed step in the model's units (SGLD's, pSGLD's and SGRLD's are variances, so
    smaller); the EM samplers take an M step every 10 draws, so that short runs exercise it.
    """
    options = {"step_size": 2e-3 if cls.kernel.name in ("sgld", "psgld", "sgrld") else 0.05}
    options |= steps_per_draw(cls, 5)
    if cls.mass_adapter_class is MassEM:
        options["sample_size"] = 10
    return options


def switch_model(n_rows: int = 60):
    """theta ~ N(0, I₂), a switch k ~ Bern(½), y_i ~ N(θ₁ + θ₂ + k, 1) seen 10 rows at a time."""
    y = np.random.default_rng(0).normal(0.5, 1.0, size=n_rows)
    with pm.Model() as model:
        k = pm.Bernoulli("k", 0.5)
        theta = pm.Normal("theta", 0.0, 1.0, shape=2)
        batch = pm.Minibatch(y, batch_size=10)
        pm.Normal("y", theta.sum() + k, 1.0, observed=batch, total_size=n_rows)
    return model


MCSE_TOLERANCE = 4.5
"""Tolerance in Monte Carlo standard errors (±4.5 leaves a Gaussian estimate with
probability 7e-6; the slack covers the error of the ESS behind each MCSE)."""


def assert_within_mcse(draws, exact_mean, exact_sd, min_ess):
    """Each quantity's mean and sd within :data:`MCSE_TOLERANCE` of its MCSE of the exact ones.

    ``draws``: ``(chain, draw, quantity)``; each quantity's bulk ESS must exceed ``min_ess``.
    """
    failures = []
    for k in range(draws.shape[-1]):
        x = draws[..., k]
        assert float(az.ess(x, method="bulk")) > min_ess, k
        for label, estimate, exact, method in [
            ("mean", x.mean(), exact_mean[k], "mean"),
            ("sd", x.std(ddof=1), exact_sd[k], "sd"),
        ]:
            mcse = float(az.mcse(x, method=method))
            if not abs(estimate - exact) <= MCSE_TOLERANCE * mcse:
                failures.append(f"{label}[{k}]: {estimate:.5f} vs {exact:.5f}, MCSE {mcse:.5f}")
    assert not failures, failures


def mixture_moments(weights, raw, axis=None):
    """Mean, sd and sd of the squared deviations of a mixture, from its parts' raw moments.

    ``raw``: ``E[x^k]`` of each part for ``k = 1, ..., 4``, each broadcasting against
    ``weights`` (the parts' probabilities, e.g. a grid's normalised weights); the sums run
    over ``axis``. The last value, ``sqrt(E[(x - m)^4] - sd^4)``, is the exact spread of
    ``(x - m)²``: the standard error of a mean square without the draws' own spread of
    squares (see :func:`mean_and_variance_errors`).
    """
    first, second, third, fourth = ((weights * moment).sum(axis) for moment in raw)
    variance = second - first**2
    central_fourth = fourth - 4 * first * third + 6 * first**2 * second - 3 * first**4
    return first, np.sqrt(variance), np.sqrt(central_fourth - variance**2)


def gaussian_raw_moments(mean, variance):
    """``E[x^k]``, ``k = 1, ..., 4``, of ``N(mean, variance)``."""
    return [
        mean,
        mean**2 + variance,
        mean**3 + 3 * mean * variance,
        mean**4 + 6 * mean**2 * variance + 3 * variance**2,
    ]


def mean_and_variance_errors(draws, mean, sd, sd_of_squares):
    """Each quantity's errors of mean and variance, in Monte Carlo standard errors.

    ``draws``: ``(chain, draw, quantity)``; ``mean``, ``sd`` and ``sd_of_squares`` (the
    spread of ``(x - mean)²``, ``√2 sd²`` for a Gaussian) are the exact posterior's. The
    standard errors take the spreads from the exact posterior and the ESS from the draws.
    The draws' own spread of squares is small exactly when a chain has missed a tail, which
    gives the variance's error a heavy tail on the narrow side: for 300 independent Gaussian
    draws, P(z < -4.5) = 2.8e-4 with it, against 1.5e-5 for z > 4.5 with the exact spread
    (7e-6 for a Gaussian z; 2 x 10⁵ runs simulated).
    """
    squares = (draws - mean) ** 2
    z_mean = np.abs(draws.mean((0, 1)) - mean) / (sd / np.sqrt(az.ess(draws)))
    z_variance = np.abs(squares.mean((0, 1)) - sd**2) / (sd_of_squares / np.sqrt(az.ess(squares)))
    return z_mean, z_variance


def correlated_regression(seed: int, n_rows: int = 2_000):
    """A linear regression with known noise (sd 3), 3 correlated features, prior N(0, 2²).

    Its posterior is Gaussian: returns the model (``pm.Minibatch`` of 100 rows), the exact
    mean and covariance.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 3)) @ np.array([[1.0, 0.9, 0.0], [0.0, 0.5, 0.4], [0, 0, 1]])
    y = x @ np.array([0.5, -1.0, 2.0]) + rng.normal(0.0, 3.0, n_rows)
    precision = x.T @ x / 9.0 + np.eye(3) / 4.0
    covariance = np.linalg.inv(precision)
    with pm.Model() as model:
        xb, yb = pm.Minibatch(x, y, batch_size=100)
        w = pm.Normal("w", 0.0, 2.0, shape=3)
        pm.Normal("y", xb @ w, 3.0, observed=yb, total_size=n_rows)
    return model, covariance @ (x.T @ y / 9.0), covariance
