"""Time to accuracy: NUTS, ADVI and our stochastic-gradient samplers on one exact posterior.

Problems (float64 throughout, prior sds as written):

* ``--model logistic`` (default): Bayesian logistic regression, ``X ~ N(0, 1)`` of shape
  (N, D) from ``--rows N --cols D`` (default 100,000 × 10), true weights ``w ~ N(0, 0.5²)``,
  ``y ~ Bernoulli(sigmoid(X w))``; prior ``w ~ N(0, 10²)``.
* ``--model hierarchical``: varying-intercept logistic regression, ``--groups G`` groups of
  ``--rows-per-group R`` rows (default 10⁴ × 100), D = 5 shared slopes ``w ~ N(0, 10²)``,
  ``logit = a[group] + X w`` with ``a_g ~ N(mu, sigma)``, ``mu ~ N(0, 5²)``,
  ``sigma ~ HalfNormal(2)``, written NON-CENTRED in every sampler (``z_g ~ N(0, 1)``,
  ``a = mu + sigma z``), or CENTRED with ``--centered`` (``a_g ~ N(mu, sigma)``, better
  when every group has many rows). Accuracy is judged on ``mu, sigma, w`` and all G
  intercepts ``a``.

Reference posterior. Logistic: the mode by Newton's method on all rows and the Laplace
covariance (means = mode, sds = sqrt(diag(inv(-Hessian)))), accurate at these sizes;
``--confirm-laplace`` also runs NumPyro's NUTS directly in JAX (4 chains × 5,000 draws after
1,000 warm-up) and prints the worst ``|mean difference| / sd`` and the range of the sd ratio
between the two. Hierarchical: no closed form, so the reference is that long NumPyro NUTS
run itself (``--reference-chains/--reference-draws``, default 4 × 5,000): its Monte Carlo
standard error is ``sd / sqrt(ESS)``, printed in the header as ``max 1/sqrt(ESS)`` (about
0.01 sd for an ESS of 10⁴, a tenth of the 0.1 sd tolerance). It is cached in
``--cache DIR`` (default: a temporary directory, removed at the end) keyed by the problem
and its length, together with the data, so repeated runs reuse both.

Rows. Each configuration runs in a fresh process of this script (``--worker CONFIG``), so
that compilation is counted and peak memory is its own. The parent writes the data once to
.npy files; a worker imports its libraries, reads its resident set size (the baseline),
loads the data fully into memory (``np.load``), builds the model and samples:

1. ``nuts``: PyMC's NUTS, ``pm.sample(draws, tune, chains, nuts_sampler="pymc")`` on the
   full-data model (PyMC 6 picks nutpie when it is installed, so "pymc" is named);
2. ``nutpie``: ``pm.sample(..., nuts_sampler="nutpie")``;
3. ``numpyro-pymc``: ``pm.sample(..., nuts_sampler="numpyro")``; ``numpyro``: a hand-written
   NumPyro model, ``MCMC(NUTS(model), ..., num_chains=chains, chain_method="vectorized")``
   and its ``run`` (JAX arrays of the data as arguments, not constants);
4. ``advi``: ``pm.fit(--advi-iterations, method="advi")`` on ``pm.Minibatch(X, y,
   batch_size=1000)`` with ``total_size=N``, then ``approx.sample(chains × draws)``;
   judged on the final approximation only;
5. ``ours``: every sampler of ``--ours`` (default SGLD, SGHMC, SGNHT, SGHMCEM, SGNHTEM) with
   default arguments, ``cls(gradient=G)`` for every G of ``--gradients`` (default
   minibatch, control_variates), on the minibatched model, in ``pm.sample(draws, tune,
   chains, cores=1, step=step)`` (one core, so that their timing is comparable).

``pm.sample`` runs with ``progressbar=False, compute_convergence_checks=False`` and
``random_seed`` fixed per configuration (``--seed`` and the row's name).

Columns. *wall s*: in the worker, from model construction to the end of sampling
(compilation included). *setup s*: the part before the first draw, where it is known:
PyMC's step methods (NUTS, ours) the time of the first draw (a ``pm.sample`` callback);
nutpie the total less its ``sampling_time``; NumPyro the total less its sampler call plus
the JAX compilation inside it (``jax.monitoring`` events); ADVI the time of the first
iteration (a ``pm.fit`` callback). For ours the mode-finding time ``step.mode_seconds`` of
control variates is shown beside it where the package reports it. *time to acc. s*: the
first prefix of the kept draws (the first k draws of every chain, pooled; k = 50, 100, ...,
``--check-every``) at which every mean is within ``--mean-tol`` (0.1) reference sd of the
reference mean and every sd within ``--sd-tol`` (10 %) of the reference sd. Its time is
ESTIMATED as setup + (tune + k) / (tune + draws) × (wall − setup): every draw is assumed to
cost the same and the chains to advance together (true of parallel or vectorised chains;
with ``cores=1`` the chains of ours run one after the other, so this is the time the pooled
prefix would take with chains interleaved on the same core). ADVI: the wall time if the
final approximation is accurate. *|Δmean|/sd* and *sd ratio*: of all kept draws.
*min ESS*: the smallest bulk ESS (``az.ess``) over the parameters; *ESS/s* = min ESS / wall.
*rows touched*: data rows read by gradients: NUTS the sum of its tree sizes × N (where the
warm-up's tree sizes are not reported, warm-up × mean tree size of the draws, marked
"(warm-up est.)"); ours (tune + draws) × chains × n_steps × batch × (2 for control variates
or SVRG) + ``step.rows_touched_by_setup``; ADVI iterations × batch. *peak MB*: the largest
resident memory of the worker and its child processes (PSS summed when there are
children, sampled every 0.1 s; the worker's own peak from the kernel's high-water mark)
less the baseline; the data's size is printed beside it.

NUTS at large N. A NUTS row whose rough projected run time (one numpy gradient pass × a
guessed tree size × iterations × chains) exceeds a tenth of ``--nuts-budget-s`` (3,600)
first runs only ``--nuts-short`` (100) warm-up and 100 kept draws per chain (fewer when
even that would take half the budget). Its full cost is extrapolated: seconds per
leapfrog step of the short run × (its warm-up steps + the remaining warm-up and all draws
at the short run's mean tree size), plus its setup. If that fits the budget the full run
follows; otherwise the row shows the extrapolation, marked "~": ESS scaled with the number
of draws, time to accuracy from the prefix found in the short run (or "> ~T", the end of
the short run's draws after the full warm-up, when none was), accuracy columns and peak
memory of the short run.

Output: a Markdown table on stdout (and ``--out FILE.md``), raw results as JSON (``--json
FILE``). A worker that fails or passes ``--worker-timeout-s`` gives a row with its error.

    python benchmarks/time_to_accuracy.py --rows 100000 --cols 10 --confirm-laplace
    python benchmarks/time_to_accuracy.py --rows 1000000 --cols 20 --out t.md --json t.json
    python benchmarks/time_to_accuracy.py --model hierarchical --cache ~/.cache/tta
    python benchmarks/time_to_accuracy.py --rows 20000 --draws 300 --tune 300 \\
        --only nuts,ours --ours SGHMC --gradients minibatch     # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PRIOR_SD = 10.0
MU_SD, SIGMA_SCALE = 5.0, 2.0  # hierarchical hyperpriors
TRUE_W_SD, TRUE_MU, TRUE_SIGMA = 0.5, -0.5, 1.0
HIER_COLS = 5
CHUNK = 1 << 18  # rows per chunk when simulating and in Newton's method
OURS = ("SGLD", "SGHMC", "SGNHT", "SGHMCEM", "SGNHTEM")
GRADIENTS = ("minibatch", "control_variates", "svrg")
KINDS = ("nuts", "nutpie", "numpyro", "numpyro-pymc", "advi", "ours")
NUTS_KINDS = ("nuts", "nutpie", "numpyro", "numpyro-pymc")
FALLBACK_STEP_SIZE = 1e-4
# Guessed leapfrog steps per NUTS iteration, only to decide whether a run fits the budget.
TREE_GUESS = {"logistic": 7, "hierarchical": 31}
JAX_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


# -- data and reference -------------------------------------------------------------------


def simulate(args, directory: Path) -> dict:
    """Write X, y (and the group of every row) to .npy files, chunk by chunk."""
    from scipy.special import expit

    hier = args.model == "hierarchical"
    n, d = args.n_rows, args.n_cols
    key = f"{args.model}-{n}x{d}-G{args.groups if hier else 0}-seed{args.data_seed}"
    paths = {name: directory / f"data-{key}-{name}.npy" for name in ("X", "y", "g")}
    truth_path = directory / f"data-{key}-truth.npz"
    if not hier:
        paths["g"] = None
    if truth_path.exists():
        return {"paths": paths, "truth": dict(np.load(truth_path)), "key": key}
    rng = np.random.default_rng(args.data_seed)
    truth = {"w": rng.normal(scale=TRUE_W_SD, size=d)}
    if hier:
        truth["a"] = rng.normal(TRUE_MU, TRUE_SIGMA, size=args.groups)
    X = np.lib.format.open_memmap(paths["X"], mode="w+", dtype=np.float64, shape=(n, d))
    y = np.lib.format.open_memmap(paths["y"], mode="w+", dtype=np.float64, shape=(n,))
    g = None
    if hier:
        g = np.lib.format.open_memmap(paths["g"], mode="w+", dtype=np.int64, shape=(n,))
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        X[start:stop] = rng.normal(size=(stop - start, d))
        logit = X[start:stop] @ truth["w"]
        if hier:
            g[start:stop] = np.arange(start, stop) // args.rows_per_group
            logit += truth["a"][g[start:stop]]
        y[start:stop] = rng.uniform(size=stop - start) < expit(logit)
    for array in (X, y, g):
        if array is not None:
            array.flush()
    del X, y, g
    np.savez(truth_path, **truth)
    return {"paths": paths, "truth": truth, "key": key}


def laplace(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Newton's method on all rows (chunked): mode, Laplace sds, one gradient pass's seconds."""
    from scipy.special import expit

    n, d = X.shape
    w = np.zeros(d)

    def grad_hess(w):
        grad, hess = -w / PRIOR_SD**2, np.eye(d) / PRIOR_SD**2
        for start in range(0, n, CHUNK):
            Xc, yc = np.asarray(X[start : start + CHUNK]), y[start : start + CHUNK]
            p = expit(Xc @ w)
            grad = grad + Xc.T @ (yc - p)
            hess = hess + (Xc * (p * (1 - p))[:, None]).T @ Xc
        return grad, hess

    for _ in range(100):
        grad, hess = grad_hess(w)
        step = np.linalg.solve(hess, grad)
        w = w + step
        if np.max(np.abs(step)) < 1e-12:
            break
    _, hess = grad_hess(w)
    return w, np.sqrt(np.diag(np.linalg.inv(hess))), gradient_seconds(X, y, None)


