"""Why SGHMC has friction: naive stochastic-gradient HMC drifts away from the posterior.

The two checks of Jiang and Huang, "sghmcmc: a Python package for stochastic gradient
MCMC" (its Figures 1 and 2): the mean of 10,000 points drawn from N(0, 1), and the mean
of 10,000 points drawn from a bivariate normal with correlation 0.9 (mean (1, −1)), each
seen 100 rows at a time through ``pm.Minibatch``; the posteriors are exact (a normal
prior, known covariance). Four samplers, 2 chains × (1,000 tuning + 2,000) draws each:

- ``pmsg.SGHMC()``: its defaults (control variates at the mode, friction 1, the noise
  measured and counted);
- ``pmsg.SGHMC(gradient="minibatch")``: plain minibatch gradients, friction 1, the step
  size capped so that the measured gradient noise stays within what the friction absorbs;
- ``pmsg.HMC()``: minibatch gradients in the leapfrog steps, a full-data
  Metropolis–Hastings test (exact, a pass over the data per draw);
- **naive SGHMC**, written below and deliberately wrong: HMC's leapfrog steps on plain
  minibatch gradients with neither friction nor a test (the write-up's eq. 6). Its
  mass is the exact posterior covariance's inverse and its step the default SGHMC
  step in those units (``ε = 0.2``, 10 steps a draw): every step adds the gradient's
  noise to the momentum and nothing takes it out, so the draws spread far wider than the
  posterior. ``pmsg.SGHMC(friction=0)`` is refused for this reason.

The table prints each sampler's posterior means and sds against the exact ones; the
figure (``docs/naive_sghmc.png``, or ``--plot FILE.png``) shows the draws against the
exact densities.

    bash run.sh example naive_sghmc
"""

import argparse
import time
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_sgmcmc as pmsg

N_ROWS, BATCH, PRIOR_SD = 10_000, 100, 10.0
N_STEPS, NAIVE_STEP = 10, 0.2
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "naive_sghmc.png"
BIVARIATE_COV = np.array([[1.0, 0.9], [0.9, 1.0]])


