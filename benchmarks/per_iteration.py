"""Per-iteration cost of SGHMC: the fused trajectory against a Python loop and BlackJAX.

Problem: Bayesian logistic regression, N = 100,000 rows, D = 10 features, minibatches of
100 rows through ``pm.Minibatch``, L = 10 integrator steps per iteration, float64.

One run measures, side by side:

(a) ``step.step(point)`` of ``pmsg.SGHMC`` in a loop (the step method's own cost);
(b) the same step method inside ``pm.sample`` (per draw, compilation and set-up excluded),
    one draw per compiled call (the default) and in blocks of ``--draws-per-call`` draws
    per call (5 and 20 by default);
(c) a Python loop of single-step calls: ``SGHMC(n_steps=1)`` called 10 times per
    iteration, and 10 bare calls of its compiled function;
(d) BlackJAX's SGHMC with the whole chain in one ``jax.lax.scan`` under ``jax.jit``.

Each case is timed in blocks of many iterations, and the blocks of all cases are
interleaved (case 1, case 2, ..., case 1, case 2, ...) so that a busy phase of a shared
machine hits every case alike. Each block reads two clocks: the process's CPU time
(``time.process_time``, all threads; it does not count time the process waits for a
core, so it stays stable when other processes compete for the CPU) and wall time. The
tables report the median block. A breakdown of one ``step.step`` call follows, then the
memory check of ``benchmarks/memory.py`` (in fresh processes).

    bash run.sh bench              # the full run, a few minutes
    bash run.sh bench --quick      # fewer and shorter blocks
    bash run.sh bench --no-memory  # skip the memory check
    bash run.sh python benchmarks/per_iteration.py --draws-per-call 2,5,10,20

With ``--baseline DIR`` (a checkout of an older revision, e.g. ``git worktree add DIR
<commit>``) the script instead compares the package here with the one in DIR, in one
run: per draw of ``step.step(point)`` in a loop and of ``pm.sample`` (tune=0, one chain,
compilation and fixed cost excluded) for SGHMC (both minibatch modes), SGLD, SGNHT, HMC,
SGNHT-EM (default options; ``step.step`` while it learns its mass, ``pm.sample`` with the
mass frozen) on the problem above, and SGGMC on the sphere problem of
``geodesic_per_iteration.py``. Each revision runs in a process of its own (both are
called ``pymc_sgmcmc``) and uses only what both offer: the samplers' constructors,
``step.step`` and ``pm.sample``. The blocks of the two alternate (new, old, old, new,
...), with the same number of draws; the table gives each revision's median block, the
median over rounds of the ratio new/old within a round, and a distribution-free interval
for that median (the noise). About 3 minutes (a few more with cold compiler caches):

    bash run.sh bench --baseline /tmp/sgmcmc_before
    bash run.sh bench --baseline DIR --rounds 31 --block-seconds 0.3   # tighter
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor
from pymc.blocking import DictToArrayBijection

import pymc_sgmcmc as pmsg

N_ROWS = 100_000
N_FEATURES = 10
BATCH_SIZE = 100
N_STEPS = 10
# Small enough for a stable, divergence-free chain at N = 100,000 (the largest
# curvature of the log posterior is ~ N/4 per unit feature variance); not tuned for
# statistical efficiency. Friction C = 1 is BlackJAX's alpha, B̂ = 0 its beta.
STEP_SIZE = 1e-4
FRICTION = 1.0
DATA_SEED = 20240601
CHAIN_SEED = 7
MODES = ("step", "trajectory")


@dataclass
class Sizes:
    """How many iterations each timed block runs, and how many blocks per case."""

    repeats: int
    step_calls: int
    loop_iterations: int
    sample_short: int
    sample_long: int
    jax_iterations: int

    @classmethod
    def from_args(cls, quick: bool) -> Sizes:
        if quick:
            return cls(3, 1000, 100, 200, 1200, 2000)
        return cls(11, 3000, 300, 500, 6500, 5000)


# -- problem ------------------------------------------------------------------------------


def make_data(n_rows: int, n_features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal features and Bernoulli labels from a fixed true coefficient."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    true_beta = rng.standard_normal(n_features)
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-X @ true_beta))).astype(np.float64)
    return X, y


def logistic_model(X: np.ndarray, y: np.ndarray, batch_size: int) -> pm.Model:
    """``beta ~ N(0, 1)``, ``y ~ Bernoulli(logit = X beta)``, minibatched."""
    with pm.Model() as model:
        X_batch, y_batch = pm.Minibatch(X, y, batch_size=batch_size)
        beta = pm.Normal("beta", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=X_batch @ beta, observed=y_batch, total_size=X.shape[0])
    return model


def laplace_reference(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Full-data MAP and Laplace posterior sd: where every chain starts, and a sanity check."""
    beta = np.zeros(X.shape[1])
    for _ in range(25):  # Newton's method; the log posterior is strictly concave
        p = 1.0 / (1.0 + np.exp(-X @ beta))
        grad = X.T @ (y - p) - beta
        hess = -(X.T * (p * (1.0 - p))) @ X - np.eye(X.shape[1])
        beta = beta - np.linalg.solve(hess, grad)
    return beta, np.sqrt(np.diag(np.linalg.inv(-hess)))


