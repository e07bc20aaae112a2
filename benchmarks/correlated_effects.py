"""Correlated varying intercepts and slopes (an LKJ prior), logistic, against NumPyro's NUTS.

``y_i ~ Bernoulli(logit⁻¹(a_{g_i} + b_{g_i} x_i))`` with each group's ``(a_j, b_j) ~
MvNormal(mu, L Lᵀ)``, ``L`` from ``pm.LKJCholeskyCov(eta=2, sd_dist=HalfNormal(1))``,
``mu ~ N(0, 2²)``: PyMC's usual model of correlated varying effects, written centred as
users write it, the effects read as ``ab[g, 0] + ab[g, 1] * x``. ``--groups`` groups of
``--rows-per-group`` rows, simulated from ``--seed`` (sds 0.8 and 0.58, correlation 0.51).

The reference is NumPyro's NUTS on the full data, ``--reference-chains`` × (1,000 +
``--reference-draws``), cached under ``--cache``; its own smallest ESS is printed. Each
run then samples 2 chains × (``--tune`` + ``--draws``) in this process, timed from
building the model until the draws are in hand (compile included): NumPyro's NUTS with
vectorized and with parallel chains on the full data, and ``pmsg.SGHMC()`` with defaults
on ``pm.Minibatch`` data (batch ``--batch-size``) and PyMC's default ``cores``. Printed
per run: wall time, the worst error of a posterior mean in reference sds and the range of
the sd ratios over every quantity (``mu``, the two sds, the correlation, every group's
two effects), the smallest bulk ESS and ESS per second.

    python benchmarks/correlated_effects.py
    python benchmarks/correlated_effects.py --groups 300 --rows-per-group 60
"""

from __future__ import annotations

import argparse

import numpy as np
import pymc as pm
from against_numpyro import add_run_arguments, print_table, reference

TRUE_MU = np.array([-0.5, 1.0])
TRUE_FACTOR = np.array([[0.8, 0.0], [0.3, 0.5]])


def simulate(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Rows' groups, covariate and outcomes."""
    rng = np.random.default_rng(args.seed)
    group = np.repeat(np.arange(args.groups), args.rows_per_group)
    x = rng.standard_normal(group.size)
    effects = TRUE_MU + rng.standard_normal((args.groups, 2)) @ TRUE_FACTOR.T
    eta = effects[group, 0] + effects[group, 1] * x
    y = rng.binomial(1, 1 / (1 + np.exp(-eta))).astype(float)
    return {"group": group, "x": x, "y": y}


def model_of(data: dict[str, np.ndarray], args: argparse.Namespace, minibatch: bool) -> pm.Model:
    """The PyMC model, on ``pm.Minibatch`` data or on all rows."""
    columns = (data["group"], data["x"], data["y"])
    with pm.Model() as model:
        if minibatch:
            group, x, y = pm.Minibatch(*columns, batch_size=args.batch_size)
        else:
            group, x, y = columns
        mu = pm.Normal("mu", 0.0, 2.0, shape=2)
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(1.0), compute_corr=True
        )
        ab = pm.MvNormal("ab", mu=mu, chol=chol, shape=(args.groups, 2))
        total_size = data["y"].size if minibatch else None
        pm.Bernoulli(
            "y", logit_p=ab[group, 0] + ab[group, 1] * x, observed=y, total_size=total_size
        )
    return model


def draws_of(idata) -> np.ndarray:
    """(chains, draws, quantities): ``mu``, the sds, the correlation, every ``ab``."""
    posterior = idata.posterior
    chains, draws = posterior.sizes["chain"], posterior.sizes["draw"]
    parts = [
        posterior["mu"].values,
        posterior["chol_stds"].values,
        posterior["chol_corr"].values[..., 0, 1, None],
        posterior["ab"].values.reshape(chains, draws, -1),
    ]
    return np.concatenate(parts, axis=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--rows-per-group", type=int, default=100)
    add_run_arguments(parser)
    args = parser.parse_args()
    data = simulate(args)

    def build(minibatch: bool) -> pm.Model:
        return model_of(data, args, minibatch)

    key = f"correlated-{args.groups}x{args.rows_per_group}-seed{args.seed}"
    ref = reference(key, build, draws_of, args)
    print(
        f"{args.groups:,} groups x {args.rows_per_group} rows; reference: NumPyro NUTS "
        f"{args.reference_chains} x (1,000 + {args.reference_draws:,}), "
        f"{float(ref['wall']):.0f} s, its smallest ESS {ref['ess'].min():,.0f}\n"
    )
    print_table(ref, build, draws_of, args)


if __name__ == "__main__":
    main()