def exact_posterior(y: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of ``μ`` given rows ``y ~ N(μ, cov)``, ``μ ~ N(0, PRIOR_SD² I)``."""
    precision = len(y) * np.linalg.inv(cov) + np.eye(len(cov)) / PRIOR_SD**2
    covariance = np.linalg.inv(precision)
    return covariance @ np.linalg.solve(cov, y.sum(axis=0)), covariance


def model_of(y: np.ndarray, cov: np.ndarray) -> pm.Model:
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD, shape=y.shape[1])
        batch = pm.Minibatch(y, batch_size=BATCH)
        pm.MvNormal("y", mu, cov=cov, observed=batch, total_size=len(y))
    return model


def naive_sghmc(
    y: np.ndarray, cov: np.ndarray, covariance: np.ndarray, start: np.ndarray, draws: int, seed: int
) -> np.ndarray:
    """Naive SGHMC: leapfrog steps on minibatch gradients, no friction, no test (eq. 6)."""
    rng = np.random.default_rng(seed)
    precision_of_rows = np.linalg.inv(cov)
    mass = np.linalg.inv(covariance)
    mass_factor = np.linalg.cholesky(mass)

    def minibatch_gradient(mu: np.ndarray) -> np.ndarray:
        rows = y[rng.integers(0, len(y), size=BATCH)]
        scaled = len(y) / BATCH * precision_of_rows @ (rows - mu).sum(axis=0)
        return scaled - mu / PRIOR_SD**2

    mu, out = start.copy(), np.empty((draws, len(start)))
    for t in range(draws):
        p = mass_factor @ rng.standard_normal(len(mu))  # p ~ N(0, M)
        gradient = minibatch_gradient(mu)
        for _ in range(N_STEPS):
            p = p + 0.5 * NAIVE_STEP * gradient
            mu = mu + NAIVE_STEP * covariance @ p
            gradient = minibatch_gradient(mu)  # fresh rows: its noise enters p unchecked
            p = p + 0.5 * NAIVE_STEP * gradient
        out[t] = mu
    return out


def run(y: np.ndarray, cov: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Each sampler's draws of ``mu``, shape ``(draws, dim)``, both chains pooled."""
    mean, covariance = exact_posterior(y, cov)
    quiet = {"mode_kwargs": {"progressbar": False}}
    samplers = {
        "SGHMC()": lambda: pmsg.SGHMC(**quiet),
        'SGHMC(gradient="minibatch")': lambda: pmsg.SGHMC(gradient="minibatch", **quiet),
        "HMC()": lambda: pmsg.HMC(**quiet),
    }
    draws = {}
    model = model_of(y, cov)
    for label, make in samplers.items():
        started = time.perf_counter()
        with model:
            idata = pm.sample(
                step=make(),
                draws=2000, tune=1000, chains=2, cores=1, random_seed=seed,
                progressbar=False, compute_convergence_checks=False,
            )  # fmt: skip
        draws[label] = idata.posterior["mu"].values.reshape(-1, len(mean))
        print(f"  {label}: {time.perf_counter() - started:.1f} s", flush=True)
    draws["naive SGHMC"] = np.concatenate(
        [naive_sghmc(y, cov, covariance, mean, 2000, seed + chain) for chain in range(2)]
    )
    return draws


def table(name: str, draws: dict[str, np.ndarray], mean: np.ndarray, cov: np.ndarray) -> None:
    sd = np.sqrt(np.diag(cov))
    print(f"\n{name}: exact mean {np.round(mean, 4)}, sd {np.round(sd, 4)}")
    print(f"{'sampler':<30} {'mean error (sd)':>18} {'sd ratio':>16}")
    for label, x in draws.items():
        error = np.abs(x.mean(axis=0) - mean) / sd
        ratio = x.std(axis=0, ddof=1) / sd
        errors = ", ".join(f"{e:.2f}" for e in error)
        ratios = ", ".join(f"{r:.2f}" for r in ratio)
        print(f"{label:<30} {errors:>18} {ratios:>16}")


def plot(results: list, path: Path) -> None:
    import matplotlib.pyplot as plt
    from scipy.stats import norm

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    styles = {
        "SGHMC()": "C0",
        'SGHMC(gradient="minibatch")': "C2",
        "HMC()": "C1",
        "naive SGHMC": "C3",
    }
    for ax, (title, draws, mean, cov, k) in zip(axes, results, strict=True):
        sd = np.sqrt(cov[k, k])
        grid = np.linspace(mean[k] - 12 * sd, mean[k] + 12 * sd, 400)
        bins = np.linspace(grid[0], grid[-1], 120)
        for label, x in draws.items():
            ax.hist(x[:, k], bins=bins, density=True, histtype="step", color=styles[label],
                    label=label, lw=1.3)  # fmt: skip
        ax.plot(grid, norm(mean[k], sd).pdf(grid), "k:", lw=1.5, label="exact posterior")
        ax.set_title(title, fontsize=10)
        ax.set_yticks([])
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(
        "Naive SGHMC (no friction, no test) against SGHMC and HMC: the posterior of a mean, "
        "10,000 rows seen 100 at a time",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"\nfigure: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--plot", default=FIGURE, type=Path, metavar="FILE.png")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    checks = [
        ("N(0, 1), 10,000 rows", rng.normal(size=(N_ROWS, 1)), np.eye(1)),
        (
            "bivariate normal, correlation 0.9",
            rng.multivariate_normal([1.0, -1.0], BIVARIATE_COV, size=N_ROWS),
            BIVARIATE_COV,
        ),
    ]
    results = []
    for name, y, cov in checks:
        print(f"{name}:", flush=True)
        draws = run(y, cov, args.seed)
        mean, covariance = exact_posterior(y, cov)
        table(name, draws, mean, covariance)
        for k in range(len(mean)):
            results.append((f"{name}: mu[{k}]", draws, mean, covariance, k))
    plot(results, args.plot)


if __name__ == "__main__":
    main()
