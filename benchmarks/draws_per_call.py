"""Per-draw cost inside ``pm.sample`` with one draw per compiled call against blocks of draws.

Two problems, each with ``pmsg.SGHMC()`` and its defaults (control variates, fresh rows at
every step) built twice, with ``draws_per_call=1`` (the default) and with
``draws_per_call=K``: a one-coordinate Gaussian mean on 200 rows in minibatches of 10
(the size of the test suite's models, where Python around the compiled call dominates),
and the quickstart's logistic regression, 100,000 × 10 rows in minibatches of 100.
Both steps are compiled and warmed up first; then ``pm.sample(tune=0, draws=10_000)``
runs alternate between them, and the table gives each one's median CPU µs per draw (the
run's CPU time over its draws, ``pm.sample``'s fixed cost of ~0.1 s included, i.e.
~10 µs per draw) and the ratio of the medians.

    bash run.sh python benchmarks/draws_per_call.py            # K = 20, 7 rounds, ~1 min
    bash run.sh python benchmarks/draws_per_call.py --k 5 --rounds 11
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import pymc as pm

import pymc_sgmcmc as pmsg

DRAWS = 10_000


def gaussian_mean(rng: np.random.Generator) -> pm.Model:
    """``mu ~ N(0, 10²)``, ``y_i ~ N(mu, 1)``, 200 rows seen 10 at a time."""
    y = rng.normal(1.0, 1.0, size=200)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("obs", mu, 1.0, observed=pm.Minibatch(y, batch_size=10), total_size=200)
    return model


def logistic_regression(rng: np.random.Generator) -> pm.Model:
    """The quickstart's problem: 100,000 × 10 standard normal features, batch 100."""
    X = rng.standard_normal((100_000, 10))
    w = rng.standard_normal(10) * 0.5
    y = (rng.uniform(size=100_000) < 1.0 / (1.0 + np.exp(-X @ w))).astype(float)
    with pm.Model() as model:
        X_batch, y_batch = pm.Minibatch(X, y, batch_size=100)
        beta = pm.Normal("beta", 0.0, 1.0, shape=10)
        pm.Bernoulli("y", logit_p=X_batch @ beta, observed=y_batch, total_size=100_000)
    return model


def per_draw(model: pm.Model, steps: dict, rounds: int) -> dict[int, list[float]]:
    """CPU µs per draw of each step, ``rounds`` alternating runs of ``DRAWS`` draws."""
    options = dict(
        tune=0, chains=1, progressbar=False, compute_convergence_checks=False,
        random_seed=1, return_inferencedata=False,
    )  # fmt: skip
    times: dict[int, list[float]] = {k: [] for k in steps}
    with model:
        for step in steps.values():
            pm.sample(draws=200, step=step, **options)  # compiled and warm
        for _ in range(rounds):
            for k, step in steps.items():
                start = time.process_time()
                pm.sample(draws=DRAWS, step=step, **options)
                times[k].append((time.process_time() - start) / DRAWS * 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=20, help="draws_per_call of the blocks")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # short chains' diagnostics; deprecations
    rng = np.random.default_rng(0)
    print(f"| problem | CPU µs per draw, K = 1 (min–max) | K = {args.k} (min–max) | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, make in (
        ("Gaussian mean, 200 rows, batch 10", gaussian_mean),
        ("logistic regression, 100,000 × 10, batch 100", logistic_regression),
    ):
        model = make(rng)
        with model:
            steps = {
                k: pmsg.SGHMC(draws_per_call=k, mode_kwargs={"progressbar": False})
                for k in (1, args.k)
            }
        times = per_draw(model, steps, args.rounds)
        cells = [f"{statistics.median(v):.0f} ({min(v):.0f}–{max(v):.0f})" for v in times.values()]
        ratio = statistics.median(times[args.k]) / statistics.median(times[1])
        print(f"| {name} | {cells[0]} | {cells[1]} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