def gradient_seconds(X, y, g) -> float:
    """Seconds of one full-data gradient pass in numpy (for the NUTS budget projection)."""
    from scipy.special import expit

    w = np.zeros(X.shape[1])
    start_time = time.perf_counter()
    for start in range(0, X.shape[0], CHUNK):
        Xc = np.asarray(X[start : start + CHUNK])
        logit = Xc @ w
        if g is not None:
            logit = logit + w[0] * np.asarray(g[start : start + CHUNK])
        _ = Xc.T @ (y[start : start + CHUNK] - expit(logit))
    return time.perf_counter() - start_time


def param_labels(model: str, n_cols: int, groups: int) -> list[str]:
    labels = [f"w[{j}]" for j in range(n_cols)]
    if model == "hierarchical":
        labels = ["mu", "sigma", *labels, *(f"a[{k}]" for k in range(groups))]
    return labels


def to_matrix(model: str, draws: dict) -> np.ndarray:
    """(chains, draws, P) array of the compared quantities, in ``param_labels`` order."""
    w = np.asarray(draws["w"], dtype=np.float64)
    if model == "logistic":
        return w
    mu = np.asarray(draws["mu"], dtype=np.float64)[..., None]
    sigma = np.asarray(draws["sigma"], dtype=np.float64)[..., None]
    if "a" in draws:
        a = np.asarray(draws["a"], dtype=np.float64)
    else:
        a = mu + sigma * np.asarray(draws["z"], dtype=np.float64)
    return np.concatenate([mu, sigma, w, a], axis=-1)


# -- accuracy -----------------------------------------------------------------------------


