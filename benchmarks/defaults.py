"""Every sampler with default arguments on a dozen posteriors, against exact or long-NUTS ones.

What it measures. For every posterior below and every sampler of ``--samplers`` (default:
SGLD, SGHMC, SGNHT, HMC, HMCEM, SGHMCEM, SGNHTEM and NUTS), one run of

    with model:
        idata = pm.sample(step=pmsg.SGHMC(), draws=1000, tune=1000, chains=2, cores=1, ...)

with the sampler's DEFAULT arguments (NUTS: ``pm.sample()`` with no step, which picks nutpie
when it is installed and the model allows it; the row says which ran), ``progressbar=False,
compute_convergence_checks=False`` and ``random_seed`` fixed per (posterior, sampler). Every
variable of the posterior group (free variables and deterministics, on the constrained scale
that users see) is flattened to scalars and compared with the reference:

* *max |Δmean|/sd*: the worst ``|mean − reference mean| / reference sd``;
* *sd ratio*: the range (min–max) of ``sd / reference sd``;
* *max R-hat*: rank-normalised split R-hat (``az.rhat``), the worst parameter;
* *min ESS*: the smallest bulk ESS (``az.ess``); *ESS/s*: min ESS / wall;
* *wall s*: the whole ``pm.sample`` call, step construction included (the package's samplers
  find the mode and tune there), compilation included;
* *pass*: every mean within ``--mean-tol`` (0.2) reference sd AND every sd ratio within
  [0.75, 1.25] (``--sd-tol`` 0.25).

A sampler that raises gives a row "error: <message>" and the table goes on; a row that runs
past ``--row-timeout-s`` is stopped and reported the same way. The summary counts the passes
of every sampler out of the posteriors it ran on.

The posteriors (data simulated with fixed seeds, or shipped with scikit-learn):

1. ``tiny_scale_1d``: normal mean, ``pm.Flat`` prior, 100 observations with known sigma 0.01
   around 50: posterior N(ȳ, 0.001²), 50,000 sds from the initial point 0. Exact.
2. ``scales_1e-3_to_1e3``: 7 independent means with flat priors, 10 observations each, known
   noise chosen so that the posterior sds are 1e-3, 1e-2, ..., 1e3. Exact.
3. ``correlated_100d``: 100 flat means, one MvNormal observation whose covariance has
   eigenvalues log-spaced from 1e-2 to 1e2 (condition number 1e4) in a random orthogonal
   basis: the posterior is that Gaussian. Exact.
4. ``linreg_raw_flat``: linear regression, 1,000 rows, 5 raw-scale predictors (means 100,
   sds 1 to 1,000), flat intercept and slopes, known noise sd 0.5: modes hundreds of sds
   from 0, posterior sds from 1e-5 to 1. Exact (least squares).
5. ``linreg_minibatch_1e5``: linear regression, 100,000 rows, 10 correlated predictors,
   flat priors, known noise sd 1, ``pm.Minibatch(X, y, batch_size=100)`` with
   ``total_size=N``. Exact (least squares on all rows).
6. ``logistic_minibatch_2e4``: logistic regression, 20,000 rows × 10, N(0, 5²) priors,
   minibatches of 100. Long NUTS on the full data.
7. ``hier_gauss_noncentred``: 40 groups × 3 rows, known noise sd 2, non-centred
   ``theta = mu + tau z`` with ``tau ~ HalfNormal(5)`` (theta kept as a deterministic).
   Long NUTS.
8. ``hier_poisson_300``: varying-intercept Poisson regression, 300 groups × 5 rows, centred
   intercepts ``a ~ N(mu, sigma)``, one shared slope (303 parameters). Long NUTS.
9. ``breast_cancer_logistic``: scikit-learn's breast cancer data (569 × 30) on the raw
   (unstandardised) scale, logistic regression with N(0, 10²) priors. Long NUTS.
10. ``diabetes_linear``: scikit-learn's diabetes data (442 × 10, as shipped), linear
    regression, N(0, 1000²) coefficients, ``sigma ~ HalfNormal(100)``. Long NUTS.
11. ``ar1``: AR(1) series of 1,000 points, ``phi ~ Uniform(-1, 1)`` (true 0.9), mean 10
    with a N(0, 100²) prior, ``sigma ~ HalfNormal(5)``. Long NUTS.
12. ``mixture_ordered``: two-component normal mixture of 1,000 points, ordered means
    (``transform=ordered``), a Beta(1, 1) weight, HalfNormal sds. Long NUTS.
13. ``dirichlet_sparse_minibatch``: 2,000 categorical rows of 40 categories drawn with
    probabilities ``∝ 1/k²``, a sparse ``Dirichlet(0.1)`` prior (a few categories unseen),
    minibatches of 100. Exact: Dirichlet(α + counts).

The minibatched posteriors (5, 6, 13) are sampled by the package's samplers on the minibatched
model; NUTS and the reference use the same model on all rows (NUTS on a minibatched logp
would not target the posterior).

References. Exact ones in closed form. The others: ``pm.sample(draws=5000, tune=2000,
chains=4, target_accept=0.95, nuts_sampler="nutpie")`` on the full-data model (``--reference-*``
to change it), checked for R-hat ≤ 1.01, bulk and tail ESS ≥ 2,000 and no divergences
(a warning is printed and shown in the properties table otherwise), and cached as
``<posterior>-v<version>-nuts-<chains>x<draws>+<tune>.npz`` (labels, mean, sd, covariance and
the checks) in ``--cache`` (default: ``pymc_sgmcmc_defaults`` in the system's temporary
directory). ``--references-only`` computes them and stops. With ``--quick`` (100 warm-up and
100 kept draws per chain, a smoke test) a missing reference is computed shorter
(4 × (1,000 + 1,000)) and cached under its own name; a full one is used when cached.

The properties table lists for every posterior its scalar parameters P, data rows and whether
they are minibatched, the range of the reference sds, the condition numbers of the reference
covariance and correlation matrices, and the distance of the initial point from the
reference mean in reference sds (the worst parameter).

    python benchmarks/defaults.py
    python benchmarks/defaults.py --references-only --cache ~/.cache/pymc_sgmcmc_defaults
    python benchmarks/defaults.py --quick --only tiny_scale_1d,ar1 --samplers NUTS,HMC
    python benchmarks/defaults.py --samplers SGHMC,NUTS --out defaults.md --json defaults.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import logging
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OURS = (
    "SGLD",
    "PSGLD",
    "SGFS",
    "SGRLD",
    "SGHMC",
    "SGNHT",
    "HMC",
    "MALA",
    "HMCEM",
    "SGHMCEM",
    "SGNHTEM",
    "SGNPHMC",
    "SGNPHMCEM",
    "SGRNPHMC",
    "RHMC",
)
SAMPLERS = (*OURS, "NUTS")
QUICK = 100  # warm-up and kept draws per chain with --quick
QUICK_REFERENCE = (4, 1000, 1000)  # chains, draws, tune of a reference computed by --quick
BATCH = 100


# -- posteriors ---------------------------------------------------------------------------


@dataclass
class Posterior:
    """One posterior: its model (full data or minibatched) and, if known, its exact form."""

    name: str
    description: str
    n_rows: int
    build: Callable[[bool], object]  # build(minibatch) -> pm.Model
    minibatch: bool = False  # the package's samplers get build(True)
    exact: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None  # flattened mean, cov
    version: int = 1  # part of the reference's cache key: raise it when the model changes

    @property
    def reference_kind(self) -> str:
        return "exact" if self.exact is not None else "NUTS"


def least_squares(A: np.ndarray, y: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Posterior of flat-prior regression with known noise: mean and covariance (via QR)."""
    q, r = np.linalg.qr(A)
    mean = np.linalg.solve(r, q.T @ y)
    r_inv = np.linalg.inv(r)
    return mean, sigma**2 * r_inv @ r_inv.T


