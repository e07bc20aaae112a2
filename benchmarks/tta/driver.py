"""The parent process: the whole run.

The configurations to run, the NUTS time budget, and :func:`run`: the data, the
reference, one worker per row and the report.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from .config import NUTS_KINDS
from .problems import simulate
from .reference import reference
from .report import fmt, header_lines, table
from .worker import json_default, run_worker

# Guessed leapfrog steps per NUTS iteration, only to decide whether a run fits the budget.
TREE_GUESS = {"logistic": 7, "hierarchical": 31}


def configurations(args: argparse.Namespace) -> list[dict]:
    """The rows asked for by ``--only``, ``--ours`` and ``--gradients``, in table order."""
    only = set(args.only.split(","))
    configs = []
    names = {
        "nuts": "PyMC NUTS",
        "nutpie": "nutpie (pm.sample)",
        "numpyro-pymc": "NumPyro NUTS (pm.sample)",
        "numpyro": "NumPyro NUTS (direct)",
        "numpyro-sequential": "NumPyro NUTS (direct, sequential chains)",
        "numpyro-parallel": "NumPyro NUTS (direct, parallel chains)",
        "advi": f"ADVI (pm.fit, {args.advi_iterations:,} it., minibatch)",
    }
    numpyro_kinds = ("numpyro", "numpyro-sequential", "numpyro-parallel")
    for kind in ("nuts", "nutpie", "numpyro-pymc", *numpyro_kinds, "advi"):
        if kind in only:
            configs.append({"kind": kind, "label": names[kind]})
            if kind in numpyro_kinds[1:]:
                configs[-1].update(kind="numpyro", chain_method=kind.split("-")[1])
            if kind.startswith("numpyro") and args.nuts_form != "same":
                configs[-1]["form"] = args.nuts_form
                configs[-1]["label"] += f", {args.nuts_form}"
    if "ours" in only:
        for sampler in args.ours.split(","):
            for gradient in args.gradients.split(","):
                label = f"{sampler}, {gradient.replace('_', ' ')}"
                configs.append(
                    {"kind": "ours", "label": label, "sampler": sampler, "gradient": gradient}
                )
    return configs


def run_nuts(args: argparse.Namespace, cfg: dict, gradient_s: float, workdir: Path) -> dict:
    """A NUTS row: in full, or extrapolated from a short run when over the budget.

    The first projection (a numpy gradient pass × a guessed tree size) is rough; when it
    is above a tenth of the budget a short run comes first, and the full run follows only
    if the short run's extrapolation fits the budget.
    """
    cfg = {**cfg, "tune": args.nuts_tune, "draws": args.nuts_draws}
    per_iteration = gradient_s * TREE_GUESS[args.model] * args.chains
    projected = per_iteration * (args.nuts_tune + args.nuts_draws)
    result = None
    if projected > args.nuts_budget_s / 10:
        short = args.nuts_short
        if 2 * short * per_iteration > args.nuts_budget_s / 2:
            short = max(10, int(args.nuts_budget_s / (4 * per_iteration)))
        if short < min(args.nuts_tune, args.nuts_draws):
            probe = {**cfg, "full_tune": cfg["tune"], "full_draws": cfg["draws"]}
            probe.update(tune=short, draws=short)
            print(f"Running {cfg['label']} (short: {short} + {short}) ...", file=sys.stderr)
            result = run_worker(probe, workdir, args.worker_timeout_s)
            projected = result.get("total_s", projected)
            if "error" in result or projected > args.nuts_budget_s:
                result["projected_s"] = projected
                return result
    print(f"Running {cfg['label']} ...", file=sys.stderr, flush=True)
    full = run_worker(cfg, workdir, args.worker_timeout_s)
    full["projected_s"] = projected
    if result is not None:
        full.setdefault("notes", []).append(
            f"a short run ({result['measured']['tune']} + {result['measured']['draws']}) "
            f"projected {projected:.0f} s, within --nuts-budget-s: run in full"
        )
    return full


def base_config(args: argparse.Namespace, data: dict) -> dict:
    """What every worker's configuration shares: the problem, data files and tolerances."""
    return {
        "model": args.model,
        "data": {k: (str(v) if v else None) for k, v in data["paths"].items()},
        "n_rows": args.n_rows,
        "groups": args.groups,
        "batch_size": args.batch_size,
        "cores": args.cores,
        "seed": args.seed,
        "advi_iterations": args.advi_iterations,
        "mean_tol": args.mean_tol,
        "sd_tol": args.sd_tol,
        "every": args.check_every,
        "centered": args.centered,
        "form": "centred" if args.centered else "non-centred",
    }


def run_row(args: argparse.Namespace, cfg: dict, gradient_s: float, workdir: Path) -> dict:
    """One row in its worker (NUTS rows under the budget), with progress on stderr."""
    if cfg["kind"] in NUTS_KINDS:
        result = run_nuts(args, cfg, gradient_s, workdir)
    else:
        print(f"Running {cfg['label']} ...", file=sys.stderr, flush=True)
        result = run_worker(cfg, workdir, args.worker_timeout_s)
    for note in result.get("notes", []):
        if note.startswith("!!"):
            print(f"  WARNING, {cfg['label']}: {note} (FOR TESTING ONLY)", file=sys.stderr)
    brief = (
        result["error"]
        if "error" in result
        else f"{fmt(result['total_s'])} s, time to accuracy {fmt(result.get('tta_s'))} s"
    )
    print(f"  {brief}", file=sys.stderr, flush=True)
    return result


def run(args: argparse.Namespace, cache: Path, workdir: Path) -> None:
    """Simulate, find the reference, run every row, print and write the report."""
    command = "python " + " ".join(
        shlex.quote(os.path.relpath(a) if i == 0 else a) for i, a in enumerate(sys.argv)
    )
    print(f"Simulating {args.n_rows:,} × {args.n_cols} ...", file=sys.stderr, flush=True)
    data = simulate(args, cache)
    base = base_config(args, data)
    ref_path, ref_lines, ref_info = reference(args, data, workdir, cache, base)
    base["reference"] = str(ref_path)
    header = header_lines(args, ref_lines, command)
    print("\n".join(header), file=sys.stderr, flush=True)

    rows = []
    for cfg in configurations(args):
        cfg = {**base, **cfg, "chains": args.chains, "tune": args.tune, "draws": args.draws}
        rows.append(run_row(args, cfg, ref_info["gradient_s"], workdir))

    header = header_lines(args, ref_lines, command, rows)  # now with the JAX devices
    text = table(args, rows, header)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        raw = {"command": command, "header": header, "reference": ref_info, "rows": rows}
        args.json.write_text(json.dumps(raw, indent=1, default=json_default) + "\n")