def accuracy(x: np.ndarray, ref_mean, ref_sd, mean_tol, sd_tol, every) -> dict:
    """First pooled prefix k (per chain) within tolerance, and the end state."""
    chains, n_draws, _ = x.shape
    s1 = np.zeros(x.shape[-1])
    s2 = np.zeros(x.shape[-1])
    first, done = None, 0
    checkpoints = list(range(every, n_draws + 1, every))
    if not checkpoints or checkpoints[-1] != n_draws:
        checkpoints.append(n_draws)
    end = {}
    for k in checkpoints:
        block = (x[:, done:k] - ref_mean) / ref_sd
        s1 += block.sum(axis=(0, 1))
        s2 += (block**2).sum(axis=(0, 1))
        done = k
        m = chains * k
        mean = s1 / m
        ratio = np.sqrt(np.maximum(s2 - m * mean**2, 0.0) / max(m - 1, 1))
        ok = np.all(np.abs(mean) <= mean_tol) and np.all(np.abs(ratio - 1) <= sd_tol)
        if ok and first is None and k % every == 0:
            first = k
        end = {"mean_err": np.abs(mean), "ratio": ratio, "ok": bool(ok)}
    worst = int(np.argmax(end["mean_err"]))
    return {
        "tta_k": first,
        "final_ok": end["ok"],
        "worst_mean_err": float(end["mean_err"][worst]),
        "worst_index": worst,
        "sd_ratio_min": float(end["ratio"].min()),
        "sd_ratio_max": float(end["ratio"].max()),
        "sd_ratio_argmin": int(end["ratio"].argmin()),
        "sd_ratio_argmax": int(end["ratio"].argmax()),
    }


def bulk_ess(x: np.ndarray) -> np.ndarray:
    import arviz as az

    if x.shape[0] * x.shape[1] < 8:
        return np.full(x.shape[-1], np.nan)
    return np.asarray(az.ess(x, method="bulk"), dtype=float)  # axes: chain, draw, param


# -- worker -------------------------------------------------------------------------------


class PeakMemory:
    """Peak resident memory of this process and its children above a baseline."""

    def __init__(self, interval: float = 0.1) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:  # reset the high-water mark
                f.write("5")
            self.reset = True
        except OSError:
            self.reset = False
        self.baseline = self._self_rss()
        self.tree_peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(interval,), daemon=True)
        self._thread.start()

    @staticmethod
    def _self_rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _watch(self, interval: float) -> None:
        try:
            import psutil
        except ImportError:
            return
        me = psutil.Process()
        while not self._stop.wait(interval):
            try:
                children = me.children(recursive=True)
                if not children:
                    continue
                total = me.memory_full_info().pss
                for child in children:
                    with contextlib.suppress(psutil.Error):
                        total += child.memory_full_info().pss
                self.tree_peak = max(self.tree_peak, total)
            except psutil.Error:
                pass

    def stop(self) -> int:
        import resource

        self._stop.set()
        self._thread.join()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.reset:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = int(line.split()[1]) * 1024
        return max(peak, self.tree_peak) - self.baseline


class JaxCompileClock:
    """Sums JAX's compilation events (tracing, lowering, XLA compile) with their end times."""

    def __init__(self) -> None:
        import jax.monitoring

        self.events: list[tuple[float, float]] = []

        def listener(event: str, duration_secs: float, **kwargs) -> None:
            if event in JAX_COMPILE_EVENTS:
                self.events.append((time.perf_counter(), duration_secs))

        jax.monitoring.register_event_duration_secs_listener(listener)

    def within(self, start: float, stop: float) -> float:
        """Seconds of compilation between two times (nested events counted once)."""
        spans = sorted((max(start, end - d), min(stop, end)) for end, d in self.events)
        total, reached = 0.0, start
        for lo, hi in spans:
            if hi > max(lo, reached):
                total += hi - max(lo, reached)
                reached = hi
        return total


def seed_of(label: str, seed: int) -> int:
    return (seed * 1_000_003 + zlib.crc32(label.encode())) % 2**31


def pymc_model(cfg, X, y, g, minibatch: bool):
    import pymc as pm

    n, d = X.shape
    with pm.Model() as model:
        if minibatch and g is None:
            Xd, yd = pm.Minibatch(X, y, batch_size=cfg["batch_size"])
        elif minibatch:
            Xd, gd, yd = pm.Minibatch(X, g, y, batch_size=cfg["batch_size"])
        else:
            Xd, gd, yd = X, g, y
        w = pm.Normal("w", 0.0, PRIOR_SD, shape=d)
        logit = Xd @ w
        if g is not None:
            mu = pm.Normal("mu", 0.0, MU_SD)
            sigma = pm.HalfNormal("sigma", SIGMA_SCALE)
            if cfg.get("centered"):
                a = pm.Normal("a", mu, sigma, shape=cfg["groups"])
            else:
                a = mu + sigma * pm.Normal("z", 0.0, 1.0, shape=cfg["groups"])
            logit = logit + a[gd]
        pm.Bernoulli("y", logit_p=logit, observed=yd, total_size=n if minibatch else None)
    return model


def posterior_arrays(idata, names, chains=None) -> dict:
    out = {}
    for name in names:
        values = np.asarray(idata.posterior[name].values)
        if chains is not None:  # ADVI: one "chain" of chains × draws
            values = values.reshape(chains, -1, *values.shape[2:])
        out[name] = values
    return out


class DrawClock:
    """``pm.sample`` callback: time of the first draw and tree sizes per chain and phase."""

    def __init__(self, chains: int) -> None:
        self.first = None
        self.steps = {"tune": np.zeros(chains), "draw": np.zeros(chains)}

    def __call__(self, trace, draw) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        for stats in draw.stats:
            if "tree_size" in stats:  # NUTS's raw name of the n_steps statistic
                self.steps["tune" if draw.tuning else "draw"][draw.chain] += stats["tree_size"]


def make_step(cls, gradient: str, notes: list[str]):
    """``cls(gradient=...)``; before the package has defaults, fall back loudly."""
    try:
        return cls(gradient=gradient)
    except TypeError as err:
        if "step_size" not in str(err):
            first = err
        else:
            first = None
    if first is None:
        try:
            step = cls(gradient=gradient, step_size=FALLBACK_STEP_SIZE)
            notes.append(f"!! step_size={FALLBACK_STEP_SIZE:g} passed: no default step size")
            return step
        except TypeError as err:
            first = err
    if gradient == "minibatch" and "gradient" in str(first):
        try:
            step = cls()
        except TypeError as err:
            if "step_size" not in str(err):
                raise
            step = cls(step_size=FALLBACK_STEP_SIZE)
            notes.append(f"!! step_size={FALLBACK_STEP_SIZE:g} passed: no default step size")
        notes.append("!! gradient= not accepted: plain minibatches without it")
        return step
    raise TypeError(f"{cls.__name__}(gradient={gradient!r}): {first}") from first