def tiny_scale_1d() -> Posterior:
    import pymc as pm

    sigma, n = 0.01, 100
    y = 50.0 + sigma * np.random.default_rng(101).normal(size=n)

    def build(minibatch: bool):
        with pm.Model() as model:
            mu = pm.Flat("mu")
            pm.Normal("y", mu, sigma, observed=y)
        return model

    return Posterior(
        "tiny_scale_1d",
        "normal mean, flat prior, 100 rows, known sd 0.01, centred at 50",
        n,
        build,
        exact=lambda: (np.array([y.mean()]), np.array([[sigma**2 / n]])),
    )


def scales() -> Posterior:
    import pymc as pm

    n = 10
    sds = 10.0 ** np.arange(-3, 4)
    centres = sds * np.array([2.0, -3.0, 4.0, -5.0, 6.0, -7.0, 8.0])
    noise = sds * math.sqrt(n)
    y = centres + noise * np.random.default_rng(102).normal(size=(n, sds.size))

    def build(minibatch: bool):
        with pm.Model() as model:
            x = pm.Flat("x", shape=sds.size)
            pm.Normal("y", x, noise, observed=y)
        return model

    return Posterior(
        "scales_1e-3_to_1e3",
        "7 flat means, 10 rows each, posterior sds 1e-3 ... 1e3",
        n * sds.size,
        build,
        exact=lambda: (y.mean(axis=0), np.diag(sds**2)),
    )


