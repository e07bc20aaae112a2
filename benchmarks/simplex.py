"""SGRLD on a sparse simplex: a Dirichlet–categorical posterior against its exact law.

Categories drawn with Zipf-like probabilities (``∝ 1/k²``) under a sparse prior
``Dirichlet(α)``, so that many categories have no row: their posterior Beta(α, ~N) sits
near 0, where Euclidean steps in PyMC's log-ratio coordinates (SGLD, SGHMC) and the
paper's Euler step on the expanded mean each have their own trouble. The exact posterior
is Dirichlet(α + counts). Each run: 2 chains, ``--tune`` + ``--draws``, ``cores=1``,
timed from building the step until the draws are in hand (compile included); ours on
``pm.Minibatch`` rows with defaults (control variates), NumPyro's NUTS on all rows in
both chain methods.

Columns: the worst ``|mean − exact| / exact sd`` and the range of ``sd / exact sd`` over
the categories; *unseen total*: the error of the mean of the unseen categories' total
probability (exactly Beta(Σα_unseen, ·)) in its Monte Carlo standard errors; *unseen
log*: the worst error of ``E[log π_k]`` over the unseen categories (exact: digamma
differences) in posterior sds of ``log π_k``; the smallest bulk ESS and it per second.

    python benchmarks/simplex.py
    python benchmarks/simplex.py --categories 200 --rows 100000 --batch-size 1000
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm
from arviz_stats.base import array_stats
from scipy import special

import pymc_sgmcmc as pmsg

RUNS = {
    "sgrld": ("`pmsg.SGRLD()`", lambda: pmsg.SGRLD()),
    "sgrld-euler": ('`pmsg.SGRLD(integrator="euler")`', lambda: pmsg.SGRLD(integrator="euler")),
    "sgld": ("`pmsg.SGLD()`", lambda: pmsg.SGLD()),
    "sghmc": ("`pmsg.SGHMC()`", lambda: pmsg.SGHMC()),
    "numpyro": ("NumPyro NUTS, vectorized chains", None),
    "numpyro-parallel": ("NumPyro NUTS, parallel chains", None),
}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--categories", type=int, default=50)
    add("--rows", type=int, default=1000)
    add("--batch-size", type=int, default=100)
    add("--alpha", type=float, default=0.1)
    add("--tune", type=int, default=1000)
    add("--draws", type=int, default=1000)
    add("--seed", type=int, default=0)
    add("--only", default=",".join(RUNS))
    return parser.parse_args()


def build(rows: np.ndarray, args: argparse.Namespace, minibatch: bool) -> pm.Model:
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.full(args.categories, args.alpha))
        data = pm.Minibatch(rows, batch_size=args.batch_size) if minibatch else rows
        pm.Categorical("y", p=p, observed=data, total_size=len(rows))
    return model


def timed(kind: str, rows: np.ndarray, args: argparse.Namespace) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    make = RUNS[kind][1]
    if make is not None:
        with build(rows, args, minibatch=True), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            idata = pm.sample(
                args.draws, tune=args.tune, chains=2, cores=1, step=make(), random_seed=1,
                progressbar=False, compute_convergence_checks=False,
            )  # fmt: skip
    else:
        method = "vectorized" if kind == "numpyro" else "parallel"
        with build(rows, args, minibatch=False):
            idata = pm.sample(
                args.draws, tune=args.tune, chains=2, nuts_sampler="numpyro", random_seed=2,
                progressbar=False, compute_convergence_checks=False,
                nuts_sampler_kwargs={"chain_method": method},
            )  # fmt: skip
    return idata.posterior["p"].values, time.perf_counter() - start


def main() -> None:
    args = parse()
    probabilities = 1.0 / np.arange(1, args.categories + 1) ** 2
    rng = np.random.default_rng(args.seed)
    rows = rng.choice(args.categories, size=args.rows, p=probabilities / probabilities.sum())
    rows = rows.astype("int32")
    beta = args.alpha + np.bincount(rows, minlength=args.categories)
    unseen = beta < 1.0
    kappa = beta.sum()
    mean = beta / kappa
    sd = np.sqrt(mean * (1.0 - mean) / (kappa + 1.0))
    log_mean = special.digamma(beta) - special.digamma(kappa)
    log_sd = np.sqrt(special.polygamma(1, beta) - special.polygamma(1, kappa))
    print(
        f"{args.rows:,} rows of {args.categories} categories, α = {args.alpha}, batches of "
        f"{args.batch_size}; {unseen.sum()} categories unseen; 2 × ({args.tune:,} + "
        f"{args.draws:,})\n"
    )
    print(
        "| run | wall s | worst mean error (sd) | sd ratios | unseen total (MCSE) | "
        "unseen log (sd) | min ESS | min ESS/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind in args.only.split(","):
        draws, wall = timed(kind, rows, args)
        flat = draws.reshape(-1, args.categories)
        error = np.abs(flat.mean(0) - mean) / sd
        ratio = flat.std(0) / sd
        together = draws[..., unseen].sum(axis=-1)
        total_mcse = array_stats.mcse(together, chain_axis=0, draw_axis=1, method="mean")
        total_error = (together.mean() - beta[unseen].sum() / kappa) / total_mcse
        log_error = np.abs(np.log(flat[:, unseen]).mean(0) - log_mean[unseen]) / log_sd[unseen]
        ess = array_stats.ess(draws, chain_axis=0, draw_axis=1, method="bulk").min()
        print(
            f"| {RUNS[kind][0]} | {wall:.1f} | {error.max():.3f} | "
            f"{ratio.min():.2f}-{ratio.max():.2f} | {total_error:+.1f} | "
            f"{log_error.max() if unseen.any() else float('nan'):.2f} | {ess:,.0f} | "
            f"{ess / wall:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
