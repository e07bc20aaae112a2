"""What the model comparisons against NumPyro's NUTS share (`crossed_effects.py`,
`correlated_effects.py`): a long reference run, cached; timed runs of NumPyro in both
chain methods and of ``pmsg.SGHMC()``; and the table of their errors and ESS.

A script gives ``build(minibatch)`` (the PyMC model on ``pm.Minibatch`` data or on all
rows) and ``draws_of(idata)`` (``(chains, draws, quantities)``).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pymc as pm
from arviz_stats.base import array_stats

import pymc_sgmcmc as pmsg

LABELS = {
    "numpyro": "NumPyro NUTS, vectorized chains",
    "numpyro-parallel": "NumPyro NUTS, parallel chains",
    "ours": "`pmsg.SGHMC()`, defaults",
}


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every comparison takes: run lengths, the reference's, the cache, ``--only``."""
    add = parser.add_argument
    add("--batch-size", type=int, default=1000)
    add("--seed", type=int, default=3)
    add("--tune", type=int, default=1000)
    add("--draws", type=int, default=1000)
    add("--reference-chains", type=int, default=4)
    add("--reference-draws", type=int, default=2000)
    add("--cache", default=str(Path.home() / ".cache" / "pymc_sgmcmc_benchmarks"))
    add("--only", default="numpyro,numpyro-parallel,ours")


def reference(
    key: str, build: Callable, draws_of: Callable, args: argparse.Namespace
) -> dict[str, np.ndarray]:
    """The long NUTS run's means, sds, ESS and wall time: from the cache, or run."""
    path = Path(args.cache) / f"{key}-{args.reference_chains}x{args.reference_draws}.npz"
    if path.exists():
        return dict(np.load(path))
    start = time.perf_counter()
    with build(minibatch=False):
        idata = pm.sample(
            args.reference_draws, tune=1000, chains=args.reference_chains,
            nuts_sampler="numpyro", random_seed=1, progressbar=False,
        )  # fmt: skip
    draws = draws_of(idata)
    flat = draws.reshape(-1, draws.shape[-1])
    result = {
        "mean": flat.mean(0),
        "sd": flat.std(0),
        "ess": array_stats.ess(draws, chain_axis=0, draw_axis=1, method="bulk"),
        "wall": np.asarray(time.perf_counter() - start),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **result)
    return result


def timed_run(
    kind: str, build: Callable, draws_of: Callable, args: argparse.Namespace
) -> tuple[np.ndarray, float, str]:
    """One run of 2 chains: its draws, wall time and a note (our set-up time).

    Timed from building the model until the draws are in hand (``pm.sample`` returns
    NumPyro's draws converted, after JAX has finished), compile included.
    """
    start = time.perf_counter()
    note = ""
    if kind == "ours":
        with build(minibatch=True), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            step = pmsg.SGHMC()
            idata = pm.sample(
                args.draws, tune=args.tune, chains=2, step=step, random_seed=1,
                progressbar=False, compute_convergence_checks=False,
            )  # fmt: skip
        note = f" (set-up {step.setup_seconds:.1f} s)"
    else:
        method = "vectorized" if kind == "numpyro" else "parallel"
        with build(minibatch=False):
            idata = pm.sample(
                args.draws, tune=args.tune, chains=2, nuts_sampler="numpyro", random_seed=2,
                progressbar=False, nuts_sampler_kwargs={"chain_method": method},
            )  # fmt: skip
    return draws_of(idata), time.perf_counter() - start, note


def print_table(
    ref: dict[str, np.ndarray], build: Callable, draws_of: Callable, args: argparse.Namespace
) -> None:
    """Each run of ``--only``: wall time, worst mean error, sd ratios, smallest ESS per second."""
    print("| run | wall s | worst mean error (sd) | sd ratios | min ESS | min ESS/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in args.only.split(","):
        draws, wall, note = timed_run(kind, build, draws_of, args)
        flat = draws.reshape(-1, draws.shape[-1])
        error = np.abs(flat.mean(0) - ref["mean"]) / ref["sd"]
        ratio = flat.std(0) / ref["sd"]
        ess = array_stats.ess(draws, chain_axis=0, draw_axis=1, method="bulk").min()
        print(
            f"| {LABELS[kind]}{note} | {wall:.0f} | {error.max():.3f} | "
            f"{ratio.min():.2f}-{ratio.max():.2f} | {ess:,.0f} | {ess / wall:.2f} |",
            flush=True,
        )