def correlated() -> Posterior:
    import pymc as pm
    from scipy.stats import ortho_group

    d = 100
    rng = np.random.default_rng(103)
    basis = ortho_group.rvs(d, random_state=rng)
    cov = (basis * np.logspace(-2, 2, d)) @ basis.T
    cov = (cov + cov.T) / 2
    observed = rng.normal(0.0, 3.0, size=d)

    def build(minibatch: bool):
        with pm.Model() as model:
            x = pm.Flat("x", shape=d)
            pm.MvNormal("y", mu=x, cov=cov, observed=observed)
        return model

    return Posterior(
        "correlated_100d",
        "100 flat means, one MvNormal row, covariance condition number 1e4",
        1,
        build,
        exact=lambda: (observed.copy(), cov),
    )


def linreg_raw_flat() -> Posterior:
    import pymc as pm

    n, sigma = 1000, 0.5
    rng = np.random.default_rng(104)
    sds = np.logspace(0, 3, 5)
    X = 100.0 + sds * rng.normal(size=(n, sds.size))
    w = 3.0 / sds * np.array([1.0, -1.0, 1.0, -1.0, 1.0])
    y = 50.0 + X @ w + sigma * rng.normal(size=n)
    A = np.column_stack([np.ones(n), X])

    def build(minibatch: bool):
        with pm.Model() as model:
            b = pm.Flat("b")
            coef = pm.Flat("w", shape=sds.size)
            pm.Normal("y", b + X @ coef, sigma, observed=y)
        return model

    return Posterior(
        "linreg_raw_flat",
        "linear regression, 1,000 rows, 5 raw predictors (means 100, sds 1-1,000), flat",
        n,
        build,
        exact=lambda: least_squares(A, y, sigma),
    )


def linreg_minibatch() -> Posterior:
    import pymc as pm

    n, d, sigma = 100_000, 10, 1.0
    rng = np.random.default_rng(105)
    X = rng.normal(size=(n, d))
    X[:, 1:] += 0.5 * X[:, :1]
    X += 1.0
    y = 2.0 + X @ rng.normal(size=d) + sigma * rng.normal(size=n)
    A = np.column_stack([np.ones(n), X])

    def build(minibatch: bool):
        with pm.Model() as model:
            Xd, yd = pm.Minibatch(X, y, batch_size=BATCH) if minibatch else (X, y)
            b = pm.Flat("b")
            coef = pm.Flat("w", shape=d)
            pm.Normal("y", b + Xd @ coef, sigma, observed=yd, total_size=n if minibatch else None)
        return model

    return Posterior(
        "linreg_minibatch_1e5",
        f"linear regression, 100,000 rows × 10, flat, minibatches of {BATCH}",
        n,
        build,
        minibatch=True,
        exact=lambda: least_squares(A, y, sigma),
    )


def logistic_minibatch() -> Posterior:
    import pymc as pm
    from scipy.special import expit

    n, d = 20_000, 10
    rng = np.random.default_rng(106)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < expit(-0.5 + X @ rng.normal(0.0, 0.5, size=d))).astype(np.float64)

    def build(minibatch: bool):
        with pm.Model() as model:
            Xd, yd = pm.Minibatch(X, y, batch_size=BATCH) if minibatch else (X, y)
            b = pm.Normal("b", 0.0, 5.0)
            w = pm.Normal("w", 0.0, 5.0, shape=d)
            pm.Bernoulli("y", logit_p=b + Xd @ w, observed=yd, total_size=n if minibatch else None)
        return model

    return Posterior(
        "logistic_minibatch_2e4",
        f"logistic regression, 20,000 rows × 10, N(0, 5²), minibatches of {BATCH}",
        n,
        build,
        minibatch=True,
    )


def hier_gauss() -> Posterior:
    import pymc as pm

    groups, per_group, noise = 40, 3, 2.0
    rng = np.random.default_rng(107)
    theta = 3.0 + 1.0 * rng.normal(size=groups)
    g = np.repeat(np.arange(groups), per_group)
    y = theta[g] + noise * rng.normal(size=g.size)

    def build(minibatch: bool):
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, 5.0)
            tau = pm.HalfNormal("tau", 5.0)
            z = pm.Normal("z", 0.0, 1.0, shape=groups)
            theta = pm.Deterministic("theta", mu + tau * z)
            pm.Normal("y", theta[g], noise, observed=y)
        return model

    return Posterior(
        "hier_gauss_noncentred",
        "hierarchical normal, 40 groups × 3 rows, non-centred, tau ~ HalfNormal(5)",
        g.size,
        build,
    )


