"""Table 4: the M step's estimator (position or momentum) and structure (diag or dense).

Compared by the bulk ESS per gradient relative to the fixed-mass twin on an
ill-conditioned Gaussian posterior (Table 4), and summarised per estimator (Table 4b).
"""

from __future__ import annotations

import numpy as np
import pymc as pm

import pymc_sgmcmc as pmsg

from .chains import Run, Spec, columns, min_ess, run_chains
from .config import N_STEPS, NAMES, PAPER_SGNHT, SEED, TWINS, Sizes
from .output import print_table, progress
from .problems import T4_N, regression_data, regression_model, regression_posterior

ESTIMATOR_VARIANTS = (
    ("position", "diag"),
    ("position", "dense"),
    ("momentum", "diag"),
    ("momentum", "dense"),
)

TABLE4_COLUMNS = [
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
]


def table4_settings() -> list[tuple[str, bool, type, dict]]:
    """(regime, minibatch, twin class, arguments) of each comparison."""
    exact = [
        ("all rows", False, pmsg.HMC, {"step_size": 2e-3}),
        ("all rows", False, pmsg.SGHMC, {"step_size": 2e-3, "friction": 1.0}),
        ("all rows", False, pmsg.SGNHT, {"step_size": 2e-3, "diffusion": 1.0}),
    ]
    # SGHMC is left out here: at every stable setting tried (ε ≤ 1e-3, C = 1–30) its
    # fixed-mass chain had a bulk ESS below 10 in 10⁵ gradients, too few to compare.
    noisy = [("minibatch 100", True, pmsg.SGNHT, {"step_size": 2e-4} | PAPER_SGNHT)]
    return exact + noisy


def table4_specs(twin_cls: type, kwargs: dict, minibatch: bool) -> list[Spec]:
    """The fixed-mass twin, then its EM sampler with every estimator and structure."""
    em_of = {twin: em for em, twin in TWINS.items()}
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
    return specs


def table4_row(
    regime: str,
    spec: Spec,
    eps: str,
    run: Run,
    posterior: tuple[np.ndarray, np.ndarray],
    ess: float,
    relative: str,
    n_gradients: int,
) -> list[str]:
    """One row of Table 4 for a run that did not fail; ``posterior`` is (mean, sd)."""
    mean, sd = posterior
    b = columns(run.draws["b"])
    flat = b.reshape(-1, b.shape[2])
    sd_ratio = flat.std(axis=0, ddof=1) / sd
    mean_err = np.abs(flat.mean(axis=0) - mean) / sd
    cond = run.stats.get("mass_condition")
    updates, refused = run.stats.get("mass_updates"), run.stats.get("mass_rejections")
    return [
        regime,
        spec.label,
        eps,
        f"{ess:.0f}",
        f"{1000 * ess / n_gradients:.2f}",
        relative,
        f"{sd_ratio.min():.2f}–{sd_ratio.max():.2f}",
        f"{mean_err.max():.2f}",
        f"{cond[:, -1].mean():.0f}" if cond is not None else "",
        # A fixed-mass twin reports the windowed mass's updates (0) and no refusals.
        f"{updates[:, -1].mean():.0f} ({refused[:, -1].mean():.0f})" if refused is not None else "",
    ]


def table4_comparison(
    sizes: Sizes,
    k: int,
    setting: tuple[str, bool, type, dict],
    model: pm.Model,
    posterior: tuple[np.ndarray, np.ndarray],
    summary: dict[tuple, dict],
) -> list[list[str]]:
    """The rows of the ``k``-th setting of :func:`table4_settings`.

    Each EM variant's ESS relative to the twin is also stored in
    ``summary[variant][regime, twin class]`` for Table 4b.
    """
    regime, minibatch, twin_cls, kwargs = setting
    kwargs = kwargs | {"n_steps": N_STEPS}
    n_gradients = sizes.chains * sizes.draws4 * N_STEPS
    rows = []
    twin_ess = None
    for j, spec in enumerate(table4_specs(twin_cls, kwargs, minibatch)):
        seed = SEED + 1000 + 10 * k + j
        run = run_chains(model, spec, sizes.tune4, sizes.draws4, sizes.chains, seed)
        eps = f"{kwargs['step_size']:g}"
        if run.failed:
            rows.append([regime, spec.label, eps, run.failed, "", "", "", "", "", ""])
            if j == 0:
                twin_ess = float("nan")
            else:
                summary[ESTIMATOR_VARIANTS[j - 1]][regime, twin_cls] = 0.0
            continue
        ess = min_ess(run)
        if j == 0:
            twin_ess = ess
            relative = "1 (twin)"
        else:
            summary[ESTIMATOR_VARIANTS[j - 1]][regime, twin_cls] = ess / twin_ess
            relative = f"{ess / twin_ess:.2f}"
        rows.append(table4_row(regime, spec, eps, run, posterior, ess, relative, n_gradients))
        progress(f"Table 4: {regime}, {spec.label} done in {run.seconds:.0f} s")
    return rows


def table4(sizes: Sizes) -> None:
    """Run and print Tables 4 and 4b."""
    X, y = regression_data(SEED)
    mean, cov = regression_posterior(X, y)
    sd = np.sqrt(np.diag(cov))
    models = {mb: regression_model(X, y, mb) for mb in (False, True)}
    rows: list[list[str]] = []
    summary: dict[tuple, dict] = {v: {} for v in ESTIMATOR_VARIANTS}
    for k, setting in enumerate(table4_settings()):
        rows += table4_comparison(sizes, k, setting, models[setting[1]], (mean, sd), summary)
    print_table4(sizes, rows, cov)
    print_table4b(summary)


def print_table4(sizes: Sizes, rows: list[list[str]], cov: np.ndarray) -> None:
    """Table 4: one row per sampler and setting."""
    eig_sd = 1 / np.sqrt(np.linalg.eigvalsh(np.linalg.inv(cov)))
    print_table(
        "Table 4 — mass estimators: min bulk ESS per gradient relative to the fixed-mass "
        f"twin ({sizes.chains} chain(s) × {sizes.draws4:,} draws after {sizes.tune4:,} "
        "tuning iterations, mass learned during tuning)",
        TABLE4_COLUMNS,
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


def print_table4b(summary: dict[tuple, dict]) -> None:
    """Table 4b: ESS relative to the twin per estimator, and their geometric mean."""
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
