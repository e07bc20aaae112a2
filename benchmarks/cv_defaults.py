"""Samplers with default arguments on the quickstart's logistic regression, plain and CV.

Bayesian logistic regression, N rows × 10 (default 100,000), prior N(0, 10²), batch 1,000;
every named sampler with default arguments and ``gradient=`` each of the given estimators;
``pm.sample(draws=2000, tune=1000, chains=2, cores=1)``; against the exact posterior
(Newton's mode and the Laplace covariance on all rows). Prints wall time (sampler creation
to the end of sampling, compilation and mode finding included), the mode finder's time,
the worst mean error in posterior sds, the range of sd ratios, min bulk ESS and ESS/s.

    bash run.sh python benchmarks/cv_defaults.py 100000 SGHMC,SGLD,SGNHT control_variates
    bash run.sh python benchmarks/cv_defaults.py 100000 SGHMC minibatch
"""

import sys
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm
from scipy.special import expit

import pymc_sgmcmc as pmsg

warnings.filterwarnings("ignore")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    samplers = (sys.argv[2] if len(sys.argv) > 2 else "SGHMC").split(",")
    gradients = (sys.argv[3] if len(sys.argv) > 3 else "control_variates").split(",")
    d = 10
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < expit(X @ (rng.normal(size=d) * 0.5))).astype(float)
    w = np.zeros(d)
    for _ in range(50):
        p = expit(X @ w)
        hess = (X * (p * (1 - p))[:, None]).T @ X + np.eye(d) / 100
        step = np.linalg.solve(hess, X.T @ (y - p) - w / 100)
        w += step
        if np.abs(step).max() < 1e-12:
            break
    sd = np.sqrt(np.diag(np.linalg.inv(hess)))
    with pm.Model() as model:
        Xb, yb = pm.Minibatch(X, y, batch_size=1000)
        weights = pm.Normal("w", 0, 10, shape=d)
        pm.Bernoulli("y", logit_p=Xb @ weights, observed=yb, total_size=n)
    for name in samplers:
        for gradient in gradients:
            start = time.perf_counter()
            with model:
                step = getattr(pmsg, name)(gradient=gradient, mode_kwargs={"progressbar": False})
                idata = pm.sample(
                    draws=2000,
                    tune=1000,
                    chains=2,
                    cores=1,
                    step=step,
                    progressbar=False,
                    random_seed=1,
                    compute_convergence_checks=False,
                )
            wall = time.perf_counter() - start
            draws = idata.posterior["w"].values.reshape(-1, d)
            error = np.abs(draws.mean(0) - w) / sd
            ratio = draws.std(0) / sd
            ess = float(az.ess(idata, var_names=["w"])["w"].min())
            print(
                f"{name:8s} {gradient:17s} wall {wall:6.1f} s (mode {step.mode_seconds or 0:4.1f})"
                f" worst mean error {error.max():.3f} sd  sd ratio {ratio.min():.3f}-"
                f"{ratio.max():.3f}  min ESS {ess:7.0f}  ESS/s {ess / wall:6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