def hier_poisson() -> Posterior:
    import pymc as pm

    groups, per_group = 300, 5
    rng = np.random.default_rng(108)
    a = 1.5 + 0.5 * rng.normal(size=groups)
    g = np.repeat(np.arange(groups), per_group)
    x = rng.normal(size=g.size)
    counts = rng.poisson(np.exp(a[g] + 0.3 * x))

    def build(minibatch: bool):
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, 2.0)
            sigma = pm.HalfNormal("sigma", 1.0)
            intercepts = pm.Normal("a", mu, sigma, shape=groups)
            slope = pm.Normal("b", 0.0, 1.0)
            pm.Poisson("y", pm.math.exp(intercepts[g] + slope * x), observed=counts)
        return model

    return Posterior(
        "hier_poisson_300",
        "varying-intercept Poisson regression, 300 groups × 5 rows, centred",
        g.size,
        build,
    )


def breast_cancer() -> Posterior:
    import pymc as pm
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = X.astype(np.float64)

    def build(minibatch: bool):
        with pm.Model() as model:
            b = pm.Normal("b", 0.0, 10.0)
            w = pm.Normal("w", 0.0, 10.0, shape=X.shape[1])
            pm.Bernoulli("y", logit_p=b + X @ w, observed=y)
        return model

    return Posterior(
        "breast_cancer_logistic",
        "scikit-learn breast cancer, 569 × 30 raw, logistic, N(0, 10²)",
        X.shape[0],
        build,
    )


def diabetes() -> Posterior:
    import pymc as pm
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)

    def build(minibatch: bool):
        with pm.Model() as model:
            b = pm.Normal("b", 0.0, 1000.0)
            w = pm.Normal("w", 0.0, 1000.0, shape=X.shape[1])
            sigma = pm.HalfNormal("sigma", 100.0)
            pm.Normal("y", b + X @ w, sigma, observed=y)
        return model

    return Posterior(
        "diabetes_linear",
        "scikit-learn diabetes, 442 × 10, linear, N(0, 1000²), sigma ~ HalfNormal(100)",
        X.shape[0],
        build,
    )


def ar1() -> Posterior:
    import pymc as pm

    n, phi, sigma, level = 1000, 0.9, 0.5, 10.0
    rng = np.random.default_rng(111)
    series = np.empty(n)
    series[0] = level + sigma / math.sqrt(1 - phi**2) * rng.normal()
    for t in range(1, n):
        series[t] = level + phi * (series[t - 1] - level) + sigma * rng.normal()

    def build(minibatch: bool):
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, 100.0)
            rho = pm.Uniform("phi", -1.0, 1.0)
            scale = pm.HalfNormal("sigma", 5.0)
            pm.Normal("y", mu + rho * (series[:-1] - mu), scale, observed=series[1:])
        return model

    return Posterior(
        "ar1",
        "AR(1), 1,000 points, phi ~ Uniform(-1, 1) (true 0.9), mu ~ N(0, 100²)",
        n - 1,
        build,
        version=2,
    )


def mixture() -> Posterior:
    import pymc as pm

    n = 1000
    rng = np.random.default_rng(112)
    first = rng.random(n) < 0.3
    data = np.where(first, rng.normal(-1.0, 1.0, n), rng.normal(2.0, 0.5, n))

    def build(minibatch: bool):
        with pm.Model() as model:
            weight = pm.Beta("p", 1.0, 1.0)  # one weight: a simplex's covariance is singular
            weights = pm.math.stack([weight, 1.0 - weight])
            means = pm.Normal(
                "mu",
                0.0,
                10.0,
                shape=2,
                transform=pm.distributions.transforms.ordered,
                initval=np.array([-1.0, 1.0]),
            )
            sds = pm.HalfNormal("sigma", 2.0, shape=2)
            pm.NormalMixture("y", w=weights, mu=means, sigma=sds, observed=data)
        return model

    return Posterior(
        "mixture_ordered",
        "two-component normal mixture, 1,000 points, ordered means, Beta(1, 1) weight",
        n,
        build,
        version=2,
    )


def dirichlet_sparse() -> Posterior:
    import pymc as pm

    n, k, alpha = 2000, 40, 0.1
    probabilities = 1.0 / np.arange(1, k + 1) ** 2
    rows = np.random.default_rng(113).choice(k, size=n, p=probabilities / probabilities.sum())
    rows = rows.astype("int32")
    beta = alpha + np.bincount(rows, minlength=k)

    def build(minibatch: bool):
        with pm.Model() as model:
            p = pm.Dirichlet("p", np.full(k, alpha))
            data = pm.Minibatch(rows, batch_size=BATCH) if minibatch else rows
            pm.Categorical("y", p=p, observed=data, total_size=n)
        return model

    def exact():
        mean = beta / beta.sum()
        return mean, (np.diag(mean) - np.outer(mean, mean)) / (beta.sum() + 1.0)

    return Posterior(
        "dirichlet_sparse_minibatch",
        f"40 categories, 2,000 rows, Dirichlet(0.1) prior, {int((beta < 1).sum())} unseen",
        n,
        build,
        minibatch=True,
        exact=exact,
    )


