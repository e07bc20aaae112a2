"""Wall time per draw of ``pm.sample`` against the number of chains, ``cores`` and ``K``.

``pmsg.SGHMC()`` with its defaults (control variates, fresh rows at every step) on the
quickstart's logistic regression at two sizes: 100,000 × 10 in minibatches of 100 and
1,000,000 × 20 in minibatches of 1,000. Each configuration is ``pm.sample(tune=0,
draws=D, chains=C, cores=c)`` with the step built once per ``K = draws_per_call`` and
compiled and warmed up before any timing; the configurations alternate over rounds, and
the table gives each one's median wall time from the call to the returned trace, per
draw of all chains together (``C × D`` draws: lower is better, the chains' throughput),
with the worker processes' start (``cores > 1``) included, as a user pays it.

    bash run.sh python benchmarks/chains_and_blocks.py              # ~5 min
    bash run.sh python benchmarks/chains_and_blocks.py --sizes 100000x10 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import numpy as np
import pymc as pm

import pymc_sgmcmc as pmsg

CONFIGURATIONS = [  # (chains, cores, K)
    (1, 1, 1), (2, 1, 1), (2, 2, 1), (4, 1, 1), (4, 2, 1), (1, 1, 20), (2, 1, 20), (2, 2, 20),
]  # fmt: skip


def logistic_regression(n_rows: int, n_cols: int, batch_size: int) -> pm.Model:
    """Standard normal features, coefficients N(0, 0.5²), ``pm.Minibatch`` of the rows."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_rows, n_cols))
    w = rng.standard_normal(n_cols) * 0.5
    y = (rng.uniform(size=n_rows) < 1.0 / (1.0 + np.exp(-X @ w))).astype(float)
    with pm.Model() as model:
        X_batch, y_batch = pm.Minibatch(X, y, batch_size=batch_size)
        beta = pm.Normal("beta", 0.0, 1.0, shape=n_cols)
        pm.Bernoulli("y", logit_p=X_batch @ beta, observed=y_batch, total_size=n_rows)
    return model


def sample_seconds(step, chains: int, cores: int, draws: int) -> float:
    start = time.perf_counter()
    pm.sample(
        draws=draws, tune=0, chains=chains, cores=cores, step=step, progressbar=False,
        compute_convergence_checks=False, random_seed=1, return_inferencedata=False,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000x10,1000000x20", help="ROWSxCOLS,...")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=2000, help="draws per chain")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # short chains' diagnostics
    print(f"{os.cpu_count()} logical cores; {args.rounds} rounds of {args.draws} draws a chain")
    print("| data | chains | cores | K | wall µs per draw, all chains (min–max) | vs 1 chain |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for size in args.sizes.split(","):
        n_rows, n_cols = (int(s) for s in size.split("x"))
        batch_size = 100 if n_rows <= 100_000 else 1_000
        with logistic_regression(n_rows, n_cols, batch_size):
            steps = {
                k: pmsg.SGHMC(draws_per_call=k, mode_kwargs={"progressbar": False})
                for k in sorted({k for _, _, k in CONFIGURATIONS})
            }
            for chains, cores, k in CONFIGURATIONS:  # compiled, worker start warm
                sample_seconds(steps[k], chains, cores, 50)
            times: dict[tuple, list[float]] = {c: [] for c in CONFIGURATIONS}
            for _ in range(args.rounds):
                for chains, cores, k in CONFIGURATIONS:
                    seconds = sample_seconds(steps[k], chains, cores, args.draws)
                    times[chains, cores, k].append(seconds / (chains * args.draws) * 1e6)
        single = statistics.median(times[1, 1, 1])
        for (chains, cores, k), values in times.items():
            median = statistics.median(values)
            print(
                f"| {n_rows:,} × {n_cols}, batch {batch_size:,} | {chains} | {cores} | {k} | "
                f"{median:.0f} ({min(values):.0f}–{max(values):.0f}) | {median / single:.2f} |"
            )


if __name__ == "__main__":
    main()
