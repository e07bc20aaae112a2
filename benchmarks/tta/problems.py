"""The problems: logistic regression and the varying-intercept (hierarchical) model.

Their simulated data (:func:`simulate`), the models in PyMC (:func:`pymc_model`) and in
NumPyro (:func:`numpyro_model_fn`), and the quantities compared with the reference
(:func:`param_labels`, :func:`to_matrix`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported by the functions themselves: a worker imports what it needs
    import pymc as pm

from .config import CHUNK, MU_SD, PRIOR_SD, SIGMA_SCALE, TRUE_MU, TRUE_SIGMA, TRUE_W_SD

HEAVY_TAIL_LOG_SD = 2.0
"""``--group-sizes heavy``: the log-sd of the lognormal group sizes (a quarter of the groups
get 1-3 rows when the mean is 100)."""

STRONG_GROUP_ROWS = 10
"""``--reference-form mixed``: groups with at least this many rows are written centred."""


def group_sizes(groups: int, rows_per_group: int, law: str, seed: int) -> np.ndarray:
    """Rows of each group: all ``rows_per_group``, or heavy-tailed with that mean.

    ``"heavy"``: lognormal sizes of log-sd :data:`HEAVY_TAIL_LOG_SD` and mean
    ``rows_per_group``, rounded up (at least one row), from their own generator so that
    the row count is known before the data are simulated.
    """
    if law == "equal":
        return np.full(groups, rows_per_group, dtype=np.int64)
    rng = np.random.default_rng([seed, 1])
    log_mean = np.log(rows_per_group) - HEAVY_TAIL_LOG_SD**2 / 2
    sizes = np.ceil(rng.lognormal(log_mean, HEAVY_TAIL_LOG_SD, size=groups))
    return np.maximum(sizes, 1).astype(np.int64)


def simulate(args: argparse.Namespace, directory: Path) -> dict:
    """Write X, y (and the group of every row) to .npy files, chunk by chunk."""
    from scipy.special import expit

    hier = args.model == "hierarchical"
    n, d = args.n_rows, args.n_cols
    key = f"{args.model}-{n}x{d}-G{args.groups if hier else 0}-seed{args.data_seed}"
    if hier and args.group_sizes != "equal":
        key += f"-{args.group_sizes}"
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
    if hier:
        ends = np.cumsum(group_sizes(args.groups, args.rows_per_group, args.group_sizes,
                                     args.data_seed))  # fmt: skip
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        X[start:stop] = rng.normal(size=(stop - start, d))
        logit = X[start:stop] @ truth["w"]
        if hier:
            g[start:stop] = np.searchsorted(ends, np.arange(start, stop), side="right")
            logit += truth["a"][g[start:stop]]
        y[start:stop] = rng.uniform(size=stop - start) < expit(logit)
    for array in (X, y, g):
        if array is not None:
            array.flush()
    del X, y, g
    np.savez(truth_path, **truth)
    return {"paths": paths, "truth": truth, "key": key}


def param_labels(model: str, n_cols: int, groups: int) -> list[str]:
    """Names of the compared quantities, in the order of :func:`to_matrix`."""
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


def pymc_model(
    cfg: dict, X: np.ndarray, y: np.ndarray, g: np.ndarray | None, minibatch: bool
) -> pm.Model:
    """The PyMC model: logistic, or hierarchical when ``g`` (the rows' groups) is given.

    Non-centred intercepts ``a = mu + sigma z`` unless ``cfg["centered"]``; with
    ``minibatch``, the data come through ``pm.Minibatch`` and ``total_size`` is N.
    """
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


def numpyro_model_fn(
    hier: bool, groups: int, form: str = "non-centred", strong: np.ndarray | None = None
) -> Callable:
    """The same model written in NumPyro: a function of ``(X, y, g=None)``.

    ``form``: the intercepts ``a`` sampled directly (``"centred"``), as ``mu + sigma z``
    (``"non-centred"``), or ``"mixed"``: centred where ``strong`` (groups of many rows)
    and non-centred elsewhere, the form in which NUTS mixes best when group sizes vary;
    all three are the same posterior.
    """
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    if form == "mixed":
        strong_index = np.flatnonzero(strong)
        weak_index = np.flatnonzero(~strong)

    def model(X, y, g=None):
        w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SD).expand([X.shape[1]]).to_event(1))
        logit = X @ w
        if hier:
            mu = numpyro.sample("mu", dist.Normal(0.0, MU_SD))
            sigma = numpyro.sample("sigma", dist.HalfNormal(SIGMA_SCALE))
            if form == "centred":
                a = numpyro.sample("a", dist.Normal(mu, sigma).expand([groups]).to_event(1))
            elif form == "mixed":
                a_strong = numpyro.sample(
                    "a_strong", dist.Normal(mu, sigma).expand([strong_index.size]).to_event(1)
                )
                z_weak = numpyro.sample(
                    "z_weak", dist.Normal(0.0, 1.0).expand([weak_index.size]).to_event(1)
                )
                a = jnp.zeros(groups).at[strong_index].set(a_strong)
                a = numpyro.deterministic("a", a.at[weak_index].set(mu + sigma * z_weak))
            else:
                z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([groups]).to_event(1))
                a = mu + sigma * z
            logit = logit + a[g]
        numpyro.sample("y", dist.Bernoulli(logits=logit), obs=y)

    return model
