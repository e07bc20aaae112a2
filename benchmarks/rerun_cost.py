"""What a script run again pays before its draws: with and without the rewritten-graph store.

PyTensor keeps the machine code it compiles on disk, so a script run a second time does
not compile again, but until the package kept its rewritten graphs on disk too
(``pymc_sgmcmc.core.compilation.RewrittenGraphStore``) it rewrote every graph again, in
every new process. This benchmark runs each (model, sampler) in fresh processes, one
after another in the same run:

1. a first run that fills PyTensor's, Numba's and the package's caches (not reported);
2. ``--repeats`` runs with the store switched off (``PYMC_SGMCMC_NO_GRAPH_STORE=1``):
   what a second run cost before;
3. ``--repeats`` runs with the store on: what a second run costs now.

Each run prints *build s* (``SAMPLER()`` with default arguments, its mode search
included), *to first draw s* (the step built and ``pm.sample`` of one draw: every compile
paid) and *total s* (``pm.sample`` of ``--draws`` draws after as many tuning draws, one
chain, the step's build included). The medians are reported, with their ratio.

Models: ``logistic`` (the quickstart's 100,000 × 10 minibatched logistic regression),
``mixture`` (a minibatched two-component normal mixture of 2,000 rows, whose gradient
holds an operation with an inner graph) and ``funnel`` (``v ~ N(0, 1)``,
``x ~ N(0, e^v)``, for the Riemannian samplers' nested loops).

    bash run.sh python benchmarks/rerun_cost.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = "logistic:SGHMC,logistic:SGNHTEM,mixture:SGHMC,funnel:SGRNPHMC"


def build_model(name: str):
    """The named model (see the module docstring)."""
    import numpy as np
    import pymc as pm

    rng = np.random.default_rng(0)
    if name == "logistic":
        x = rng.normal(size=(100_000, 10))
        w = rng.normal(scale=0.5, size=10)
        y = (rng.random(100_000) < 1 / (1 + np.exp(-x @ w))).astype(float)
        with pm.Model() as model:
            xb, yb = pm.Minibatch(x, y, batch_size=1_000)
            coefficients = pm.Normal("w", 0.0, 10.0, shape=10)
            pm.Bernoulli("y", logit_p=xb @ coefficients, observed=yb, total_size=len(y))
        return model
    if name == "mixture":
        rows = rng.normal(np.repeat([-2.0, 2.0], 1_000), 1.0)
        with pm.Model() as model:
            weights = pm.Dirichlet("weights", np.ones(2))
            means = pm.Normal("means", [-1.0, 1.0], 5.0, shape=2)
            batch = pm.Minibatch(rows, batch_size=200)
            pm.NormalMixture(
                "y", w=weights, mu=means, sigma=1.0, observed=batch, total_size=len(rows)
            )
        return model
    with pm.Model() as model:
        v = pm.Normal("v", 0.0, 1.0)
        pm.Normal("x", 0.0, pm.math.exp(v / 2))
    return model


def measure(model_name: str, sampler: str, draws: int) -> dict:
    """One run, in this process."""
    import warnings

    import pymc as pm

    import pymc_sgmcmc as pmsg

    warnings.simplefilter("ignore")
    model = build_model(model_name)
    options = {"chains": 1, "cores": 1, "progressbar": False, "random_seed": 1}
    options["compute_convergence_checks"] = False
    with model:
        start = time.perf_counter()
        step = getattr(pmsg, sampler)(mode_kwargs={"progressbar": False})
        built = time.perf_counter()
        pm.sample(step=step, draws=1, tune=0, **options)
        first = time.perf_counter()
        pm.sample(step=step, draws=draws, tune=draws, **options)
        sampled = time.perf_counter()
    return {
        "build": built - start,
        "first": first - start,
        "total": sampled - start,
    }


def run_child(case: str, draws: int, store: bool) -> dict:
    """``measure`` in a fresh process, the store on or off."""
    env = dict(os.environ)
    env.pop("PYMC_SGMCMC_NO_GRAPH_STORE", None)
    if not store:
        env["PYMC_SGMCMC_NO_GRAPH_STORE"] = "1"
    command = [sys.executable, __file__, "--one", case, "--draws", str(draws)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=CASES, help="model:sampler pairs, comma-separated")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # model:sampler, in a child process
    args = parser.parse_args()
    if args.one:
        model_name, sampler = args.one.split(":")
        print(json.dumps(measure(model_name, sampler, args.draws)))
        return
    import pymc_sgmcmc

    print(f"package: {pymc_sgmcmc.__file__}")
    print(f"medians of {args.repeats} runs each, after one run that fills the caches")
    print(
        "| model | sampler | build s (off → on) | to first draw s (off → on) "
        "| total s (off → on) | total ratio |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for case in args.cases.split(","):
        run_child(case, args.draws, store=True)
        off = [run_child(case, args.draws, store=False) for _ in range(args.repeats)]
        on = [run_child(case, args.draws, store=True) for _ in range(args.repeats)]
        cells = []
        for name in ("build", "first", "total"):
            before = statistics.median(r[name] for r in off)
            after = statistics.median(r[name] for r in on)
            cells.append(f"{before:.1f} → {after:.1f}")
        ratio = statistics.median(r["total"] for r in off) / statistics.median(
            r["total"] for r in on
        )
        model_name, sampler = case.split(":")
        print(f"| {model_name} | {sampler} | {' | '.join(cells)} | {ratio:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
