"""Kernel of SGRLD: Riemannian Langevin on simplices, SGLD on the other coordinates.

Patterson and Teh, "Stochastic Gradient Riemannian Langevin Dynamics on the Probability
Simplex" (the survey's §3.1), in the expanded-mean parameterisation: the update rule is
:func:`pymc_sgmcmc.dynamics.sgrld.expanded_mean_step`, its drift
:func:`pymc_sgmcmc.manifolds.simplex.expanded_mean_drift`. The position keeps PyMC's
coordinates of each simplex (its ``simplex`` transform), so that every gradient estimator
and the trace see the model as written; the state adds each simplex's total ``S = Σθ``,
and ``θ = S · π(v)``. The coordinates outside the simplices take SGLD's step in the metric
(:mod:`pymc_sgmcmc.kernels.sgld`), which the glue keeps free of covariances between them
and the simplices so that their move does not read the simplices' gradient.

Each step needs one standard normal number per coordinate and one more per simplex (``K``
per simplex for its ``K − 1`` coordinates).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array, namespace, with_entries
from pymc_sgmcmc.core.validation import check_choice
from pymc_sgmcmc.dynamics.sgld import sgld_step
from pymc_sgmcmc.dynamics.sgrld import expanded_mean_gamma_step, expanded_mean_step
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.manifolds.simplex import (
    SimplexLayout,
    expanded_mean_drift,
    simplex_coordinates,
    simplex_point,
)
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class SGRLDState(NamedTuple):
    """SGRLD's state: the position and each simplex's expanded-mean total ``S``."""

    position: Array
    simplex_total: Array


class SGRLDParams(NamedTuple):
    """SGRLD's parameters: ``η``, metric, simplices, totals' shape ``a``, integrator.

    The integrator on the simplices is "gamma" or the paper's "euler".
    """

    step_size: Array
    metric: EuclideanMetric
    simplices: SimplexLayout
    simplex_shape: Array
    integrator: str


INTEGRATORS = {"gamma": expanded_mean_gamma_step, "euler": expanded_mean_step}
"""The steps on the simplices, by name (:mod:`pymc_sgmcmc.dynamics.sgrld`)."""


def parameters(simplex_shape: float | str = "auto", integrator: str = "gamma") -> dict:
    """Validated ``simplex_shape`` ("auto" or ``a > 0`` of ``S ~ Gamma(a, 1)``) and integrator.

    The layout and, with "auto", the shapes are set from the model by the glue.
    """
    integrator = check_choice("integrator", integrator, tuple(INTEGRATORS))
    if isinstance(simplex_shape, str):
        if simplex_shape != "auto":
            raise ValueError(
                f'simplex_shape must be "auto" or a positive number, got {simplex_shape!r}.'
            )
        return {"simplex_shape": simplex_shape, "integrator": integrator}
    shape = float(simplex_shape)
    if not (np.isfinite(shape) and shape > 0.0):
        raise ValueError(
            f"simplex_shape must be positive and finite, got {simplex_shape}. Leave it "
            '"auto" (the posterior concentration at the mode), or pass e.g. the sum of '
            "the Dirichlet prior's concentrations, the paper's choice."
        )
    return {"simplex_shape": shape, "integrator": integrator}


def init(position: Array, normal: Array, params: SGRLDParams) -> SGRLDState:
    """A chain at ``position`` with each total at its law's mean ``a`` (``S ~ Gamma(a, 1)``).

    The totals are independent of ``π`` under the target and evolve on their own (a
    Cox–Ingersoll–Ross process in continuous time), so where they start changes only how
    long a step ``π`` takes at first, not its law.
    """
    return SGRLDState(position, params.simplex_shape * 1.0)


def step(state: SGRLDState, target: Target, noise: Array, params: SGRLDParams) -> SGRLDState:
    """One step: SGLD's in the metric off the simplices, the expanded mean's on them."""
    metric, layout, step_size = params.metric, params.simplices, params.step_size
    position = state.position
    gradient = target.grad(position)
    normal = noise[: layout.size]
    whitened_noise = metric.velocity(position, metric.momentum(position, normal))
    moved = sgld_step(position, lambda x: metric.velocity(x, gradient), whitened_noise, step_size)
    totals = []
    for k, among in layout.simplex_slices():
        rows = layout.rows(k)
        point = simplex_point(position[rows])
        total = state.simplex_total[among]
        expanded = total[:, None] * point
        drift = expanded_mean_drift(point, expanded, gradient[rows], params.simplex_shape[among])
        extra = noise[layout.size + among.start : layout.size + among.stop]
        normals = namespace(normal).concatenate([normal[rows], extra[:, None]], axis=1)
        expanded = INTEGRATORS[params.integrator](expanded, drift, normals, step_size)
        totals.append(expanded.sum(axis=1))
        moved = with_entries(moved, rows, simplex_coordinates(expanded))
    if not totals:
        return SGRLDState(moved, state.simplex_total)
    total = totals[0] if len(totals) == 1 else namespace(*totals).concatenate(totals)
    return SGRLDState(moved, total)


def extra_normals(params: SGRLDParams) -> int:
    """One normal number per simplex beyond one per coordinate."""
    return params.simplices.n_simplices


class SimplexNoiseWhitening(NamedTuple):
    """Whitens a gradient's error as SGRLD's step feels it (a chain's gradient-noise ratio).

    Off the simplices, ``L⁻¹δ`` in the metric (SGLD's: the step adds ``η²V`` to the
    injected ``2η``). On a simplex, the error moves ``θ`` by ``η c`` with ``c`` the centred
    ``(δ, 0)`` (:func:`~pymc_sgmcmc.manifolds.simplex.expanded_mean_drift`) against the
    injected ``2ηθ``: per category ``c_k²/θ_k``. A category whose ``θ`` is near 0 and whose
    rows are rare in the data would make that ratio unbounded wherever the chain visits
    the boundary, so each simplex's coordinates take the ratio averaged over its
    categories in proportion to ``θ``: ``Σ c_k² / S``.
    """

    metric: EuclideanMetric
    simplices: SimplexLayout
    position: np.ndarray
    totals: np.ndarray

    def whiten(self, vector: np.ndarray) -> np.ndarray:
        """The whitened error, each simplex's value in each of its coordinates."""
        layout = self.simplices
        whitened = np.array(self.metric.whiten(vector), dtype=float)
        for k, among in layout.simplex_slices():
            rows = layout.rows(k)
            padded = np.concatenate([vector[rows], np.zeros((rows.shape[0], 1))], axis=1)
            centred = padded - padded.mean(axis=1, keepdims=True)
            per_simplex = np.sqrt((centred * centred).sum(axis=1) / self.totals[among])
            whitened[rows] = per_simplex[:, None]
        return whitened


def noise_whitening(params: SGRLDParams, position: np.ndarray, state: Any) -> SimplexNoiseWhitening:
    """:class:`SimplexNoiseWhitening` at ``position`` with the state's totals (else ``a``)."""
    totals = params.simplex_shape if state is None else state.simplex_total
    return SimplexNoiseWhitening(
        params.metric, params.simplices, np.asarray(position), np.asarray(totals, dtype=float)
    )


def stats(state: SGRLDState, info: dict, params: SGRLDParams) -> dict:
    """The smallest and largest total ``S`` over the simplices, relative to its mean ``a``."""
    if not params.simplices.n_simplices:
        return {"simplex_total_min": 1.0, "simplex_total_max": 1.0}
    ratio = state.simplex_total / params.simplex_shape
    return {"simplex_total_min": ratio.min(), "simplex_total_max": ratio.max()}


KERNEL = Kernel(
    metric="euclidean",
    name="sgrld",
    state_type=SGRLDState,
    params_type=SGRLDParams,
    init=init,
    step=step,
    stats=stats,
    stats_dtypes={"simplex_total_min": (np.float64, []), "simplex_total_max": (np.float64, [])},
    step_noise_extra=extra_normals,
    noise_whitening=noise_whitening,
    supports_simplices=True,
    # SGLD's, in the units of the posterior's scale on and off the simplices.
    default_step_size=0.1,
)
