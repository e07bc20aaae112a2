"""Minibatch rows read as windows of a shuffled copy against random rows, side by side.

``pmsg.SGHMC()`` with its defaults (control variates, fresh rows at every step) on a
logistic regression (standard normal features, coefficients N(0, 0.5²), prior N(0, 1)),
built twice on the same model: once as a user gets it (minibatches read as windows of
consecutive rows of a shuffled copy, ``pymc_sgmcmc.sampling.row_windows``) and once with
the copy refused (``row_windows.MEMORY_SHARE = 0``, as on a machine without room for it:
rows drawn and gathered as ``pm.Minibatch`` does). For each:

* *set-up s*: building the step (mode search, Laplace curvature, the copy), the second
  time each is built (the first builds also compile, the one built first the most);
* *µs per draw*: ``pm.sample(tune=0, draws=--draws, chains=1)`` after a warm-up call, the
  median of ``--rounds`` alternating rounds, per draw (PyMC's loop included);
* accuracy and ESS of ``pm.sample(tune=1000, draws=2000, chains=2, cores=1)`` against the
  Laplace approximation at the full-data mode (Newton's method in NumPy on all rows; exact
  to O(1/N) here): *max |Δmean|/sd*, the *sd ratio* range, *min ESS* (bulk) and *ESS/s*
  (min ESS over the wall time of that call).

    bash run.sh python benchmarks/row_windows.py                      # ~6 min
    bash run.sh python benchmarks/row_windows.py --sizes 1000000x20x1000 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling import row_windows


def data(n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_rows, n_cols))
    w = rng.standard_normal(n_cols) * 0.5
    y = (rng.uniform(size=n_rows) < 1.0 / (1.0 + np.exp(-X @ w))).astype(float)
    return X, y


def laplace(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mode and sds of the posterior's Laplace approximation (Newton on all rows)."""
    w = np.zeros(X.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-X @ w))
        gradient = X.T @ (y - p) - w
        hessian = (X * (p * (1 - p))[:, None]).T @ X + np.eye(X.shape[1])
        step = np.linalg.solve(hessian, gradient)
        w += step
        if np.abs(step).max() < 1e-12:
            break
    p = 1.0 / (1.0 + np.exp(-X @ w))
    hessian = (X * (p * (1 - p))[:, None]).T @ X + np.eye(X.shape[1])
    return w, np.sqrt(np.diag(np.linalg.inv(hessian)))


def sample(step, draws: int, tune: int, chains: int):
    start = time.perf_counter()
    idata = pm.sample(
        draws=draws, tune=tune, chains=chains, cores=1, step=step, progressbar=False,
        compute_convergence_checks=False, random_seed=1,
    )  # fmt: skip
    return idata, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="100000x10x100,100000x10x1000,1000000x20x1000", help="NxDxB,..."
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=2000, help="draws of each timed round")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # short chains' diagnostics
    print(f"{os.cpu_count()} logical cores; {args.rounds} rounds of {args.draws} draws")
    print(
        "| data | batch | rows | set-up s | µs per draw (min–max) | vs random | "
        "max \\|Δmean\\|/sd | sd ratio | min ESS | ESS/s |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    share = row_windows.MEMORY_SHARE
    for size in args.sizes.split(","):
        n_rows, n_cols, batch_size = (int(s) for s in size.split("x"))
        X, y = data(n_rows, n_cols)
        mean, sd = laplace(X, y)
        with pm.Model() as model:
            X_batch, y_batch = pm.Minibatch(X, y, batch_size=batch_size)
            beta = pm.Normal("beta", 0.0, 1.0, shape=n_cols)
            pm.Bernoulli("y", logit_p=X_batch @ beta, observed=y_batch, total_size=n_rows)
        steps, setup = {}, {}
        for _ in range(2):
            for rows, memory_share in (("windows", share), ("random", 0.0)):
                row_windows.MEMORY_SHARE = memory_share
                started = time.perf_counter()
                with model:
                    steps[rows] = pmsg.SGHMC(mode_kwargs={"progressbar": False})
                setup[rows] = time.perf_counter() - started
                assert (steps[rows].row_orders[0] is not None) == (rows == "windows")
        row_windows.MEMORY_SHARE = share
        per_draw: dict[str, list[float]] = {rows: [] for rows in steps}
        with model:
            for step in steps.values():
                sample(step, 50, 0, 1)  # compiled, warm
            for _ in range(args.rounds):
                for rows, step in steps.items():
                    _, seconds = sample(step, args.draws, 0, 1)
                    per_draw[rows].append(seconds / args.draws * 1e6)
            for rows, step in steps.items():
                idata, seconds = sample(step, 2000, 1000, 2)
                draws = idata.posterior["beta"].values
                errors = np.abs(draws.mean((0, 1)) - mean) / sd
                ratios = draws.std((0, 1), ddof=1) / sd
                ess = float(np.min(az.ess(idata, var_names=["beta"])["beta"].values))
                median = statistics.median(per_draw[rows])
                baseline = statistics.median(per_draw["random"])
                print(
                    f"| {n_rows:,} × {n_cols} | {batch_size:,} | {rows} | {setup[rows]:.1f} | "
                    f"{median:,.0f} ({min(per_draw[rows]):,.0f}–{max(per_draw[rows]):,.0f}) | "
                    f"{median / baseline:.2f} | {errors.max():.3f} | "
                    f"{ratios.min():.3f}–{ratios.max():.3f} | {ess:,.0f} | {ess / seconds:,.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