def sghmc(model: pm.Model, n_steps: int, minibatch: str, **kwargs) -> pmsg.SGHMC:
    """The SGHMC step method of every case, compiled and set up for one chain."""
    step = pmsg.SGHMC(
        step_size=STEP_SIZE,
        n_steps=n_steps,
        friction=FRICTION,
        minibatch=minibatch,
        # BlackJAX's estimator: the plain minibatch gradient (the default with
        # pm.Minibatch data is control variates, two minibatch gradients per step).
        gradient="minibatch",
        model=model,
        **kwargs,
    )
    step.trajectory_function  # noqa: B018 - compile now, outside every timed block
    # A chain long enough for every loop below: blocks of draws never pass its end.
    step.setup_chain(np.random.default_rng(CHAIN_SEED), 0, 10**9)
    return step


# -- timing -------------------------------------------------------------------------------


def clocks() -> np.ndarray:
    """(wall, CPU) time in seconds."""
    return np.array([time.perf_counter(), time.process_time()])


@dataclass
class Case:
    """One timed configuration; ``block()`` returns (wall, CPU) µs per iteration."""

    label: str
    block: Callable[[], np.ndarray]
    samples: list[np.ndarray] = field(default_factory=list)

    def _column(self, k: int) -> list[float]:
        return [float(s[k]) for s in self.samples]

    @property
    def wall(self) -> float:
        return statistics.median(self._column(0)) if self.samples else float("nan")

    @property
    def cpu(self) -> float:
        return statistics.median(self._column(1)) if self.samples else float("nan")

    def cpu_spread(self) -> str:
        cpu = self._column(1)
        return f"{min(cpu):.1f}–{max(cpu):.1f}" if cpu else ""


def per_iteration(run: Callable[[int], object], n: int) -> Callable[[], np.ndarray]:
    """A block that calls ``run(n)`` and returns (wall, CPU) µs per iteration."""

    def block() -> np.ndarray:
        start = clocks()
        run(n)
        return (clocks() - start) / n * 1e6

    return block


def measure(cases: list[Case], repeats: int) -> None:
    """Warm every case up once, then time ``repeats`` interleaved rounds of blocks."""
    for case in cases:
        case.block()  # first calls: JIT compilation, lazy imports, caches
    for _ in range(repeats):
        for case in cases:
            case.samples.append(case.block())


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b > 0 and np.isfinite(a / b) else "n/a"


# -- (a) the step method, (c) the Python loop ------------------------------------------------


def step_loop(step: pmsg.SGHMC, point: dict, calls_per_iteration: int = 1):
    """``step.step`` in a loop, carrying the chain's point from call to call."""
    state = {"point": point}

    def run(n: int) -> None:
        p = state["point"]
        for _ in range(n * calls_per_iteration):
            p, _ = step.step(p)
        state["point"] = p

    return run


def bare_call_loop(step: pmsg.SGHMC, position: np.ndarray, calls_per_iteration: int):
    """Bare compiled calls in a loop, fresh noise and rows each call, no PyMC around them.

    Position and momentum carry over from call to call, as in one long trajectory. The
    inputs are those ``astep`` passes (``step.trajectory_inputs``, drawn the way it draws
    them), with the carried momentum in place of the chain's.
    """
    fn = step.trajectory_function
    out_position, out_momentum = fn.index["position"], fn.index["state.momentum"]
    fresh = step.kernel.init(position, step.rng.standard_normal(step.dim), step.params)
    state = {"position": position, "momentum": fresh.momentum}

    def run(n: int) -> None:
        q, momentum = state["position"], state["momentum"]
        for _ in range(n * calls_per_iteration):
            inputs = step.trajectory_inputs(q, STEP_SIZE)
            inputs["state.momentum"] = momentum
            outputs = fn(*[inputs[name] for name in fn.input_names])
            q, momentum = outputs[out_position], outputs[out_momentum]
        state["position"], state["momentum"] = q, momentum

    return run


# -- (b) pm.sample ------------------------------------------------------------------------------


def sample_draws(
    model: pm.Model, step: pmsg.SGHMC, draws: int, seed: int, start: dict | None, **kwargs
):
    """One chain of ``pm.sample``; the MultiTrace keeps the conversion out of the timing."""
    with warnings.catch_warnings():
        # return_inferencedata=False is deprecated in PyMC 6, and short chains warn
        # about diagnostics; neither matters for a timing.
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=draws,
            tune=0,
            chains=1,
            cores=1,
            step=step,
            model=model,
            random_seed=seed,
            initvals=start,
            progressbar=False,
            quiet=True,
            compute_convergence_checks=False,
            return_inferencedata=False,
            **kwargs,
        )


