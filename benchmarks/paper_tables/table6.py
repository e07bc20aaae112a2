"""Table 6: the Riemannian supplement's Tables 1-2, RMSE as the thermostats' frictions vary.

Roychowdhury, Kulis and Parthasarathy, "Robust Monte Carlo Sampling using Riemannian
Nosé-Poincaré Hamiltonian Dynamics", supplement §D.1: SGR-NPHMC with ``A = B`` in
{0.01, 0.001, 0.0001} (its Table 1) and SG-NHT with ``A`` in {0.1, 1, 10} (its Table 2) on
a synthetic Bayesian logistic regression with two weights. The supplement gives neither
its data nor its step sizes: we use Table 2's problem (the same authors' EM paper, 2,000
rows, true weights [1, −1]), plain minibatches of 100 (the gradient noise the thermostats
are there to absorb) and the package's automatic step size; two more rows run each
sampler with the package's defaults (control variates).

The mapping of the parameters:

- ``SGNHT(diffusion=A)`` is SG-NHT's ``A`` (the noise ``N(0, 2Aε)``, the thermostat's
  target);
- eq. 2's friction ``−A ∂H/∂q`` on SGR-NPHMC's thermostat momentum is the rate
  ``A s/|G(θ)|``, and ``SGRNPHMC(diffusion=)`` is that rate: the rows pass
  ``A / |G|``, ``|G|`` the product of the Laplace precision's diagonal at the mode (the
  default metric there) and ``s = 1`` (where each trajectory starts);
- the momentum friction is not one number in the supplement: its ``−√s B ∂H/∂p`` is the
  matrix rate ``B G(θ)⁻¹`` with noise ``2B`` (per coordinate ``B/g_i`` for the default
  diagonal ``G``), where ours is one rate ``B`` with noise ``2B G`` (both keep
  ``N(0, kT G)``). The rows pass ``friction = B / median(g)``, ``g`` the Laplace precision's
  diagonal at the mode (the default metric's value there), which is the supplement's
  ``B`` exactly where ``G`` is isotropic.
"""

from __future__ import annotations

import numpy as np

import pymc_sgmcmc as pmsg

from .chains import LOGISTIC_COLUMNS, Spec, logistic_cells, run_chains
from .config import N_STEPS, SEED, Sizes
from .output import fmt, print_table, progress
from .problems import T2_N, TRUE_W, logistic_model, mixture_logistic_data, quadrature_posterior

PAPER_RIEMANNIAN_TABLE1 = {
    0.01: (0.2684, 0.1833),
    0.001: (0.1927, 0.1932),
    0.0001: (0.1965, 0.2125),
}
"""The supplement's Table 1: SGR-NPHMC's RMSE of ``w₁`` and ``w₂`` at ``A = B``."""
PAPER_RIEMANNIAN_TABLE2 = {0.1: (0.2071, 0.1884), 1.0: (0.2023, 0.1850), 10.0: (0.2151, 0.1907)}
"""The supplement's Table 2: SG-NHT's RMSE of ``w₁`` and ``w₂`` at ``A``."""


def table6_specs(
    median_precision: float, determinant: float
) -> list[tuple[Spec, tuple[float, float], str]]:
    """The rows: each sampler's arguments, the paper's RMSEs and the paper's setting."""
    plain = {"gradient": "minibatch", "n_steps": N_STEPS}
    rows = []
    for a, paper in PAPER_RIEMANNIAN_TABLE1.items():
        kwargs = plain | {"diffusion": a / determinant, "friction": a / median_precision}
        rows.append((Spec("SGR-NPHMC", pmsg.SGRNPHMC, kwargs, True), paper, f"A = B = {a:g}"))
    for a, paper in PAPER_RIEMANNIAN_TABLE2.items():
        spec = Spec("SGNHT", pmsg.SGNHT, plain | {"diffusion": a}, True)
        rows.append((spec, paper, f"A = {a:g}"))
    # The package's defaults (control variates, A = 0.01, B = 1), beside the paper's rows.
    none = (float("nan"), float("nan"))
    rows.append((Spec("SGR-NPHMC", pmsg.SGRNPHMC, {}, True), none, "defaults"))
    rows.append((Spec("SGNHT", pmsg.SGNHT, {}, True), none, "defaults"))
    return rows


def table6(sizes: Sizes) -> None:
    """Run and print Table 6."""
    X, y = mixture_logistic_data(SEED)
    mean, sd = quadrature_posterior(X, y)
    model = logistic_model(X, y, True)
    with model:
        mode = pmsg.find_mode(curvature=True, progressbar=False)
    precision = np.diag(np.linalg.inv(mode.covariance))
    median_precision, determinant = float(np.median(precision)), float(np.prod(precision))
    rows = []
    for k, (spec, paper, setting) in enumerate(table6_specs(median_precision, determinant)):
        progress(f"Table 6: {spec.label}, {setting}")
        run = run_chains(model, spec, sizes.tune2, sizes.draws2, sizes.chains, SEED + 600 + k)
        head = [spec.label, setting, *(fmt(x) if x == x else "—" for x in paper)]
        if run.failed:
            rows.append(head + [run.failed] + [""] * 7)
            continue
        step = run.stats["step_size"][0, -1]
        rows.append(head + [f"{step:.3g}"] + logistic_cells(run, TRUE_W, mean, sd))
    rmse_exact = np.sqrt(sd**2 + (mean - TRUE_W) ** 2)
    print_table(
        f"Table 6 — the Riemannian supplement's Tables 1-2: 2-D Bayesian logistic regression, "
        f"N = {T2_N:,}, minibatches of 100, plain but in the defaults rows "
        f"({sizes.chains} chain(s) × {sizes.draws2:,} "
        f"draws after {sizes.tune2:,} tuning)",
        ["method", "paper's setting", "paper RMSE w₁", "paper RMSE w₂", "ε", *LOGISTIC_COLUMNS],
        rows,
        [
            f"Exact posterior (quadrature): sds {sd[0]:.4f}, {sd[1]:.4f}; a perfect sampler "
            f"scores RMSE {rmse_exact[0]:.4f}, {rmse_exact[1]:.4f} against the true [1, −1]. "
            f"SGR-NPHMC's friction is B / {median_precision:,.0f} (the median of the Laplace "
            f"precision's diagonal at the mode) and its diffusion A / {determinant:,.0f} (their "
            "product): see the module's docstring. ε is the step size the chains kept (in "
            "the metric's units).",
        ],
    )