POSTERIORS: dict[str, Callable[[], Posterior]] = {
    "tiny_scale_1d": tiny_scale_1d,
    "scales_1e-3_to_1e3": scales,
    "correlated_100d": correlated,
    "linreg_raw_flat": linreg_raw_flat,
    "linreg_minibatch_1e5": linreg_minibatch,
    "logistic_minibatch_2e4": logistic_minibatch,
    "hier_gauss_noncentred": hier_gauss,
    "hier_poisson_300": hier_poisson,
    "breast_cancer_logistic": breast_cancer,
    "diabetes_linear": diabetes,
    "ar1": ar1,
    "mixture_ordered": mixture,
    "dirichlet_sparse_minibatch": dirichlet_sparse,
}


# -- draws --------------------------------------------------------------------------------


def compared_names(model) -> list[str]:
    """Free variables then deterministics, in the model's order."""
    return [v.name for v in model.free_RVs] + [v.name for v in model.deterministics]


def labels_of(names: list[str], shapes: list[tuple[int, ...]]) -> list[str]:
    labels = []
    for name, shape in zip(names, shapes, strict=True):
        if not shape:
            labels.append(name)
        else:
            labels.extend(f"{name}[{','.join(map(str, i))}]" for i in np.ndindex(*shape))
    return labels


def flatten(idata, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """(chains, draws, P) array of every compared variable of the posterior group."""
    blocks, shapes = [], []
    for name in names:
        values = np.asarray(idata.posterior[name].values, dtype=np.float64)
        shapes.append(values.shape[2:])
        blocks.append(values.reshape(*values.shape[:2], -1))
    return np.concatenate(blocks, axis=-1), labels_of(names, shapes)


def initial_values(model, names: list[str]) -> list[np.ndarray]:
    """The compared quantities at PyMC's initial point (constrained values)."""
    outputs = model.replace_rvs_by_values([model[name] for name in names])
    fn = model.compile_fn(outputs, inputs=model.value_vars, on_unused_input="ignore")
    return [np.asarray(v, dtype=np.float64) for v in fn(model.initial_point())]


def concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in arrays])


def rhat(x: np.ndarray) -> np.ndarray:
    import arviz as az

    if x.shape[0] < 2 or x.shape[1] < 4:
        return np.full(x.shape[-1], np.nan)
    return np.asarray(az.rhat(x, method="rank"), dtype=float).reshape(-1)


def ess(x: np.ndarray, method: str = "bulk") -> np.ndarray:
    import arviz as az

    if x.shape[0] * x.shape[1] < 8:
        return np.full(x.shape[-1], np.nan)
    extra = {"prob": (0.05, 0.95)} if method == "tail" else {}  # the array API needs it
    return np.asarray(az.ess(x, method=method, **extra), dtype=float).reshape(-1)


def quiet():
    """Silence PyMC's logging and the warnings of short or poor runs; stdout to stderr.

    The table goes to stdout; progress bars that a sampler draws there go to stderr.
    """
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(sys.stderr))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    for logger in ("pymc", "pytensor", "arviz"):
        log = logging.getLogger(logger)
        stack.callback(log.setLevel, log.level)
        log.setLevel(logging.ERROR)
    return stack


# -- references ---------------------------------------------------------------------------


def reference_settings(args) -> list[tuple[int, int, int]]:
    """Reference lengths (chains, draws, tune) to look for in the cache, the last to compute."""
    full = (args.reference_chains, args.reference_draws, args.reference_tune)
    return [full, QUICK_REFERENCE] if args.quick and full != QUICK_REFERENCE else [full]


def reference_path(args, post: Posterior, length: tuple[int, int, int]) -> Path:
    chains, draws, tune = length
    return args.cache / f"{post.name}-v{post.version}-nuts-{chains}x{draws}+{tune}.npz"


def reference(args, post: Posterior) -> dict:
    """Labels, mean, sd, covariance of the reference and how it was obtained."""
    if post.exact is not None:
        model = post.build(False)
        names = compared_names(model)
        initial = initial_values(model, names)
        mean, cov = post.exact()
        labels = labels_of(names, [a.shape for a in initial])
        if len(labels) != mean.size:
            raise ValueError(f"{post.name}: {len(labels)} parameters but {mean.size} exact means")
        ref = {"labels": labels, "mean": mean, "sd": np.sqrt(np.diag(cov)), "cov": cov}
        ref["initial"] = concat(initial)
        ref["kind"] = "exact"
        return ref
    lengths = reference_settings(args)
    for length in lengths:
        path = reference_path(args, post, length)
        if path.exists():
            with np.load(path) as stored:
                ref = {key: stored[key] for key in stored.files}
            ref["labels"] = [str(label) for label in ref["labels"]]
            return describe_nuts(ref, length, cached=True)
    length = lengths[-1]
    path = reference_path(args, post, length)
    ref = run_reference(args, post, length)
    args.cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **{k: (np.asarray(v) if k != "labels" else np.array(v)) for k, v in ref.items()})
    return describe_nuts(ref, length, cached=False)