def pm_sample_block(
    model: pm.Model, step: pmsg.SGHMC, start: dict, short: int, long: int, keep: dict
) -> Callable[[], np.ndarray]:
    """Per-draw time inside ``pm.sample``: a long and a short run, their difference.

    pm.sample's fixed cost (initial point, trace set-up, checks) cancels in the
    difference, which leaves the per-draw cost of PyMC's loop plus the step method.
    """
    seeds = iter(range(10_000))

    def block() -> np.ndarray:
        t0 = clocks()
        sample_draws(model, step, short, next(seeds), start)
        t1 = clocks()
        trace = sample_draws(model, step, long, next(seeds), start)
        t2 = clocks()
        per_draw = ((t2 - t1) - (t1 - t0)) / (long - short)
        keep.setdefault("fixed_ms", []).append(((t1 - t0)[1] - short * per_draw[1]) * 1e3)
        keep["draws"] = trace.get_values("beta")
        return per_draw * 1e6

    return block


# -- (d) BlackJAX -------------------------------------------------------------------------------


def blackjax_cases(X: np.ndarray, y: np.ndarray, start: np.ndarray, n_iterations: int, keep: dict):
    """BlackJAX SGHMC chains as (minibatch mode, Case) pairs, and a note on the versions."""
    try:
        import blackjax
        import jax
        import jax.numpy as jnp
        from blackjax.sgmcmc.diffusions import sghmc as sghmc_diffusion
        from blackjax.sgmcmc.gradients import grad_estimator
        from blackjax.util import generate_gaussian_noise
    except ImportError as err:
        return [], f"BlackJAX is not importable ({err}); its rows are skipped"

    jax.config.update("jax_enable_x64", True)
    n_rows = X.shape[0]
    data = (jnp.asarray(X), jnp.asarray(y))

    def logprior(beta):
        return jax.scipy.stats.norm.logpdf(beta).sum()

    def loglikelihood(beta, row):
        x, label = row
        logit = x @ beta
        return label * logit - jnp.logaddexp(0.0, logit)

    # BlackJAX's estimator: log prior + N · mean log likelihood over the minibatch, the
    # same scaling as PyMC's total_size.
    grad = grad_estimator(logprior, loglikelihood, n_rows)
    # BlackJAX: p ← (1 − αε) p + ε∇ + N(0, ε(2α − εβ)); ours with M = I:
    # r ← r − εC r + ε∇ + N(0, 2(C − B̂)ε). So α = C and β = 2B̂/ε = 0. Both update the
    # position with the old momentum and resample the momentum at each trajectory.
    kernel = blackjax.sghmc(grad, num_integration_steps=N_STEPS, alpha=FRICTION, beta=0.0)
    integrator = sghmc_diffusion(FRICTION, 0.0)

    def gather(key, shape):
        rows = jax.random.randint(key, shape, 0, n_rows)  # with replacement, as pm.Minibatch
        return tuple(d[rows] for d in data)

    def per_trajectory(position, key):
        # BlackJAX's own kernel: one minibatch for all L steps of the trajectory.
        key_rows, key_step = jax.random.split(key)
        position = kernel.step(key_step, position, gather(key_rows, (BATCH_SIZE,)), STEP_SIZE)
        return position, position

    def per_step(position, key):
        # BlackJAX's kernel takes one minibatch per call; this is its build_kernel with
        # the L minibatches (gathered at once, like ours) scanned alongside the keys.
        key_rows, key_momentum, key_steps = jax.random.split(key, 3)
        batches = gather(key_rows, (N_STEPS, BATCH_SIZE))
        momentum = generate_gaussian_noise(key_momentum, position)

        def body(state, inputs):
            key_t, *batch_t = inputs
            q, p = state
            return integrator(key_t, q, p, grad(q, tuple(batch_t)), STEP_SIZE), None

        keys = jax.random.split(key_steps, N_STEPS)
        (position, _), _ = jax.lax.scan(body, (position, momentum), (keys, *batches))
        return position, position

    cases = []
    for mode, one_iteration in (("step", per_step), ("trajectory", per_trajectory)):

        def chain(key, position, one_iteration=one_iteration):
            keys = jax.random.split(key, n_iterations)
            return jax.lax.scan(one_iteration, position, keys)[1]

        chain = jax.jit(chain)
        seeds = iter(range(10_000))

        def run(n, chain=chain, seeds=seeds, mode=mode):
            draws = chain(jax.random.key(next(seeds)), jnp.asarray(start))
            keep[mode] = np.asarray(jax.block_until_ready(draws))

        label = "BlackJAX sghmc, chain in one lax.scan"
        cases.append((mode, Case(label, per_iteration(run, n_iterations))))
    return cases, f"BlackJAX {blackjax.__version__}, JAX {jax.__version__}"


# -- breakdown ----------------------------------------------------------------------------------

