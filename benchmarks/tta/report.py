"""The report printed on stdout (and written with ``--out``).

The header (machine, versions, problem, reference, command), the Markdown table of the
rows with its footnotes, and the summary ratios of ours against NUTS.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import math
import os
import platform
import subprocess
from collections.abc import Sequence

import numpy as np

from .config import MU_SD, NUTS_KINDS, PRIOR_SD, ROOT, SIGMA_SCALE
from .problems import group_sizes, param_labels

COLUMNS = (
    "configuration",
    "wall s",
    "setup s",
    "time to acc. s",
    "max \\|Δmean\\|/sd",
    "sd ratio",
    "min ESS",
    "ESS/s",
    "rows touched",
    "peak MB",
)


def fmt(value: float | None, digits: int = 3, approx: bool = False) -> str:
    """A number to ``digits`` significant digits (thousands in full), "~" if ``approx``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    prefix = "~" if approx else ""
    if abs(value) >= 1000:
        return f"{prefix}{value:,.0f}"
    return f"{prefix}{value:.{digits}g}"


def fmt_rows(value: float | None, approx: bool = False) -> str:
    """A count of rows in scientific notation."""
    if value is None:
        return "—"
    return f"{'~' if approx else ''}{value:.2e}"


def environment(args: argparse.Namespace, rows: Sequence[dict] = ()) -> list[str]:
    """The header lines on the machine, JAX's devices, the versions and git revision.

    The JAX line lists the devices that the NumPyro rows among ``rows`` ran on (as their
    workers report them), and is left out before the rows have run or when none did.
    """
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    versions = []
    for package in ("numpy", "pymc", "pytensor", "arviz", "jax", "numpyro", "nutpie"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "pymc_sgmcmc"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        rev += " + uncommitted changes" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        rev = "unknown"
    devices = dict.fromkeys(r["jax_devices"] for r in rows if r.get("jax_devices"))
    return [
        f"- Machine: {cpu}, {os.cpu_count()} logical cores; {platform.system()} "
        f"{platform.machine()}; Python {platform.python_version()}",
        *([f"- JAX (NumPyro rows): {'; '.join(devices)}"] if devices else []),
        f"- Versions: {', '.join(versions)}; pymc_sgmcmc at git {rev}",
    ]


def problem_description(args: argparse.Namespace) -> str:
    """The problem in words, as in the title."""
    hier = args.model == "hierarchical"
    if not hier:
        return f"logistic regression, {args.n_rows:,} rows × {args.n_cols} features"
    form = "centred" if args.centered else "non-centred"
    sizes = f"{args.rows_per_group} rows"
    if args.group_sizes == "heavy":
        counts = group_sizes(args.groups, args.rows_per_group, "heavy", args.data_seed)
        sizes = (
            f"lognormal sizes (mean {args.rows_per_group}: {np.mean(counts <= 3):.0%} of "
            f"groups with 1-3 rows, the largest {counts.max():,})"
        )
    return (
        f"varying-intercept logistic regression ({form}), {args.groups:,} groups × "
        f"{sizes} = {args.n_rows:,} rows, {args.n_cols} slopes"
    )


def header_lines(
    args: argparse.Namespace, ref_lines: list[str], command: str, rows: Sequence[dict] = ()
) -> list[str]:
    """The title and the bullet list above the table (with ``rows``: their JAX devices)."""
    hier = args.model == "hierarchical"
    problem = problem_description(args)
    cores = args.cores if args.cores is not None else f"PyMC's default ({min(4, os.cpu_count())})"
    return [
        f"# Time to accuracy: {problem}",
        "",
        *environment(args, rows),
        f"- Problem: {problem}; float64; prior w ~ N(0, {PRIOR_SD:g}²)"
        + (f", mu ~ N(0, {MU_SD:g}²), sigma ~ HalfNormal({SIGMA_SCALE:g})" if hier else "")
        + f"; minibatches of {args.batch_size} rows (ADVI, ours)",
        *ref_lines,
        f"- Accuracy: every mean within {args.mean_tol:g} reference sd and every sd within "
        f"{args.sd_tol:.0%} of the reference sd (pooled chains, checked every "
        f"{args.check_every} draws per chain); time = setup + (tune + k)/(tune + draws) × "
        "(wall − setup)",
        f"- Runs: NUTS {args.chains} chains × ({args.nuts_tune} + {args.nuts_draws}); ours "
        f"{args.chains} × ({args.tune} + {args.draws}), cores={cores}; "
        f"ADVI {args.advi_iterations:,} iterations then {args.chains} × {args.draws} draws",
        f"- Command: `{command}`",
    ]


def table_row(r: dict, labels: list[str], footnotes: list[str]) -> str:
    """One row of the table; its footnotes are appended to ``footnotes``."""
    if "error" in r:
        return f"| {r['label']} | error: {r['error'][:160]} |" + " |" * 8
    ex = r.get("extrapolated", False)
    setup = fmt(r.get("setup_s"))
    if r.get("mode_s") is not None:
        setup += f" (mode {fmt(r['mode_s'])})"
    tta = fmt(r.get("tta_s"), approx=ex)
    if r.get("tta_s") is None and r.get("tta_lower_s") is not None:
        tta = f"> {fmt(r['tta_lower_s'], approx=True)}"
    worst = r.get("worst_mean_err")
    worst_s = "—" if worst is None else f"{worst:.3f} ({labels[r['worst_index']]})"
    ratio = "—"
    if r.get("sd_ratio_min") is not None:
        ratio = f"{r['sd_ratio_min']:.3f}–{r['sd_ratio_max']:.3f}"
    min_ess_s = fmt(r.get("min_ess"), approx=ex)
    if r.get("min_ess") is not None and r.get("min_ess_index") is not None:
        min_ess_s += f" ({labels[r['min_ess_index']]})"
    rows_s = fmt_rows(r.get("rows_touched"), approx=ex)
    if r.get("steps_exact") is False:
        rows_s += " (warm-up est.)"
    if r.get("setup_rows"):
        rows_s += f" (setup {r['setup_rows']:.2e})"
    cells = [
        r["label"],
        fmt(r.get("total_s"), approx=ex),
        setup,
        tta,
        worst_s,
        ratio,
        min_ess_s,
        fmt(r.get("ess_per_s"), approx=ex),
        rows_s,
        fmt(r.get("peak_mb")),
    ]
    # Our samplers' own warnings (a minibatch step capped far below its default is
    # warned about before sampling): the row is marked and the warning quoted.
    ours_warned = [
        w for w in r.get("warnings", []) if r["kind"] == "ours" and w.startswith("Runtime")
    ]
    if ours_warned:
        cells[0] += " (warned)"
    for message in ours_warned:
        footnotes.append(f"{r['label']} warned: {message.removeprefix('RuntimeWarning: ')}")
    for note in r.get("notes", []):
        footnotes.append(f"{r['label']}: {note}")
    if ex:
        m = r["measured"]
        footnotes.append(
            f"{r['label']}: ~ extrapolated from a short run of {m['tune']} warm-up + "
            f"{m['draws']} draws per chain ({fmt(m['total_s'])} s measured, "
            f"{r['seconds_per_leapfrog'] * 1e3:.3g} ms per "
            f"{'joint ' if r.get('joint_tune_steps') is not None else ''}leapfrog step, "
            f"mean tree size {r['mean_tree']:.3g}) to {r['tune']} + {r['draws']}; its "
            "accuracy columns are the short run's."
        )
    return "| " + " | ".join(cells) + " |"


def table_notes(args: argparse.Namespace, rows: list[dict], footnotes: list[str]) -> list[str]:
    """The lines under the table: data size, markers explained, footnotes."""
    lines = []
    data_mb = next((r["data_mb"] for r in rows if "data_mb" in r), None)
    lines.append("")
    if data_mb is not None:
        lines.append(f"Data in memory: {data_mb:.1f} MB (X, y{', groups' * (args.groups > 0)}).")
    if any(r.get("extrapolated") for r in rows):
        lines.append(
            "~ extrapolated: the NUTS run's projected time exceeded --nuts-budget-s, so a short "
            "run was timed and scaled to the full warm-up and draws (see the module docstring)."
        )
    if any(r.get("steps_exact") is False for r in rows):
        lines.append(
            "(warm-up est.): the warm-up's tree sizes are not reported by that path; counted as "
            "warm-up iterations × the draws' mean tree size (an underestimate)."
        )
    lines.extend(f"- {note}" for note in footnotes)
    return lines


def table(args: argparse.Namespace, rows: list[dict], header: list[str]) -> str:
    """The whole report: header, table, notes and summary."""
    lines = [*header, "", "| " + " | ".join(COLUMNS) + " |"]
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(COLUMNS) - 1)) + "|")
    footnotes: list[str] = []
    labels = param_labels(args.model, args.n_cols, args.groups)
    lines.extend(table_row(r, labels, footnotes) for r in rows)
    lines.extend(table_notes(args, rows, footnotes))
    lines.append("")
    lines.extend(summary(rows))
    return "\n".join(lines)


