"""Crossed effects: a logistic model of users and items, against NumPyro's NUTS.

``y_i ~ Bernoulli(logit⁻¹(mu + a[user_i] + b[item_i] + x_i · beta))`` with ``a ~ N(0,
sa)``, ``b ~ N(0, sb)``, ``sa, sb ~ HalfNormal(1)``, ``mu ~ N(0, 2)``, ``beta ~ N(0, 1)``:
the form users write for crossed effects, the shared intercept outside both groups'
priors. Users and items are drawn uniformly for each row; ``--rows`` rows, ``--cols``
covariates, data simulated from ``--seed`` (``sa = 0.8``, ``sb = 0.5``).

The reference is NumPyro's NUTS on the full data, ``--reference-chains`` × (1,000 +
``--reference-draws``), cached under ``--cache``; its own smallest ESS is printed, since
its Monte Carlo error is part of every error below. Each run then samples 2 chains ×
(``--tune`` + ``--draws``) in this process, timed from building the model until the draws
are in hand (compile included; ``pm.sample`` returns NumPyro's draws converted, after
JAX has finished): NumPyro's NUTS with vectorized and with parallel chains on the full
data, and ``pmsg.SGHMC()`` with defaults on ``pm.Minibatch`` data (batch
``--batch-size``). Printed per run: wall time, the worst error of a posterior mean in
reference sds and the range of the sd ratios over every quantity (``mu``, ``beta``,
``sa``, ``sb``, every ``a`` and ``b``), the smallest bulk ESS and ESS per second.

    python benchmarks/crossed_effects.py
    python benchmarks/crossed_effects.py --users 2000 --items 50 --rows 8000 --batch-size 400
"""

from __future__ import annotations

import argparse

import numpy as np
import pymc as pm
from against_numpyro import add_run_arguments, print_table, reference

NAMES = ("mu", "beta", "sa", "sb", "a", "b")
TRUE_SA, TRUE_SB, TRUE_MU = 0.8, 0.5, -0.3


def simulate(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Rows' users, items, covariates and outcomes."""
    rng = np.random.default_rng(args.seed)
    user = rng.integers(0, args.users, args.rows)
    item = rng.integers(0, args.items, args.rows)
    x = rng.standard_normal((args.rows, args.cols))
    a = rng.normal(0, TRUE_SA, args.users)
    b = rng.normal(0, TRUE_SB, args.items)
    beta = np.array([0.5, -0.4, 0.2, 0.1, -0.1][: args.cols])
    eta = TRUE_MU + a[user] + b[item] + x @ beta
    y = rng.binomial(1, 1 / (1 + np.exp(-eta))).astype("int32")
    return {"user": user.astype("int32"), "item": item.astype("int32"), "x": x, "y": y}


def model_of(data: dict[str, np.ndarray], args: argparse.Namespace, minibatch: bool) -> pm.Model:
    """The PyMC model, on ``pm.Minibatch`` data or on all rows."""
    columns = (data["x"], data["user"], data["item"], data["y"])
    with pm.Model() as model:
        if minibatch:
            x, user, item, y = pm.Minibatch(*columns, batch_size=args.batch_size)
        else:
            x, user, item, y = columns
        mu = pm.Normal("mu", 0, 2)
        beta = pm.Normal("beta", 0, 1, shape=args.cols)
        sa, sb = pm.HalfNormal("sa", 1), pm.HalfNormal("sb", 1)
        a = pm.Normal("a", 0, sa, shape=args.users)
        b = pm.Normal("b", 0, sb, shape=args.items)
        eta = mu + a[user] + b[item] + pm.math.dot(x, beta)
        pm.Bernoulli("y", logit_p=eta, observed=y, total_size=args.rows if minibatch else None)
    return model


def draws_of(idata, chains: int) -> np.ndarray:
    """(chains, draws, quantities) in :data:`NAMES`' order."""
    posterior = idata.posterior
    return np.concatenate(
        [posterior[n].values.reshape(chains, posterior.sizes["draw"], -1) for n in NAMES], axis=-1
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--users", type=int, default=400)
    add("--items", type=int, default=60)
    add("--rows", type=int, default=40_000)
    add("--cols", type=int, default=3, choices=range(1, 6))
    add_run_arguments(parser)
    args = parser.parse_args()
    data = simulate(args)

    def build(minibatch: bool) -> pm.Model:
        return model_of(data, args, minibatch)

    def draws(idata) -> np.ndarray:
        return draws_of(idata, idata.posterior.sizes["chain"])

    key = f"crossed-{args.users}x{args.items}-{args.rows}x{args.cols}-seed{args.seed}"
    ref = reference(key, build, draws, args)
    print(
        f"{args.users} users x {args.items} items, {args.rows:,} rows, {args.cols} covariates; "
        f"reference: NumPyro NUTS {args.reference_chains} x (1,000 + {args.reference_draws:,}),"
        f" {float(ref['wall']):.0f} s, its smallest ESS {ref['ess'].min():,.0f} "
        f"(quantity {int(np.argmin(ref['ess']))})\n"
    )
    print_table(ref, build, draws, args)


if __name__ == "__main__":
    main()
