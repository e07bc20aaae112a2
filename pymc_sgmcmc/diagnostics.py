"""Checks that see what R-hat and ESS cannot: the bias of a stochastic-gradient chain.

A stochastic-gradient chain without a Metropolis test can mix well and still sample the
wrong distribution: too hot when the gradient noise exceeds the friction, distorted when
the step is too large. Its own statistics say so:

- the kinetic temperature ``pᵀM⁻¹p/D`` averages 1 at equilibrium (momentum samplers);
- the gradient-noise ratio ``B̂/C`` (:func:`pymc_sgmcmc.adaptation.step_size.gradient_noise_ratio`)
  must stay well below 1 for the injected noise to dominate;
- an SGNHT thermostat settles; one that drifts has not reached equilibrium;
- with control variates, the draws stay within a few posterior sds of the anchor, where
  the estimate's noise was measured small;
- divergences.

The kernel Stein discrepancy (Gorham and Mackey, "Measuring sample quality with
kernels", 2017) measures the distance of the draws from the posterior through its score
``∇log p`` alone: a number users can compare across samplers on the same model.
:func:`diagnostics` reports all of them per chain; the step methods warn at the end of
each chain when a check fails, as PyMC warns about divergences.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytensor
from pymc.model import Model
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.sampling.chain_checks import (
    CHAIN_CHECKS,
    chain_check_messages,
    chain_checks,
)


def kernel_stein_discrepancy(
    samples: np.ndarray, scores: np.ndarray, c: float = 1.0, beta: float = -0.5
) -> float:
    """The kernel Stein discrepancy of ``samples`` with the inverse multiquadric kernel.

    Gorham and Mackey, "Measuring sample quality with kernels" (2017), eq. 4 with the
    Stein kernel of the IMQ base kernel ``k(x, y) = (c² + ‖x − y‖²)^β``, ``β ∈ (−1, 0)``::

        k₀(x, y) = s(x)·s(y) k + 2β u^(β−1) (s(y) − s(x))·(x − y)
                   − 2βd u^(β−1) − 4β(β − 1) u^(β−2) ‖x − y‖²,   u = c² + ‖x − y‖²

    with ``s = ∇log p`` the score; the discrepancy is ``√(mean over all pairs of k₀)``.
    It is zero only for the target itself (for these ``c`` and ``β``, their Theorem 8)
    and decreases like ``1/√n`` for independent exact draws.

    Parameters
    ----------
    samples : ndarray
        Shape ``(n, d)``: the draws.
    scores : ndarray
        Shape ``(n, d)``: ``∇log p`` at each draw.
    c, beta : float
        The IMQ kernel's parameters (the paper's defaults, ``c = 1``, ``β = −1/2``).
    """
    x = np.asarray(samples, dtype=float)
    s = np.asarray(scores, dtype=float)
    n, d = x.shape
    difference = x[:, None, :] - x[None, :, :]
    squared = np.einsum("ijk,ijk->ij", difference, difference)
    u = c**2 + squared
    base = u**beta
    score_products = s @ s.T
    # (s(y) − s(x))·(x − y) for x = x_i, y = x_j.
    cross = np.einsum("jk,ijk->ij", s, difference) - np.einsum("ik,ijk->ij", s, difference)
    stein = (
        score_products * base
        + 2.0 * beta * u ** (beta - 1.0) * cross
        - 2.0 * beta * d * u ** (beta - 1.0)
        - 4.0 * beta * (beta - 1.0) * u ** (beta - 2.0) * squared
    )
    return float(np.sqrt(max(stein.sum() / n**2, 0.0)))


def diagnostics(
    idata: Any,
    model: Any = None,
    *,
    stein: bool = True,
    max_draws: int = 500,
    scale: np.ndarray | None = None,
    warn: bool = True,
) -> pd.DataFrame:
    """The checks of a stochastic-gradient run, one row per chain.

    Parameters
    ----------
    idata : InferenceData or DataTree
        What ``pm.sample`` returned with one of this package's samplers.
    model : pm.Model, optional
        The model the trace came from (by default the one in context); needed for the
        Stein discrepancy only. Outside a model's context and without it, the table has
        no ``stein`` column and a warning says how to get one.
    stein : bool
        Compute the kernel Stein discrepancy (:func:`kernel_stein_discrepancy`) of each
        chain's draws, in the unconstrained space of the sampled variables, with scores
        from full-data gradients (one full pass per draw used).
    max_draws : int
        Draws per chain the Stein discrepancy uses, evenly thinned.
    scale : ndarray, optional
        Each unconstrained coordinate is divided by this before the discrepancy, so
        that coordinates of different scales weigh alike. By default the pooled sd of the
        draws; pass the same ``scale`` to compare samplers on one model.
    warn : bool
        Emit a warning for each failed check.

    Returns
    -------
    pandas.DataFrame
        Per chain: ``divergences``; ``kinetic_temperature`` (mean; 1 at equilibrium) and
        ``kinetic_temperature_ok``; ``gradient_noise`` (``B̂/C``, last measurement) and
        ``gradient_noise_ok``; ``thermostat_drift`` and ``thermostat_ok``;
        ``anchor_distance`` (control variates: the draws' root-mean-square distance from
        the anchor in posterior sds) and ``anchor_distance_ok``; ``stein``
        (the kernel Stein discrepancy); ``ok`` (every check passed).
    """
    stats = idata["sample_stats"]
    rows = []
    for chain in range(stats.sizes["chain"]):
        draw_stats = {
            name: np.asarray(stats[name].isel(chain=chain).values, dtype=float)
            for name in (*CHAIN_CHECKS, "diverging")
            if name in stats
        }
        checks = chain_checks(draw_stats)
        row: dict[str, Any] = {
            "chain": chain,
            "divergences": int(np.nansum(draw_stats.get("diverging", 0))),
        }
        for name, column, ok in (
            ("kinetic_temperature", "kinetic_temperature", "kinetic_temperature_ok"),
            ("gradient_noise", "gradient_noise", "gradient_noise_ok"),
            ("thermostat", "thermostat_drift", "thermostat_ok"),
            ("anchor_distance", "anchor_distance", "anchor_distance_ok"),
        ):
            row[column], fails = checks.get(name, (np.nan, False))
            row[ok] = not fails
        rows.append(row)
        if warn:
            for message in chain_check_messages(f"chain {chain}", draw_stats, checks):
                warnings.warn(message, RuntimeWarning, stacklevel=2)
            if row["divergences"]:
                warnings.warn(
                    f"chain {chain}: {row['divergences']} divergent draws after tuning.",
                    RuntimeWarning,
                    stacklevel=2,
                )
    table = pd.DataFrame(rows).set_index("chain")
    if stein and model is None:
        model = Model.get_context(error_if_none=False)
        if model is None:
            warnings.warn(
                "diagnostics: no model was given and none is in context, so the Stein "
                "discrepancy (which needs the model's gradient) is left out. Pass "
                "model=<the model> (or call it inside `with model:`), or stein=False to "
                "silence this.",
                UserWarning,
                stacklevel=2,
            )
            stein = False
    if stein:
        table["stein"] = _stein_per_chain(idata, model, max_draws, scale)
    checks = ["kinetic_temperature_ok", "gradient_noise_ok", "thermostat_ok", "anchor_distance_ok"]
    table["ok"] = table[checks].all(axis=1) & (table["divergences"] == 0)
    return table


def _stein_per_chain(idata, model, max_draws: int, scale) -> list[float]:
    """The Stein discrepancy of each chain's draws (unconstrained, scaled)."""
    from pymc_sgmcmc.sampling.mode import ModeFinder
    from pymc_sgmcmc.sampling.model_graph import flat_logp

    posterior = idata["posterior"]
    value_vars = [
        v for v in model.continuous_value_vars if model.values_to_rvs[v].name in posterior
    ]
    names = [model.values_to_rvs[v].name for v in value_vars]
    to_values = _to_unconstrained(model, value_vars)
    point = model.initial_point()
    flat = flat_logp(model, value_vars, point)
    n_rows = [g.n_rows() for g in flat.groups]
    finder = ModeFinder(model, value_vars, flat, n_rows)
    n_chains, n_draws = posterior.sizes["chain"], posterior.sizes["draw"]
    keep = np.unique(np.linspace(0, n_draws - 1, min(max_draws, n_draws)).astype(int))
    per_chain = []
    for chain in range(n_chains):
        constrained = [np.asarray(posterior[name].isel(chain=chain).values)[keep] for name in names]
        unconstrained = to_values(*constrained)
        samples = np.concatenate([np.reshape(u, (len(keep), -1)) for u in unconstrained], axis=1)
        per_chain.append(samples)
    pooled = np.concatenate(per_chain)
    if scale is None:
        scale = pooled.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
    scale = np.asarray(scale, dtype=float)
    result = []
    for samples in per_chain:
        scores = np.array([finder.full_pass(x)[1] for x in samples])
        # In the coordinates y = x / scale the score is scale · ∇log p(x).
        result.append(kernel_stein_discrepancy(samples / scale, scores * scale))
    return result


def _to_unconstrained(model, value_vars):
    """A compiled map from the variables' constrained values to their value variables."""
    rvs = [model.values_to_rvs[v] for v in value_vars]
    inputs = {rv: rv.type(name=rv.name) for rv in model.free_RVs}
    outputs = []
    for rv in rvs:
        transform = model.rvs_to_transforms.get(rv)
        outputs.append(rv if transform is None else transform.forward(rv, *rv.owner.inputs))
    outputs = graph_replace(outputs, inputs, strict=False)
    function = pytensor.function(
        [inputs[rv] for rv in rvs], outputs, on_unused_input="ignore", mode="FAST_COMPILE"
    )

    def vectorised(*constrained: np.ndarray) -> list[np.ndarray]:
        results = [[] for _ in rvs]
        for draw in zip(*constrained, strict=True):
            for k, value in enumerate(function(*draw)):
                results[k].append(np.asarray(value))
        return [np.asarray(r) for r in results]

    return vectorised