def run_pymc(cfg, X, y, g, names, t0) -> dict:
    """PyMC's NUTS, nutpie and NumPyro through pm.sample, ADVI, and ours."""
    import pymc as pm

    kind, chains = cfg["kind"], cfg["chains"]
    seed = seed_of(cfg["label"], cfg["seed"])
    common = dict(draws=cfg["draws"], tune=cfg["tune"], chains=chains, random_seed=seed)
    common.update(progressbar=False, compute_convergence_checks=False)
    out: dict = {"notes": [], "steps_exact": True}
    model = pymc_model(cfg, X, y, g, minibatch=kind in ("advi", "ours"))
    with model:
        if kind == "nuts":
            clock = DrawClock(chains)
            idata = pm.sample(nuts_sampler="pymc", callback=clock, **common)
            out["setup_s"] = clock.first - t0
            out["tune_steps"], out["draw_steps"] = clock.steps["tune"], clock.steps["draw"]
        elif kind in ("nutpie", "numpyro-pymc"):
            jax_clock = JaxCompileClock() if kind == "numpyro-pymc" else None
            window = []
            if kind == "numpyro-pymc":
                import pymc.sampling.jax as pmjax

                inner = pmjax._sample_numpyro_nuts

                def timed(*a, **k):
                    window.append(time.perf_counter())
                    try:
                        return inner(*a, **k)
                    finally:
                        window.append(time.perf_counter())

                pmjax._sample_numpyro_nuts = timed
            idata = pm.sample(nuts_sampler=kind.split("-")[0], **common)
            draw_steps = np.asarray(idata.sample_stats["n_steps"].values, dtype=float)
            out["draw_steps"] = draw_steps.sum(axis=1)
            if "warmup_sample_stats" in idata.children:
                out["tune_steps"] = idata.warmup_sample_stats["n_steps"].values.sum(axis=1)
            else:
                out["tune_steps"] = cfg["tune"] * draw_steps.mean(axis=1)
                out["steps_exact"] = False
            t_end = time.perf_counter()
            if len(window) == 2:
                sampling = window[1] - window[0] - jax_clock.within(*window)
                out["setup_s"] = t_end - t0 - sampling
            else:
                attrs = {**idata.attrs, **idata.posterior.attrs}
                if "sampling_time" in attrs:
                    out["setup_s"] = t_end - t0 - float(attrs["sampling_time"])
        elif kind == "advi":
            first = []

            def on_iteration(approx, losses, i):
                if not first:
                    first.append(time.perf_counter())

            approx = pm.fit(
                cfg["advi_iterations"],
                method="advi",
                random_seed=seed,
                progressbar=False,
                callbacks=[on_iteration],
            )
            idata = approx.sample(draws=chains * cfg["draws"], random_seed=seed)
            out["setup_s"] = first[0] - t0 if first else None
            out["rows_touched"] = cfg["advi_iterations"] * cfg["batch_size"]
        else:  # ours
            import pymc_sgmcmc as pmsg

            cls = getattr(pmsg, cfg["sampler"])
            step = make_step(cls, cfg["gradient"], out["notes"])
            clock = DrawClock(chains)
            idata = pm.sample(step=step, cores=1, callback=clock, **common)
            out["setup_s"] = clock.first - t0
            mode_s = getattr(step, "mode_seconds", None)
            setup_rows = getattr(step, "rows_touched_by_setup", None)
            out["mode_s"] = None if mode_s is None else float(mode_s)
            out["setup_rows"] = None if setup_rows is None else int(setup_rows)
            n_steps = int(getattr(step, "n_steps", 10))
            factor = 2 if cfg["gradient"] in ("control_variates", "svrg") else 1
            iterations = (cfg["tune"] + cfg["draws"]) * chains
            out["rows_touched"] = iterations * n_steps * cfg["batch_size"] * factor + int(
                setup_rows or 0
            )
            out["step_size"] = _describe(getattr(step, "step_size_adapter", None))
    out["draws"] = posterior_arrays(idata, names, chains if kind == "advi" else None)
    return out


def _describe(adapter) -> str | None:
    if adapter is None:
        return None
    for name in ("step_size", "value", "schedule"):
        if hasattr(adapter, name):
            with contextlib.suppress(Exception):
                return repr(getattr(adapter, name))
    return None


def numpyro_model_fn(hier: bool, groups: int, centered: bool = False):
    import numpyro
    import numpyro.distributions as dist

    def model(X, y, g=None):
        w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([X.shape[1]]).to_event(1))
        logit = X @ w
        if hier:
            mu = numpyro.sample("mu", dist.Normal(0.0, MU_SD))
            sigma = numpyro.sample("sigma", dist.HalfNormal(SIGMA_SCALE))
            if centered:
                a = numpyro.sample("a", dist.Normal(mu, sigma).expand([groups]).to_event(1))
            else:
                z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([groups]).to_event(1))
                a = mu + sigma * z
            logit = logit + a[g]
        numpyro.sample("y", dist.Bernoulli(logits=logit), obs=y)

    return model


