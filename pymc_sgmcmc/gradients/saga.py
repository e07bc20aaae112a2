"""SAGA's gradient estimate: a table of every datum's gradient, refreshed where rows are seen.

Dubey, Reddi, Póczos, Smola, Xing and Williamson, "Variance Reduction in Stochastic
Gradient Langevin Dynamics" (Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian
inference", §3.6, SAGA-LD): with ``g_j`` the stored gradient of datum ``j``,

    ∇log p(θ) ≈ ∇log prior(θ) + Σ_j g_j + (N/n) Σ_{i ∈ B} (∇log p(x_i | θ) − g_i)

on a minibatch ``B`` of ``n`` rows, unbiased for any table, with a variance that vanishes
as the table's entries approach the gradients at ``θ``. The minibatch terms
``(N/n) Σ ∇log p(x_i | θ)`` are PyMC's scaled minibatch gradient as the trajectory
computes it, so a step adds the correction ``Σ_j g_j − (N/n) Σ_{i ∈ B} g_i``
(:func:`saga_correction`), computed from the table before the trajectory.

One choice of ours: the paper refreshes ``g_i`` at every step, at the step's position,
for the step's rows. The compiled trajectory runs ``n_steps`` steps in one call, so a
:class:`SAGATable` refreshes the rows of the whole trajectory after it, at the draw's
position (one Jacobian of the rows' log densities, :mod:`pymc_sgmcmc.gradients.per_datum`).
The estimate stays unbiased (a step's correction reads only entries its own rows did not
set), and each entry is at most one trajectory older than the paper's.

Memory: ``N × D`` numbers per chain (8 bytes each in float64), for data held in RAM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state

from pymc_sgmcmc.gradients.minibatch import MinibatchGradient
from pymc_sgmcmc.gradients.per_datum import PerDatumGradients
from pymc_sgmcmc.kernels.base import Target

FILL_ROWS = 20_000
"""Rows per call when a chain's table is filled (one Jacobian of that many rows)."""


def saga_correction(
    table_sum: np.ndarray, table_rows: np.ndarray, n_rows: int, batch_size: int
) -> np.ndarray:
    """``Σ_j g_j − (N/n) Σ_{i ∈ B} g_i``: what turns the scaled minibatch gradient into SAGA's.

    Parameters
    ----------
    table_sum : ndarray
        ``Σ_j g_j`` over every datum, ``(D,)``.
    table_rows : ndarray
        The stored ``g_i`` of the minibatch's rows, ``(..., n, D)``: any leading axes (one
        per step) are kept.
    n_rows, batch_size : int
        ``N`` and ``n``.
    """
    # §3.6, SAGA-LD: Σ_j g_j + (N/n) Σ_{i∈B} (∇log p(x_i|θ) − g_i), less the scaled minibatch
    # gradient (N/n) Σ_{i∈B} ∇log p(x_i|θ) that the trajectory computes.
    return table_sum - (n_rows / batch_size) * table_rows.sum(axis=-2)


def _unique(index: np.ndarray) -> np.ndarray:
    """The distinct entries of ``index``, sorted.

    Not ``np.unique``: NumPy 2's hashing took 260 µs for 2,200 row indices, a tenth of a
    draw; sorting them takes ~50.
    """
    ordered = np.sort(index, axis=None)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def table_bytes(n_rows: list[int], dim: int, dtype: Any) -> int:
    """Bytes of one chain's table: every datum's gradient."""
    return int(sum(n_rows) * dim * np.dtype(dtype).itemsize)


@dataclass_state
class SAGATableState(DataClassState):
    """A chain's table, its sums and the rows of the trajectory not yet refreshed."""

    tables: Any
    sums: Any
    pending: Any