def summary(rows: list[dict]) -> list[str]:
    """The closing lines: ours against NUTS by time to accuracy and ESS/s."""
    good = [r for r in rows if "error" not in r]
    ours = [r for r in good if r["kind"] == "ours" and r.get("tta_s") is not None]
    nuts = [r for r in good if r["kind"] in NUTS_KINDS]
    out = []
    direct = next((r for r in nuts if r["kind"] == "numpyro"), None)
    via = next((r for r in nuts if r["kind"] == "numpyro-pymc"), None)
    if direct and via:
        faster, slower = sorted((direct, via), key=lambda r: r["total_s"])
        out.append(
            f"NumPyro: {faster['label']} is faster ({fmt(faster['total_s'])} s against "
            f"{fmt(slower['total_s'])} s wall)."
        )
    if not ours:
        out.append("No sampler of ours reached the accuracy: no ratios.")
        return out
    best = max(ours, key=lambda r: r.get("ess_per_s") or 0.0)
    by_tta = [r for r in nuts if r.get("tta_s") is not None]
    by_ess = [r for r in nuts if r.get("ess_per_s")]
    out.append(f"Best of ours (highest ESS/s among those accurate): {best['label']}.")
    if by_tta:
        fastest = min(by_tta, key=lambda r: r["tta_s"])
        out.append(
            f"- time-to-accuracy ratio (ours / fastest NUTS, {fastest['label']}): "
            f"{best['tta_s'] / fastest['tta_s']:.3g} ({fmt(best['tta_s'])} s against "
            f"{fmt(fastest['tta_s'], approx=fastest.get('extrapolated', False))} s)"
        )
    else:
        why = "reached the accuracy" if nuts else "in this run"
        out.append(f"- time-to-accuracy ratio: no NUTS row {why}")
    if by_ess and best.get("ess_per_s"):
        top = max(by_ess, key=lambda r: r["ess_per_s"])
        out.append(
            f"- ESS/s ratio (ours / best NUTS, {top['label']}): "
            f"{best['ess_per_s'] / top['ess_per_s']:.3g} ({fmt(best['ess_per_s'])} against "
            f"{fmt(top['ess_per_s'], approx=top.get('extrapolated', False))})"
        )
    return out
