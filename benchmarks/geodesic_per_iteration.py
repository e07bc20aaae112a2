"""Per-iteration cost of the geodesic SGGMC against SGHMC, side by side in one run.

Problems of the same dimension and minibatch (D = 10, N = 100,000 rows, minibatches of
100 rows through ``pm.Minibatch``, L = 10 integrator steps per iteration, float64):

* sphere: ``mu ~ vMF(m0, 1)`` on S⁹ ⊂ R¹⁰, ``x_i ~ vMF(mu, 5)``, sampled by SGGMC;
* Euclidean: ``beta ~ N(0, I₁₀)``, ``y_i ~ N(beta, I₁₀)``, sampled by SGHMC, and by
  SGGMC too (no spheres: straight lines only, the geodesic machinery's fixed cost).

Both likelihoods are linear in the data, but their gradients do not cost the same:
the von Mises-Fisher density normalises its mean direction, so its gradient has more
terms than the normal one. What the target counts is the whole iteration; to show where
the difference comes from, the table of compiled trajectories has a fourth row, SGGMC
on the sphere model with its spheres treated as unconstrained coordinates (the same
gradients, no geodesic flow, projection or re-normalisation). Its distance from SGHMC is
the model's share, its distance from the sphere row the geodesic update's.

Each case is timed in blocks of many ``step.step`` calls; the blocks of all cases are
interleaved (case 1, case 2, ..., case 1, ...) so that a busy phase of a shared machine
hits every case alike. Each block reads the process's CPU time (``time.process_time``,
which does not count time spent waiting for a core) and wall time; the table reports the
median block and the ratio to SGHMC. Target: SGGMC within 1.5× of SGHMC. A second table
times the compiled trajectory alone (one call on fixed inputs), which separates the
update rule's compiled cost from the step method's per-iteration Python glue.

    python benchmarks/geodesic_per_iteration.py           # a minute or two
    python benchmarks/geodesic_per_iteration.py --quick   # fewer and shorter blocks
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor
from pymc.logprob.transforms import Transform

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.distributions import sample_vmf, sphere_transform

N_ROWS, DIM, BATCH_SIZE, N_STEPS = 100_000, 10, 100, 10
STEP_SIZE, FRICTION = 1e-4, 1.0
DATA_SEED, CHAIN_SEED = 20160101, 7
TARGET = 1.5


class StraightLines(Transform):
    """The sphere transform under a type of its own, which geodesic samplers do not know.

    The same value variable and log density (hence the same gradients) as with the sphere
    transform, but a sampler takes its coordinates for unconstrained ones.
    """

    name = "sphere_on_straight_lines"
    ndim_supp = sphere_transform.ndim_supp

    def forward(self, value, *inputs):
        return sphere_transform.forward(value, *inputs)

    def backward(self, value, *inputs):
        return sphere_transform.backward(value, *inputs)

    def log_jac_det(self, value, *inputs):
        return sphere_transform.log_jac_det(value, *inputs)


def sphere_model(straight_lines: bool = False) -> pm.Model:
    """``mu`` on S⁹; with ``straight_lines``, the same model with ``mu``'s spheres taken for
    unconstrained coordinates (see :class:`StraightLines`)."""
    rng = np.random.default_rng(DATA_SEED)
    truth = np.eye(DIM)[-1]
    data = sample_vmf(rng, truth, 5.0, size=N_ROWS)
    transform = {"default_transform": StraightLines()} if straight_lines else {}
    with pm.Model() as model:
        batch = pm.Minibatch(data, batch_size=BATCH_SIZE)
        mu = pmsg.VonMisesFisher("mu", mu=np.ones(DIM) / np.sqrt(DIM), kappa=1.0, **transform)
        pmsg.VonMisesFisher("x", mu=mu, kappa=5.0, observed=batch, total_size=N_ROWS)
    return model


def euclidean_model() -> pm.Model:
    rng = np.random.default_rng(DATA_SEED)
    data = rng.normal(0.5, 1.0, size=(N_ROWS, DIM))
    with pm.Model() as model:
        batch = pm.Minibatch(data, batch_size=BATCH_SIZE)
        beta = pm.Normal("beta", 0.0, 1.0, shape=DIM)
        pm.Normal("y", beta, 1.0, observed=batch, total_size=N_ROWS)
    return model


def prepared(step):
    step.trajectory_function  # noqa: B018 - compile now, outside every timed block
    step.setup_chain(np.random.default_rng(CHAIN_SEED), 0, 1)
    return step


@dataclass
class Case:
    label: str
    block: Callable[[], np.ndarray]
    samples: list[np.ndarray] = field(default_factory=list)

    def median(self, k: int) -> float:
        return statistics.median(float(s[k]) for s in self.samples)

    def spread(self) -> str:
        cpu = [float(s[1]) for s in self.samples]
        return f"{min(cpu):.1f}–{max(cpu):.1f}"


def step_block(step, model: pm.Model, calls: int) -> Callable[[], np.ndarray]:
    """``step.step(point)`` ``calls`` times; returns (wall, CPU) µs per iteration."""
    state = {"point": model.initial_point()}

    def block() -> np.ndarray:
        start = np.array([time.perf_counter(), time.process_time()])
        point = state["point"]
        for _ in range(calls):
            point, _ = step.step(point)
        state["point"] = point
        return (np.array([time.perf_counter(), time.process_time()]) - start) / calls * 1e6

    return block


def trajectory_block(step, model: pm.Model, calls: int) -> Callable[[], np.ndarray]:
    """The compiled trajectory alone, on inputs drawn once the way ``astep`` draws them.

    (SGGMC puts the point on its spheres and projects the velocity inside the compiled
    trajectory, so that its cost is part of this one.)
    """
    point = model.initial_point()
    position = np.concatenate([np.ravel(point[v.name]) for v in step.vars])
    inputs = step.trajectory_inputs(position, STEP_SIZE)
    fn = step.trajectory_function

    def block() -> np.ndarray:
        start = np.array([time.perf_counter(), time.process_time()])
        for _ in range(calls):
            fn(*inputs)
        return (np.array([time.perf_counter(), time.process_time()]) - start) / calls * 1e6

    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter blocks")
    args = parser.parse_args()
    repeats, calls = (5, 500) if args.quick else (15, 2000)

    sphere, euclid = sphere_model(), euclidean_model()
    lines = sphere_model(straight_lines=True)
    kwargs = dict(step_size=STEP_SIZE, n_steps=N_STEPS, friction=FRICTION)
    with sphere:
        sggmc = prepared(pmsg.SGGMC(**kwargs))
    with lines:
        sggmc_lines = prepared(pmsg.SGGMC(**kwargs))
    with euclid:
        sghmc = prepared(pmsg.SGHMC(**kwargs))
        sggmc_flat = prepared(pmsg.SGGMC(**kwargs))
    cases = [
        Case("SGHMC, Euclidean R¹⁰", step_block(sghmc, euclid, calls)),
        Case("SGGMC, sphere S⁹ ⊂ R¹⁰", step_block(sggmc, sphere, calls)),
        Case("SGGMC, Euclidean R¹⁰ (no spheres)", step_block(sggmc_flat, euclid, calls)),
    ]
    trajectories = [
        Case(case.label, trajectory_block(step, model, calls))
        for case, step, model in zip(
            cases, [sghmc, sggmc, sggmc_flat], [euclid, sphere, euclid], strict=True
        )
    ]
    trajectories.append(
        Case("SGGMC, S⁹ model on straight lines", trajectory_block(sggmc_lines, lines, calls))
    )
    for case in cases + trajectories:
        case.block()  # warm-up: first calls, caches
    for _ in range(repeats):
        for case in cases + trajectories:
            case.samples.append(case.block())

    print(
        f"Per-iteration cost, D = {DIM}, N = {N_ROWS:,}, batch {BATCH_SIZE}, L = {N_STEPS}, "
        f"median of {repeats} interleaved blocks of {calls} iterations"
    )
    print(
        f"Python {platform.python_version()}, PyMC {pm.__version__}, "
        f"PyTensor {pytensor.__version__} ({pytensor.config.linker} linker), "
        f"{platform.machine()}"
    )
    base = cases[0].median(1)
    header = f"{'case':38s} {'CPU µs/it':>10s} {'(range)':>14s} {'wall µs/it':>11s}"
    print(f"\n{header} {'vs SGHMC':>9s}")
    for case in cases:
        cpu = case.median(1)
        print(
            f"{case.label:38s} {cpu:10.1f} {case.spread():>14s} {case.median(0):11.1f} "
            f"{cpu / base:8.2f}×"
        )
    print("\nOf which the compiled trajectory alone (fixed inputs, no Python glue):")
    fn_base = trajectories[0].median(1)
    for case in trajectories:
        cpu = case.median(1)
        print(
            f"{case.label:38s} {cpu:10.1f} {case.spread():>14s} {case.median(0):11.1f} "
            f"{cpu / fn_base:8.2f}×"
        )
    ratio = cases[1].median(1) / base
    verdict = "within" if ratio <= TARGET else "OVER"
    print(f"\nSGGMC (sphere) / SGHMC (Euclidean): {ratio:.2f}× CPU, {verdict} the {TARGET}× target")


if __name__ == "__main__":
    main()
