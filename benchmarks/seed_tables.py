"""Tables 1–3 of the MCEM paper, reproduced, and the choice of the M step's estimator.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM", §4.1
(Table 1: mean and precision of a 1-D normal) and §4.2 (Table 2: 2-D Bayesian logistic
regression; Table 3: per-iteration times), for HMC, SGHMC, SGNHT and their EM variants.
The paper's numbers are printed beside ours. Its RMSE "against the true parameter"
rewards a chain that is too narrow (a chain stuck at the truth scores 0), so each table
also scores the draws against the exact posterior: the error of the mean in posterior
sds and the ratio of the sds (1 is right). Table 4 compares the two estimators of the
M step (``mass_estimator="position"`` and ``"momentum"``) and the two structures
(``mass_structure="diag"`` and ``"dense"``) on an ill-conditioned Gaussian posterior by the
effective sample size per gradient relative to the fixed-mass twin.

Table 5 gives the Nosé–Poincaré and Riemannian rows of Tables 1–3 (SG-NPHMC,
SG-NPHMC-EM, SGR-NPHMC, RHMC, with SGNHT-EM and HMC-EM beside them), every sampler with
its default arguments (``step_size="auto"``, ``n_steps=10``), and tests the paper's claim
that its EM variants reach similar accuracy about an order of magnitude faster than the
Riemannian samplers.

Problems (fixed seeds)
----------------------
Table 1. 5,000 points from N(0, 1); ``τ ~ Gamma(shape 1/2, rate 1/2)``, which is the
paper's W(τ | 1, 1) in one dimension, ``μ | τ ~ N(0, 1/(κ₀τ))`` with ``κ₀ = 1``,
``x_i ~ N(μ, 1/τ)``: the normal–gamma model, whose posterior is normal–gamma in closed
form (``μ`` Student-t, ``τ`` gamma). ``τ`` is sampled on its own scale (no log
transform), as the paper's samplers do; a step to ``τ < 0`` gives a non-finite density,
which HMC rejects and the stochastic samplers treat as a divergence.

Table 2. 2,000 points ``x ~ ½ N([1, −1], I) + ½ N([−1, 1], I)``, labels
``y ~ Bernoulli(σ(xᵀw))`` with ``w = [1, −1]`` and no intercept, prior ``w ~ N(0, 10 I)``
(variance 10). Labels are Bernoulli draws, not ``sign(xᵀw)``: deterministic labels make
the data linearly separable, and the posterior then sits near ``w ≈ [11, −11]`` with
sds ≈ 1.3, which cannot give the paper's RMSEs of 0.01–0.3 against ``[1, −1]``. The exact
posterior is computed by quadrature on a 241 × 241 grid (±9 Laplace sds), and a long
NUTS run (PyMC's own sampler) is printed as a cross-check.

Table 3. The synthetic set of Table 2 and synthetic sets of the shapes of the UCI
Australian credit (690 × 14) and Heart (270 × 13) data (the real data cannot be
downloaded where this benchmark runs; the time per iteration depends on the shapes,
not on the values): standard normal features, Bernoulli labels. Also the 1-D set of
Table 1, for its time column.

Table 4. Bayesian linear regression with known noise sd 1, 1,000 rows, 5 features of
scales 0.25–4 of which two are correlated 0.95, prior N(0, 10 I): a Gaussian posterior
(exact) with posterior sds 0.007–0.12 along its principal axes (condition number
≈ 300). Exact gradients (all rows) and, separately, minibatches of 100.

Samplers
--------
10 leapfrog (integrator) steps per iteration everywhere; minibatches of 100 rows with a
fresh minibatch for every gradient for SGHMC and SGNHT; HMC uses all rows. The paper's
"A" is SGNHT's diffusion ``A``; for SGHMC we read it as the friction ``C`` with noise
estimate ``B̂ = 0``, so that both inject ``N(0, 2Aε)`` per step (SGHMC: A = 10, SGNHT:
A = 1). EM samplers use the package defaults (diagonal mass, ``S`` starting at 100 and
grown by the §3.2 rule, mass learned during tuning only) except where a row says
otherwise; Table 2 starts ``S`` at 300 as the paper does. Burn-in (= tuning) draws are
discarded: 5,000 in Table 1 and 10,000 in Table 2, as in the paper.

Timing
------
``step.step`` (the step method's whole call, as ``pm.sample`` makes it) in blocks of
300 iterations, by this process's CPU time (on a shared machine the wall time also counts
other processes); the blocks of all cases of a data set are interleaved (round-robin, the
order reversed every other round) so that a busy spell hits each case alike. An EM
sampler is timed while it learns (tuning), with ``S`` fixed at 300 as for the paper's
Table 3 (so every block holds exactly one M step), with the defaults, and after tuning
(mass frozen). Table 3b gives EM / twin as the median over rounds of the ratio of the
two cases' blocks and as the ratio of their fastest blocks; Table 3c measures the EM
bookkeeping itself (sample storage, test-function records, M steps) over the first
iterations of a new chain, as a share of the twin's time per iteration.

    python benchmarks/seed_tables.py              # everything (see docs/em.md for time)
    python benchmarks/seed_tables.py --quick      # shorter chains, fewer timing rounds
    python benchmarks/seed_tables.py --tables 1 3 # a subset
    python benchmarks/seed_tables.py --quick --tables 5  # the NP and Riemannian rows
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import scipy
from pymc.exceptions import SamplingError
from scipy.special import expit, log_expit

import pymc_sgmcmc as pmsg

N_STEPS = 10
BATCH = 100
SEED = 20240611
EM_TOLERANCE = 1.10
"""An EM sampler's time per iteration may exceed its fixed-mass twin's by 10 % at most."""

# The paper's numbers: RMSE of μ, RMSE of τ, ms per iteration (Table 1); RMSE of W₀ and
# W₁ (Table 2); ms per iteration on the synthetic, Australian and Heart sets (Table 3).
PAPER_TABLE1 = {
    "HMC": (0.0196, 0.0197, 0.417),
    "HMC-EM": (0.0115, 0.0104, 0.423),
    "SGHMC": (0.1590, 0.1646, 0.133),
    "SGHMC-EM": (0.0713, 0.2243, 0.132),
    "SGNHT": (0.0344, 0.0335, 0.148),
    "SGNHT-EM": (0.0317, 0.0289, 0.148),
}
PAPER_TABLE2 = {
    "HMC": (0.0456, 0.1290),
    "HMC-EM": (0.0145, 0.0851),
    "SGHMC": (0.2812, 0.2717),
    "SGHMC-EM": (0.2804, 0.2583),
    "SGNHT": (0.2035, 0.1921),
    "SGNHT-EM": (0.1983, 0.1729),
}
PAPER_TABLE3 = {
    "HMC": (1.435, 0.987, 0.791),
    "HMC-EM": (1.428, 0.970, 0.799),
    "SGHMC": (0.200, 0.136, 0.112),
    "SGHMC-EM": (0.203, 0.141, 0.131),
    "SGNHT": (0.302, 0.270, 0.166),
    "SGNHT-EM": (0.306, 0.251, 0.175),
}

# The Nosé–Poincaré and Riemannian rows of the same tables (Table 3: synthetic,
# Australian, Heart).
PAPER_NP_TABLE1 = {
    "SG-NPHMC": (0.0326, 0.0433, 0.514),
    "SG-NPHMC-EM": (0.0274, 0.0354, 0.498),
    "SGR-NPHMC": (0.0240, 0.0308, 3.145),
    "RHMC": (0.0111, 0.0089, 5.748),
}
PAPER_NP_TABLE2 = {
    "SG-NPHMC": (0.4945, 0.4263),
    "SG-NPHMC-EM": (0.0990, 0.4229),
    "SGR-NPHMC": (0.1901, 0.1925),
    "RHMC": (0.0091, 0.0574),
}
PAPER_NP_TABLE3 = {
    "SG-NPHMC": (0.731, 0.512, 0.403),
    "SG-NPHMC-EM": (0.803, 0.525, 0.426),
    "SGR-NPHMC": (6.720, 4.568, 3.676),
    "RHMC": (1550.0, 367.0, 209.0),
}

TWINS = {pmsg.HMCEM: pmsg.HMC, pmsg.SGHMCEM: pmsg.SGHMC, pmsg.SGNHTEM: pmsg.SGNHT}
NAMES = {
    pmsg.HMC: "HMC",
    pmsg.HMCEM: "HMC-EM",
    pmsg.SGHMC: "SGHMC",
    pmsg.SGHMCEM: "SGHMC-EM",
    pmsg.SGNHT: "SGNHT",
    pmsg.SGNHTEM: "SGNHT-EM",
}


@dataclass
class Sizes:
    """Chain lengths and timing rounds."""

    chains: int
    tune1: int
    draws1: int
    tune2: int
    draws2: int
    nuts_draws: int
    tune4: int
    draws4: int
    rounds: int
    bookkeeping: int
    block: int = 300

    @classmethod
    def from_args(cls, quick: bool) -> Sizes:
        if quick:
            return cls(1, 2000, 2000, 3000, 3000, 1000, 2000, 2000, 4, 1000)
        return cls(2, 5000, 5000, 10000, 10000, 5000, 5000, 5000, 15, 3000)


# -- output -----------------------------------------------------------------------------


def environment() -> list[str]:
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return [
        f"CPU: {cpu}, {os.cpu_count()} logical cores; {platform.system()} "
        f"{platform.machine()}; Python {platform.python_version()}",
        f"NumPy {np.__version__}, SciPy {scipy.__version__}, PyMC {pm.__version__}, "
        f"PyTensor {pytensor.__version__} (linker {pytensor.config.linker}), ArviZ "
        f"{az.__version__}, pymc_sgmcmc {pmsg.__version__}",
    ]


def print_table(title: str, header: list[str], rows: list[list[str]], notes=()) -> None:
    """A Markdown table (also readable as plain text)."""
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(f"\n### {title}\n")
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    for note in notes:
        print(f"\n{note}")
    print(flush=True)


def fmt(x: float, digits: int = 4) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- running chains ---------------------------------------------------------------------


@dataclass
class Spec:
    """One row: a sampler class, its arguments, and whether it sees minibatches."""

    label: str
    cls: type
    kwargs: dict[str, Any]
    minibatch: bool

    @property
    def paper(self) -> str:
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
    values = np.concatenate([columns(d) for d in run.draws.values()], axis=2)
    return float(min(az.ess(values[:, :, k], method="bulk") for k in range(values.shape[2])))


def divergences(run: Run) -> int:
    return int(run.stats["divergences"][:, -1].sum()) if "divergences" in run.stats else 0


def scores(values: np.ndarray, truth: float, mean: float, sd: float) -> tuple[float, ...]:
    """RMSE against the truth, mean error in posterior sds, sd ratio."""
    x = values.ravel()
    return (
        float(np.sqrt(np.mean((x - truth) ** 2))),
        float((x.mean() - mean) / sd),
        float(x.std(ddof=1) / sd),
    )


# -- timing -----------------------------------------------------------------------------


@dataclass
class TimedCase:
    """A step method timed in blocks of ``step.step`` calls (ms per iteration)."""

    label: str
    step: Any
    start: dict
    samples: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.point = dict(self.start)

    def block(self, n: int) -> float:
        # CPU time of this process: on a shared machine, wall time also counts the time
        # other processes hold the core, which differs from block to block.
        point = self.point
        start = time.process_time()
        for _ in range(n):
            point, _ = self.step.step(point)
        elapsed = time.process_time() - start
        self.point = point
        return elapsed / n * 1e3

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def timed_step(model: pm.Model, cls: type, kwargs: dict, seed: int, learning: bool) -> Any:
    """A compiled step method, in its tuning phase (``learning``: an EM sampler learns its
    mass) or past it (an EM sampler's mass is frozen, the default after tuning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = cls(model=model, **kwargs)
        step.trajectory_function  # noqa: B018 - compile now, outside the timing
    step.setup_chain(np.random.default_rng(seed), 10**9 if learning else 0, 1)
    return step


def measure(cases: list[TimedCase], rounds: int, block: int) -> None:
    """One warm-up block each (JIT compilation), then interleaved rounds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            case.block(block)
        for r in range(rounds):
            for case in cases if r % 2 == 0 else cases[::-1]:
                case.samples.append(case.block(block))


def paired_ratio(a: TimedCase, b: TimedCase) -> float:
    """Median over rounds of the ratio of the two cases' blocks in that round."""
    return statistics.median(x / y for x, y in zip(a.samples, b.samples, strict=True))


def best_ratio(a: TimedCase, b: TimedCase) -> float:
    """Ratio of the fastest blocks: the least disturbed by other processes."""
    return min(a.samples) / min(b.samples)


# -- Table 1: 1-D normal, normal–gamma prior ----------------------------------------------

T1_N = 5000
KAPPA0 = 1.0
GAMMA_SHAPE, GAMMA_RATE = 0.5, 0.5  # W(τ | 1, 1) in one dimension


def normal_data(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(T1_N)


def normal_gamma_model(x: np.ndarray, minibatch: bool) -> pm.Model:
    """``τ ~ Gamma(½, ½)``, ``μ | τ ~ N(0, 1/(κ₀τ))``, ``x_i ~ N(μ, 1/τ)``."""
    with pm.Model() as model:
        data = pm.Minibatch(x, batch_size=BATCH) if minibatch else x
        tau = pm.Gamma("tau", alpha=GAMMA_SHAPE, beta=GAMMA_RATE, default_transform=None)
        mu = pm.Normal("mu", 0.0, tau=KAPPA0 * tau)
        pm.Normal("x", mu, tau=tau, observed=data, total_size=len(x) if minibatch else None)
    return model


def normal_gamma_posterior(x: np.ndarray) -> dict[str, tuple[float, float]]:
    """Exact posterior means and sds of ``μ`` (Student-t) and ``τ`` (gamma)."""
    n, xbar = len(x), x.mean()
    kappa = KAPPA0 + n
    alpha = GAMMA_SHAPE + n / 2
    beta = GAMMA_RATE + 0.5 * ((x - xbar) ** 2).sum() + KAPPA0 * n * xbar**2 / (2 * kappa)
    return {
        "mu": (n * xbar / kappa, np.sqrt(beta / (kappa * (alpha - 1)))),
        "tau": (alpha / beta, np.sqrt(alpha) / beta),
    }


def table1_specs() -> list[Spec]:
    hmc = {"step_size": 1e-2, "n_steps": N_STEPS}
    rows = [
        Spec("HMC", pmsg.HMC, hmc, False),
        Spec("HMC-EM", pmsg.HMCEM, hmc, False),
        Spec("HMC-EM, momentum", pmsg.HMCEM, hmc | {"mass_estimator": "momentum"}, False),
        # Not the paper's: without HMC's step-size jitter, 10 leapfrog steps of 0.01 are
        # almost exactly one period of the posterior that the learned mass whitens, and
        # successive draws nearly coincide.
        Spec("HMC-EM, no jitter", pmsg.HMCEM, hmc | {"step_jitter": 0.0}, False),
    ]
    for eps in (1e-2, 1e-3):
        sghmc = {"step_size": eps, "n_steps": N_STEPS, "friction": 10.0}
        rows += [
            Spec("SGHMC", pmsg.SGHMC, sghmc, True),
            Spec("SGHMC-EM", pmsg.SGHMCEM, sghmc, True),
            Spec("SGHMC-EM, momentum", pmsg.SGHMCEM, sghmc | {"mass_estimator": "momentum"}, True),
        ]
    for eps in (1e-3, 1e-2):
        sgnht = {"step_size": eps, "n_steps": N_STEPS, "diffusion": 1.0}
        rows += [
            Spec("SGNHT", pmsg.SGNHT, sgnht, True),
            Spec("SGNHT-EM", pmsg.SGNHTEM, sgnht, True),
            Spec("SGNHT-EM, momentum", pmsg.SGNHTEM, sgnht | {"mass_estimator": "momentum"}, True),
        ]
    return rows


def table1(sizes: Sizes, times: dict) -> None:
    x = normal_data(SEED)
    exact = normal_gamma_posterior(x)
    models = {mb: normal_gamma_model(x, mb) for mb in (False, True)}
    rows = []
    for k, spec in enumerate(table1_specs()):
        run = run_chains(
            models[spec.minibatch], spec, sizes.tune1, sizes.draws1, sizes.chains, SEED + k
        )
        paper = PAPER_TABLE1[spec.paper]
        eps = f"{spec.kwargs['step_size']:g}"
        time_ms = times.get(("normal", spec.label, eps))
        head = [spec.label, eps, fmt(paper[0]), fmt(paper[1])]
        if run.failed:
            rows.append(head + [run.failed] + [""] * 6 + [fmt(time_ms, 3), fmt(paper[2], 3)])
            continue
        mu = scores(run.draws["mu"], 0.0, *exact["mu"])
        tau = scores(run.draws["tau"], 1.0, *exact["tau"])
        rows.append(
            head
            + [fmt(mu[0]), fmt(tau[0]), f"{mu[1]:+.2f}", f"{tau[1]:+.2f}"]
            + [f"{mu[2]:.2f}", f"{tau[2]:.2f}", f"{min_ess(run):.0f}"]
            + [fmt(time_ms, 3), fmt(paper[2], 3)]
        )
        progress(f"Table 1: {spec.label} ε={eps} done in {run.seconds:.0f} s")
    print_table(
        f"Table 1 — 1-D normal, normal–gamma prior, N = {T1_N:,} "
        f"({sizes.chains} chain(s) × {sizes.draws1:,} draws after {sizes.tune1:,} burn-in)",
        [
            "method",
            "ε",
            "paper RMSE μ",
            "paper RMSE τ",
            "RMSE μ",
            "RMSE τ",
            "mean err μ",
            "mean err τ",
            "sd ratio μ",
            "sd ratio τ",
            "min ESS",
            "ms/iter",
            "paper ms",
        ],
        rows,
        [
            f"Exact posterior: μ = {exact['mu'][0]:.4f} ± {exact['mu'][1]:.4f}, "
            f"τ = {exact['tau'][0]:.4f} ± {exact['tau'][1]:.4f} (mean ± sd). RMSE is against "
            "μ = 0, τ = 1 (the paper's metric); a perfect sampler scores "
            f"RMSE μ = {np.hypot(*exact['mu']):.4f}, RMSE τ = "
            f"{np.hypot(exact['tau'][0] - 1, exact['tau'][1]):.4f}. Mean errors are in "
            "exact posterior sds, sd ratio = sampled sd / exact sd.",
            "HMC: all rows, full-data Metropolis–Hastings test. SGHMC: friction C = 10, "
            "B̂ = 0; SGNHT: diffusion A = 1; minibatch 100. '—' in ms/iter: not timed. "
            "HMC's step size is jittered by ±15 % per draw (the default, as PyMC's HMC). "
            "The 'no jitter' row is not the paper's setting: with exactly 10 steps of 0.01 "
            "the learned mass makes both parameters oscillate with the same period, about "
            "one trajectory long (≈ 2π), so that successive draws nearly coincide.",
        ],
    )


# -- Table 2: 2-D Bayesian logistic regression ----------------------------------------------

T2_N = 2000
TRUE_W = np.array([1.0, -1.0])
PRIOR_VAR = 10.0


def mixture_logistic_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = np.where(rng.random(T2_N)[:, None] < 0.5, [1.0, -1.0], [-1.0, 1.0])
    X = centres + rng.standard_normal((T2_N, 2))
    y = (rng.random(T2_N) < expit(X @ TRUE_W)).astype(float)
    return X, y


def shaped_logistic_data(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < expit(X @ rng.normal(0.0, 0.5, d))).astype(float)
    return X, y


def logistic_model(X: np.ndarray, y: np.ndarray, minibatch: bool) -> pm.Model:
    with pm.Model() as model:
        if minibatch:
            Xb, yb = pm.Minibatch(X, y, batch_size=BATCH)
        else:
            Xb, yb = pm.Data("X", X), pm.Data("y_obs", y)
        w = pm.Normal("w", 0.0, np.sqrt(PRIOR_VAR), shape=X.shape[1])
        pm.Bernoulli("y", logit_p=Xb @ w, observed=yb, total_size=len(y) if minibatch else None)
    return model


def logistic_log_posterior(X: np.ndarray, y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Unnormalised log posterior at each row of ``W``."""
    z = X @ W.T
    loglik = (y[:, None] * log_expit(z) + (1 - y[:, None]) * log_expit(-z)).sum(axis=0)
    return loglik - 0.5 * (W**2).sum(axis=1) / PRIOR_VAR


def quadrature_posterior(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior mean and sds by quadrature on a grid in Laplace-whitened axes."""
    w = np.zeros(X.shape[1])
    for _ in range(50):  # Newton's method for the mode
        p = expit(X @ w)
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.eye(len(w)) / PRIOR_VAR
        w = w + np.linalg.solve(hess, X.T @ (y - p) - w / PRIOR_VAR)
    factor = np.linalg.cholesky(np.linalg.inv(hess))
    axis = np.linspace(-9.0, 9.0, 241)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    W = w + grid @ factor.T  # a linear map: uniform quadrature weights
    logp = np.concatenate([logistic_log_posterior(X, y, c) for c in np.array_split(W, 32)])
    weights = np.exp(logp - logp.max())
    weights /= weights.sum()
    mean = weights @ W
    sd = np.sqrt(weights @ (W - mean) ** 2)
    return mean, sd


def table2_specs() -> list[Spec]:
    em = {"sample_size": 300}
    hmc = {"step_size": 1e-2, "n_steps": N_STEPS}
    rows = [
        Spec("HMC", pmsg.HMC, hmc, False),
        Spec("HMC-EM", pmsg.HMCEM, hmc | em, False),
        Spec("HMC-EM, momentum", pmsg.HMCEM, hmc | em | {"mass_estimator": "momentum"}, False),
    ]
    for eps in (1e-2, 1e-3):
        sghmc = {"step_size": eps, "n_steps": N_STEPS, "friction": 10.0}
        sgnht = {"step_size": eps, "n_steps": N_STEPS, "diffusion": 1.0}
        for cls, em_cls, kw in (
            (pmsg.SGHMC, pmsg.SGHMCEM, sghmc),
            (pmsg.SGNHT, pmsg.SGNHTEM, sgnht),
        ):
            name = NAMES[cls]
            rows += [
                Spec(name, cls, kw, True),
                Spec(f"{name}-EM", em_cls, kw | em, True),
                Spec(
                    f"{name}-EM, momentum", em_cls, kw | em | {"mass_estimator": "momentum"}, True
                ),
            ]
    return rows


def table2(sizes: Sizes) -> None:
    X, y = mixture_logistic_data(SEED)
    mean, sd = quadrature_posterior(X, y)
    models = {mb: logistic_model(X, y, mb) for mb in (False, True)}
    progress("Table 2: NUTS reference")
    with models[False], warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nuts = pm.sample(
            draws=sizes.nuts_draws,
            tune=1000,
            chains=2,
            cores=1,
            nuts_sampler="pymc",
            random_seed=SEED,
            progressbar=False,
            compute_convergence_checks=False,
        )
    nuts_w = nuts.posterior["w"].values.reshape(-1, 2)
    nuts_mcse = [float(az.mcse(nuts.posterior["w"].values[:, :, k])) for k in range(2)]
    rows = []
    for k, spec in enumerate(table2_specs()):
        run = run_chains(
            models[spec.minibatch], spec, sizes.tune2, sizes.draws2, sizes.chains, SEED + 100 + k
        )
        paper = PAPER_TABLE2[spec.paper]
        eps = f"{spec.kwargs['step_size']:g}"
        head = [spec.label, eps, fmt(paper[0]), fmt(paper[1])]
        if run.failed:
            rows.append(head + [run.failed] + [""] * 7)
            continue
        w = columns(run.draws["w"])
        s0 = scores(w[:, :, 0], TRUE_W[0], mean[0], sd[0])
        s1 = scores(w[:, :, 1], TRUE_W[1], mean[1], sd[1])
        rows.append(
            head
            + [fmt(s0[0]), fmt(s1[0]), f"{s0[1]:+.2f}", f"{s1[1]:+.2f}"]
            + [f"{s0[2]:.2f}", f"{s1[2]:.2f}", f"{min_ess(run):.0f}", str(divergences(run))]
        )
        progress(f"Table 2: {spec.label} ε={eps} done in {run.seconds:.0f} s")
    rmse_exact = np.sqrt(sd**2 + (mean - TRUE_W) ** 2)
    print_table(
        f"Table 2 — 2-D Bayesian logistic regression, N = {T2_N:,} "
        f"({sizes.chains} chain(s) × {sizes.draws2:,} draws after {sizes.tune2:,} burn-in)",
        [
            "method",
            "ε",
            "paper RMSE W₀",
            "paper RMSE W₁",
            "RMSE W₀",
            "RMSE W₁",
            "mean err W₀",
            "mean err W₁",
            "sd ratio W₀",
            "sd ratio W₁",
            "min ESS",
            "div.",
        ],
        rows,
        [
            f"Exact posterior (quadrature): W₀ = {mean[0]:.4f} ± {sd[0]:.4f}, W₁ = "
            f"{mean[1]:.4f} ± {sd[1]:.4f}; a perfect sampler scores RMSE {rmse_exact[0]:.4f}"
            f", {rmse_exact[1]:.4f} against the true [1, −1]. NUTS ({2 * sizes.nuts_draws:,} "
            f"draws): W₀ = {nuts_w[:, 0].mean():.4f} ± {nuts_w[:, 0].std():.4f}, W₁ = "
            f"{nuts_w[:, 1].mean():.4f} ± {nuts_w[:, 1].std():.4f} (MCSE of the means "
            f"{nuts_mcse[0]:.4f}, {nuts_mcse[1]:.4f}).",
            "SGHMC: C = 10, B̂ = 0; SGNHT: A = 1; minibatch 100; EM samplers start at "
            "S = 300 (the paper's S_count). div.: trajectories restarted after a "
            "non-finite state (SG samplers) or flagged divergent (HMC).",
        ],
    )


# -- Table 3: per-iteration times -----------------------------------------------------------

TIMING_SETS = {
    # name: (description, n, d, HMC ε, SGHMC ε, SGNHT ε)
    "normal": ("1-D normal (Table 1)", T1_N, 1, 1e-2, 1e-2, 1e-3),
    "synthetic": ("synthetic LR", T2_N, 2, 1e-2, 1e-2, 1e-2),
    "australian": ("Australian-shaped", 690, 14, 1e-2, 1e-2, 1e-2),
    "heart": ("Heart-shaped", 270, 13, 1e-2, 1e-2, 1e-2),
}


def timing_models(name: str) -> tuple[dict[bool, pm.Model], int]:
    if name == "normal":
        x = normal_data(SEED)
        return {mb: normal_gamma_model(x, mb) for mb in (False, True)}, 2
    if name == "synthetic":
        X, y = mixture_logistic_data(SEED)
    else:
        _, n, d, *_ = TIMING_SETS[name]
        X, y = shaped_logistic_data(n, d, SEED)
    return {mb: logistic_model(X, y, mb) for mb in (False, True)}, X.shape[1]


TIMING_VARIANTS = (
    # (label suffix, EM or twin, extra arguments, learning, dense)
    ("", False, {}, True, False),
    ("-EM, S = 300", True, {"sample_size": 300, "adaptive_sample_size": False}, True, False),
    ("-EM, defaults", True, {}, True, False),
    ("-EM, defaults, after tuning", True, {}, False, False),
    (", dense I", False, {}, True, True),
    ("-EM, dense, S = 300", True, {"sample_size": 300, "adaptive_sample_size": False}, True, True),
)
TIMING_PAIRS = (
    # (pair label suffix, EM case suffix, twin case suffix)
    ("-EM, S = 300 (learning)", "-EM, S = 300", ""),
    ("-EM, defaults (learning)", "-EM, defaults", ""),
    ("-EM, defaults (after tuning)", "-EM, defaults, after tuning", ""),
    ("-EM, dense, S = 300 (learning) / dense twin", "-EM, dense, S = 300", ", dense I"),
)


def timing_cases(name: str, seed: int) -> list[TimedCase]:
    """Every case of one data set (see ``TIMING_VARIANTS``)."""
    models, dim = timing_models(name)
    _, _, _, eps_hmc, eps_sghmc, eps_sgnht = TIMING_SETS[name]
    cases = []
    for em_cls, eps, extra, minibatch in (
        (pmsg.HMCEM, eps_hmc, {}, False),
        (pmsg.SGHMCEM, eps_sghmc, {"friction": 10.0}, True),
        (pmsg.SGNHTEM, eps_sgnht, {"diffusion": 1.0}, True),
    ):
        twin_cls = TWINS[em_cls]
        model = models[minibatch]
        base = {"step_size": eps, "n_steps": N_STEPS} | extra
        point = model.initial_point()
        for suffix, is_em, kwargs, learning, dense in TIMING_VARIANTS:
            kwargs = base | kwargs
            if dense:
                kwargs |= {"mass_structure": "dense"} if is_em else {"mass": np.eye(dim)}
            cls = em_cls if is_em else twin_cls
            step = timed_step(model, cls, kwargs, seed, learning)
            cases.append(TimedCase(NAMES[twin_cls] + suffix, step, point))
    return cases


EM_PARTS = ("records", "m_steps")
"""An EM iteration is its twin's iteration plus the mass adapter's ``update``: storing the
sample (and its gradient, which comes out of the trajectory), the test-function records
(``records``) and the M steps (``m_steps``) that it triggers."""


def em_bookkeeping(step: Any, point: dict, n: int) -> dict[str, float]:
    """µs per iteration of EM bookkeeping over ``n`` iterations of a new chain.

    Times every call of the mass adapter's ``update`` (``step.mass_adapter``), wrapped on
    the instance for this measurement only, and sorts the calls by what they did, read
    from the adapter's public state: a call that ended an E step ran an M step (or had
    it refused by the stiffness check), by this process's CPU time, which leaves out the
    time other processes hold the core; a call that stored a test-function record costs
    the median of those calls' wall time; any other call only stored the sample, about a
    microsecond, too short for a CPU-time clock, so its cost is the median over
    iterations of its wall time, robust to the iterations at which another process took
    the core. The records' share is what their calls cost beyond a plain one. Measured
    directly, the overhead does not rest on the difference of two noisy totals. (The
    generic step's few lines that hand the iteration to the adapter are not included.)
    """
    adapter = step.mass_adapter
    method = adapter.update
    m_steps = [0.0]
    plain: list[float] = []
    recording: list[float] = []

    def update(*args):
        samples, records = len(adapter.em_samples), len(adapter.em_records)
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        try:
            return method(*args)
        finally:
            wall = time.perf_counter() - start_wall
            if len(adapter.em_samples) <= samples:  # the E step ended: an M step
                m_steps[0] += time.process_time() - start_cpu
            elif len(adapter.em_records) > records:
                recording.append(wall)
            else:
                plain.append(wall)

    adapter.update = update
    step.setup_chain(np.random.default_rng(SEED), 10**9, 1)  # S and the mass start afresh
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(n):
                point, _ = step.step(point)
    finally:
        del adapter.update  # the class's method again
    own = statistics.median(plain) if plain else 0.0
    extra = max(statistics.median(recording) - own, 0.0) * len(recording) if recording else 0.0
    per_iteration = {"records": extra / n * 1e6, "m_steps": m_steps[0] / n * 1e6}
    return {"total": own * 1e6 + sum(per_iteration.values())} | per_iteration


def run_timings(sizes: Sizes, names: list[str]) -> dict:
    """Time every data set; results keyed (set, case label) and (set, 'ratio', pair)."""
    results: dict = {}
    for k, name in enumerate(names):
        progress(f"Timing: {TIMING_SETS[name][0]} (compiling)")
        cases = timing_cases(name, SEED + k)
        progress(f"Timing: {TIMING_SETS[name][0]} ({sizes.rounds} rounds)")
        measure(cases, sizes.rounds, sizes.block)
        by_label = {c.label: c for c in cases}
        for c in cases:
            results[name, c.label] = (c.median, min(c.samples), max(c.samples))
        for sampler in ("HMC", "SGHMC", "SGNHT"):
            for pair, em, twin in TIMING_PAIRS:
                a, b = by_label[sampler + em], by_label[sampler + twin]
                results[name, "ratio", sampler + pair] = (paired_ratio(a, b), best_ratio(a, b))
        progress(f"Timing: {TIMING_SETS[name][0]} (EM bookkeeping)")
        for c in cases:
            if "-EM" in c.label and "after tuning" not in c.label:
                results[name, "bookkeeping", c.label] = em_bookkeeping(
                    c.step, dict(c.start), sizes.bookkeeping
                )
    return results


def table1_times(results: dict) -> dict:
    """Table 1's time column: the default twin and EM rows of the 1-D set."""
    out = {}
    for sampler, eps in (("HMC", 1e-2), ("SGHMC", 1e-2), ("SGNHT", 1e-3)):
        em = f"{sampler}-EM, defaults"
        for label, case in ((sampler, sampler), (f"{sampler}-EM", em)):
            if ("normal", case) in results:
                out["normal", label, f"{eps:g}"] = results["normal", case][0]
    return out


def table3(sizes: Sizes, results: dict, names: list[str]) -> None:
    header = ["method"] + [
        f"{TIMING_SETS[n][0]} ({TIMING_SETS[n][1]}×{TIMING_SETS[n][2]})" for n in names
    ]
    paper_index = {"synthetic": 0, "australian": 1, "heart": 2}
    rows = []
    for sampler in ("HMC", "SGHMC", "SGNHT"):
        for suffix, *_ in TIMING_VARIANTS:
            label = sampler + suffix
            row = [label]
            paper_key = {"": sampler, "-EM, S = 300": f"{sampler}-EM"}.get(suffix)
            for name in names:
                median, low, high = results[name, label]
                cell = f"{median:.3f} ({low:.3f}–{high:.3f})"
                if name in paper_index and paper_key:
                    cell += f" [paper {PAPER_TABLE3[paper_key][paper_index[name]]:.3f}]"
                row.append(cell)
            rows.append(row)
    print_table(
        f"Table 3 — ms per iteration ({N_STEPS} leapfrog steps): median (min–max) of "
        f"{sizes.rounds} interleaved blocks of {sizes.block} iterations",
        header,
        rows,
        [
            "HMC uses all rows (and evaluates the full-data log density twice per "
            "iteration for its test); SGHMC and SGNHT a fresh minibatch of 100 per "
            "gradient. EM rows learn the mass (tuning phase) unless marked 'after tuning'. "
            "'S = 300': E step fixed at 300 iterations, as for the paper's timing; "
            "'defaults': S from 100, grown by the §3.2 rule (its test function takes the "
            "gradient the trajectory returns); 'dense I': the fixed-mass twin "
            "with a dense identity mass. Australian and Heart: synthetic data of those "
            "shapes.",
        ],
    )
    rows, verdicts = [], []
    for sampler in ("HMC", "SGHMC", "SGNHT"):
        for pair, *_ in TIMING_PAIRS:
            ratios = [results[name, "ratio", sampler + pair] for name in names]
            if all(max(both) <= EM_TOLERANCE for both in ratios):
                verdict = "PASS"
            elif any(min(both) > EM_TOLERANCE for both in ratios):
                verdict = "FAIL"
            else:
                verdict = "noisy"
            verdicts.append(verdict)
            cells = [f"{median:.3f} / {best:.3f}" for median, best in ratios]
            rows.append([sampler + pair, *cells, verdict])
    print_table(
        "Table 3b — time per iteration, EM sampler / its fixed-mass twin: median of the "
        "per-round ratios / ratio of the fastest blocks (requirement ≤ "
        f"{EM_TOLERANCE:.2f})",
        ["EM case / twin", *[TIMING_SETS[n][0] for n in names], "verdict"],
        rows,
        [
            "PASS: both estimates within the requirement on every data set; FAIL: both "
            "above it on some data set; noisy: only one of the two above it. Ratios near 1 "
            "for 'after tuning' show how noisy the machine was.",
            f"Pairs: {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL, "
            f"{verdicts.count('noisy')} noisy.",
        ],
    )
    rows = []
    for sampler in ("HMC", "SGHMC", "SGNHT"):
        for suffix, is_em, _, learning, dense in TIMING_VARIANTS:
            if not (is_em and learning):
                continue
            label = sampler + suffix
            twin = sampler + (", dense I" if dense else "")
            cells, worst = [], 0.0
            for name in names:
                parts = results[name, "bookkeeping", label]
                share = parts["total"] / (1e3 * results[name, twin][0])
                worst = max(worst, share)
                cells.append(
                    f"{parts['total']:.1f} ({parts['records']:.1f}, "
                    f"{parts['m_steps']:.1f}) = {100 * share:.1f} %"
                )
            rows.append([label, *cells, "PASS" if worst <= EM_TOLERANCE - 1 else "FAIL"])
    print_table(
        "Table 3c — EM bookkeeping measured directly: µs per iteration (of which test-"
        "function records, M steps) and as a share of the twin's time per iteration, "
        f"over the first {sizes.bookkeeping:,} iterations of a new chain",
        ["EM case", *[TIMING_SETS[n][0] for n in names], "≤ 10 %"],
        rows,
        [
            "Everything an EM iteration does besides its twin's iteration: storing the "
            "sample (and its gradient, which the trajectory returns), the §3.2 test "
            "function's records, the M steps (with the stiffness check). The twin's time is "
            "Table 3's median (the dense twin for dense rows).",
        ],
    )


# -- Table 4: the M step's estimator -------------------------------------------------------

T4_N, T4_SCALES, T4_CORR = 1000, np.array([0.25, 0.5, 1.0, 2.0, 4.0]), 0.95


def regression_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((T4_N, len(T4_SCALES)))
    Z[:, 4] = T4_CORR * Z[:, 3] + np.sqrt(1 - T4_CORR**2) * Z[:, 4]
    X = Z * T4_SCALES
    y = X @ rng.normal(0.0, 0.5, len(T4_SCALES)) + rng.standard_normal(T4_N)
    return X, y


def regression_model(X: np.ndarray, y: np.ndarray, minibatch: bool) -> pm.Model:
    with pm.Model() as model:
        if minibatch:
            Xb, yb = pm.Minibatch(X, y, batch_size=BATCH)
        else:
            Xb, yb = X, y
        b = pm.Normal("b", 0.0, np.sqrt(PRIOR_VAR), shape=X.shape[1])
        pm.Normal("y", Xb @ b, 1.0, observed=yb, total_size=len(y) if minibatch else None)
    return model


def regression_posterior(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cov = np.linalg.inv(X.T @ X + np.eye(X.shape[1]) / PRIOR_VAR)
    return cov @ X.T @ y, cov


ESTIMATOR_VARIANTS = (
    ("position", "diag"),
    ("position", "dense"),
    ("momentum", "diag"),
    ("momentum", "dense"),
)


def table4_settings() -> list[tuple[str, bool, type, dict]]:
    """(regime, minibatch, twin class, arguments) of each comparison."""
    exact = [
        ("all rows", False, pmsg.HMC, {"step_size": 2e-3}),
        ("all rows", False, pmsg.SGHMC, {"step_size": 2e-3, "friction": 1.0}),
        ("all rows", False, pmsg.SGNHT, {"step_size": 2e-3, "diffusion": 1.0}),
    ]
    # SGHMC is left out here: at every stable setting tried (ε ≤ 1e-3, C = 1–30) its
    # fixed-mass chain had a bulk ESS below 10 in 10⁵ gradients, too few to compare.
    noisy = [("minibatch 100", True, pmsg.SGNHT, {"step_size": 2e-4, "diffusion": 1.0})]
    return exact + noisy


def table4(sizes: Sizes) -> None:
    X, y = regression_data(SEED)
    mean, cov = regression_posterior(X, y)
    sd = np.sqrt(np.diag(cov))
    models = {mb: regression_model(X, y, mb) for mb in (False, True)}
    em_of = {twin: em for em, twin in TWINS.items()}
    n_gradients = sizes.chains * sizes.draws4 * N_STEPS
    rows: list[list[str]] = []
    summary: dict[tuple, dict] = {v: {} for v in ESTIMATOR_VARIANTS}
    for k, (regime, minibatch, twin_cls, kwargs) in enumerate(table4_settings()):
        kwargs = kwargs | {"n_steps": N_STEPS}
        specs = [Spec(NAMES[twin_cls], twin_cls, kwargs, minibatch)]
        for estimator, structure in ESTIMATOR_VARIANTS:
            specs.append(
                Spec(
                    f"{NAMES[em_of[twin_cls]]} {estimator} {structure}",
                    em_of[twin_cls],
                    kwargs | {"mass_estimator": estimator, "mass_structure": structure},
                    minibatch,
                )
            )
        twin_ess = None
        for j, spec in enumerate(specs):
            seed = SEED + 1000 + 10 * k + j
            run = run_chains(models[minibatch], spec, sizes.tune4, sizes.draws4, sizes.chains, seed)
            eps = f"{kwargs['step_size']:g}"
            if run.failed:
                rows.append([regime, spec.label, eps, run.failed, "", "", "", "", "", ""])
                if j == 0:
                    twin_ess = float("nan")
                else:
                    summary[ESTIMATOR_VARIANTS[j - 1]][regime, twin_cls] = 0.0
                continue
            b = columns(run.draws["b"])
            flat = b.reshape(-1, b.shape[2])
            sd_ratio = flat.std(axis=0, ddof=1) / sd
            mean_err = np.abs(flat.mean(axis=0) - mean) / sd
            ess = min_ess(run)
            if j == 0:
                twin_ess = ess
                relative = "1 (twin)"
            else:
                summary[ESTIMATOR_VARIANTS[j - 1]][regime, twin_cls] = ess / twin_ess
                relative = f"{ess / twin_ess:.2f}"
            cond = run.stats.get("mass_condition")
            updates, refused = run.stats.get("mass_updates"), run.stats.get("mass_rejections")
            rows.append(
                [
                    regime,
                    spec.label,
                    eps,
                    f"{ess:.0f}",
                    f"{1000 * ess / n_gradients:.2f}",
                    relative,
                    f"{sd_ratio.min():.2f}–{sd_ratio.max():.2f}",
                    f"{mean_err.max():.2f}",
                    f"{cond[:, -1].mean():.0f}" if cond is not None else "",
                    f"{updates[:, -1].mean():.0f} ({refused[:, -1].mean():.0f})"
                    if updates is not None
                    else "",
                ]
            )
            progress(f"Table 4: {regime}, {spec.label} done in {run.seconds:.0f} s")
    eig_sd = 1 / np.sqrt(np.linalg.eigvalsh(np.linalg.inv(cov)))
    print_table(
        "Table 4 — mass estimators: min bulk ESS per gradient relative to the fixed-mass "
        f"twin ({sizes.chains} chain(s) × {sizes.draws4:,} draws after {sizes.tune4:,} "
        "tuning iterations, mass learned during tuning)",
        [
            "gradients",
            "sampler",
            "ε",
            "min ESS",
            "ESS / 1000 grad",
            "vs twin",
            "sd ratio (min–max)",
            "max |mean err|",
            "cond(M⁻¹)",
            "M steps (refused)",
        ],
        rows,
        [
            f"Target: Gaussian posterior of a linear regression, {T4_N} rows, sds along the "
            f"principal axes {eig_sd.min():.4f}–{eig_sd.max():.4f} (covariance condition "
            f"number {(eig_sd.max() / eig_sd.min()) ** 2:.0f}). sd ratio and mean error "
            "over the 5 coefficients against the exact posterior; a ratio far from 1 marks "
            "a chain whose ESS means little. cond(M⁻¹): learned inverse mass at the end. "
            "M steps (refused): M steps taken while tuning, and those the stiffness check "
            "refused (mean over chains).",
        ],
    )
    rows = []
    for variant, ratios in summary.items():
        exact = [r for (regime, _), r in ratios.items() if regime == "all rows"]
        positive = [r for r in exact if r > 0]
        geo = float(np.exp(np.mean(np.log(positive)))) if positive else float("nan")
        rows.append(
            [
                f"{variant[0]}, {variant[1]}",
                *[f"{r:.2f}" if r > 0 else "diverged" for r in ratios.values()],
                f"{geo:.2f}",
            ]
        )
    print_table(
        "Table 4b — min ESS relative to the fixed-mass twin, per estimator",
        [
            "estimator, structure",
            *[f"{NAMES[c]} ({regime})" for regime, c in next(iter(summary.values()))],
            "geometric mean, all rows (non-diverged)",
        ],
        rows,
    )


# -- main ---------------------------------------------------------------------------------


# -- Table 5: the Nosé–Poincaré and Riemannian rows of Tables 1–3 --------------------------

NP_SPECS = (
    # (label, class, minibatch); every sampler with its default arguments
    ("SG-NPHMC", pmsg.SGNPHMC, True),
    ("SG-NPHMC-EM", pmsg.SGNPHMCEM, True),
    ("SGR-NPHMC", pmsg.SGRNPHMC, True),
    ("RHMC", pmsg.RHMC, False),
    ("SGNHT-EM", pmsg.SGNHTEM, True),
    ("HMC-EM", pmsg.HMCEM, False),
)
"""Rows of Table 5: the paper's four, and two EM samplers of Tables 1–3 with the same
(default) arguments for comparison."""

QUIET = {"mode_kwargs": {"progressbar": False}}


def np_accuracy(sizes: Sizes) -> tuple[list[list[str]], list[list[str]]]:
    """Tables 1 and 2's scores for :data:`NP_SPECS`."""
    x = normal_data(SEED)
    exact = normal_gamma_posterior(x)
    normal_models = {mb: normal_gamma_model(x, mb) for mb in (False, True)}
    X, y = mixture_logistic_data(SEED)
    mean, sd = quadrature_posterior(X, y)
    logistic_models = {mb: logistic_model(X, y, mb) for mb in (False, True)}
    rows1, rows2 = [], []
    for k, (label, cls, minibatch) in enumerate(NP_SPECS):
        spec = Spec(label, cls, dict(QUIET), minibatch)
        paper1 = PAPER_NP_TABLE1.get(label, PAPER_TABLE1.get(label))
        paper2 = PAPER_NP_TABLE2.get(label, PAPER_TABLE2.get(label))
        run = run_chains(
            normal_models[minibatch], spec, sizes.tune1, sizes.draws1, sizes.chains, SEED + k
        )
        head = [label, fmt(paper1[0]), fmt(paper1[1])]
        if run.failed:
            rows1.append(head + [run.failed] + [""] * 6)
        else:
            mu = scores(run.draws["mu"], 0.0, *exact["mu"])
            tau = scores(run.draws["tau"], 1.0, *exact["tau"])
            rows1.append(
                head
                + [fmt(mu[0]), fmt(tau[0]), f"{mu[1]:+.2f}", f"{tau[1]:+.2f}"]
                + [f"{mu[2]:.2f}", f"{tau[2]:.2f}", f"{min_ess(run):.0f}"]
            )
        progress(f"Table 5 (Table 1 problem): {label} done in {run.seconds:.0f} s")
        run = run_chains(
            logistic_models[minibatch],
            spec,
            sizes.tune2,
            sizes.draws2,
            sizes.chains,
            SEED + 100 + k,
        )
        head = [label, fmt(paper2[0]), fmt(paper2[1])]
        if run.failed:
            rows2.append(head + [run.failed] + [""] * 7)
        else:
            w = columns(run.draws["w"])
            s0 = scores(w[:, :, 0], TRUE_W[0], mean[0], sd[0])
            s1 = scores(w[:, :, 1], TRUE_W[1], mean[1], sd[1])
            rows2.append(
                head
                + [fmt(s0[0]), fmt(s1[0]), f"{s0[1]:+.2f}", f"{s1[1]:+.2f}"]
                + [f"{s0[2]:.2f}", f"{s1[2]:.2f}", f"{min_ess(run):.0f}", str(divergences(run))]
            )
        progress(f"Table 5 (Table 2 problem): {label} done in {run.seconds:.0f} s")
    return rows1, rows2


NP_TIMING_SETS = ("normal", "synthetic", "australian", "heart")


def np_timings(sizes: Sizes, names: tuple[str, ...]) -> dict:
    """ms per iteration of :data:`NP_SPECS` on the data sets ``names`` (interleaved blocks)."""
    results = {}
    for k, name in enumerate(names):
        progress(f"Table 5 timing: {TIMING_SETS[name][0]} (compiling)")
        models, _ = timing_models(name)
        cases = []
        for label, cls, minibatch in NP_SPECS:
            model = models[minibatch]
            step = timed_step(model, cls, dict(QUIET), SEED + k, learning=True)
            cases.append(TimedCase(label, step, model.initial_point()))
        # RHMC's iterations are ~100x longer than the others': blocks of equal length in
        # iterations would make its rounds dominate the run, so its blocks are shorter.
        block = max(sizes.block // 10, 10)
        measure(cases, sizes.rounds, block)
        for case in cases:
            results[name, case.label] = (case.median, min(case.samples), max(case.samples))
    return results


def table5(sizes: Sizes, names: tuple[str, ...] = NP_TIMING_SETS, accuracy: bool = True) -> None:
    if accuracy:
        table5_accuracy(sizes)
    if names:
        table5_timing(sizes, names)


def table5_accuracy(sizes: Sizes) -> None:
    rows1, rows2 = np_accuracy(sizes)
    x = normal_data(SEED)
    exact = normal_gamma_posterior(x)
    print_table(
        f"Table 5a — Table 1's problem (N = {T1_N:,}), every sampler with its defaults "
        f"({sizes.chains} chain(s) × {sizes.draws1:,} draws after {sizes.tune1:,} tuning)",
        [
            "method",
            "paper RMSE μ",
            "paper RMSE τ",
            "RMSE μ",
            "RMSE τ",
            "mean err μ",
            "mean err τ",
            "sd ratio μ",
            "sd ratio τ",
            "min ESS",
        ],
        rows1,
        [
            f"Exact posterior: μ = {exact['mu'][0]:.4f} ± {exact['mu'][1]:.4f}, "
            f"τ = {exact['tau'][0]:.4f} ± {exact['tau'][1]:.4f}; a perfect sampler scores "
            f"RMSE μ = {np.hypot(*exact['mu']):.4f}, RMSE τ = "
            f"{np.hypot(exact['tau'][0] - 1, exact['tau'][1]):.4f}. step_size='auto', "
            "n_steps=10; minibatches of 100 for the stochastic-gradient samplers, all rows "
            "for RHMC and HMC-EM.",
        ],
    )
    X, y = mixture_logistic_data(SEED)
    mean, sd = quadrature_posterior(X, y)
    print_table(
        f"Table 5b — Table 2's problem (N = {T2_N:,}), defaults "
        f"({sizes.chains} chain(s) × {sizes.draws2:,} draws after {sizes.tune2:,} tuning)",
        [
            "method",
            "paper RMSE W₀",
            "paper RMSE W₁",
            "RMSE W₀",
            "RMSE W₁",
            "mean err W₀",
            "mean err W₁",
            "sd ratio W₀",
            "sd ratio W₁",
            "min ESS",
            "div.",
        ],
        rows2,
        [
            f"Exact posterior (quadrature): W₀ = {mean[0]:.4f} ± {sd[0]:.4f}, W₁ = "
            f"{mean[1]:.4f} ± {sd[1]:.4f}.",
        ],
    )


def table5_timing(sizes: Sizes, names: tuple[str, ...]) -> None:
    progress("Table 5: timing")
    times = np_timings(sizes, names)
    paper_index = {"synthetic": 0, "australian": 1, "heart": 2}
    rows = []
    for label, *_ in NP_SPECS:
        row = [label]
        for name in names:
            median, low, high = times[name, label]
            cell = f"{median:.3f} ({low:.3f}–{high:.3f})"
            paper = PAPER_NP_TABLE3.get(label, PAPER_TABLE3.get(label))
            if name in paper_index and paper:
                cell += f" [paper {paper[paper_index[name]]:.3f}]"
            row.append(cell)
        rows.append(row)
    ratio = [times[n, "SGR-NPHMC"][0] / times[n, "SG-NPHMC-EM"][0] for n in names]
    ratio_rhmc = [times[n, "RHMC"][0] / times[n, "HMC-EM"][0] for n in names]
    print_table(
        f"Table 5c — ms per iteration (10 steps), median (min–max) of {sizes.rounds} "
        "interleaved blocks, EM samplers learning their mass",
        [
            "method",
            *[f"{TIMING_SETS[n][0]} ({TIMING_SETS[n][1]}×{TIMING_SETS[n][2]})" for n in names],
        ],
        rows,
        [
            "SGR-NPHMC / SG-NPHMC-EM: " + ", ".join(f"{r:.1f}x" for r in ratio) + "; "
            "RHMC / HMC-EM: " + ", ".join(f"{r:.1f}x" for r in ratio_rhmc) + " (same order "
            "of data sets).",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter chains, fewer rounds")
    parser.add_argument(
        "--tables", nargs="+", type=int, default=[1, 2, 3, 4, 5], choices=[1, 2, 3, 4, 5]
    )
    parser.add_argument(
        "--np-timing-sets",
        nargs="*",
        default=list(NP_TIMING_SETS),
        choices=list(NP_TIMING_SETS),
        help="Table 5's timing data sets (the Riemannian samplers compile for minutes each)",
    )
    parser.add_argument("--np-timing-only", action="store_true", help="Table 5: timing only")
    args = parser.parse_args()
    sizes = Sizes.from_args(args.quick)
    start = time.perf_counter()
    print(*environment(), sep="\n")
    print(f"Load average (1 min) at start: {os.getloadavg()[0]:.2f}")
    timing_names = []
    if 1 in args.tables:
        timing_names.append("normal")
    if 3 in args.tables:
        timing_names += ["synthetic", "australian", "heart"]
    times = run_timings(sizes, timing_names) if timing_names else {}
    if 1 in args.tables:
        table1(sizes, table1_times(times))
    if 2 in args.tables:
        table2(sizes)
    if 3 in args.tables:
        table3(sizes, times, timing_names)
    if 4 in args.tables:
        table4(sizes)
    if 5 in args.tables:
        table5(sizes, tuple(args.np_timing_sets), not args.np_timing_only)
    print(f"Load average (1 min) at end: {os.getloadavg()[0]:.2f}")
    print(f"Total time: {(time.perf_counter() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()
