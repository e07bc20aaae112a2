"""Table 3: time per iteration of HMC, SGHMC, SGNHT and their EM variants.

Table 3 gives ms per iteration, 3b the EM / twin ratios against the 10 % requirement and
3c the EM bookkeeping measured directly. :func:`run_timings` also gives Table 1's
ms/iter column.
"""

from __future__ import annotations

import numpy as np

import pymc_sgmcmc as pmsg

from .config import (
    EM_TOLERANCE,
    N_STEPS,
    NAMES,
    PAPER_ESTIMATORS_NOTE,
    PAPER_SGHMC,
    PAPER_SGNHT,
    SEED,
    TWINS,
    Sizes,
)
from .output import print_table, progress
from .paper import PAPER_TABLE3
from .problems import TIMING_SETS, timing_models
from .timing import TimedCase, best_ratio, em_bookkeeping, measure, paired_ratio, timed_step

TIMING_VARIANTS = (
    # (label suffix, EM or twin, extra arguments, learning, dense)
    ("", False, {}, True, False),
    ("-EM, S = 300", True, {"sample_size": 300, "adaptive_sample_size": False}, True, False),
    ("-EM, defaults", True, {}, True, False),
    ("-EM, defaults, after tuning", True, {}, False, False),
    (", dense I", False, {}, True, True),
    ("-EM, dense, S = 300", True, {"sample_size": 300, "adaptive_sample_size": False}, True, True),
)
TIMING_PAIRS = (
    # (pair label suffix, EM case suffix, twin case suffix)
    ("-EM, S = 300 (learning)", "-EM, S = 300", ""),
    ("-EM, defaults (learning)", "-EM, defaults", ""),
    ("-EM, defaults (after tuning)", "-EM, defaults, after tuning", ""),
    ("-EM, dense, S = 300 (learning) / dense twin", "-EM, dense, S = 300", ", dense I"),
)


def timing_cases(name: str, seed: int) -> list[TimedCase]:
    """Every case of one data set (see ``TIMING_VARIANTS``)."""
    models, dim = timing_models(name)
    _, _, _, eps_hmc, eps_sghmc, eps_sgnht = TIMING_SETS[name]
    cases = []
    for em_cls, eps, extra, minibatch in (
        (pmsg.HMCEM, eps_hmc, {}, False),
        (pmsg.SGHMCEM, eps_sghmc, PAPER_SGHMC, True),
        (pmsg.SGNHTEM, eps_sgnht, PAPER_SGNHT, True),
    ):
        twin_cls = TWINS[em_cls]
        model = models[minibatch]
        base = {"step_size": eps, "n_steps": N_STEPS} | extra
        point = model.initial_point()
        for suffix, is_em, kwargs, learning, dense in TIMING_VARIANTS:
            kwargs = base | kwargs
            if dense:
                kwargs |= {"mass_structure": "dense"} if is_em else {"mass": np.eye(dim)}
            cls = em_cls if is_em else twin_cls
            step = timed_step(model, cls, kwargs, seed, learning)
            cases.append(TimedCase(NAMES[twin_cls] + suffix, step, point))
    return cases


def run_timings(sizes: Sizes, names: list[str]) -> dict:
    """Time every data set; results keyed (set, case label) and (set, 'ratio', pair)."""
    results: dict = {}
    for k, name in enumerate(names):
        progress(f"Timing: {TIMING_SETS[name][0]} (compiling)")
        cases = timing_cases(name, SEED + k)
        progress(f"Timing: {TIMING_SETS[name][0]} ({sizes.rounds} rounds)")
        measure(cases, sizes.rounds, sizes.block)
        by_label = {c.label: c for c in cases}
        for c in cases:
            results[name, c.label] = (c.median, min(c.samples), max(c.samples))
        for sampler in ("HMC", "SGHMC", "SGNHT"):
            for pair, em, twin in TIMING_PAIRS:
                a, b = by_label[sampler + em], by_label[sampler + twin]
                results[name, "ratio", sampler + pair] = (paired_ratio(a, b), best_ratio(a, b))
        progress(f"Timing: {TIMING_SETS[name][0]} (EM bookkeeping)")
        for c in cases:
            if "-EM" in c.label and "after tuning" not in c.label:
                results[name, "bookkeeping", c.label] = em_bookkeeping(
                    c.step, dict(c.start), sizes.bookkeeping
                )
    return results


def table3(sizes: Sizes, results: dict, names: list[str]) -> None:
    """Print Tables 3, 3b and 3c from :func:`run_timings`'s ``results``."""
    table3_times(sizes, results, names)
    table3_ratios(results, names)
    table3_bookkeeping(sizes, results, names)


