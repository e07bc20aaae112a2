"""Running chains with ``pm.sample`` and scoring their draws against the exact posterior."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import arviz as az
import numpy as np
import pymc as pm
from pymc.exceptions import SamplingError

from .config import NAMES
from .output import fmt

NORMAL_GAMMA_COLUMNS = [
    "RMSE μ",
    "RMSE τ",
    "mean err μ",
    "mean err τ",
    "sd ratio μ",
    "sd ratio τ",
    "min ESS",
]
"""Columns of :func:`normal_gamma_cells` (Tables 1 and 5a)."""

LOGISTIC_COLUMNS = [
    "RMSE W₀",
    "RMSE W₁",
    "mean err W₀",
    "mean err W₁",
    "sd ratio W₀",
    "sd ratio W₁",
    "min ESS",
    "div.",
]
"""Columns of :func:`logistic_cells` (Tables 2 and 5b)."""


@dataclass
class Spec:
    """One row: a sampler class, its arguments, and whether it sees minibatches."""

    label: str
    cls: type
    kwargs: dict[str, Any]
    minibatch: bool

    @property
    def paper(self) -> str:
        """The paper's name of the sampler (its row of the published table)."""
        return NAMES[self.cls]


@dataclass
class Run:
    """Post-burn-in draws of one row, or why there are none."""

    draws: dict[str, np.ndarray] = field(default_factory=dict)  # (chain, draw, ...)
    stats: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: float = float("nan")
    failed: str = ""


def run_chains(model: pm.Model, spec: Spec, tune: int, draws: int, chains: int, seed: int) -> Run:
    """``pm.sample`` with one step method, sequential chains."""
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        # Divergence warnings are counted from sample_stats instead; short chains warn
        # about diagnostics that the tables report themselves.
        warnings.simplefilter("ignore")
        step = spec.cls(**spec.kwargs)
        try:
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                cores=1,
                step=step,
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
            )
        except SamplingError:
            return Run(failed="diverged", seconds=time.perf_counter() - start)
    posterior, sample_stats = idata.posterior, idata.sample_stats
    names = [v.name for v in model.free_RVs]
    return Run(
        draws={n: np.asarray(posterior[n].values) for n in names},
        stats={k: np.asarray(sample_stats[k].values) for k in sample_stats.data_vars},
        seconds=time.perf_counter() - start,
    )


def columns(draws: np.ndarray) -> np.ndarray:
    """(chain, draw, ...) → (chain, draw, k)."""
    return draws.reshape(draws.shape[0], draws.shape[1], -1)


def min_ess(run: Run) -> float:
    """The smallest bulk ESS over every scalar of the draws."""
    values = np.concatenate([columns(d) for d in run.draws.values()], axis=2)
    return float(min(az.ess(values[:, :, k], method="bulk") for k in range(values.shape[2])))


def divergences(run: Run) -> int:
    """Divergences counted by the end of every chain, summed."""
    return int(run.stats["divergences"][:, -1].sum()) if "divergences" in run.stats else 0


def scores(values: np.ndarray, truth: float, mean: float, sd: float) -> tuple[float, ...]:
    """RMSE against the truth, mean error in posterior sds, sd ratio."""
    x = values.ravel()
    return (
        float(np.sqrt(np.mean((x - truth) ** 2))),
        float((x.mean() - mean) / sd),
        float(x.std(ddof=1) / sd),
    )


def normal_gamma_cells(run: Run, exact: dict[str, tuple[float, float]]) -> list[str]:
    """Scores of ``μ`` and ``τ`` against 0, 1 and the exact posterior, and the min ESS."""
    mu = scores(run.draws["mu"], 0.0, *exact["mu"])
    tau = scores(run.draws["tau"], 1.0, *exact["tau"])
    errors = [fmt(mu[0]), fmt(tau[0]), f"{mu[1]:+.2f}", f"{tau[1]:+.2f}"]
    return errors + [f"{mu[2]:.2f}", f"{tau[2]:.2f}", f"{min_ess(run):.0f}"]


def logistic_cells(run: Run, truth: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> list[str]:
    """Scores of ``W₀`` and ``W₁`` against truth and posterior, min ESS, divergences."""
    w = columns(run.draws["w"])
    s0 = scores(w[:, :, 0], truth[0], mean[0], sd[0])
    s1 = scores(w[:, :, 1], truth[1], mean[1], sd[1])
    errors = [fmt(s0[0]), fmt(s1[0]), f"{s0[1]:+.2f}", f"{s1[1]:+.2f}"]
    return errors + [f"{s0[2]:.2f}", f"{s1[2]:.2f}", f"{min_ess(run):.0f}", str(divergences(run))]