def run_reference(args, post: Posterior, length: tuple[int, int, int]) -> dict:
    import pymc as pm

    chains, draws, tune = length
    print(
        f"Reference for {post.name}: nutpie, {chains} chains × ({tune:,} + {draws:,}), "
        f"target_accept {args.reference_target_accept} ...",
        file=sys.stderr,
        flush=True,
    )
    model = post.build(False)
    names = compared_names(model)
    start = time.perf_counter()
    with quiet(), model:
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            target_accept=args.reference_target_accept,
            nuts_sampler="nutpie",
            random_seed=seed_of(f"{post.name}/reference", args.seed),
            progressbar=False,
            compute_convergence_checks=False,
        )
    wall = time.perf_counter() - start
    x, labels = flatten(idata, names)
    pooled = x.reshape(-1, x.shape[-1])
    diverging = 0
    with contextlib.suppress(AttributeError, KeyError):
        diverging = int(np.asarray(idata.sample_stats["diverging"].values).sum())
    return {
        "labels": labels,
        "mean": pooled.mean(axis=0),
        "sd": pooled.std(axis=0, ddof=1),
        "cov": np.atleast_2d(np.cov(pooled, rowvar=False)),
        "initial": concat(initial_values(model, names)),
        "wall_s": wall,
        "max_rhat": np.nanmax(rhat(x)),
        "min_ess_bulk": np.nanmin(ess(x, "bulk")),
        "min_ess_tail": np.nanmin(ess(x, "tail")),
        "divergences": diverging,
    }


def describe_nuts(ref: dict, length: tuple[int, int, int], cached: bool) -> dict:
    chains, draws, tune = length
    ref["kind"] = f"NUTS {chains}×({tune:,}+{draws:,})"
    problems = []
    if float(ref["max_rhat"]) > 1.01:
        problems.append(f"R-hat {float(ref['max_rhat']):.3f}")
    low = min(float(ref["min_ess_bulk"]), float(ref["min_ess_tail"]))
    if low < 2000:
        problems.append(f"ESS {low:,.0f}")
    if int(ref["divergences"]) > 0:
        problems.append(f"{int(ref['divergences'])} divergences")
    ref["problems"] = problems
    ref["cached"] = cached
    return ref


def properties(post: Posterior, ref: dict) -> dict:
    sd = np.asarray(ref["sd"])
    cov = np.asarray(ref["cov"])
    corr = cov / np.outer(sd, sd)
    distance = np.abs(np.asarray(ref["initial"]) - ref["mean"]) / sd
    out = {
        "P": len(ref["labels"]),
        "rows": post.n_rows,
        "data": "minibatch" if post.minibatch else "full",
        "sd_min": float(sd.min()),
        "sd_max": float(sd.max()),
        "cond_cov": float(np.linalg.cond(cov)),
        "cond_corr": float(np.linalg.cond(corr)),
        "initial_sds": float(distance.max()),
        "reference": ref["kind"],
    }
    if "wall_s" in ref:
        out.update(
            reference_s=float(ref["wall_s"]),
            max_rhat=float(ref["max_rhat"]),
            min_ess_bulk=float(ref["min_ess_bulk"]),
            min_ess_tail=float(ref["min_ess_tail"]),
            divergences=int(ref["divergences"]),
            problems=ref["problems"],
        )
    return out


# -- rows ---------------------------------------------------------------------------------


def seed_of(label: str, seed: int) -> int:
    return (seed * 1_000_003 + zlib.crc32(label.encode())) % 2**31


