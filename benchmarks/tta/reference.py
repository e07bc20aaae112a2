"""The reference posterior that every row is judged against.

Logistic: the Laplace approximation at the mode found by Newton's method. Hierarchical
(or to confirm the Laplace approximation): a long NumPyro NUTS run in a worker, cached
on disk.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .config import CHUNK, PRIOR_SD
from .worker import run_worker


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


def gradient_seconds(X: np.ndarray, y: np.ndarray, g: np.ndarray | None) -> float:
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


def nuts_reference(
    args: argparse.Namespace, ref_cfg: dict, nuts_path: Path, length: str, workdir: Path
) -> dict:
    """The long NumPyro NUTS run's mean, sd, ESS and wall time: from the cache, or run."""
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


def laplace_reference(
    args: argparse.Namespace,
    data: dict,
    workdir: Path,
    run_nuts: Callable[[], dict],
    length: str,
) -> tuple[Path, list[str], dict]:
    """Logistic: the Laplace approximation, confirmed by NUTS with ``--confirm-laplace``."""
    paths = data["paths"]
    info: dict = {}
    lines = []
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
    return ref_path, lines, info


def hierarchical_reference(
    args: argparse.Namespace, data: dict, nuts_path: Path, run_nuts: Callable[[], dict]
) -> tuple[Path, list[str], dict]:
    """Hierarchical: the long NumPyro NUTS run itself."""
    paths = data["paths"]
    info: dict = {}
    lines = []
    X = np.load(paths["X"], mmap_mode="r")
    info["gradient_s"] = gradient_seconds(X, np.load(paths["y"]), np.load(paths["g"]))
    del X
    nuts = run_nuts()
    ref_path = nuts_path
    info["reference_min_ess"] = float(nuts["ess"].min())
    lines.append(
        f"- Reference: NumPyro NUTS directly in JAX ({reference_form(args)} form), "
        f"{args.reference_chains} chains × "
        f"{args.reference_draws:,} draws after {args.reference_tune:,} warm-up (cached in "
        f"{nuts_path.name}, {float(nuts['wall_s']):.0f} s); min bulk ESS "
        f"{nuts['ess'].min():,.0f}, so its MC error is at "
        f"most ~{1 / math.sqrt(nuts['ess'].min()):.3f} sd for means and "
        f"~{1 / math.sqrt(2 * nuts['ess'].min()):.3f} relative for sds"
    )
    return ref_path, lines, info


def reference_form(args: argparse.Namespace) -> str:
    """The parameterisation of the NUTS reference: the run's unless one is asked for."""
    if args.reference_form != "same":
        return args.reference_form
    return "centred" if args.centered else "non-centred"


def reference(
    args: argparse.Namespace, data: dict, workdir: Path, cache: Path, base: dict
) -> tuple[Path, list[str], dict]:
    """The reference's npz (mean, sd), the header lines describing it, raw information."""
    ref_cfg = {
        **base,
        "kind": "reference",
        "chains": args.reference_chains,
        "draws": args.reference_draws,
        "tune": args.reference_tune,
        "reference": None,
        "form": reference_form(args),
    }
    length = f"{args.reference_chains}x{args.reference_draws}+{args.reference_tune}"
    form = {"centred": "-centred", "non-centred": "", "mixed": "-mixed"}[reference_form(args)]
    nuts_path = cache / f"reference-{data['key']}{form}-{length}.npz"

    def run_nuts() -> dict:
        return nuts_reference(args, ref_cfg, nuts_path, length, workdir)

    if args.model == "logistic":
        return laplace_reference(args, data, workdir, run_nuts, length)
    return hierarchical_reference(args, data, nuts_path, run_nuts)