class SAGATable(WithSamplingState):
    """One chain's table of every datum's gradient, and its sum, per ``pm.Minibatch`` call.

    Parameters
    ----------
    gradients : PerDatumGradients
        Each row's term of the minibatch log density's gradient (PyMC's scaling
        ``N/rows fed`` included, which the table removes).
    gather : callable
        ``rows -> arrays``: the data's rows (one index array per group) in the compiled
        function's input order.
    n_rows : list of int
        ``N`` of each group.
    dtype : dtype
        The position's.
    """

    _state_class = SAGATableState

    def __init__(
        self,
        gradients: PerDatumGradients,
        gather: Callable[[list[np.ndarray]], list[np.ndarray]],
        n_rows: list[int],
        dtype: Any,
    ) -> None:
        self.gradients, self.gather = gradients, gather
        self.n_rows = list(n_rows)
        self.dtype = np.dtype(dtype)
        self.tables: list[np.ndarray] | None = None
        self.sums: list[np.ndarray] | None = None
        self.pending: list[np.ndarray] | None = None

    @property
    def filled(self) -> bool:
        """Whether the table holds every datum's gradient (a chain's first trajectory fills it)."""
        return self.tables is not None

    def _unscaled(self, position: np.ndarray, rows: list[np.ndarray]) -> list[np.ndarray]:
        """Each datum's gradient ``∇log p(x_i | θ)`` of ``rows`` (without PyMC's ``N/n``)."""
        per_row = self.gradients(position, self.gather(rows)).per_row
        return [g * (len(r) / n) for g, r, n in zip(per_row, rows, self.n_rows, strict=True)]

    def fill(self, position: np.ndarray) -> None:
        """Every datum's gradient at ``position``, :data:`FILL_ROWS` rows at a time."""
        dim = len(position)
        tables = [np.empty((n, dim), dtype=self.dtype) for n in self.n_rows]
        for start in range(0, max(self.n_rows), FILL_ROWS):
            # A group with fewer rows than this chunk's start is fed one row, ignored.
            rows = [np.arange(min(start, n - 1), min(start + FILL_ROWS, n)) for n in self.n_rows]
            for table, g, r, n in zip(
                tables, self._unscaled(position, rows), rows, self.n_rows, strict=True
            ):
                if start < n:
                    table[r] = g
        self.tables = tables
        self.sums = [table.sum(axis=0) for table in tables]

    def correction(self, rows: list[np.ndarray]) -> np.ndarray:
        """The correction of each minibatch of ``rows`` (one index array per group).

        Index arrays of shape ``(M, n)`` (fresh rows at every step) give ``(M, D)``; of
        shape ``(n,)`` (one minibatch per trajectory), ``(D,)``. The rows are kept for
        :meth:`refresh`.
        """
        self.pending = rows
        total = 0.0
        for table, table_sum, index, n in zip(
            self.tables, self.sums, rows, self.n_rows, strict=True
        ):
            total = total + saga_correction(table_sum, table[index], n, index.shape[-1])
        return np.asarray(total, dtype=self.dtype)

    def refresh(self, position: np.ndarray) -> None:
        """Store the gradients at ``position`` of the last trajectory's rows; update the sums."""
        rows, self.pending = self.pending, None
        if rows is None:
            return
        unique = [_unique(index) for index in rows]
        fresh = self._unscaled(position, unique)
        if not all(np.all(np.isfinite(g)) for g in fresh):
            return  # the chain restarts from a finite state; the table keeps its entries
        for table, table_sum, index, g in zip(self.tables, self.sums, unique, fresh, strict=True):
            table_sum += (g - table[index]).sum(axis=0)
            table[index] = g


class SAGAGradient:
    """The plain minibatch gradient plus the step's correction (:func:`saga_correction`).

    The correction is the last array of each step's batch: the trajectory feeds it as the
    input ``saga.correction``, one row per minibatch, sliced as the rows are. The log
    density (the ``minibatch_logp`` statistic) is the plain one.

    Parameters
    ----------
    plain : MinibatchGradient
        The plain minibatch estimator.
    """

    def __init__(self, plain: MinibatchGradient) -> None:
        self.plain = plain

    def target(self, batch: list, lengths: list | None = None) -> Target:
        """The target on ``batch``, whose last entry is the correction."""
        *rows, correction = batch
        plain = self.plain.target(rows, lengths)
        return Target(logp=plain.logp, grad=lambda x: plain.grad(x) + correction)