def table3_times(sizes: Sizes, results: dict, names: list[str]) -> None:
    """Table 3: ms per iteration of every case, the paper's beside the matching rows."""
    header = ["method"] + [
        f"{TIMING_SETS[n][0]} ({TIMING_SETS[n][1]}×{TIMING_SETS[n][2]})" for n in names
    ]
    paper_index = {"synthetic": 0, "australian": 1, "heart": 2}
    rows = []
    for sampler in ("HMC", "SGHMC", "SGNHT"):
        for suffix, *_ in TIMING_VARIANTS:
            label = sampler + suffix
            row = [label]
            paper_key = {"": sampler, "-EM, S = 300": f"{sampler}-EM"}.get(suffix)
            for name in names:
                median, low, high = results[name, label]
                cell = f"{median:.3f} ({low:.3f}–{high:.3f})"
                if name in paper_index and paper_key:
                    cell += f" [paper {PAPER_TABLE3[paper_key][paper_index[name]]:.3f}]"
                row.append(cell)
            rows.append(row)
    print_table(
        f"Table 3 — ms per iteration ({N_STEPS} leapfrog steps): median (min–max) of "
        f"{sizes.rounds} interleaved blocks of {sizes.block} iterations",
        header,
        rows,
        [
            "HMC uses all rows (and evaluates the full-data log density twice per "
            "iteration for its test); SGHMC and SGNHT a fresh minibatch of 100 per "
            "gradient. EM rows learn the mass (tuning phase) unless marked 'after tuning'. "
            "'S = 300': E step fixed at 300 iterations, as for the paper's timing; "
            "'defaults': S from 100, grown by the §3.2 rule (its test function takes the "
            "gradient the trajectory returns); 'dense I': the fixed-mass twin "
            "with a dense identity mass. Australian and Heart: synthetic data of those "
            "shapes.",
            PAPER_ESTIMATORS_NOTE,
        ],
    )


def ratio_verdict(ratios: list[tuple[float, float]]) -> str:
    """PASS, FAIL or noisy for one pair's (median, best) ratios over the data sets."""
    if all(max(both) <= EM_TOLERANCE for both in ratios):
        return "PASS"
    if any(min(both) > EM_TOLERANCE for both in ratios):
        return "FAIL"
    return "noisy"


def table3_ratios(results: dict, names: list[str]) -> None:
    """Table 3b: EM sampler / fixed-mass twin, with a verdict per pair."""
    rows, verdicts = [], []
    for sampler in ("HMC", "SGHMC", "SGNHT"):
        for pair, *_ in TIMING_PAIRS:
            ratios = [results[name, "ratio", sampler + pair] for name in names]
            verdict = ratio_verdict(ratios)
            verdicts.append(verdict)
            cells = [f"{median:.3f} / {best:.3f}" for median, best in ratios]
            rows.append([sampler + pair, *cells, verdict])
    print_table(
        "Table 3b — time per iteration, EM sampler / its fixed-mass twin: median of the "
        "per-round ratios / ratio of the fastest blocks (requirement ≤ "
        f"{EM_TOLERANCE:.2f})",
        ["EM case / twin", *[TIMING_SETS[n][0] for n in names], "verdict"],
        rows,
        [
            "PASS: both estimates within the requirement on every data set; FAIL: both "
            "above it on some data set; noisy: only one of the two above it. Ratios near 1 "
            "for 'after tuning' show how noisy the machine was.",
            f"Pairs: {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL, "
            f"{verdicts.count('noisy')} noisy.",
        ],
    )


def table3_bookkeeping(sizes: Sizes, results: dict, names: list[str]) -> None:
    """Table 3c: the EM bookkeeping per iteration as a share of the twin's time."""
    rows = []
    for sampler in ("HMC", "SGHMC", "SGNHT"):
        for suffix, is_em, _, learning, dense in TIMING_VARIANTS:
            if not (is_em and learning):
                continue
            label = sampler + suffix
            twin = sampler + (", dense I" if dense else "")
            cells, worst = [], 0.0
            for name in names:
                parts = results[name, "bookkeeping", label]
                share = parts["total"] / (1e3 * results[name, twin][0])
                worst = max(worst, share)
                cells.append(
                    f"{parts['total']:.1f} ({parts['records']:.1f}, "
                    f"{parts['m_steps']:.1f}) = {100 * share:.1f} %"
                )
            rows.append([label, *cells, "PASS" if worst <= EM_TOLERANCE - 1 else "FAIL"])
    print_table(
        "Table 3c — EM bookkeeping measured directly: µs per iteration (of which test-"
        "function records, M steps) and as a share of the twin's time per iteration, "
        f"over the first {sizes.bookkeeping:,} iterations of a new chain",
        ["EM case", *[TIMING_SETS[n][0] for n in names], "≤ 10 %"],
        rows,
        [
            "Everything an EM iteration does besides its twin's iteration: storing the "
            "sample (and its gradient, which the trajectory returns), the §3.2 test "
            "function's records, the M steps (with the stiffness check). The twin's time is "
            "Table 3's median (the dense twin for dense rows).",
        ],
    )
