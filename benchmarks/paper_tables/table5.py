"""Table 5: the Nosé–Poincaré and Riemannian rows of Tables 1–3.

SG-NPHMC, SG-NPHMC-EM, SGR-NPHMC and RHMC, with SGNHT-EM and HMC-EM beside them, every
sampler with its default arguments: Table 1's problem (5a), Table 2's (5b) and ms per
iteration (5c).
"""

from __future__ import annotations

import numpy as np

import pymc_sgmcmc as pmsg

from .chains import (
    LOGISTIC_COLUMNS,
    NORMAL_GAMMA_COLUMNS,
    Spec,
    logistic_cells,
    normal_gamma_cells,
    run_chains,
)
from .config import SEED, Sizes
from .output import fmt, print_table, progress
from .paper import (
    PAPER_NP_TABLE1,
    PAPER_NP_TABLE2,
    PAPER_NP_TABLE3,
    PAPER_TABLE1,
    PAPER_TABLE2,
    PAPER_TABLE3,
)
from .problems import (
    T1_N,
    T2_N,
    TIMING_SETS,
    TRUE_W,
    logistic_model,
    mixture_logistic_data,
    normal_data,
    normal_gamma_model,
    normal_gamma_posterior,
    quadrature_posterior,
    timing_models,
)
from .timing import TimedCase, measure, timed_step

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
NP_TIMING_SETS = ("normal", "synthetic", "australian", "heart")


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
            rows1.append(head + normal_gamma_cells(run, exact))
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
            rows2.append(head + logistic_cells(run, TRUE_W, mean, sd))
        progress(f"Table 5 (Table 2 problem): {label} done in {run.seconds:.0f} s")
    return rows1, rows2


def np_timings(sizes: Sizes, names: tuple[str, ...]) -> dict:
    """Milliseconds per iteration of :data:`NP_SPECS` on ``names`` (interleaved blocks)."""
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
    """Tables 5a and 5b (with ``accuracy``), and 5c on the data sets ``names``."""
    if accuracy:
        table5_accuracy(sizes)
    if names:
        table5_timing(sizes, names)


def table5_accuracy(sizes: Sizes) -> None:
    """Run and print Tables 5a and 5b."""
    rows1, rows2 = np_accuracy(sizes)
    print_table5a(sizes, rows1)
    print_table5b(sizes, rows2)


def print_table5a(sizes: Sizes, rows1: list[list[str]]) -> None:
    """Table 5a: Table 1's problem."""
    x = normal_data(SEED)
    exact = normal_gamma_posterior(x)
    print_table(
        f"Table 5a — Table 1's problem (N = {T1_N:,}), every sampler with its defaults "
        f"({sizes.chains} chain(s) × {sizes.draws1:,} draws after {sizes.tune1:,} tuning)",
        ["method", "paper RMSE μ", "paper RMSE τ", *NORMAL_GAMMA_COLUMNS],
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


def print_table5b(sizes: Sizes, rows2: list[list[str]]) -> None:
    """Table 5b: Table 2's problem."""
    X, y = mixture_logistic_data(SEED)
    mean, sd = quadrature_posterior(X, y)
    print_table(
        f"Table 5b — Table 2's problem (N = {T2_N:,}), defaults "
        f"({sizes.chains} chain(s) × {sizes.draws2:,} draws after {sizes.tune2:,} tuning)",
        ["method", "paper RMSE W₀", "paper RMSE W₁", *LOGISTIC_COLUMNS],
        rows2,
        [
            f"Exact posterior (quadrature): W₀ = {mean[0]:.4f} ± {sd[0]:.4f}, W₁ = "
            f"{mean[1]:.4f} ± {sd[1]:.4f}.",
        ],
    )


def table5_timing(sizes: Sizes, names: tuple[str, ...]) -> None:
    """Run and print Table 5c."""
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
