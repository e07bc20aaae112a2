"""The problems: data sets, PyMC models and exact posteriors.

Tables 1, 2 and 4 score draws against these posteriors; Tables 3 and 5 time the samplers
on the data sets of :data:`TIMING_SETS`.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy.special import expit, log_expit

from .config import BATCH, SEED

# -- Table 1: 1-D normal, normal–gamma prior ----------------------------------------------

T1_N = 5000
KAPPA0 = 1.0
GAMMA_SHAPE, GAMMA_RATE = 0.5, 0.5  # W(τ | 1, 1) in one dimension


def normal_data(seed: int) -> np.ndarray:
    """Table 1's data: ``T1_N`` draws from N(0, 1)."""
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


# -- Table 2: 2-D Bayesian logistic regression ----------------------------------------------

T2_N = 2000
TRUE_W = np.array([1.0, -1.0])
PRIOR_VAR = 10.0


def mixture_logistic_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Table 2's data: features from a two-component mixture, Bernoulli labels."""
    rng = np.random.default_rng(seed)
    centres = np.where(rng.random(T2_N)[:, None] < 0.5, [1.0, -1.0], [-1.0, 1.0])
    X = centres + rng.standard_normal((T2_N, 2))
    y = (rng.random(T2_N) < expit(X @ TRUE_W)).astype(float)
    return X, y


def shaped_logistic_data(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic logistic data of shape ``(n, d)`` (the UCI sets' shapes in Table 3)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < expit(X @ rng.normal(0.0, 0.5, d))).astype(float)
    return X, y


def logistic_model(X: np.ndarray, y: np.ndarray, minibatch: bool) -> pm.Model:
    """Bayesian logistic regression without intercept, prior ``w ~ N(0, 10 I)``."""
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


# -- Table 4: Bayesian linear regression, ill-conditioned ------------------------------------

T4_N, T4_SCALES, T4_CORR = 1000, np.array([0.25, 0.5, 1.0, 2.0, 4.0]), 0.95


def regression_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Table 4's data: 5 features of scales 0.25–4, two of them correlated 0.95."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((T4_N, len(T4_SCALES)))
    Z[:, 4] = T4_CORR * Z[:, 3] + np.sqrt(1 - T4_CORR**2) * Z[:, 4]
    X = Z * T4_SCALES
    y = X @ rng.normal(0.0, 0.5, len(T4_SCALES)) + rng.standard_normal(T4_N)
    return X, y


def regression_model(X: np.ndarray, y: np.ndarray, minibatch: bool) -> pm.Model:
    """Bayesian linear regression with known noise sd 1, prior ``b ~ N(0, 10 I)``."""
    with pm.Model() as model:
        if minibatch:
            Xb, yb = pm.Minibatch(X, y, batch_size=BATCH)
        else:
            Xb, yb = X, y
        b = pm.Normal("b", 0.0, np.sqrt(PRIOR_VAR), shape=X.shape[1])
        pm.Normal("y", Xb @ b, 1.0, observed=yb, total_size=len(y) if minibatch else None)
    return model


def regression_posterior(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact (Gaussian) posterior: mean and covariance."""
    cov = np.linalg.inv(X.T @ X + np.eye(X.shape[1]) / PRIOR_VAR)
    return cov @ X.T @ y, cov


# -- Tables 3 and 5: the data sets timed ----------------------------------------------------

TIMING_SETS = {
    # name: (description, n, d, HMC ε, SGHMC ε, SGNHT ε)
    "normal": ("1-D normal (Table 1)", T1_N, 1, 1e-2, 1e-2, 1e-3),
    "synthetic": ("synthetic LR", T2_N, 2, 1e-2, 1e-2, 1e-2),
    "australian": ("Australian-shaped", 690, 14, 1e-2, 1e-2, 1e-2),
    "heart": ("Heart-shaped", 270, 13, 1e-2, 1e-2, 1e-2),
}


def timing_models(name: str) -> tuple[dict[bool, pm.Model], int]:
    """The full-data and minibatch models of a timed data set, and its dimension."""
    if name == "normal":
        x = normal_data(SEED)
        return {mb: normal_gamma_model(x, mb) for mb in (False, True)}, 2
    if name == "synthetic":
        X, y = mixture_logistic_data(SEED)
    else:
        _, n, d, *_ = TIMING_SETS[name]
        X, y = shaped_logistic_data(n, d, SEED)
    return {mb: logistic_model(X, y, mb) for mb in (False, True)}, X.shape[1]