class RowTimeoutError(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise RowTimeoutError in the main thread after ``seconds`` (0: no limit)."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise RowTimeoutError(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def short_error(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else ""
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def run_row(args, post: Posterior, sampler: str, ref: dict) -> dict:
    import pymc as pm

    row = {"posterior": post.name, "sampler": sampler}
    seed = seed_of(f"{post.name}/{sampler}", args.seed)
    try:
        model = post.build(post.minibatch and sampler != "NUTS")
        names = compared_names(model)
        with quiet(), time_limit(args.row_timeout_s):
            if sampler == "NUTS":
                start = time.perf_counter()
                with model:
                    idata = sample(pm, args, seed, step=None)
            else:
                cls = getattr(importlib.import_module("pymc_sgmcmc"), sampler)
                start = time.perf_counter()
                with model:
                    idata = sample(pm, args, seed, step=cls())
            wall = time.perf_counter() - start
        x, labels = flatten(idata, names)
    except Exception as error:  # any failure becomes a row
        row["error"] = short_error(error)
        return row
    if labels != list(ref["labels"]):
        row["error"] = "parameters differ from the reference's"
        return row
    if sampler == "NUTS":
        library = idata.posterior.attrs.get("inference_library", "pymc")
        row["sampler"] = f"NUTS ({library}{', all rows' if post.minibatch else ''})"
    pooled = x.reshape(-1, x.shape[-1])
    sd = np.asarray(ref["sd"])
    error = np.abs(pooled.mean(axis=0) - ref["mean"]) / sd
    ratio = pooled.std(axis=0, ddof=1) / sd
    min_ess = float(np.nanmin(ess(x)))
    worst = int(np.nanargmax(error)) if np.isfinite(error).any() else 0
    row.update(
        mean_err=float(np.max(error)),  # nan when a draw is nan
        worst=labels[worst],
        sd_ratio_min=float(np.min(ratio)),
        sd_ratio_max=float(np.max(ratio)),
        max_rhat=float(np.nanmax(rhat(x))) if x.shape[1] >= 4 else math.nan,
        min_ess=min_ess,
        wall_s=wall,
        ess_per_s=min_ess / wall,
        passed=bool(np.all(error <= args.mean_tol) and np.all(np.abs(ratio - 1.0) <= args.sd_tol)),
    )
    return row


def sample(pm, args, seed: int, step):
    return pm.sample(
        draws=args.draws,
        tune=args.tune,
        chains=args.chains,
        cores=1,
        step=step,
        random_seed=seed,
        progressbar=False,
        compute_convergence_checks=False,
    )


# -- output -------------------------------------------------------------------------------


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def sci(value: float) -> str:
    exponent = math.floor(math.log10(value)) if value > 0 else 0
    if -2 <= exponent <= 3:
        return fmt(value)
    return f"{value / 10**exponent:.2g}e{exponent}"


def environment() -> list[str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    versions = []
    for package in ("numpy", "pymc", "pytensor", "arviz", "nutpie", "scikit-learn"):
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


def properties_table(posts: list[Posterior], props: dict[str, dict]) -> list[str]:
    lines = [
        "| posterior | P | rows | data | reference sds | cond(cov) | cond(corr) "
        "| initial point (sds) | reference |",
        "|---|---:|---:|---|---|---:|---:|---:|---|",
    ]
    for post in posts:
        p = props[post.name]
        kind = p["reference"]
        if "reference_s" in p:
            kind += (
                f": {fmt(p['reference_s'])} s, max R-hat {p['max_rhat']:.4f}, min ESS bulk "
                f"{p['min_ess_bulk']:,.0f} / tail {p['min_ess_tail']:,.0f}, "
                f"{p['divergences']} divergences"
            )
            if p["problems"]:
                kind += f" (**not trustworthy: {', '.join(p['problems'])}**)"
        lines.append(
            f"| {post.name} | {p['P']} | {p['rows']:,} | {p['data']} | "
            f"{sci(p['sd_min'])}–{sci(p['sd_max'])} | {sci(p['cond_cov'])} | "
            f"{sci(p['cond_corr'])} | {sci(p['initial_sds'])} | {kind} |"
        )
    return lines


def results_table(rows: list[dict]) -> list[str]:
    lines = [
        "| posterior | sampler | max \\|Δmean\\|/sd | sd ratio | max R-hat | min ESS | ESS/s "
        "| wall s | pass |",
        "|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            message = r["error"].replace("|", "\\|")
            lines.append(
                f"| {r['posterior']} | {r['sampler']} | error: {message} | — | — | — | — | — "
                "| error |"
            )
            continue
        lines.append(
            f"| {r['posterior']} | {r['sampler']} | {fmt(r['mean_err'])} ({r['worst']}) | "
            f"{fmt(r['sd_ratio_min'])}–{fmt(r['sd_ratio_max'])} | {fmt(r['max_rhat'], 4)} | "
            f"{fmt(r['min_ess'])} | {fmt(r['ess_per_s'])} | {fmt(r['wall_s'])} | "
            f"{'pass' if r['passed'] else 'FAIL'} |"
        )
    return lines


def summary(rows: list[dict], samplers: list[str], n_posteriors: int) -> list[str]:
    lines = ["| sampler | passes | errors |", "|---|---:|---:|"]
    for sampler in samplers:
        mine = [r for r in rows if r["sampler"].split(" ")[0] == sampler]
        passes = sum(bool(r.get("passed")) for r in mine)
        errors = sum("error" in r for r in mine)
        lines.append(f"| {sampler} | {passes}/{n_posteriors} | {errors} |")
    return lines


def brief(row: dict) -> str:
    if "error" in row:
        return f"error: {row['error']}"
    return (
        f"{'pass' if row['passed'] else 'FAIL'}: |Δmean|/sd {fmt(row['mean_err'])}, sd ratio "
        f"{fmt(row['sd_ratio_min'])}–{fmt(row['sd_ratio_max'])}, R-hat {fmt(row['max_rhat'], 4)}"
        f", ESS {fmt(row['min_ess'])}, {fmt(row['wall_s'])} s"
    )


# -- main ---------------------------------------------------------------------------------


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], formatter_class=argparse.RawTextHelpFormatter
    )
    add = parser.add_argument
    add("--only", default=",".join(POSTERIORS), help="comma-separated posteriors (default: all)")
    add("--samplers", default=",".join(SAMPLERS), help=f"of {','.join(SAMPLERS)}")
    add("--tune", type=int, default=1000, help="warm-up draws per chain")
    add("--draws", type=int, default=1000, help="kept draws per chain")
    add("--chains", type=int, default=2)
    add("--quick", action="store_true", help=f"smoke test: {QUICK} warm-up and kept draws")
    add("--mean-tol", type=float, default=0.2, help="pass: |Δmean| within this many ref. sds")
    add("--sd-tol", type=float, default=0.25, help="pass: sd ratio within 1 ± this")
    add(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "pymc_sgmcmc_defaults",
        help="directory of the NUTS references (kept between runs)",
    )
    add("--references-only", action="store_true", help="compute (or load) references, stop")
    add("--reference-chains", type=int, default=4)
    add("--reference-draws", type=int, default=5000)
    add("--reference-tune", type=int, default=2000)
    add("--reference-target-accept", type=float, default=0.95)
    add("--row-timeout-s", type=float, default=1800.0, help="stop a row after this (0: never)")
    add("--seed", type=int, default=1)
    add("--out", type=Path, default=None, metavar="FILE.md")
    add("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    args.only = [name for name in args.only.split(",") if name]
    args.samplers = [name for name in args.samplers.split(",") if name]
    unknown = (set(args.only) - set(POSTERIORS)) | (set(args.samplers) - set(SAMPLERS))
    if unknown:
        parser.error(f"unknown names: {sorted(unknown)}")
    if args.quick:
        args.tune = args.draws = QUICK
    args.cache = args.cache.expanduser()
    return args


def main(argv=None) -> None:
    args = parse(argv)
    command = "python " + " ".join(
        shlex.quote(os.path.relpath(a) if i == 0 else a) for i, a in enumerate(sys.argv)
    )
    posts = [POSTERIORS[name]() for name in args.only]
    props, refs = {}, {}
    for post in posts:
        refs[post.name] = reference(args, post)
        props[post.name] = properties(post, refs[post.name])
        p = props[post.name]
        for problem in p.get("problems", []):
            print(
                f"WARNING: the reference of {post.name} fails a check: {problem}", file=sys.stderr
            )
    header = [
        "# Samplers with default arguments",
        "",
        *environment(),
        f"- Runs: `pm.sample(draws={args.draws}, tune={args.tune}, chains={args.chains}, "
        "cores=1)`, one seed per (posterior, sampler); wall time includes step construction "
        "and compilation",
        f"- Pass: every mean within {args.mean_tol:g} reference sd and every sd ratio within "
        f"[{1 - args.sd_tol:g}, {1 + args.sd_tol:g}], over every scalar of the posterior group",
        f"- Command: `{command}`",
        "",
        "## Posteriors",
        "",
        *properties_table(posts, props),
        "",
        *(f"- {post.name}: {post.description}" for post in posts),
    ]
    print("\n".join(header), file=sys.stderr, flush=True)
    rows: list[dict] = []
    if not args.references_only:
        for post in posts:
            for sampler in args.samplers:
                print(f"Running {post.name} / {sampler} ...", file=sys.stderr, flush=True)
                row = run_row(args, post, sampler, refs[post.name])
                rows.append(row)
                print(f"  {brief(row)}", file=sys.stderr, flush=True)
    lines = list(header)
    if rows:
        lines += [
            "",
            "## Results",
            "",
            *results_table(rows),
            "",
            "## Passes per sampler",
            "",
            *summary(rows, args.samplers, len(posts)),
        ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        raw = {"command": command, "properties": props, "rows": rows}
        args.json.write_text(json.dumps(raw, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
