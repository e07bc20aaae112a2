"""Table 1: mean and precision of a 1-D normal with a normal–gamma prior.

HMC, SGHMC, SGNHT and their EM variants, scored against the truth (the paper's RMSE) and
the exact posterior, with their ms per iteration from Table 3's timing.
"""

from __future__ import annotations

import numpy as np

import pymc_sgmcmc as pmsg

from .chains import NORMAL_GAMMA_COLUMNS, Run, Spec, normal_gamma_cells, run_chains
from .config import N_STEPS, PAPER_ESTIMATORS_NOTE, PAPER_SGHMC, PAPER_SGNHT, SEED, Sizes
from .output import fmt, print_table, progress
from .paper import PAPER_TABLE1
from .problems import T1_N, normal_data, normal_gamma_model, normal_gamma_posterior

TABLE1_NOTE = (
    "HMC: all rows, full-data Metropolis–Hastings test. SGHMC: friction C = 10, "
    "B̂ = 0; SGNHT: diffusion A = 1; minibatch 100. '—' in ms/iter: not timed. "
    "HMC's step size is jittered by ±15 % per draw (the default, as PyMC's HMC). "
    "The 'no jitter' row is not the paper's setting: with exactly 10 steps of 0.01 "
    "the learned mass makes both parameters oscillate with the same period, about "
    "one trajectory long (≈ 2π), so that successive draws nearly coincide."
)


def table1_specs() -> list[Spec]:
    """The rows of Table 1: every sampler at the paper's step sizes."""
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
        sghmc = {"step_size": eps, "n_steps": N_STEPS} | PAPER_SGHMC
        rows += [
            Spec("SGHMC", pmsg.SGHMC, sghmc, True),
            Spec("SGHMC-EM", pmsg.SGHMCEM, sghmc, True),
            Spec("SGHMC-EM, momentum", pmsg.SGHMCEM, sghmc | {"mass_estimator": "momentum"}, True),
        ]
    for eps in (1e-3, 1e-2):
        sgnht = {"step_size": eps, "n_steps": N_STEPS} | PAPER_SGNHT
        rows += [
            Spec("SGNHT", pmsg.SGNHT, sgnht, True),
            Spec("SGNHT-EM", pmsg.SGNHTEM, sgnht, True),
            Spec("SGNHT-EM, momentum", pmsg.SGNHTEM, sgnht | {"mass_estimator": "momentum"}, True),
        ]
    return rows


def table1_times(results: dict) -> dict:
    """Table 1's time column: the default twin and EM rows of the 1-D set."""
    out = {}
    for sampler, eps in (("HMC", 1e-2), ("SGHMC", 1e-2), ("SGNHT", 1e-3)):
        em = f"{sampler}-EM, defaults"
        for label, case in ((sampler, sampler), (f"{sampler}-EM", em)):
            if ("normal", case) in results:
                out["normal", label, f"{eps:g}"] = results["normal", case][0]
    return out


def table1_row(spec: Spec, run: Run, exact: dict, times: dict) -> list[str]:
    """One row: the paper's numbers, our scores (or why there are none), ms per iteration."""
    paper = PAPER_TABLE1[spec.paper]
    eps = f"{spec.kwargs['step_size']:g}"
    time_ms = times.get(("normal", spec.label, eps))
    head = [spec.label, eps, fmt(paper[0]), fmt(paper[1])]
    if run.failed:
        return head + [run.failed] + [""] * 6 + [fmt(time_ms, 3), fmt(paper[2], 3)]
    return head + normal_gamma_cells(run, exact) + [fmt(time_ms, 3), fmt(paper[2], 3)]


def exact_normal_gamma_note(exact: dict) -> str:
    """The exact posterior of Table 1's problem and a perfect sampler's RMSE."""
    return (
        f"Exact posterior: μ = {exact['mu'][0]:.4f} ± {exact['mu'][1]:.4f}, "
        f"τ = {exact['tau'][0]:.4f} ± {exact['tau'][1]:.4f} (mean ± sd). RMSE is against "
        "μ = 0, τ = 1 (the paper's metric); a perfect sampler scores "
        f"RMSE μ = {np.hypot(*exact['mu']):.4f}, RMSE τ = "
        f"{np.hypot(exact['tau'][0] - 1, exact['tau'][1]):.4f}. Mean errors are in "
        "exact posterior sds, sd ratio = sampled sd / exact sd."
    )


def table1(sizes: Sizes, times: dict) -> None:
    """Run and print Table 1; ``times`` is its ms/iter column (:func:`table1_times`)."""
    x = normal_data(SEED)
    exact = normal_gamma_posterior(x)
    models = {mb: normal_gamma_model(x, mb) for mb in (False, True)}
    rows = []
    for k, spec in enumerate(table1_specs()):
        run = run_chains(
            models[spec.minibatch], spec, sizes.tune1, sizes.draws1, sizes.chains, SEED + k
        )
        rows.append(table1_row(spec, run, exact, times))
        if not run.failed:
            eps = f"{spec.kwargs['step_size']:g}"
            progress(f"Table 1: {spec.label} ε={eps} done in {run.seconds:.0f} s")
    print_table(
        f"Table 1 — 1-D normal, normal–gamma prior, N = {T1_N:,} "
        f"({sizes.chains} chain(s) × {sizes.draws1:,} draws after {sizes.tune1:,} burn-in)",
        ["method", "ε", "paper RMSE μ", "paper RMSE τ", *NORMAL_GAMMA_COLUMNS]
        + ["ms/iter", "paper ms"],
        rows,
        [exact_normal_gamma_note(exact), TABLE1_NOTE, PAPER_ESTIMATORS_NOTE],
    )
