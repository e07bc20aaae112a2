"""What RHMC's and SGR-NPHMC's trajectories cost to compile, and then per draw.

Each (model, sampler) runs in a fresh process with empty PyTensor and Numba caches (a
user's first run), and prints: *build s* (the step with default arguments, its mode
search included), *compile s* (``step.trajectory_function``: graph rewriting and
Numba), *ms/draw* (``pm.sample`` of ``--draws`` draws after 100 tuning, one chain, the
first call's compile excluded by a draw before the clock starts), and the size of the
trajectory's graph before and after rewriting (nodes, loops included). A run that has not
finished compiling after ``--timeout`` seconds is reported as such.

Models: ``funnel`` (``v ~ N(0, 1)``, ``x ~ N(0, e^v)``), ``ar1`` (``defaults.py``'s AR(1)
series of 1,000 points, three parameters) and ``logistic`` (1,000 × 5 logistic regression,
prior ``N(0, 1)``).

Run it against another revision with that revision's package first on ``PYTHONPATH``;
the first line says which package ran:

    bash run.sh python benchmarks/riemannian_compile.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def build_model(name: str):
    """The named model (see the module docstring)."""
    import numpy as np
    import pymc as pm

    if name == "funnel":
        with pm.Model() as model:
            v = pm.Normal("v", 0.0, 1.0)
            pm.Normal("x", 0.0, pm.math.exp(v / 2))
        return model
    if name == "ar1":
        sys.path.insert(0, os.path.dirname(__file__))
        from defaults import ar1

        return ar1().build(False)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 5))
    y = (rng.random(1000) < 1 / (1 + np.exp(-x @ np.linspace(-1, 1, 5)))).astype(float)
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0, shape=5)
        pm.Bernoulli("y", logit_p=x @ w, observed=y)
    return model


def graph_nodes(outputs) -> int:
    """Nodes of a graph, those of its loops' bodies included."""
    from pytensor.graph.traversal import toposort
    from pytensor.scan.op import Scan

    total, pending = 0, [list(outputs)]
    while pending:
        for node in toposort(pending.pop()):
            total += 1
            if isinstance(node.op, Scan):
                pending.append(node.op.inner_outputs)
    return total


def measure(model_name: str, sampler: str, draws: int) -> dict:
    """One row, in this process."""
    import warnings

    import pymc as pm

    import pymc_sgmcmc as pmsg
    import pymc_sgmcmc.sampling.trajectory as trajectory

    warnings.simplefilter("ignore")
    sizes = {}
    compile_trajectory = trajectory.compile_trajectory

    def counted(inputs, outputs, rows, compile_kwargs=None):
        sizes["before"] = graph_nodes(list(outputs.values()))
        compiled = compile_trajectory(inputs, outputs, rows, compile_kwargs)
        sizes["after"] = graph_nodes(compiled.function.maker.fgraph.outputs)
        return compiled

    trajectory.compile_trajectory = counted
    model = build_model(model_name)
    with model:
        start = time.perf_counter()
        step = getattr(pmsg, sampler)(mode_kwargs={"progressbar": False})
        built = time.perf_counter()
        step.trajectory_function  # noqa: B018
        compiled = time.perf_counter()
        options = {"chains": 1, "cores": 1, "progressbar": False, "random_seed": 1}
        options["compute_convergence_checks"] = False
        pm.sample(step=step, draws=1, tune=0, **options)
        clock = time.perf_counter()
        pm.sample(step=step, draws=draws, tune=100, **options)
        sampled = time.perf_counter()
    return {
        "build": built - start,
        "compile": compiled - built,
        "ms_per_draw": 1e3 * (sampled - clock) / (draws + 100),
        **sizes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="funnel,ar1,logistic")
    parser.add_argument("--samplers", default="RHMC,SGRNPHMC")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # model:sampler, in a child process
    args = parser.parse_args()
    if args.one:
        model_name, sampler = args.one.split(":")
        print(json.dumps(measure(model_name, sampler, args.draws)))
        return
    import pymc_sgmcmc

    print(f"package: {pymc_sgmcmc.__file__}")
    print("| model | sampler | build s | compile s | ms/draw | nodes before | nodes after |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model_name in args.models.split(","):
        for sampler in args.samplers.split(","):
            with tempfile.TemporaryDirectory() as caches:
                env = os.environ | {
                    "PYTENSOR_FLAGS": f"base_compiledir={caches}/pytensor",
                    "NUMBA_CACHE_DIR": f"{caches}/numba",
                }
                command = [sys.executable, __file__, "--one", f"{model_name}:{sampler}"]
                command += ["--draws", str(args.draws)]
                try:
                    done = subprocess.run(
                        command, env=env, capture_output=True, text=True, timeout=args.timeout
                    )
                except subprocess.TimeoutExpired:
                    print(f"| {model_name} | {sampler} | over {args.timeout:.0f} s | | | | |")
                    continue
            if done.returncode != 0:
                print(f"| {model_name} | {sampler} | failed: {done.stderr.strip()[-200:]} |")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"| {model_name} | {sampler} | {row['build']:.1f} | {row['compile']:.1f} | "
                f"{row['ms_per_draw']:.2f} | {row['before']:,} | {row['after']:,} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