STEP_CALL = "step.step (the whole call)"
ASTEP = "astep (what ArrayStepShared.step wraps)"
CALL_FRESH = "compiled call, fresh rows each call"
CALL_SAME = "compiled call, the same rows every call"
DRAWS = "NumPy draws: rows, noise, momentum"
GATHER_FRESH = "NumPy gather of those rows, fresh rows"
GATHER_SAME = "NumPy gather of those rows, same rows"
NUMBA_SAME = "Numba function alone, same rows"
NUMBA_ONE = "Numba function alone, 1 integrator step"


def repeat(f: Callable[[], object]) -> Callable[[int], None]:
    def run(n: int) -> None:
        for _ in range(n):
            f()

    return run


def breakdown(
    step: pmsg.SGHMC, X: np.ndarray, y: np.ndarray, start: np.ndarray, sizes: Sizes
) -> dict[str, Case]:
    """Time the parts of one ``step.step`` call separately, interleaved as above."""
    point = {"beta": start.copy()}
    q = DictToArrayBijection.map(point)
    fn = step.trajectory_function
    # Index sets drawn in advance and cycled through: fresh rows at every call (the
    # gather is as cache-cold as in a chain) without paying for the draw.
    pool = [step.draw_rows() for _ in range(512)]
    n_groups = len(pool[0])
    # The inputs astep passes, drawn the way it draws them; the rows come last.
    assert all(name.startswith("rows_") for name in fn.input_names[-n_groups:])
    named = step.trajectory_inputs(q.data, STEP_SIZE)
    head = [named[name] for name in fn.input_names[:-n_groups]]  # all but the rows
    inputs = head + pool[0]

    def cycling(f: Callable[[list], object]) -> Callable[[int], None]:
        def run(n: int) -> None:
            for k in range(n):
                f(pool[k % len(pool)])

        return run

    def draws() -> None:  # what astep draws before its call: rows, noise, momentum
        step.trajectory_inputs(q.data, STEP_SIZE)

    def gather(indices: list) -> None:
        X[indices[0]], y[indices[0]]

    parts = {
        STEP_CALL: step_loop(step, point),
        ASTEP: repeat(lambda: step.astep(q)),
        CALL_FRESH: cycling(lambda indices: fn(*head, *indices)),
        CALL_SAME: repeat(lambda: fn(*inputs)),
        DRAWS: repeat(draws),
        GATHER_FRESH: cycling(gather),
        GATHER_SAME: repeat(lambda: gather(pool[0])),
    }
    vm = fn.function.vm  # PyTensor internals: the Numba function itself
    jit_fn = getattr(vm, "jit_fn", None)
    if jit_fn is not None:
        # Its inputs are the Function's inputs followed by the shared data arrays.
        raw = inputs + [storage[0] for storage in vm.inputs[len(inputs) :]]
        # The number of steps is the number of noise rows: the same function runs one step.
        noise_at = fn.input_names.index("noise")
        one = list(raw)
        one[noise_at] = raw[noise_at][:1]
        if step.minibatch == "step":
            # Rows of shape (n_steps [+ rows for the start], B): keep those of one step.
            keep = len(pool[0][0]) - step.n_steps + 1
            one[len(head) : len(inputs)] = [i[:keep] for i in pool[0]]
        parts[NUMBA_SAME] = repeat(lambda: jit_fn(*raw))
        parts[NUMBA_ONE] = repeat(lambda: jit_fn(*one))
    cases = {
        label: Case(label, per_iteration(run, sizes.step_calls)) for label, run in parts.items()
    }
    measure(list(cases.values()), sizes.repeats)
    return cases


def print_breakdown(mode: str, cases: dict[str, Case]) -> None:
    rows = [(c.label, f"{c.cpu:.1f}", c.cpu_spread(), f"{c.wall:.1f}") for c in cases.values()]
    print_table(
        f"Where one step.step goes, minibatch per {mode}: µs per call, median of blocks",
        rows,
        ("part", "CPU µs", "CPU min–max", "wall µs"),
    )
    t = {label: c.cpu for label, c in cases.items()}
    print(
        f"From CPU medians: ArrayStepShared.step around astep {t[STEP_CALL] - t[ASTEP]:.1f} µs; "
        f"astep's Python besides the call and the draws "
        f"{t[ASTEP] - t[CALL_FRESH] - t[DRAWS]:.1f} µs; cache-cold rows add "
        f"{t[CALL_FRESH] - t[CALL_SAME]:.1f} µs to the compiled call"
    )
    if NUMBA_SAME in t:
        per_step = (t[NUMBA_SAME] - t[NUMBA_ONE]) / (N_STEPS - 1)
        print(
            f"PyTensor Function wrapper {t[CALL_SAME] - t[NUMBA_SAME]:.1f} µs; Numba function "
            f"{t[NUMBA_ONE] - per_step:.1f} µs per call + {per_step:.1f} µs per integrator step"
        )


# -- report -------------------------------------------------------------------------------------


def environment() -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import numba

        numba_version = f", Numba {numba.__version__}"
    except ImportError:
        numba_version = ""
    return [
        f"CPU: {cpu}, {os.cpu_count()} logical cores; Python {platform.python_version()}",
        f"NumPy {np.__version__}, PyMC {pm.__version__}, PyTensor {pytensor.__version__} "
        f"(linker {pytensor.config.linker}){numba_version}, pymc_sgmcmc {pmsg.__version__}",
    ]


