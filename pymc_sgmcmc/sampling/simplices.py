"""Simplex-valued variables of a model: where they lie in the flat position, and their scale.

A variable is simplex-valued for SGRLD when its value variable carries PyMC's ``simplex``
transform (``pm.Dirichlet`` by default): its coordinates are then the ones
:mod:`pymc_sgmcmc.manifolds.simplex` reads. A ``pm.Dirichlet`` given another transform,
or none, is moved as unconstrained coordinates like any other variable.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor
from pymc.distributions.transforms import SimplexTransform
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import DirichletRV

from pymc_sgmcmc.manifolds.simplex import (
    SimplexLayout,
    concentration_from_precision,
    simplex_point,
)
from pymc_sgmcmc.sampling.model_graph import flat_slices


def on_simplex(model, value_var) -> bool:
    """Whether ``value_var`` carries PyMC's ``simplex`` transform."""
    rv = model.values_to_rvs[value_var]
    return isinstance(model.rvs_to_transforms.get(rv), SimplexTransform)


def laplace_precision_diagonal(covariance: np.ndarray) -> np.ndarray:
    """The diagonal of ``(−H)`` from a Laplace covariance: the matrix's, or ``1/(−H_ii)``'s."""
    return np.diag(np.linalg.inv(covariance)) if np.ndim(covariance) == 2 else 1.0 / covariance


def simplex_layout(model, vars, point: dict[str, np.ndarray]) -> SimplexLayout:
    """Where the flat position of ``vars`` (raveled in order) holds simplices."""
    blocks: list[tuple[int, int | None]] = []
    for var in vars:
        value = np.asarray(point[var.name])
        blocks.append((value.size, value.shape[-1] + 1 if on_simplex(model, var) else None))
    return SimplexLayout.from_blocks(blocks)


def simplex_shapes(
    layout: SimplexLayout,
    *,
    model,
    vars,
    point: dict[str, np.ndarray],
    mode_position: np.ndarray | None,
    covariance: np.ndarray | None,
    given: Any = "auto",
) -> np.ndarray:
    """The shape ``a`` of each simplex total's law ``S ~ Gamma(a, 1)``, ordered as the totals.

    ``given`` (a positive number) is used for every simplex. With "auto" and a Laplace
    ``covariance`` at the mode, the posterior concentration each simplex's precision
    implies (:func:`~pymc_sgmcmc.manifolds.simplex.concentration_from_precision`), so that
    the step size has the same meaning on the simplices as off them; without one, the
    paper's choice, ``Σα`` of a ``pm.Dirichlet`` at ``point`` (``K`` for other variables).
    Any positive shape leaves the law of ``π`` exact; it sets how far a step moves.
    """
    slices = layout.simplex_slices()
    shapes = np.full(layout.n_simplices, np.nan)
    if not isinstance(given, str):
        shapes[:] = float(given)
        return shapes
    if mode_position is not None and covariance is not None:
        precision = laplace_precision_diagonal(covariance)
        for k, among in slices:
            rows = layout.rows(k)
            shapes[among] = concentration_from_precision(
                simplex_point(mode_position[rows]), precision[rows]
            )
    prior = _prior_concentrations(layout, model=model, vars=vars, point=point)
    return np.where(np.isfinite(shapes) & (shapes > 0), shapes, prior)


def _prior_concentrations(layout: SimplexLayout, *, model, vars, point) -> np.ndarray:
    """``Σα`` per simplex for a ``pm.Dirichlet`` (evaluated at ``point``), else ``K``."""
    per_simplex: dict[int, list[float]] = {k: [] for k in layout.categories}
    for var in filter(lambda var: on_simplex(model, var), vars):
        rv = model.values_to_rvs[var]
        k = np.asarray(point[var.name]).shape[-1] + 1
        n = int(np.prod(np.asarray(point[var.name]).shape[:-1], dtype=int))
        totals = np.full(n, float(k))
        if isinstance(rv.owner.op, DirichletRV):
            alpha = model.replace_rvs_by_values([rv.owner.inputs[-1]])[0]
            inputs = [v for v in model.value_vars if v in set(ancestors([alpha]))]
            values = pytensor.function(inputs, alpha, on_unused_input="ignore")(
                *(point[v.name] for v in inputs)
            )
            totals = np.broadcast_to(
                np.sum(values, axis=-1), np.asarray(point[var.name]).shape[:-1]
            ).reshape(-1)
        per_simplex[k].extend(totals.tolist())
    pieces = [np.asarray(per_simplex[k], dtype=float) for k in layout.categories]
    return np.concatenate(pieces) if pieces else np.zeros(0)


SPARSE_CONCENTRATION = 1.0
"""A category whose posterior concentration at the mode is below this is "sparse"."""


def sparse_simplex_warning(sampler: str, model, vars, point, mode) -> str | None:
    """The warning for a Euclidean sampler on simplices with nearly empty categories.

    At the mode in PyMC's coordinates a Dirichlet(β) posterior has ``π̂ = β/κ``, so
    ``κ̂ π̂ₖ`` (:func:`~pymc_sgmcmc.manifolds.simplex.concentration_from_precision`)
    estimates each category's ``βₖ``; below 1 its ``log πₖ`` has a posterior sd of several
    units and a long lower tail, where steps sized for the other coordinates stick. None
    without a Laplace covariance or without such a category.
    """
    simplex_vars = [var for var in vars if on_simplex(model, var)]
    if mode is None or mode.covariance is None or not simplex_vars:
        return None
    precision = laplace_precision_diagonal(mode.covariance)
    places = flat_slices(point, vars)
    sparse: dict[str, int] = {}
    for var in simplex_vars:
        k = np.asarray(point[var.name]).shape[-1] + 1
        where = np.arange(places[var.name].start, places[var.name].stop).reshape(-1, k - 1)
        at = simplex_point(mode.position[where])
        kappa = concentration_from_precision(at, precision[where])
        count = int(np.sum(kappa[:, None] * at < SPARSE_CONCENTRATION))
        if count:
            sparse[model.values_to_rvs[var].name] = count
    if not sparse:
        return None
    found = ", ".join(f"{name!r} ({count})" for name, count in sparse.items())
    return (
        f"{sampler}: categories of the simplex-valued {found} have a posterior concentration "
        "below 1 at the mode (rows few or none under a sparse Dirichlet prior). In PyMC's "
        f"log-ratio coordinates, where {sampler} moves them, such a category's log-"
        "probability has a posterior sd of several units and a long lower tail, and the "
        "chains stick there (measured on a sparse Dirichlet-categorical posterior: SGLD and "
        "SGHMC min ESS 2-3, and SGHMC stopped by divergences). Sample them with "
        "pmsg.SGRLD(), which moves simplices in their own metric and the other variables "
        "as SGLD does."
    )
