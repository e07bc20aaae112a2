"""Wall time of ``pm.sample(cores=2, mp_ctx="forkserver")`` with a step built just before.

The quickstart's problem (a 100,000 × 10 logistic regression, batch 1,000; ``--rows`` and
``--cols`` change it), 1,000 + 1,000 draws per chain. "forkserver" (and "spawn") pickle
the step method once (with ``cloudpickle``, as PyMC does) and send it to each worker
process, which imports the packages, unpickles the step with the model's data and links
the compiled trajectory the step carries, or compiles it where PyTensor will not rebuild
the rewritten graph; "fork" (``--mp-ctx fork``) copies the process instead. Printed: the
pickled step's size, when each chain's first draw arrived (from the start of
``pm.sample``), the wall times, and the peak resident memory of this process and of the
largest worker, and each worker's private memory (its unique set size, read while the
chains run: the data a worker maps from shared memory are not in it). Run it against
another revision with ``PYTHONPATH=<checkout of that revision>``; the first line printed
says which package ran.

    bash run.sh python benchmarks/worker_processes.py --sampler SGHMC --chains 2
    bash run.sh python benchmarks/worker_processes.py --rows 1000000 --cols 20
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import cloudpickle
import numpy as np
import psutil
import pymc as pm
import pymc.sampling.parallel

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
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--cols", type=int, default=10)
    parser.add_argument("--mp-ctx", default="forkserver", choices=["fork", "forkserver", "spawn"])
    args = parser.parse_args()
    print("package:", pmsg.__file__, flush=True)
    model = logistic_model(args.rows, args.cols)
    start = time.perf_counter()
    first_draws: dict[int, float] = {}

    private: dict[int, float] = {}
    sent: list[int] = []

    def on_draw(trace, draw) -> None:
        first_draws.setdefault(draw.chain, time.perf_counter())
        if draw.chain == 0 and draw.draw_idx == 500:  # both chains running, data read
            for process in psutil.Process().children(recursive=True):
                try:
                    private[process.pid] = process.memory_full_info().uss / 2**20
                except psutil.Error:
                    pass

    def recording_dumps(obj, *args, **kwargs):  # what PyMC sends each worker
        pickled = dumps(obj, *args, **kwargs)
        sent.append(len(pickled))
        return pickled

    dumps = cloudpickle.dumps

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = getattr(pmsg, args.sampler)(mode_kwargs={"progressbar": False})
        built = time.perf_counter() - start
        sampling = time.perf_counter()
        pymc.sampling.parallel.cloudpickle.dumps = recording_dumps
        pm.sample(
            draws=1000, tune=1000, chains=args.chains, cores=2, mp_ctx=args.mp_ctx,
            step=step, random_seed=1, progressbar=False, compute_convergence_checks=False,
            callback=on_draw,
        )  # fmt: skip
    pymc.sampling.parallel.cloudpickle.dumps = dumps
    total = time.perf_counter() - start
    pickled = sent[0] if sent else 0  # nothing pickled with "fork"
    workers = sorted(private.values(), reverse=True)[: args.chains]  # the forkserver's less
    firsts = ", ".join(f"{first_draws[c] - sampling:.1f}" for c in sorted(first_draws))
    # ru_maxrss is in kB on Linux; the children's is the largest worker's.
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"{args.sampler}, {args.chains} chains, {args.rows:,} × {args.cols}, {args.mp_ctx}: "
        f"step built in {built:.1f} s, pickled {pickled / 1e6:.1f} MB, first draws at "
        f"{firsts} s, sampling {total - built:.1f} s, {total:.1f} s all; peak memory "
        f"{parent:.0f} MB here, {worker:.0f} MB in the largest worker; private memory of "
        f"the workers {', '.join(f'{m:.0f}' for m in workers)} MB"
    )


if __name__ == "__main__":  # worker processes import this module
    main()