def run_numpyro(cfg, X, y, g, names, t0) -> dict:
    """NumPyro's NUTS directly, chains vectorised; warm-up tree sizes estimated."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS

    jax_clock = JaxCompileClock()
    model = numpyro_model_fn(g is not None, cfg.get("groups", 0), cfg.get("centered", False))
    data = (jnp.asarray(X), jnp.asarray(y)) + ((jnp.asarray(g),) if g is not None else ())
    mcmc = MCMC(
        NUTS(model),
        num_warmup=cfg["tune"],
        num_samples=cfg["draws"],
        num_chains=cfg["chains"],
        chain_method="vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    key = jax.random.PRNGKey(seed_of(cfg["label"], cfg["seed"]))
    mcmc.run(key, *data, extra_fields=("num_steps",))
    samples = mcmc.get_samples(group_by_chain=True)
    draws = {name: np.asarray(samples[name]) for name in names}
    steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"], float)
    stop = time.perf_counter()
    sampling = stop - start - jax_clock.within(start, stop)
    steps = steps.reshape(cfg["chains"], -1)
    return {
        "notes": [],
        # MCMC.run reports the draws' tree sizes only (a separate warmup() would compile
        # the sampler a second time).
        "steps_exact": False,
        "setup_s": stop - t0 - sampling,
        "tune_steps": cfg["tune"] * steps.mean(axis=1),
        "draw_steps": steps.sum(axis=1),
        "draws": draws,
    }


def worker(cfg: dict) -> None:
    """One configuration in this fresh process; writes its result to cfg["result"]."""
    kind = cfg["kind"]
    warnings.simplefilter("default")
    if kind in ("numpyro", "numpyro-pymc", "reference"):
        import jax

        jax.config.update("jax_enable_x64", True)
        import numpyro  # noqa: F401
    if kind != "numpyro" and kind != "reference":
        import pymc  # noqa: F401
    if kind == "ours":
        import pymc_sgmcmc  # noqa: F401
    if kind == "nutpie":
        import nutpie  # noqa: F401
    import arviz  # noqa: F401

    memory = PeakMemory()
    result: dict = {"label": cfg["label"], "kind": kind}
    try:
        paths = cfg["data"]
        X, y = np.load(paths["X"]), np.load(paths["y"])
        g = np.load(paths["g"]) if paths.get("g") else None
        result["data_mb"] = sum(a.nbytes for a in (X, y, g) if a is not None) / 2**20
        local = "a" if cfg.get("centered") else "z"
        names = ["w"] if g is None else ["mu", "sigma", local, "w"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            if kind in ("numpyro", "reference"):
                out = run_numpyro(cfg, X, y, g, names, t0)
            else:
                out = run_pymc(cfg, X, y, g, names, t0)
            total = time.perf_counter() - t0
        result["peak_mb"] = memory.stop() / 2**20
        messages = []
        for w in caught:
            text = f"{w.category.__name__}: {w.message}"[:300]
            if text not in messages:
                messages.append(text)
        result["warnings"] = messages[:20]
        del X, y, g
        summarise(cfg, out, total, result)
    except BaseException as err:
        traceback.print_exc()
        result["error"] = f"{type(err).__name__}: {err}"
        with contextlib.suppress(Exception):
            memory.stop()
    Path(cfg["result"]).write_text(json.dumps(result, default=_json_default))
    if "error" in result:
        sys.exit(1)


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value))


def summarise(cfg: dict, out: dict, total: float, result: dict) -> None:
    """Accuracy, ESS, rows touched and (for short NUTS runs) the extrapolation."""
    x = to_matrix(cfg["model"], out.pop("draws"))
    chains, kept = x.shape[:2]
    tune = cfg["tune"]
    ess = bulk_ess(x)
    if cfg["kind"] == "reference":
        np.savez(
            cfg["save_reference"],
            mean=x.mean(axis=(0, 1)),
            sd=x.reshape(-1, x.shape[-1]).std(axis=0, ddof=1),
            ess=ess,
            wall_s=total,
        )
    result.update(
        total_s=total,
        setup_s=out.get("setup_s"),
        mode_s=out.get("mode_s"),
        setup_rows=out.get("setup_rows"),
        notes=out["notes"],
        step_size=out.get("step_size"),
        min_ess=float(np.nanmin(ess)) if np.isfinite(ess).any() else None,
        chains=chains,
        tune=tune,
        draws=kept,
        extrapolated=False,
    )
    if cfg.get("reference"):
        ref = np.load(cfg["reference"])
        result.update(
            accuracy(x, ref["mean"], ref["sd"], cfg["mean_tol"], cfg["sd_tol"], cfg["every"])
        )
    setup = result["setup_s"] if result["setup_s"] is not None else 0.0
    sampling = total - setup
    result["ess_per_s"] = result["min_ess"] / total if result["min_ess"] else None
    k = result.get("tta_k")
    if cfg["kind"] == "advi":
        result["tta_s"] = total if result.get("final_ok") else None
    elif k is not None:
        result["tta_s"] = setup + (tune + k) / (tune + kept) * sampling
    else:
        result["tta_s"] = None
    if "tune_steps" not in out:
        result["rows_touched"] = out.get("rows_touched")
        return
    n = cfg["n_rows"]
    tune_steps, draw_steps = np.asarray(out["tune_steps"]), np.asarray(out["draw_steps"])
    result["steps_exact"] = out["steps_exact"]
    result["tune_steps"], result["draw_steps"] = tune_steps, draw_steps
    result["mean_tree"] = float(draw_steps.sum() / (chains * kept))
    result["rows_touched"] = float((tune_steps.sum() + draw_steps.sum()) * n)
    full_tune, full_draws = cfg.get("full_tune"), cfg.get("full_draws")
    if full_tune is None or (full_tune, full_draws) == (tune, kept):
        return
    # Short run: extrapolate to full_tune + full_draws at the measured cost per leapfrog step.
    per_step = sampling / (tune_steps.sum() + draw_steps.sum())
    warm = tune_steps.sum() + chains * (full_tune - tune) * result["mean_tree"]
    full_steps = warm + chains * full_draws * result["mean_tree"]
    result["measured"] = {
        key: result[key]
        for key in ("total_s", "min_ess", "ess_per_s", "tta_s", "rows_touched", "tune", "draws")
    }
    result.update(
        extrapolated=True,
        seconds_per_leapfrog=per_step,
        total_s=setup + per_step * full_steps,
        rows_touched=full_steps * n,
        tune=full_tune,
        draws=full_draws,
    )
    if result["min_ess"]:
        result["min_ess"] *= full_draws / kept
        result["ess_per_s"] = result["min_ess"] / result["total_s"]
    if k is not None:
        result["tta_s"] = setup + per_step * (warm + chains * k * result["mean_tree"])
    else:  # not within the short run: at least the end of its draws at full warm-up
        result["tta_lower_s"] = setup + per_step * (warm + chains * kept * result["mean_tree"])


# -- parent -------------------------------------------------------------------------------


def run_worker(cfg: dict, workdir: Path, timeout: float) -> dict:
    slug = hashlib.sha1(cfg["label"].encode()).hexdigest()[:10]
    cfg = {**cfg, "result": str(workdir / f"result-{slug}.json")}
    Path(cfg["result"]).unlink(missing_ok=True)
    log = workdir / f"worker-{slug}.log"
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(cfg)]
    started = time.perf_counter()
    with open(log, "w") as stream:
        proc = subprocess.Popen(
            command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and its chain processes
            proc.wait()
            return {
                "label": cfg["label"],
                "kind": cfg["kind"],
                "error": f"timed out after {timeout:.0f} s (--worker-timeout-s)",
            }
    elapsed = time.perf_counter() - started
    path = Path(cfg["result"])
    result = json.loads(path.read_text()) if path.exists() else {}
    if proc.returncode != 0 and "error" not in result:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        result["error"] = f"exit status {proc.returncode}: " + (tail[-1] if tail else "")
    result.setdefault("label", cfg["label"])
    result.setdefault("kind", cfg["kind"])
    result["process_s"] = elapsed
    if "error" in result:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        result["log_tail"] = tail
    return result


def configurations(args) -> list[dict]:
    only = set(args.only.split(","))
    configs = []
    names = {
        "nuts": "PyMC NUTS",
        "nutpie": "nutpie (pm.sample)",
        "numpyro-pymc": "NumPyro NUTS (pm.sample)",
        "numpyro": "NumPyro NUTS (direct)",
        "advi": f"ADVI (pm.fit, {args.advi_iterations:,} it., minibatch)",
    }
    for kind in ("nuts", "nutpie", "numpyro-pymc", "numpyro", "advi"):
        if kind in only:
            configs.append({"kind": kind, "label": names[kind]})
    if "ours" in only:
        for sampler in args.ours.split(","):
            for gradient in args.gradients.split(","):
                label = f"{sampler}, {gradient.replace('_', ' ')}"
                configs.append(
                    {"kind": "ours", "label": label, "sampler": sampler, "gradient": gradient}
                )
    return configs


def fmt(value, digits: int = 3, approx: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    prefix = "~" if approx else ""
    if abs(value) >= 1000:
        return f"{prefix}{value:,.0f}"
    return f"{prefix}{value:.{digits}g}"


def fmt_rows(value, approx: bool = False) -> str:
    if value is None:
        return "—"
    return f"{'~' if approx else ''}{value:.2e}"


def environment(args) -> list[str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    versions = []
    for package in ("numpy", "pymc", "pytensor", "arviz", "jax", "numpyro", "nutpie"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "pymc_sgmcmc"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        rev += " + uncommitted changes" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        rev = "unknown"
    return [
        f"- Machine: {cpu}, {os.cpu_count()} logical cores; {platform.system()} "
        f"{platform.machine()}; Python {platform.python_version()}",
        f"- Versions: {', '.join(versions)}; pymc_sgmcmc at git {rev}",
    ]


def table(args, rows: list[dict], header: list[str]) -> str:
    columns = (
        "configuration",
        "wall s",
        "setup s",
        "time to acc. s",
        "max \\|Δmean\\|/sd",
        "sd ratio",
        "min ESS",
        "ESS/s",
        "rows touched",
        "peak MB",
    )
    lines = [*header, "", "| " + " | ".join(columns) + " |"]
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(columns) - 1)) + "|")
    footnotes: list[str] = []
    labels = param_labels(args.model, args.n_cols, args.groups)
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | error: {r['error'][:160]} |" + " |" * 8)
            continue
        ex = r.get("extrapolated", False)
        setup = fmt(r.get("setup_s"))
        if r.get("mode_s") is not None:
            setup += f" (mode {fmt(r['mode_s'])})"
        tta = fmt(r.get("tta_s"), approx=ex)
        if r.get("tta_s") is None and r.get("tta_lower_s") is not None:
            tta = f"> {fmt(r['tta_lower_s'], approx=True)}"
        worst = r.get("worst_mean_err")
        worst_s = "—" if worst is None else f"{worst:.3f} ({labels[r['worst_index']]})"
        ratio = "—"
        if r.get("sd_ratio_min") is not None:
            ratio = f"{r['sd_ratio_min']:.3f}–{r['sd_ratio_max']:.3f}"
        rows_s = fmt_rows(r.get("rows_touched"), approx=ex)
        if r.get("steps_exact") is False:
            rows_s += " (warm-up est.)"
        if r.get("setup_rows"):
            rows_s += f" (setup {r['setup_rows']:.2e})"
        cells = [
            r["label"],
            fmt(r.get("total_s"), approx=ex),
            setup,
            tta,
            worst_s,
            ratio,
            fmt(r.get("min_ess"), approx=ex),
            fmt(r.get("ess_per_s"), approx=ex),
            rows_s,
            fmt(r.get("peak_mb")),
        ]
        # Our samplers' own warnings (a minibatch step capped far below its default is
        # warned about before sampling): the row is marked and the warning quoted.
        ours_warned = [
            w for w in r.get("warnings", []) if r["kind"] == "ours" and w.startswith("Runtime")
        ]
        if ours_warned:
            cells[0] += " (warned)"
        lines.append("| " + " | ".join(cells) + " |")
        for message in ours_warned:
            footnotes.append(f"{r['label']} warned: {message.removeprefix('RuntimeWarning: ')}")
        for note in r.get("notes", []):
            footnotes.append(f"{r['label']}: {note}")
        if ex:
            m = r["measured"]
            footnotes.append(
                f"{r['label']}: ~ extrapolated from a short run of {m['tune']} warm-up + "
                f"{m['draws']} draws per chain ({fmt(m['total_s'])} s measured, "
                f"{r['seconds_per_leapfrog'] * 1e3:.3g} ms per leapfrog step, mean tree size "
                f"{r['mean_tree']:.3g}) to {r['tune']} + {r['draws']}; its accuracy columns "
                "are the short run's."
            )
    data_mb = next((r["data_mb"] for r in rows if "data_mb" in r), None)
    lines.append("")
    if data_mb is not None:
        lines.append(f"Data in memory: {data_mb:.1f} MB (X, y{', groups' * (args.groups > 0)}).")
    if any(r.get("extrapolated") for r in rows):
        lines.append(
            "~ extrapolated: the NUTS run's projected time exceeded --nuts-budget-s, so a short "
            "run was timed and scaled to the full warm-up and draws (see the module docstring)."
        )
    if any(r.get("steps_exact") is False for r in rows):
        lines.append(
            "(warm-up est.): the warm-up's tree sizes are not reported by that path; counted as "
            "warm-up iterations × the draws' mean tree size (an underestimate)."
        )
    lines.extend(f"- {note}" for note in footnotes)
    lines.append("")
    lines.extend(summary(rows))
    return "\n".join(lines)


def summary(rows: list[dict]) -> list[str]:
    good = [r for r in rows if "error" not in r]
    ours = [r for r in good if r["kind"] == "ours" and r.get("tta_s") is not None]
    nuts = [r for r in good if r["kind"] in NUTS_KINDS]
    out = []
    direct = next((r for r in nuts if r["kind"] == "numpyro"), None)
    via = next((r for r in nuts if r["kind"] == "numpyro-pymc"), None)
    if direct and via:
        faster, slower = sorted((direct, via), key=lambda r: r["total_s"])
        out.append(
            f"NumPyro: {faster['label']} is faster ({fmt(faster['total_s'])} s against "
            f"{fmt(slower['total_s'])} s wall)."
        )
    if not ours:
        out.append("No sampler of ours reached the accuracy: no ratios.")
        return out
    best = max(ours, key=lambda r: r.get("ess_per_s") or 0.0)
    by_tta = [r for r in nuts if r.get("tta_s") is not None]
    by_ess = [r for r in nuts if r.get("ess_per_s")]
    out.append(f"Best of ours (highest ESS/s among those accurate): {best['label']}.")
    if by_tta:
        fastest = min(by_tta, key=lambda r: r["tta_s"])
        out.append(
            f"- time-to-accuracy ratio (ours / fastest NUTS, {fastest['label']}): "
            f"{best['tta_s'] / fastest['tta_s']:.3g} ({fmt(best['tta_s'])} s against "
            f"{fmt(fastest['tta_s'], approx=fastest.get('extrapolated', False))} s)"
        )
    else:
        why = "reached the accuracy" if nuts else "in this run"
        out.append(f"- time-to-accuracy ratio: no NUTS row {why}")
    if by_ess and best.get("ess_per_s"):
        top = max(by_ess, key=lambda r: r["ess_per_s"])
        out.append(
            f"- ESS/s ratio (ours / best NUTS, {top['label']}): "
            f"{best['ess_per_s'] / top['ess_per_s']:.3g} ({fmt(best['ess_per_s'])} against "
            f"{fmt(top['ess_per_s'], approx=top.get('extrapolated', False))})"
        )
    return out


def reference(args, data, workdir: Path, cache: Path, base: dict) -> tuple[Path, list[str], dict]:
    """The reference's npz (mean, sd), the header lines describing it, raw information."""
    paths = data["paths"]
    ref_cfg = {
        **base,
        "kind": "reference",
        "chains": args.reference_chains,
        "draws": args.reference_draws,
        "tune": args.reference_tune,
        "reference": None,
    }
    length = f"{args.reference_chains}x{args.reference_draws}+{args.reference_tune}"
    form = "-centred" if args.centered else ""
    nuts_path = cache / f"reference-{data['key']}{form}-{length}.npz"
    info: dict = {}
    lines = []

    def run_nuts() -> dict:
        if nuts_path.exists():
            return dict(np.load(nuts_path))
        print(f"Reference: NumPyro NUTS, {length} ...", file=sys.stderr, flush=True)
        result = run_worker(
            {**ref_cfg, "label": "reference NUTS", "save_reference": str(nuts_path)},
            workdir,
            args.reference_timeout_s,
        )
        if "error" in result:
            raise SystemExit(f"the reference run failed: {result['error']}")
        return dict(np.load(nuts_path))

    if args.model == "logistic":
        X = np.load(paths["X"], mmap_mode="r")
        y = np.load(paths["y"])
        mode, sd, info["gradient_s"] = laplace(X, y)
        ref_path = workdir / f"laplace-{data['key']}.npz"
        np.savez(ref_path, mean=mode, sd=sd)
        lines.append(
            "- Reference: Laplace approximation at the full-data mode (Newton's method); "
            f"posterior sds {sd.min():.3g}–{sd.max():.3g}"
        )
        if args.confirm_laplace:
            nuts = run_nuts()
            diff = np.abs(nuts["mean"] - mode) / sd
            ratio = nuts["sd"] / sd
            info["confirm"] = {
                "max_mean_diff_sd": float(diff.max()),
                "sd_ratio": [float(ratio.min()), float(ratio.max())],
                "min_ess": float(nuts["ess"].min()),
            }
            lines.append(
                f"- Laplace confirmed by NumPyro NUTS ({length}): max |Δmean|/sd "
                f"{diff.max():.4f}, sd ratio {ratio.min():.4f}–{ratio.max():.4f} (NUTS min ESS "
                f"{nuts['ess'].min():,.0f}, so its own MC error is ~"
                f"{1 / math.sqrt(nuts['ess'].min()):.3f} sd)"
            )
        del X
    else:
        X = np.load(paths["X"], mmap_mode="r")
        info["gradient_s"] = gradient_seconds(X, np.load(paths["y"]), np.load(paths["g"]))
        del X
        nuts = run_nuts()
        ref_path = nuts_path
        info["reference_min_ess"] = float(nuts["ess"].min())
        lines.append(
            f"- Reference: NumPyro NUTS directly in JAX, {args.reference_chains} chains × "
            f"{args.reference_draws:,} draws after {args.reference_tune:,} warm-up (cached in "
            f"{nuts_path.name}, {float(nuts['wall_s']):.0f} s); min bulk ESS "
            f"{nuts['ess'].min():,.0f}, so its MC error is at "
            f"most ~{1 / math.sqrt(nuts['ess'].min()):.3f} sd for means and "
            f"~{1 / math.sqrt(2 * nuts['ess'].min()):.3f} relative for sds"
        )
    return ref_path, lines, info


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], formatter_class=argparse.RawTextHelpFormatter
    )
    add = parser.add_argument
    add("--model", choices=("logistic", "hierarchical"), default="logistic")
    add("--rows", dest="n_rows", type=int, default=100_000, help="logistic: rows N")
    add("--cols", dest="n_cols", type=int, default=None, help="features D (10; hierarchical 5)")
    add("--groups", type=int, default=10_000, help="hierarchical: groups G")
    add("--rows-per-group", type=int, default=100, help="hierarchical: rows per group R")
    add(
        "--centered",
        action="store_true",
        help="hierarchical: a_g ~ N(mu, sigma) sampled directly (default: non-centred)",
    )
    add("--chains", type=int, default=2)
    add("--tune", type=int, default=1000)
    add("--draws", type=int, default=2000, help="kept draws per chain (default 2,000)")
    add("--nuts-tune", type=int, default=1000, help="NUTS warm-up per chain")
    add("--nuts-draws", type=int, default=1000, help="NUTS kept draws per chain")
    add("--batch-size", type=int, default=1000)
    add("--advi-iterations", type=int, default=30_000)
    add("--only", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    add("--ours", default=",".join(OURS), help="our samplers (class names)")
    add("--gradients", default="minibatch,control_variates", help=f"of {','.join(GRADIENTS)}")
    add("--nuts-budget-s", type=float, default=3600.0)
    add("--nuts-short", type=int, default=100, help="warm-up = draws of a short NUTS run")
    add("--worker-timeout-s", type=float, default=3600.0)
    add("--reference-timeout-s", type=float, default=4 * 3600.0)
    add("--reference-chains", type=int, default=4)
    add("--reference-draws", type=int, default=5000)
    add("--reference-tune", type=int, default=1000)
    add("--confirm-laplace", action="store_true")
    add("--mean-tol", type=float, default=0.1, help="in reference sds")
    add("--sd-tol", type=float, default=0.1, help="relative")
    add("--check-every", type=int, default=50, help="draws per chain between checks")
    add("--cache", type=Path, default=None, help="data and reference cache (default: temp)")
    add("--seed", type=int, default=1)
    add("--data-seed", type=int, default=20240601)
    add("--out", type=Path, default=None, metavar="FILE.md")
    add("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args()
    hier = args.model == "hierarchical"
    if args.n_cols is None:
        args.n_cols = HIER_COLS if hier else 10
    if hier:
        args.n_rows = args.groups * args.rows_per_group
    else:
        args.groups = 0
    unknown = set(args.only.split(",")) - set(KINDS)
    unknown |= set(args.gradients.split(",")) - set(GRADIENTS)
    if unknown:
        parser.error(f"unknown names: {sorted(unknown)}")

    temporary = args.cache is None
    cache = Path(tempfile.mkdtemp(prefix="tta-")) if temporary else args.cache.expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="tta-work-"))
    try:
        run(args, cache, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if temporary:
            shutil.rmtree(cache, ignore_errors=True)


def run_nuts(args, cfg: dict, gradient_s: float, workdir: Path) -> dict:
    """A NUTS row: in full, or extrapolated from a short run when over the budget.

    The first projection (a numpy gradient pass × a guessed tree size) is rough; when it
    is above a tenth of the budget a short run comes first, and the full run follows only
    if the short run's extrapolation fits the budget.
    """
    cfg = {**cfg, "tune": args.nuts_tune, "draws": args.nuts_draws}
    per_iteration = gradient_s * TREE_GUESS[args.model] * args.chains
    projected = per_iteration * (args.nuts_tune + args.nuts_draws)
    result = None
    if projected > args.nuts_budget_s / 10:
        short = args.nuts_short
        if 2 * short * per_iteration > args.nuts_budget_s / 2:
            short = max(10, int(args.nuts_budget_s / (4 * per_iteration)))
        if short < min(args.nuts_tune, args.nuts_draws):
            probe = {**cfg, "full_tune": cfg["tune"], "full_draws": cfg["draws"]}
            probe.update(tune=short, draws=short)
            print(f"Running {cfg['label']} (short: {short} + {short}) ...", file=sys.stderr)
            result = run_worker(probe, workdir, args.worker_timeout_s)
            projected = result.get("total_s", projected)
            if "error" in result or projected > args.nuts_budget_s:
                result["projected_s"] = projected
                return result
    print(f"Running {cfg['label']} ...", file=sys.stderr, flush=True)
    full = run_worker(cfg, workdir, args.worker_timeout_s)
    full["projected_s"] = projected
    if result is not None:
        full.setdefault("notes", []).append(
            f"a short run ({result['measured']['tune']} + {result['measured']['draws']}) "
            f"projected {projected:.0f} s, within --nuts-budget-s: run in full"
        )
    return full


def run(args, cache: Path, workdir: Path) -> None:
    hier = args.model == "hierarchical"
    command = "python " + " ".join(
        shlex.quote(os.path.relpath(a) if i == 0 else a) for i, a in enumerate(sys.argv)
    )
    print(f"Simulating {args.n_rows:,} × {args.n_cols} ...", file=sys.stderr, flush=True)
    data = simulate(args, cache)
    base = {
        "model": args.model,
        "data": {k: (str(v) if v else None) for k, v in data["paths"].items()},
        "n_rows": args.n_rows,
        "groups": args.groups,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "advi_iterations": args.advi_iterations,
        "mean_tol": args.mean_tol,
        "sd_tol": args.sd_tol,
        "every": args.check_every,
        "centered": args.centered,
    }
    ref_path, ref_lines, ref_info = reference(args, data, workdir, cache, base)
    base["reference"] = str(ref_path)
    problem = (
        f"varying-intercept logistic regression "
        f"({'centred' if args.centered else 'non-centred'}), {args.groups:,} groups × "
        f"{args.rows_per_group} rows = {args.n_rows:,} rows, {args.n_cols} slopes"
        if hier
        else f"logistic regression, {args.n_rows:,} rows × {args.n_cols} features"
    )
    header = [
        f"# Time to accuracy: {problem}",
        "",
        *environment(args),
        f"- Problem: {problem}; float64; prior w ~ N(0, {PRIOR_SD:g}²)"
        + (f", mu ~ N(0, {MU_SD:g}²), sigma ~ HalfNormal({SIGMA_SCALE:g})" if hier else "")
        + f"; minibatches of {args.batch_size} rows (ADVI, ours)",
        *ref_lines,
        f"- Accuracy: every mean within {args.mean_tol:g} reference sd and every sd within "
        f"{args.sd_tol:.0%} of the reference sd (pooled chains, checked every "
        f"{args.check_every} draws per chain); time = setup + (tune + k)/(tune + draws) × "
        "(wall − setup)",
        f"- Runs: NUTS {args.chains} chains × ({args.nuts_tune} + {args.nuts_draws}); ours "
        f"{args.chains} × ({args.tune} + {args.draws}), cores=1; ADVI {args.advi_iterations:,} "
        f"iterations then {args.chains} × {args.draws} draws",
        f"- Command: `{command}`",
    ]
    print("\n".join(header), file=sys.stderr, flush=True)

    rows = []
    for cfg in configurations(args):
        cfg = {**base, **cfg, "chains": args.chains, "tune": args.tune, "draws": args.draws}
        if cfg["kind"] in NUTS_KINDS:
            result = run_nuts(args, cfg, ref_info["gradient_s"], workdir)
        else:
            print(f"Running {cfg['label']} ...", file=sys.stderr, flush=True)
            result = run_worker(cfg, workdir, args.worker_timeout_s)
        rows.append(result)
        for note in result.get("notes", []):
            if note.startswith("!!"):
                print(f"  WARNING, {cfg['label']}: {note} (FOR TESTING ONLY)", file=sys.stderr)
        brief = (
            result["error"]
            if "error" in result
            else f"{fmt(result['total_s'])} s, time to accuracy {fmt(result.get('tta_s'))} s"
        )
        print(f"  {brief}", file=sys.stderr, flush=True)

    text = table(args, rows, header)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        raw = {"command": command, "header": header, "reference": ref_info, "rows": rows}
        args.json.write_text(json.dumps(raw, indent=1, default=_json_default) + "\n")


if __name__ == "__main__":
    main()
