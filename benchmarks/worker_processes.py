"""Wall time of ``pm.sample(cores=2, mp_ctx="forkserver")`` with a step built just before.

The quickstart's problem (a 100,000 × 10 logistic regression, batch 1,000), 1,000 + 1,000
draws per chain. "forkserver" (and "spawn") pickle the step method into each worker
process, which then links the compiled trajectory the step carries, or compiles it where
PyTensor will not rebuild the rewritten graph. Run it against another revision with
``PYTHONPATH=<checkout of that revision>``; the first line printed says which package ran.

    bash run.sh python benchmarks/worker_processes.py --sampler SGHMC --chains 2
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

import pymc_sgmcmc as pmsg


def logistic_model(rows: int = 100_000, cols: int = 10, seed: int = 0) -> pm.Model:
    """Simulated rows, ``y ~ Bernoulli(logit⁻¹(X w))``, ``w ~ N(0, I)``, batch 1,000."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cols))
    y = (rng.random(rows) < 1 / (1 + np.exp(-x @ rng.normal(size=cols)))).astype(float)
    with pm.Model() as model:
        x_batch, y_batch = pm.Minibatch(x, y, batch_size=1000)
        w = pm.Normal("w", 0.0, 1.0, shape=cols)
        pm.Bernoulli("y", logit_p=x_batch @ w, observed=y_batch, total_size=rows)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sampler", default="SGHMC")
    parser.add_argument("--chains", type=int, default=2)
    args = parser.parse_args()
    print("package:", pmsg.__file__, flush=True)
    model = logistic_model()
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = getattr(pmsg, args.sampler)(mode_kwargs={"progressbar": False})
        built = time.perf_counter() - start
        pm.sample(
            draws=1000, tune=1000, chains=args.chains, cores=2, mp_ctx="forkserver",
            step=step, random_seed=1, progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    total = time.perf_counter() - start
    print(f"{args.sampler}, {args.chains} chains: step built in {built:.1f} s, {total:.1f} s all")


if __name__ == "__main__":  # worker processes import this module
    main()