def print_table(title: str, rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header))]

    def fmt(row: tuple[str, ...]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [cell.ljust(w) if k == 0 else cell.rjust(w) for k, (cell, w) in pairs]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    print(f"\n{title}", rule, fmt(header), rule, *map(fmt, rows), rule, sep="\n")


def print_results(cases: dict[tuple[str, str], Case], sizes: Sizes) -> None:
    def blackjax(mode: str) -> Case | None:
        return cases.get(("blackjax", mode))

    rows = []
    for (kind, mode), case in cases.items():
        reference = blackjax(mode) if kind.startswith(("step", "sample")) else None
        versus = ratio(case.cpu, reference.cpu) if reference else ""
        rows.append(
            (
                case.label,
                f"per {mode}",
                f"{case.cpu:.1f}",
                case.cpu_spread(),
                f"{case.wall:.1f}",
                versus,
            )
        )
    print_table(
        f"SGHMC, logistic regression N={N_ROWS:,}, D={N_FEATURES}, batch {BATCH_SIZE}, "
        f"L={N_STEPS}, float64: µs per iteration ({N_STEPS} gradients), median of "
        f"{sizes.repeats} interleaved blocks, all from this run",
        rows,
        ("implementation", "minibatch", "CPU µs", "CPU min–max", "wall µs", "CPU /BlackJAX"),
    )


def print_ratios(cases: dict[tuple[str, str], Case], traces: dict) -> None:
    """The ratios the targets are about, from CPU-time and from wall-time medians."""

    def both(numerator: tuple[str, str], denominator: tuple[str, str]) -> tuple[str, str]:
        a, b = cases.get(numerator), cases.get(denominator)
        if a is None or b is None:
            return "n/a", "n/a"
        return ratio(a.cpu, b.cpu), ratio(a.wall, b.wall)

    rows = []
    for mode in MODES:
        for kind, name in (("step", "step.step"), ("sample", "pm.sample")):
            key, reference = (kind, mode), ("blackjax", mode)
            rows.append((f"ours ({name}) / BlackJAX", f"per {mode}", "≤ 3×", *both(key, reference)))
    for kind, name in (("loop", "step.step calls"), ("bare loop", "bare compiled calls")):
        key, reference = ("step", "step"), (kind, "step")
        rows.append((f"fused / Python loop of {name}", "per step", "< 1", *both(key, reference)))
    print_table(
        "Ratios of µs per iteration (medians)",
        rows,
        ("ratio", "minibatch", "target", "CPU", "wall"),
    )
    for mode in MODES:
        overhead = cases["sample", mode].cpu - cases["step", mode].cpu
        fixed = statistics.median(traces[mode]["fixed_ms"])
        print(
            f"PyMC's sampling loop, minibatch per {mode}: {overhead:.1f} µs CPU per draw on top "
            f"of step.step (pm.sample − step.step); pm.sample's fixed cost ≈ {fixed:.0f} ms CPU"
        )


def sanity(traces: dict, jax_draws: dict, centre: np.ndarray, sd: np.ndarray) -> str:
    """Where each chain sits relative to the full-data Laplace approximation.

    Not a test of accuracy: without a noise estimate (B̂ = 0) the minibatch gradient
    noise adds to the injected noise, so SGHMC chains run somewhat hot and need not
    match the posterior. The point is that ours and BlackJAX's agree, i.e. that they
    sample the same problem with the same dynamics.
    """
    parts = []
    for mode in MODES:
        for name, draws in (("ours", traces[mode].get("draws")), ("BlackJAX", jax_draws.get(mode))):
            if draws is not None:
                tail = draws[len(draws) // 2 :]
                offset = np.max(np.abs(tail.mean(axis=0) - centre) / sd)
                width = np.median(tail.std(axis=0) / sd)
                parts.append(f"{name} per {mode}: |mean − MAP| ≤ {offset:.1f}, sd {width:.1f}")
    return "; ".join(parts)


# -- side by side with an older revision (--baseline DIR) ---------------------------------

# Both revisions are called pymc_sgmcmc, so each runs in a worker process of its own (this
# script with --worker) whose PYTHONPATH starts at its tree. The workers set everything up
# and compile; then the parent has them time one block at a time, alternately (new, old,
# old, new, ...), so that a busy phase of the machine hits both revisions alike. The
# workers use only what both revisions offer: the samplers' constructors (with defaults
# wherever the two differ), step.step and pm.sample. They run with one BLAS thread.

WORKER_TAG = "@side-by-side "
REVISIONS = ("new", "old")
BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Quantity:
    """One side-by-side measurement: a sampler on a problem, timed one way.

    ``kind`` is ``"step"`` (``step.step(point)`` in a loop) or ``"sample"`` (per draw of
    ``pm.sample``, tune=0, one chain, its fixed cost excluded: see ``sample_block``).
    Quantities with the same ``share`` key time one step method; ``None``: a step method
    of its own (an EM sampler learns its mass in ``step.step``, and ``pm.sample`` would
    end that by resetting the chain).
    """

    label: str
    sampler: str
    problem: str
    kind: str
    kwargs: tuple[tuple[str, object], ...] = ()
    share: str | None = None


def side_by_side_quantities() -> list[Quantity]:
    """What ``--baseline`` compares (see the module docstring)."""
    sghmc = {"friction": FRICTION}
    rows = []
    for mode in MODES:
        kwargs = tuple((sghmc | {"minibatch": mode}).items())
        for kind in ("step", "sample"):
            rows.append(Quantity(f"SGHMC per {mode}", "SGHMC", "logistic", kind, kwargs, mode))
    for sampler in ("SGLD", "SGNHT", "HMC"):
        rows += [Quantity(sampler, sampler, "logistic", k, (), sampler) for k in ("step", "sample")]
    # An EM sampler with its default options: step.step on a step method in its tuning
    # phase (the mass is learned, M steps included), pm.sample with tune=0 (mass frozen).
    rows += [
        Quantity("SGNHT-EM, learning", "SGNHTEM", "logistic", "step"),
        Quantity("SGNHT-EM, mass frozen", "SGNHTEM", "logistic", "sample"),
    ]
    kwargs = tuple(sghmc.items())
    rows += [
        Quantity("SGGMC on S⁹", "SGGMC", "sphere", k, kwargs, "SGGMC") for k in ("step", "sample")
    ]
    return rows


def worker() -> None:
    """``--worker``: set up every quantity, then time the blocks the parent asks for."""
    import logging

    warnings.simplefilter("ignore")  # divergence and deprecation warnings alike
    logging.getLogger("pymc").setLevel(logging.ERROR)

    def send(message: dict) -> None:
        print(WORKER_TAG + json.dumps(message), flush=True)

    X, y = make_data(N_ROWS, N_FEATURES, DATA_SEED)
    centre, _ = laplace_reference(X, y)
    from geodesic_per_iteration import sphere_model  # this folder: sys.path[0]

    models = {"logistic": logistic_model(X, y, BATCH_SIZE), "sphere": sphere_model()}
    starts = {"logistic": {"beta": centre}, "sphere": models["sphere"].initial_point()}
    quantities = side_by_side_quantities()
    shared: dict[str, object] = {}
    blocks: list[Callable[[int], np.ndarray]] = []
    for k, q in enumerate(quantities):
        model, start = models[q.problem], starts[q.problem]
        step = shared.get(q.share) if q.share else None
        if step is None:
            step = getattr(pmsg, q.sampler)(
                step_size=STEP_SIZE,
                n_steps=N_STEPS,
                model=model,
                rng=np.random.default_rng(CHAIN_SEED + k),
                **dict(q.kwargs),
            )
            if q.share:
                shared[q.share] = step
        if q.kind == "step":
            run = step_loop(step, {name: np.copy(v) for name, v in start.items()})
            blocks.append(lambda n, run=run: per_iteration(run, n)())
        else:
            blocks.append(sample_block(model, step, start if q.problem == "logistic" else None))
        blocks[-1](20)  # compiles the trajectory (Numba JIT) and warms PyMC up
    send({"ready": True, "file": pmsg.__file__, "environment": environment()})
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("stop"):
            break
        send({"times": blocks[command["quantity"]](command["n"]).tolist()})


def sample_block(model: pm.Model, step, start: dict | None) -> Callable[[int], np.ndarray]:
    """(wall, CPU) µs per draw of ``pm.sample`` over ``n`` draws, its fixed cost excluded.

    The clocks are read at every draw by ``pm.sample``'s ``callback``: from the first draw
    to the last, ``n`` draws of PyMC's loop (``step.step``, the trace, the statistics).
    Unlike the difference of a long and a short run (``pm_sample_block``), no spike of
    the fixed cost (the initial point, the trace's set-up) can leak into the result.
    """
    seeds = iter(range(10**6))

    def block(n: int) -> np.ndarray:
        stamps = []
        sample_draws(
            model, step, n + 1, next(seeds), start, callback=lambda **_: stamps.append(clocks())
        )
        return (stamps[-1] - stamps[0]) / n * 1e6

    return block


class Worker:
    """A ``--worker`` process on one revision's tree."""

    def __init__(self, tree: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH", "")])])
        # One BLAS thread: after a large product (HMC's full-data test) idle BLAS threads
        # spin for a while, and their CPU time would land on whichever block comes next.
        env |= dict.fromkeys(BLAS_THREADS, "1")
        self.tree = tree.resolve()
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),  # no pymc_sgmcmc folder in the way
        )

    def receive(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(WORKER_TAG):
                return json.loads(line[len(WORKER_TAG) :])
        raise RuntimeError(f"the worker on {self.tree} stopped (exit {self.process.wait()})")

    def ready(self) -> list[str]:
        message = self.receive()
        package = Path(message["file"]).resolve()
        if self.tree not in package.parents:
            raise RuntimeError(f"the worker on {self.tree} imported {package} instead")
        return message["environment"]

    def time(self, quantity: int, n: int) -> np.ndarray:
        self.process.stdin.write(json.dumps({"quantity": quantity, "n": n}) + "\n")
        self.process.stdin.flush()
        return np.array(self.receive()["times"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write(json.dumps({"stop": True}) + "\n")
            self.process.stdin.close()
        self.process.wait()


def median_interval(values: list[float], coverage: float = 0.95) -> tuple[float, float, float]:
    """A distribution-free interval for the median (order statistics): (low, high, coverage).

    With ``n`` values, ``[x₍ₖ₎, x₍ₙ₋ₖ₊₁₎]`` covers the median with probability
    ``1 − 2 P(Bin(n, ½) < k)``; ``k`` is the largest that keeps this ≥ ``coverage``
    (at least 1: the range, whatever its coverage).
    """
    x, n = sorted(values), len(values)

    def below(k: int) -> float:  # P(Bin(n, ½) < k)
        return sum(math.comb(n, j) for j in range(k)) / 2**n

    k = 1
    while k < (n + 1) // 2 and below(k + 1) <= (1 - coverage) / 2:
        k += 1
    return x[k - 1], x[n - k], 1 - 2 * below(k)


def side_by_side(baseline: Path, rounds: int, block_seconds: float) -> None:
    """Time the current tree and ``baseline`` in alternating blocks; print new/old."""
    trees = {"new": Path(__file__).resolve().parents[1], "old": baseline.resolve()}
    quantities = side_by_side_quantities()
    print(f"Side by side: new = {trees['new']}, old = {trees['old']} (one BLAS thread each)")
    print(
        f"Setting up both revisions in worker processes ({len(quantities)} quantities: "
        "compilation, warm-up) ...",
        flush=True,
    )
    workers = {rev: Worker(tree) for rev, tree in trees.items()}
    try:
        for rev, w in workers.items():
            print(f"{rev}: " + "; ".join(w.ready()))
        # Block sizes: from a first timing of each quantity on both revisions, the same
        # number of draws for both, about block_seconds of draws per block.
        sizes = []
        for k in range(len(quantities)):
            per_draw = max(float(w.time(k, 50)[1]) for w in workers.values())
            sizes.append(int(min(max(block_seconds * 1e6 / max(per_draw, 1.0), 10), 20_000)))
        print(
            f"Load average (1 min) before timing: {os.getloadavg()[0]:.2f}. Timing "
            f"{rounds} rounds of {len(quantities)} × 2 blocks (~{block_seconds:g} s of "
            "draws each) ...",
            flush=True,
        )
        times: dict[str, list[list[np.ndarray]]] = {
            rev: [[] for _ in quantities] for rev in REVISIONS
        }
        for r in range(rounds):
            for k, n in enumerate(sizes):
                for rev in REVISIONS if (r + k) % 2 == 0 else REVISIONS[::-1]:
                    times[rev][k].append(workers[rev].time(k, n))
    finally:
        for w in workers.values():
            w.stop()
    print_side_by_side(quantities, sizes, times, rounds)
    print(f"Load average (1 min) after timing: {os.getloadavg()[0]:.2f}")


def print_side_by_side(
    quantities: list[Quantity], sizes: list[int], times: dict, rounds: int
) -> None:
    coverage = median_interval([0.0] * rounds)[2]
    rows, slower = [], []
    for k, (q, n) in enumerate(zip(quantities, sizes, strict=True)):
        new, old = (np.array(times[rev][k]) for rev in REVISIONS)  # (round, [wall, CPU])
        cpu_ratios = list(new[:, 1] / old[:, 1])
        low, high, _ = median_interval(cpu_ratios)
        median = statistics.median(cpu_ratios)
        label = f"{q.label}: " + ("step.step" if q.kind == "step" else "pm.sample, per draw")
        if low > 1:
            verdict = "SLOWER"
            slower.append(label)
        elif high < 1:
            verdict = "faster"
        else:
            verdict = "same (within noise)"
        rows.append(
            (
                label,
                f"{n:,}",
                f"{np.median(new[:, 1]):.1f}",
                f"{np.median(old[:, 1]):.1f}",
                f"{median:.3f}",
                f"{low:.3f}–{high:.3f}",
                f"{min(cpu_ratios):.2f}–{max(cpu_ratios):.2f}",
                f"{statistics.median(new[:, 0] / old[:, 0]):.3f}",
                verdict,
            )
        )
    print_table(
        f"New / old revision, µs per draw (CPU time), logistic regression N={N_ROWS:,}, "
        f"D={N_FEATURES} (SGGMC: vMF on S⁹, N={N_ROWS:,}), batch {BATCH_SIZE}, L={N_STEPS}: "
        f"medians of {rounds} rounds of alternating blocks, one run; ratio = median over "
        f"rounds of new/old in the same round, with a {100 * coverage:.0f} % interval",
        rows,
        (
            "quantity",
            "draws/block",
            "new µs",
            "old µs",
            "new/old",
            "interval",
            "min–max",
            "wall new/old",
            "verdict",
        ),
    )
    print(
        "Interval: distribution-free interval for the median of the per-round CPU ratios "
        "(order statistics); SLOWER / faster: the whole interval above / below 1. Over "
        f"{len(quantities)} quantities an interval misses now and then by chance: a lone "
        "verdict near 1 wants a second run (or more --rounds) before it counts."
    )
    if slower:
        print("Slower beyond noise: " + "; ".join(slower))
    else:
        print("No quantity is slower beyond noise.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter blocks")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the breakdown")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory check")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="instead, compare with the package in DIR (a checkout of an older revision)",
    )
    parser.add_argument("--rounds", type=int, help="--baseline: rounds of blocks (21)")
    parser.add_argument(
        "--block-seconds", type=float, help="--baseline: draws per block, in seconds (0.25)"
    )
    parser.add_argument(
        "--draws-per-call",
        default="5,20",
        help="pm.sample per draw also with these block lengths (comma-separated; the "
        "default, 1, is always timed)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    if args.baseline is not None:
        rounds = args.rounds or (5 if args.quick else 21)
        block_seconds = args.block_seconds or (0.05 if args.quick else 0.25)
        side_by_side(args.baseline, rounds, block_seconds)
        return
    sizes = Sizes.from_args(args.quick)

    print(*environment(), sep="\n")
    X, y = make_data(N_ROWS, N_FEATURES, DATA_SEED)
    model = logistic_model(X, y, BATCH_SIZE)
    # Every chain starts at the full-data MAP: no burn-in, so the sanity check below
    # compares stationary chains.
    centre, sd = laplace_reference(X, y)
    point = {"beta": centre.copy()}

    # Everything is compiled here, before any timing.
    steps = {mode: sghmc(model, N_STEPS, mode) for mode in MODES}
    # The loop baseline: one step per call, momentum carried over between calls, so that
    # its 10 calls follow the dynamics of one fused 10-step trajectory.
    single = sghmc(model, 1, "step", resample_momentum=False)

    traces: dict[str, dict] = {mode: {} for mode in MODES}
    cases: dict[tuple[str, str], Case] = {}
    for mode in MODES:
        label = f"ours: step.step, fused {N_STEPS}-step trajectory"
        cases["step", mode] = Case(
            label, per_iteration(step_loop(steps[mode], point), sizes.step_calls)
        )
    for mode in MODES:
        block = pm_sample_block(
            model, steps[mode], point, sizes.sample_short, sizes.sample_long, traces[mode]
        )
        cases["sample", mode] = Case("ours: pm.sample, per draw (draws_per_call=1, default)", block)
    for k in (int(k) for k in args.draws_per_call.split(",") if k):
        for mode in MODES:
            step = sghmc(model, N_STEPS, mode, draws_per_call=k)
            block = pm_sample_block(model, step, point, sizes.sample_short, sizes.sample_long, {})
            cases[f"sample K={k}", mode] = Case(
                f"ours: pm.sample, per draw, draws_per_call={k}", block
            )
    cases["loop", "step"] = Case(
        f"Python loop: {N_STEPS} × step.step, n_steps=1",
        per_iteration(step_loop(single, point, N_STEPS), sizes.loop_iterations),
    )
    cases["bare loop", "step"] = Case(
        f"Python loop: {N_STEPS} × bare compiled call, n_steps=1",
        per_iteration(bare_call_loop(single, centre.copy(), N_STEPS), sizes.loop_iterations),
    )
    jax_draws: dict[str, np.ndarray] = {}
    jax_cases, jax_note = blackjax_cases(X, y, centre, sizes.jax_iterations, jax_draws)
    for mode, case in jax_cases:
        cases["blackjax", mode] = case

    print(f"Load average (1 min) before timing: {os.getloadavg()[0]:.2f}")
    print(
        f"Timing {len(cases)} cases: one warm-up round (JIT compilation), then "
        f"{sizes.repeats} interleaved rounds ..."
    )
    measure(list(cases.values()), sizes.repeats)
    print_results(cases, sizes)
    print(f"{jax_note}. Load average (1 min) after timing: {os.getloadavg()[0]:.2f}")
    print_ratios(cases, traces)
    print(
        "Sanity, second half of the last timed chain, in Laplace posterior sds (max over "
        f"coordinates / median): {sanity(traces, jax_draws, centre, sd)}"
    )

    if not args.no_breakdown:
        for mode in MODES:
            print_breakdown(mode, breakdown(steps[mode], X, y, centre, sizes))

    if not args.no_memory:
        sys.stdout.flush()
        memory = Path(__file__).with_name("memory.py")
        flags = ["--quick"] if args.quick else []
        subprocess.run([sys.executable, str(memory), *flags], check=True)


if __name__ == "__main__":
    main()
