"""What a step's set-up costs before its first draw, against the memory bandwidth.

A logistic regression of ``--rows`` × ``--cols`` float64 features (``--dtype float32``:
float32; batch 1,000, prior ``N(0, 10²)``), the problem of ``time_to_accuracy.py``. For
each of ``--repeats`` steps built afresh in one process (the first pays the compiles
unless PyTensor's on-disk cache holds them; the later ones show the set-up itself), it
prints:

- *set-up s*: building ``pmsg.SGHMC()`` (or ``--sampler``) with default arguments, the
  mode search and the Laplace curvature included, and *mode s* of it;
- *compile s*: compiling the trajectory (``step.trajectory_function``);
- *first draw s*: ``pm.sample`` of one draw, whose first call of the trajectory pays
  Numba's compilation unless the on-disk cache holds it;
- *passes*: the rows the set-up read (``step.rows_touched_by_setup``) in full-data passes;
- *GB/s*: those rows' bytes over the set-up time, beside NumPy's own speeds on the same
  array: a reduction (``X.sum()``, the memory bound) and the logistic gradient
  (``Xᵀ(y − σ(Xw))``, one full-data pass written by hand).

``--warm-rows N0`` first builds a step and draws once on a model of ``N0`` rows (and
``--warm-batch-size`` rows per minibatch, ``--batch-size`` by default), as a user's
earlier run on data of another size or another batch size would have filled the caches;
run it with empty caches (fresh ``PYTENSOR_FLAGS=base_compiledir=...`` and
``NUMBA_CACHE_DIR=...``) to see what a new data size or batch size costs. *compilations*
counts Numba's compilations from building the measured step to its first draw.

Run it against another revision with that checkout's own environment (an editable install
takes precedence over ``PYTHONPATH``); the first line says which package ran.

    bash run.sh python benchmarks/setup_cost.py --rows 1000000 --cols 20
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm
from numba.core import event

import pymc_sgmcmc as pmsg


class CompileCounter(event.Listener):
    """Counts Numba's compilations (a cache hit is not one)."""

    def __init__(self) -> None:
        self.count = 0

    def on_start(self, event: event.Event) -> None:  # noqa: D102
        self.count += 1

    def on_end(self, event: event.Event) -> None:  # noqa: D102
        pass


def logistic_data(rows: int, cols: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``X ~ N(0, 1)``, ``y ~ Bernoulli(σ(X w))`` with ``w ~ N(0, 0.5²)``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cols))
    y = (rng.random(rows) < 1 / (1 + np.exp(-x @ rng.normal(0.0, 0.5, size=cols)))).astype(float)
    return x, y


def seconds_per_call(function, repeats: int = 5) -> float:
    """The best of ``repeats`` timed calls, after one untimed call."""
    function()
    best = np.inf
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def logistic_model(x: np.ndarray, y: np.ndarray, batch_size: int = 1000) -> pm.Model:
    """``w ~ N(0, 10²)``, ``y ~ Bernoulli(σ(X w))``, seen ``batch_size`` rows at a time."""
    with pm.Model() as model:
        x_batch, y_batch = pm.Minibatch(x, y, batch_size=batch_size)
        weights = pm.Normal("w", 0.0, 10.0, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=x_batch @ weights, observed=y_batch, total_size=len(y))
    return model


def first_draw_seconds(step, model: pm.Model) -> float:
    """``pm.sample`` of one draw with ``step`` (its first trajectory call included)."""
    started = time.perf_counter()
    with model:
        pm.sample(
            draws=1, tune=0, chains=1, step=step, progressbar=False, random_seed=0,
            compute_convergence_checks=False,
        )  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=20)
    parser.add_argument("--sampler", default="SGHMC")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument(
        "--dtype", default="float64", choices=("float64", "float32"),
        help="the features' type in RAM; the labels and the parameters are float64",
    )  # fmt: skip
    parser.add_argument("--warm-rows", type=int, default=0)
    parser.add_argument("--warm-batch-size", type=int, default=0)
    args = parser.parse_args()
    warm_batch = args.warm_batch_size or args.batch_size
    print(f"package: {pmsg.__file__}")
    warnings.simplefilter("ignore", RuntimeWarning)
    if args.warm_rows:
        started = time.perf_counter()
        model = logistic_model(*logistic_data(args.warm_rows, args.cols), warm_batch)
        with model:
            step = getattr(pmsg, args.sampler)(mode_kwargs={"progressbar": False})
        first_draw_seconds(step, model)
        warm = time.perf_counter() - started
        print(f"a step and a draw at {args.warm_rows:,} rows, batch {warm_batch:,}: {warm:.1f} s")
    x, y = logistic_data(args.rows, args.cols)
    x = x.astype(args.dtype)
    data_bytes = x.nbytes + y.nbytes
    w = np.zeros(args.cols, dtype=args.dtype)

    def numpy_gradient() -> np.ndarray:
        return x.T @ (y - 1 / (1 + np.exp(-x @ w)))

    reduction = seconds_per_call(x.sum)
    gradient = seconds_per_call(numpy_gradient)
    print(
        f"data {data_bytes / 1e6:,.0f} MB; NumPy: X.sum() {reduction * 1e3:.1f} ms "
        f"({x.nbytes / reduction / 1e9:.1f} GB/s), logistic gradient {gradient * 1e3:.1f} ms "
        f"({data_bytes / gradient / 1e9:.1f} GB/s)"
    )
    print(
        "| step | set-up s | mode s | compile s | first draw s | compilations | passes | GB/s "
        "| set-up / NumPy gradient |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    model = logistic_model(x, y, args.batch_size)
    for k in range(args.repeats):
        compilations = CompileCounter()
        event.register("numba:compile", compilations)
        started = time.perf_counter()
        with model:
            step = getattr(pmsg, args.sampler)(mode_kwargs={"progressbar": False})
        setup = time.perf_counter() - started
        started = time.perf_counter()
        step.trajectory_function  # noqa: B018 - compiled here
        compile_s = time.perf_counter() - started
        first_draw = first_draw_seconds(step, model)
        event.unregister("numba:compile", compilations)
        passes = step.rows_touched_by_setup / args.rows
        rate = passes * data_bytes / setup / 1e9
        print(
            f"| {k + 1} | {setup:.2f} | {step.mode_seconds or 0:.2f} | {compile_s:.2f} | "
            f"{first_draw:.2f} | {compilations.count} | {passes:.1f} | {rate:.2f} | "
            f"{setup / gradient:.0f}× |"
        )


if __name__ == "__main__":
    main()
