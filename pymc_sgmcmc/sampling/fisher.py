"""SGFS's measurements: the curvature and the gradient's noise from the rows' gradients.

The glue between the model's data and
:class:`~pymc_sgmcmc.adaptation.fisher_scoring.FisherScoring`. One measurement draws a
minibatch of each ``pm.Minibatch`` call from the chain's generator, takes every row's
gradient ``∇c_i(θ)`` (:class:`~pymc_sgmcmc.gradients.per_datum.PerDatumGradients`, each
row's term as PyMC scales it, ``N/n`` times its log density), and returns

- ``F = |−∇²prior(θ)| + Σ_k (n_k²/N_k) V_k``: ``V_k`` the rows' covariance (Ahn,
  Korattikara and Welling, Algorithm 1, line 6), ``(n/N)² V`` the covariance of one
  datum's score and ``N`` times it the data's empirical Fisher information;
  ``|·|`` the matrix with its eigenvalues' absolute values (the SoftAbs metric's idea,
  :func:`pymc_sgmcmc.metrics.riemannian.softabs_diagonal_hessian`), so that every measurement is
  positive semi-definite as the paper's is (measured: on a non-centred hierarchy without
  minibatches, where ``F`` is all prior, one measurement at a point of negative curvature
  pulled the running mean's eigenvalue below zero, the floor let the step grow without
  bound and the chain ended 1,483 sds away);
- ``Q = Σ_k n_k V'_k``: ``V'_k`` the covariance of the rows' terms of the gradient
  estimate (``∇c_i(θ)`` for plain minibatches, ``∇c_i(θ) − ∇c_i(θ̂)`` for an anchor
  ``θ̂``, ``∇c_i(θ) − (N/n) g_i`` for SAGA's stored ``g_i``), whose sum over ``n`` rows
  drawn with replacement is the estimate's error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pymc_sgmcmc.dynamics.sgfs import gradient_covariance
from pymc_sgmcmc.gradients.per_datum import PerDatumGradients
from pymc_sgmcmc.sampling.model_graph import row_logp


def absolute_curvature(curvature: np.ndarray, diagonal: bool) -> np.ndarray:
    """``|curvature|``: its eigenvalues by their absolute values (diagonal: its diagonal's)."""
    if diagonal:
        return np.abs(np.diag(curvature))
    values, vectors = np.linalg.eigh(0.5 * (curvature + curvature.T))
    return (vectors * np.abs(values)) @ vectors.T


def _covariance(per_row: np.ndarray, diagonal: bool) -> np.ndarray:
    if diagonal:
        return per_row.var(axis=0, ddof=1)
    return gradient_covariance(per_row)


class FisherMeasurement:
    """One measurement of ``(F, Q)`` at a position, for a built step method.

    Parameters
    ----------
    step : StochasticGradientStep
        The step whose data, passes, estimator and chain anchor are read at each call.
    diagonal : bool
        Return the diagonals of ``F`` and ``Q`` instead of the matrices.
    """

    def __init__(self, step: Any, *, diagonal: bool) -> None:
        self.step = step
        self.diagonal = bool(diagonal)
        passes = step.data_passes
        with passes.model:
            rows = row_logp(
                passes.model, passes.flat, passes.vars, passes.model.initial_point(),
                elementwise=True,
            )  # fmt: skip
        # A group whose terms carry no total_size scaling counts its rows as the data.
        self._scaled = [all(flags) for flags in rows.scaled]
        self._gradients = PerDatumGradients(rows, step.data_passes.compile_kwargs)

    def __call__(
        self, position: np.ndarray, rng: np.random.Generator, rows_factor: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(F, Q)`` at ``position`` on ``rows_factor`` minibatches' worth of rows from ``rng``."""
        step = self.step
        passes = step.data_passes
        sizes = [rows_factor * size for size in step.estimator.batch_sizes]
        rows = passes.draw_rows(rng, step.n_rows, sizes)
        gathered = passes.subsample.gather(rows)
        passes.rows_touched += sum(sizes)
        at = self._gradients(position, gathered)
        table = step.chain.estimator.table
        anchor = step.chain.estimator.anchor if step.estimator.anchored else None
        at_anchor = None
        if anchor is not None:
            with passes.others_at(anchor.others):
                at_anchor = self._gradients(anchor.position, gathered)
        curvature = absolute_curvature(-at.prior_hessian, self.diagonal)
        noise = np.zeros_like(curvature)
        for k, per_row in enumerate(at.per_row):
            n = len(per_row)
            if n < 2:
                continue
            total = step.n_rows[k] if self._scaled[k] else n
            curvature = curvature + (n * n / total) * _covariance(per_row, self.diagonal)
            terms = per_row if at_anchor is None else per_row - at_anchor.per_row[k]
            if table is not None and table.filled:
                terms = per_row - (total / n) * table.tables[k][rows[k]]
            noise = noise + n * _covariance(terms, self.diagonal)
        return curvature, noise
