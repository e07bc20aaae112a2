"""Table 2: 2-D Bayesian logistic regression.

HMC, SGHMC, SGNHT and their EM variants, scored against the true weights (the paper's
RMSE) and the exact posterior by quadrature, with a long NUTS run as a cross-check.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_sgmcmc as pmsg

from .chains import LOGISTIC_COLUMNS, Run, Spec, logistic_cells, run_chains
from .config import N_STEPS, NAMES, PAPER_ESTIMATORS_NOTE, PAPER_SGHMC, PAPER_SGNHT, SEED, Sizes
from .output import fmt, print_table, progress
from .paper import PAPER_TABLE2
from .problems import T2_N, TRUE_W, logistic_model, mixture_logistic_data, quadrature_posterior

TABLE2_NOTE = (
    "SGHMC: C = 10, B̂ = 0; SGNHT: A = 1; minibatch 100; EM samplers start at "
    "S = 300 (the paper's S_count). div.: trajectories restarted after a "
    "non-finite state (SG samplers) or flagged divergent (HMC)."
)


def table2_specs() -> list[Spec]:
    """The rows of Table 2: every sampler at the paper's step sizes, EM from S = 300."""
    em = {"sample_size": 300}
    hmc = {"step_size": 1e-2, "n_steps": N_STEPS}
    rows = [
        Spec("HMC", pmsg.HMC, hmc, False),
        Spec("HMC-EM", pmsg.HMCEM, hmc | em, False),
        Spec("HMC-EM, momentum", pmsg.HMCEM, hmc | em | {"mass_estimator": "momentum"}, False),
    ]
    for eps in (1e-2, 1e-3):
        sghmc = {"step_size": eps, "n_steps": N_STEPS} | PAPER_SGHMC
        sgnht = {"step_size": eps, "n_steps": N_STEPS} | PAPER_SGNHT
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


def nuts_reference(model: pm.Model, sizes: Sizes) -> tuple[np.ndarray, list[float]]:
    """A long run of PyMC's NUTS on all rows: its draws of ``w`` and MCSE of their means."""
    with model, warnings.catch_warnings():
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
    return nuts_w, nuts_mcse


def table2_row(spec: Spec, run: Run, mean: np.ndarray, sd: np.ndarray) -> list[str]:
    """One row: the paper's RMSEs and our scores (or why there are none)."""
    paper = PAPER_TABLE2[spec.paper]
    eps = f"{spec.kwargs['step_size']:g}"
    head = [spec.label, eps, fmt(paper[0]), fmt(paper[1])]
    if run.failed:
        return head + [run.failed] + [""] * 7
    return head + logistic_cells(run, TRUE_W, mean, sd)


def table2_exact_note(
    sizes: Sizes, mean: np.ndarray, sd: np.ndarray, nuts_w: np.ndarray, nuts_mcse: list[float]
) -> str:
    """The exact posterior, a perfect sampler's RMSE and the NUTS cross-check."""
    rmse_exact = np.sqrt(sd**2 + (mean - TRUE_W) ** 2)
    return (
        f"Exact posterior (quadrature): W₀ = {mean[0]:.4f} ± {sd[0]:.4f}, W₁ = "
        f"{mean[1]:.4f} ± {sd[1]:.4f}; a perfect sampler scores RMSE {rmse_exact[0]:.4f}"
        f", {rmse_exact[1]:.4f} against the true [1, −1]. NUTS ({2 * sizes.nuts_draws:,} "
        f"draws): W₀ = {nuts_w[:, 0].mean():.4f} ± {nuts_w[:, 0].std():.4f}, W₁ = "
        f"{nuts_w[:, 1].mean():.4f} ± {nuts_w[:, 1].std():.4f} (MCSE of the means "
        f"{nuts_mcse[0]:.4f}, {nuts_mcse[1]:.4f})."
    )


def table2(sizes: Sizes) -> None:
    """Run and print Table 2."""
    X, y = mixture_logistic_data(SEED)
    mean, sd = quadrature_posterior(X, y)
    models = {mb: logistic_model(X, y, mb) for mb in (False, True)}
    progress("Table 2: NUTS reference")
    nuts_w, nuts_mcse = nuts_reference(models[False], sizes)
    rows = []
    for k, spec in enumerate(table2_specs()):
        run = run_chains(
            models[spec.minibatch], spec, sizes.tune2, sizes.draws2, sizes.chains, SEED + 100 + k
        )
        rows.append(table2_row(spec, run, mean, sd))
        if not run.failed:
            eps = f"{spec.kwargs['step_size']:g}"
            progress(f"Table 2: {spec.label} ε={eps} done in {run.seconds:.0f} s")
    print_table(
        f"Table 2 — 2-D Bayesian logistic regression, N = {T2_N:,} "
        f"({sizes.chains} chain(s) × {sizes.draws2:,} draws after {sizes.tune2:,} burn-in)",
        ["method", "ε", "paper RMSE W₀", "paper RMSE W₁", *LOGISTIC_COLUMNS],
        rows,
        [table2_exact_note(sizes, mean, sd, nuts_w, nuts_mcse), TABLE2_NOTE, PAPER_ESTIMATORS_NOTE],
    )
