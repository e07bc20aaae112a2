"""Constants shared by the parent and the workers: priors, true values, names, paths."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parents[1] / "time_to_accuracy.py"
"""The entry script, which a worker process runs with ``--worker CONFIG``."""
PRIOR_SD = 10.0
MU_SD, SIGMA_SCALE = 5.0, 2.0  # hierarchical hyperpriors
TRUE_W_SD, TRUE_MU, TRUE_SIGMA = 0.5, -0.5, 1.0
HIER_COLS = 5
CHUNK = 1 << 18  # rows per chunk when simulating and in Newton's method
OURS = ("SGLD", "SGHMC", "SGNHT", "SGHMCEM", "SGNHTEM")
GRADIENTS = ("minibatch", "control_variates", "svrg", "saga")
KINDS = (
    "nuts", "nutpie", "numpyro", "numpyro-sequential", "numpyro-parallel", "numpyro-pymc", "advi",
    "ours",
)  # fmt: skip
NUTS_KINDS = ("nuts", "nutpie", "numpyro", "numpyro-pymc")
