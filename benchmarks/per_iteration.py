"""Per-iteration cost of SGHMC: the fused trajectory against a Python loop and BlackJAX.

Problem: Bayesian logistic regression, N = 100,000 rows, D = 10 features, minibatches of
100 rows through ``pm.Minibatch``, L = 10 integrator steps per iteration, float64.

One run measures, side by side:

(a) ``step.step(point)`` of ``pmsg.SGHMC`` in a loop (the step method's own cost);
(b) the same step method inside ``pm.sample`` (per draw, compilation and set-up excluded);
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
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
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
        model=model,
        **kwargs,
    )
    step.trajectory_function  # noqa: B018 - compile now, outside every timed block
    step.setup_chain(np.random.default_rng(CHAIN_SEED), 0, 1)
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


def trajectory_inputs(step: pmsg.SGHMC, position, auxiliary=None, indices=None) -> list:
    """The inputs ``astep`` passes to the compiled trajectory, drawn the way it draws them.

    Uses the same private helpers as ``StochasticGradientStep.astep``, so the bare calls
    and the breakdown draw exactly what a chain draws (keep in step with ``astep``).
    """
    params = [np.asarray(step.schedule(0), dtype=position.dtype)]
    params += [np.asarray(v) for v in step._parameters().values()]
    noise = step._draw_noise()
    if auxiliary is None:
        auxiliary = step._refresh_auxiliary(step.auxiliary)
    if indices is None:
        indices = step._draw_indices()
    return [position, *auxiliary, *params, noise, *indices]


def bare_call_loop(step: pmsg.SGHMC, position: np.ndarray, calls_per_iteration: int):
    """Bare compiled calls in a loop, fresh noise and rows each call, no PyMC around them.

    Position and momentum carry over from call to call, as in one long trajectory.
    """
    fn = step.trajectory_function
    state = {"position": position, "auxiliary": step._fresh_auxiliary()}

    def run(n: int) -> None:
        q, auxiliary = state["position"], state["auxiliary"]
        for _ in range(n * calls_per_iteration):
            q, *auxiliary, _ = fn(*trajectory_inputs(step, q, auxiliary))
        state["position"], state["auxiliary"] = q, auxiliary

    return run


# -- (b) pm.sample ------------------------------------------------------------------------------


def sample_draws(model: pm.Model, step: pmsg.SGHMC, draws: int, seed: int, start: dict):
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
    pool = [step._draw_indices() for _ in range(512)]
    inputs = trajectory_inputs(step, q.data, indices=pool[0])
    head = inputs[: len(inputs) - len(pool[0])]  # everything but the row indices

    def cycling(f: Callable[[list], object]) -> Callable[[int], None]:
        def run(n: int) -> None:
            for k in range(n):
                f(pool[k % len(pool)])

        return run

    def draws() -> None:  # what astep draws before its call
        step._draw_indices()
        step._draw_noise()
        step._refresh_auxiliary(step.auxiliary)

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
    jit_fn = getattr(fn.vm, "jit_fn", None)  # PyTensor internals: the Numba function itself
    if jit_fn is not None:
        # Its inputs are the Function's inputs followed by the shared data arrays.
        raw = inputs + [storage[0] for storage in fn.vm.inputs[len(inputs) :]]
        # The number of steps is the number of noise rows: the same function runs one step.
        noise_at = len(head) - 1
        one = list(raw)
        one[noise_at] = raw[noise_at][:1]
        if step.minibatch == "step":
            one[len(head) : len(inputs)] = [i[:1] for i in pool[0]]
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
        reference = blackjax(mode) if kind in ("step", "sample") else None
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter blocks")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the breakdown")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory check")
    args = parser.parse_args()
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
        cases["sample", mode] = Case("ours: pm.sample, per draw", block)
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
