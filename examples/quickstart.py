"""Minibatched Bayesian logistic regression on 100,000 rows with SGHMC, default arguments.

``pmsg.SGHMC()`` first finds the posterior mode (Adam on minibatches, then L-BFGS on
full-data passes) and the Laplace covariance there, which sets the mass; every gradient
then sees a fresh minibatch of 1,000 rows through control variates anchored at the mode
(the minibatch noise cancels near the mode); each draw runs 10 SGHMC steps in one
compiled call, and the chains start at draws from the Laplace approximation. The summary is
printed beside the true weights and a Laplace approximation of the exact posterior
(accurate at this sample size), which the draws should match; a figure of the draws of
every weight against that posterior is saved to docs/quickstart_posterior.png (or to the
file given with ``--plot FILE.png``).
"""

import argparse
import os
import time
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
from scipy.special import expit

import pymc_sgmcmc as pmsg

N_ROWS, N_FEATURES, BATCH = 100_000, 10, 1_000
PRIOR_SD = 10.0
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "quickstart_posterior.png"


def simulate(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_ROWS, N_FEATURES))
    w_true = rng.normal(scale=0.5, size=N_FEATURES)
    y = (rng.uniform(size=N_ROWS) < expit(X @ w_true)).astype(float)
    return X, y, w_true


def laplace_posterior(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mode and marginal sds of the exact posterior by Newton's method on all rows."""
    w = np.zeros(X.shape[1])
    for _ in range(50):
        p = expit(X @ w)
        grad = X.T @ (y - p) - w / PRIOR_SD**2
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.eye(len(w)) / PRIOR_SD**2
        step = np.linalg.solve(hess, grad)
        w += step
        if np.max(np.abs(step)) < 1e-10:
            break
    return w, np.sqrt(np.diag(np.linalg.inv(hess)))


def plot(draws: np.ndarray, mode: np.ndarray, sd: np.ndarray, w_true: np.ndarray, path) -> None:
    """Histogram of the draws of each weight over the Laplace posterior density."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 5, figsize=(10, 4.2))
    for j, ax in enumerate(axes.flat):
        x = np.linspace(mode[j] - 4.5 * sd[j], mode[j] + 4.5 * sd[j], 200)
        ax.hist(draws[:, j], bins=40, range=(x[0], x[-1]), density=True, color="C0", alpha=0.6)
        density = np.exp(-0.5 * ((x - mode[j]) / sd[j]) ** 2) / (sd[j] * np.sqrt(2 * np.pi))
        ax.plot(x, density, color="C1", lw=1.5)
        ax.axvline(w_true[j], color="k", ls=":", lw=1)
        ax.set_title(f"w[{j}]", fontsize="medium")
        ax.set_yticks([])
        ax.tick_params(labelsize="small")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color="C0", alpha=0.6),
        plt.Line2D([], [], color="C1", lw=1.5),
        plt.Line2D([], [], color="k", ls=":", lw=1),
    ]
    labels = ["SGHMC draws (4 chains × 2,000)", "exact posterior (Laplace)", "true weight"]
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    inside = Path(path).resolve().is_relative_to(Path.cwd())
    print(f"\nSaved {os.path.relpath(path) if inside else path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--plot", default=FIGURE, metavar="FILE.png", help="figure file")
    args = parser.parse_args()
    X, y, w_true = simulate()
    with pm.Model():
        X_batch, y_batch = pm.Minibatch(X, y, batch_size=BATCH)
        w = pm.Normal("w", 0.0, PRIOR_SD, shape=N_FEATURES)
        pm.Bernoulli("y", logit_p=X_batch @ w, observed=y_batch, total_size=N_ROWS)
        start = time.perf_counter()
        step = pmsg.SGHMC()  # finds the mode: step size, mass and anchor follow from it
        idata = pm.sample(draws=2000, tune=1000, chains=4, step=step, random_seed=1)
        elapsed = time.perf_counter() - start

    mode, sd = laplace_posterior(X, y)
    summary = az.summary(idata, var_names=["w"], kind="stats")
    table = pd.DataFrame(
        {
            "mean": summary["mean"].to_numpy(dtype=float),
            "sd": summary["sd"].to_numpy(dtype=float),
            "exact mean": mode,
            "exact sd": sd,
            "true w": w_true,
        },
        index=summary.index,
    )
    print(az.summary(idata, var_names=["w"]))
    print("\nPosterior draws against the exact posterior (Laplace) and the true weights:")
    print(table.round(4))
    worst_mean = np.max(np.abs(table["mean"] - mode) / sd)
    ratios = table["sd"] / sd
    print(
        f"\nWorst mean error {worst_mean:.3f} posterior sd; sd ratios {ratios.min():.3f} to "
        f"{ratios.max():.3f}."
    )
    print(
        f"Mode finding took {step.mode_seconds:.1f} s; mode finding and sampling took "
        f"{elapsed:.1f} s (compilation included)."
    )
    draws = idata.posterior["w"].values.reshape(-1, N_FEATURES)
    plot(draws, mode, sd, w_true, args.plot)


if __name__ == "__main__":
    main()
