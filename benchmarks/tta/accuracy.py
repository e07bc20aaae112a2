"""The accuracy check, and a worker's summary of its draws.

:func:`accuracy` finds the first prefix of the draws within tolerance of the reference;
:func:`summarise` adds the time to accuracy, ESS, rows touched and, for a short NUTS run,
its extrapolation to the full one (:func:`extrapolate`).
"""

from __future__ import annotations

import numpy as np

from .problems import to_matrix


def accuracy(
    x: np.ndarray,
    ref_mean: np.ndarray,
    ref_sd: np.ndarray,
    mean_tol: float,
    sd_tol: float,
    every: int,
) -> dict:
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
    """Bulk ESS of every quantity of a (chains, draws, P) array (NaN for tiny arrays)."""
    import arviz as az

    if x.shape[0] * x.shape[1] < 8:
        return np.full(x.shape[-1], np.nan)
    return np.asarray(az.ess(x, method="bulk"), dtype=float)  # axes: chain, draw, param


def save_reference(path: str, x: np.ndarray, ess: np.ndarray, total: float) -> None:
    """The reference run's means, sds, ESS and wall time, to ``path`` (npz)."""
    np.savez(
        path,
        mean=x.mean(axis=(0, 1)),
        sd=x.reshape(-1, x.shape[-1]).std(axis=0, ddof=1),
        ess=ess,
        wall_s=total,
    )


def summarise(cfg: dict, out: dict, total: float, result: dict) -> None:
    """Accuracy, ESS, rows touched and (for short NUTS runs) the extrapolation."""
    x = to_matrix(cfg["model"], out.pop("draws"))
    total -= out.get("uncounted_s", 0.0)
    chains, kept = x.shape[:2]
    tune = cfg["tune"]
    ess = bulk_ess(x)
    if cfg["kind"] == "reference":
        save_reference(cfg["save_reference"], x, ess, total)
    result.update(
        total_s=total,
        setup_s=out.get("setup_s"),
        mode_s=out.get("mode_s"),
        setup_rows=out.get("setup_rows"),
        notes=out["notes"],
        step_size=out.get("step_size"),
        min_ess=float(np.nanmin(ess)) if np.isfinite(ess).any() else None,
        min_ess_index=int(np.nanargmin(ess)) if np.isfinite(ess).any() else None,
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
    count_leapfrog_steps(cfg["n_rows"], out, result, chains, kept)
    full_tune, full_draws = cfg.get("full_tune"), cfg.get("full_draws")
    if full_tune is None or (full_tune, full_draws) == (tune, kept):
        return
    extrapolate(cfg["n_rows"], result, setup, sampling, full_tune, full_draws)


def count_leapfrog_steps(n: int, out: dict, result: dict, chains: int, kept: int) -> None:
    """NUTS: leapfrog steps of warm-up and draws, mean tree size, rows touched."""
    tune_steps, draw_steps = np.asarray(out["tune_steps"]), np.asarray(out["draw_steps"])
    result["steps_exact"] = out["steps_exact"]
    result["tune_steps"], result["draw_steps"] = tune_steps, draw_steps
    result["mean_tree"] = float(draw_steps.sum() / (chains * kept))
    result["rows_touched"] = float((tune_steps.sum() + draw_steps.sum()) * n)
    if "joint_draw_steps" in out:  # vectorised chains: an iteration costs the largest tree
        result["joint_draw_steps"] = out["joint_draw_steps"]
        result["joint_tune_steps"] = out.get("joint_tune_steps")


def extrapolate(
    n: int, result: dict, setup: float, sampling: float, full_tune: int, full_draws: int
) -> None:
    """A short NUTS run scaled to ``full_tune + full_draws`` at its cost per leapfrog step.

    The measured columns move to ``result["measured"]``.
    """
    tune_steps, draw_steps = result["tune_steps"], result["draw_steps"]
    chains, tune, kept, k = result["chains"], result["tune"], result["draws"], result.get("tta_k")
    # Rows touched: every chain's leapfrog steps. Time: the steps the chains take one
    # after another, or, vectorised, together (an iteration costs the largest tree).
    warm_rows = tune_steps.sum() + chains * (full_tune - tune) * result["mean_tree"]
    rows = warm_rows + chains * full_draws * result["mean_tree"]
    if result.get("joint_tune_steps") is not None:
        joint_tree = result["joint_draw_steps"] / kept
        measured_steps = result["joint_tune_steps"] + result["joint_draw_steps"]
        warm = result["joint_tune_steps"] + (full_tune - tune) * joint_tree
        per_draw = joint_tree
    else:
        measured_steps = tune_steps.sum() + draw_steps.sum()
        warm, per_draw = warm_rows, chains * result["mean_tree"]
    per_step = sampling / measured_steps
    full_steps = warm + full_draws * per_draw
    result["measured"] = {
        key: result[key]
        for key in ("total_s", "min_ess", "ess_per_s", "tta_s", "rows_touched", "tune", "draws")
    }
    result.update(
        extrapolated=True,
        seconds_per_leapfrog=per_step,
        total_s=setup + per_step * full_steps,
        rows_touched=rows * n,
        tune=full_tune,
        draws=full_draws,
    )
    if result["min_ess"]:
        result["min_ess"] *= full_draws / kept
        result["ess_per_s"] = result["min_ess"] / result["total_s"]
    if k is not None:
        result["tta_s"] = setup + per_step * (warm + k * per_draw)
    else:  # not within the short run: at least the end of its draws at full warm-up
        result["tta_lower_s"] = setup + per_step * (warm + kept * per_draw)
