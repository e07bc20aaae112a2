"""A normal hierarchy with very unequal groups, against its exact posterior.

``mu ~ N(0, 5²)``, ``tau ~ HalfNormal(2)``, ``a_j ~ N(mu, tau)`` for ``--groups J`` groups
(centred with ``--centred``, else ``a = mu + tau z`` with ``z_j ~ N(0, 1)``), rows
``y_i ~ N(a_{g_i}, 2²)`` with the noise known. Group sizes are ``1 + Zipf(1.6)``, capped at
400 rows: over half the groups have 1-3 rows, a few have hundreds. Data are simulated with
``mu = 0.3``, ``tau = 0.6`` from ``--seed``.

The exact posterior: the intercepts integrate out in closed form (a group's mean row is
``N(mu, tau² + 4/n_j)``), so ``p(mu, tau | y)`` is a two-dimensional density, integrated on
a grid (log ``tau`` from 1e-3 to 6, ``mu`` over ±10 sds of a first coarse pass); given
``(mu, tau)`` each intercept is Gaussian, so its posterior mean and sd are grid averages of
the conditional ones.

The sampler runs in ``pm.sample`` with ``--tune``/``--draws`` per chain, 2 chains,
``cores=1``, on the model with ``pm.Minibatch(group, y, batch_size=--batch-size)``; NUTS
(``--sampler NUTS``) runs on the full-data model. Printed: the worst error of the posterior
means in exact sds, the range of the sd ratios, for ``mu``, ``tau`` and the ``J``
intercepts, the bulk ESS of ``tau`` and the wall time (compile included).

    python benchmarks/normal_hierarchy.py --sampler SGHMC
    python benchmarks/normal_hierarchy.py --sampler SGHMC --tune 4000 --draws 4000
    python benchmarks/normal_hierarchy.py --sampler NUTS --centred
"""

from __future__ import annotations

import argparse
import time

import arviz as az
import numpy as np
import pymc as pm
from scipy.special import logsumexp

import pymc_sgmcmc as pmsg

NOISE_SD, MU_SD, TAU_SCALE = 2.0, 5.0, 2.0
TRUE_MU, TRUE_TAU = 0.3, 0.6


def simulate(n_groups: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows' groups and observations."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(1 + rng.zipf(1.6, size=n_groups), 400)
    group = np.repeat(np.arange(n_groups), sizes)
    intercepts = TRUE_MU + TRUE_TAU * rng.normal(size=n_groups)
    return group, intercepts[group] + NOISE_SD * rng.normal(size=group.size)


def exact_posterior(group: np.ndarray, y: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Posterior means and sds of ``mu``, ``tau`` and the intercepts ``a`` (see the module)."""
    sizes = np.bincount(group)
    means = np.bincount(group, y) / sizes

    def on_grid(low: float, high: float) -> dict:
        mu = np.linspace(low, high, 401)[:, None, None]
        log_tau = np.linspace(np.log(1e-3), np.log(6.0), 800)[None, :, None]
        tau = np.exp(log_tau)
        variance = tau**2 + NOISE_SD**2 / sizes
        loglik = -0.5 * (np.log(variance) + (means - mu) ** 2 / variance).sum(-1)
        # Priors, and the Jacobian of the grid in log tau.
        logp = loglik - 0.5 * (mu[..., 0] / MU_SD) ** 2 - 0.5 * (tau[..., 0] / TAU_SCALE) ** 2
        weight = np.exp(logp + log_tau[..., 0] - logsumexp(logp + log_tau[..., 0]))
        out = {}
        for name, value in (("mu", mu[..., 0]), ("tau", tau[..., 0])):
            mean = (weight * value).sum()
            out[name] = (np.array([mean]), np.sqrt([(weight * value**2).sum() - mean**2]))
        conditional_var = 1 / (1 / tau**2 + sizes / NOISE_SD**2)
        conditional_mean = conditional_var * (mu / tau**2 + sizes * means / NOISE_SD**2)
        mean = (weight[..., None] * conditional_mean).sum((0, 1))
        second = (weight[..., None] * (conditional_var + conditional_mean**2)).sum((0, 1))
        out["a"] = (mean, np.sqrt(second - mean**2))
        return out

    coarse = on_grid(-3.0, 3.0)
    centre, sd = coarse["mu"][0][0], coarse["mu"][1][0]
    return on_grid(centre - 10 * sd, centre + 10 * sd)


def build_model(
    group: np.ndarray, y: np.ndarray, centred: bool, batch_size: int | None
) -> pm.Model:
    """The model, minibatched when ``batch_size`` is given."""
    n_groups = int(group.max()) + 1
    with pm.Model() as model:
        if batch_size is None:
            group_data, y_data, total = group, y, None
        else:
            group_data, y_data = pm.Minibatch(group, y, batch_size=batch_size)
            total = y.size
        mu = pm.Normal("mu", 0.0, MU_SD)
        tau = pm.HalfNormal("tau", TAU_SCALE)
        if centred:
            a = pm.Normal("a", mu, tau, shape=n_groups)
        else:
            a = pm.Deterministic("a", mu + tau * pm.Normal("z", 0.0, 1.0, shape=n_groups))
        pm.Normal("y", a[group_data], NOISE_SD, observed=y_data, total_size=total)
    return model


def main() -> None:
    """Run one sampler and print its errors against the exact posterior."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sampler", default="SGHMC", help="a pmsg sampler, or NUTS")
    parser.add_argument("--groups", type=int, default=300)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--centred", action="store_true")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args()

    group, y = simulate(args.groups, args.seed)
    exact = exact_posterior(group, y)
    nuts = args.sampler == "NUTS"
    sizes = np.bincount(group)
    print(
        f"{args.groups} groups, {y.size} rows, {np.sum(sizes <= 3)} groups with 1-3 rows, "
        f"largest {sizes.max()}; {'centred' if args.centred else 'non-centred'}; "
        f"{args.sampler}, {args.tune} + {args.draws} per chain"
    )
    start = time.perf_counter()
    with build_model(group, y, args.centred, None if nuts else args.batch_size):
        step = None if nuts else getattr(pmsg, args.sampler)()
        idata = pm.sample(
            draws=args.draws, tune=args.tune, chains=2, cores=1, step=step, random_seed=1,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    print(f"wall {time.perf_counter() - start:.1f} s")
    posterior = idata.posterior
    for name in ("mu", "tau", "a"):
        values = posterior[name].values
        draws = values.reshape(-1, *values.shape[2:])
        mean, sd = exact[name]
        error = np.abs(draws.mean(axis=0) - mean) / sd
        ratio = draws.std(axis=0) / sd
        print(
            f"{name:>3}: worst |mean error| {error.max():.2f} sd, "
            f"sd ratio {ratio.min():.2f}-{ratio.max():.2f}"
        )
    ess = az.ess(posterior)
    intercepts = np.asarray(ess["a"].values)
    print(
        f"ESS of tau: {float(ess['tau']):.0f}; of the intercepts: min {intercepts.min():.0f}, "
        f"median {np.median(intercepts):.0f}"
    )


if __name__ == "__main__":
    main()
