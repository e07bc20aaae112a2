r"""The probability simplex in the expanded-mean parameterisation.

Patterson and Teh, "Stochastic Gradient Riemannian Langevin Dynamics on the Probability
Simplex" (Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §3.1): a
point ``π`` of the simplex ``Δ_K`` is ``θ / Σθ`` for ``θ ∈ R₊^K`` whose coordinates have
independent Gamma laws. Written so that a sampler's flat position keeps PyMC's coordinates
of a simplex-valued variable (its ``simplex`` transform, ``v ∈ R^(K−1)``: the centred
log-ratios ``log π − mean(log π)`` without the last one) and the expanded mean's total
``S = Σθ`` rides alongside as state. Every function works on NumPy arrays and PyTensor
variables; leading axes index independent simplices.

The density of ``θ``: if ``p_v(v)`` is the model's density in PyMC's coordinates, which
includes the transform's log-Jacobian ``log K + Σ log π``, then

.. math::

    \log p(θ) = \log p_v(v(θ)) − Σ_k \log θ_k + a \log S − b S + \text{const}

has ``π`` with the model's law and ``S ~ Gamma(a, b)`` independent of it (``θ = Sπ``
has Jacobian ``S^(K−1)``). The paper's prior ``θ_k ~ Gamma(α_k, 1)`` is ``a = Σα``,
``b = 1``. The shape ``a`` is ours to choose (:func:`concentration_from_precision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pymc_sgmcmc.core.arrays import Array, namespace


def centred_log_ratios(coordinates: Array) -> Array:
    """``w = (v, −Σv)``: PyMC's simplex coordinates completed to all ``K`` log-ratios."""
    xp = namespace(coordinates)
    return xp.concatenate([coordinates, -coordinates.sum(axis=-1, keepdims=True)], axis=-1)


def simplex_point(coordinates: Array) -> Array:
    """``π = softmax(w)`` from PyMC's simplex coordinates ``v`` (the transform's backward)."""
    xp = namespace(coordinates)
    w = centred_log_ratios(coordinates)
    e = xp.exp(w - w.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def simplex_coordinates(expanded: Array) -> Array:
    """PyMC's simplex coordinates of ``π = θ/Σθ``: ``log θ − mean(log θ)``, last one dropped.

    The total ``Σθ`` cancels, so no division is needed.
    """
    log_theta = namespace(expanded).log(expanded)
    return (log_theta - log_theta.mean(axis=-1, keepdims=True))[..., :-1]


def expanded_mean_drift(
    point: Array, expanded: Array, coordinate_gradient: Array, shape: Array, rate: Array = 1.0
) -> Array:
    r"""``G⁻¹∇log p(θ) + ∇·G⁻¹`` for the expanded mean's metric ``G(θ) = diag(1/θ)``.

    With ``g = ∇_v log p_v`` (the gradient in PyMC's coordinates, as any estimator of ours
    gives it) and ``g̃ = (g, 0)``, ``θ_k ∂v_j/∂θ_k = δ_jk − 1/K``, so

    .. math::

        θ ⊙ ∇_θ \log p(θ) + 1 = (g̃ − \bar{g̃}) + a π − b θ.

    For a Dirichlet(α) prior and multinomial counts ``n`` with ``a = Σα``, ``b = 1``
    this is the paper's ``α − θ + n − π Σn`` (tested).

    Parameters
    ----------
    point : array, shape (..., K)
        ``π``.
    expanded : array, shape (..., K)
        ``θ = Sπ``.
    coordinate_gradient : array, shape (..., K − 1)
        ``g``.
    shape, rate : array, shape (...) or scalar
        ``a`` and ``b`` of the total's Gamma law.
    """
    xp = namespace(point, expanded, coordinate_gradient)
    padded = xp.concatenate([coordinate_gradient, coordinate_gradient[..., :1] * 0.0], axis=-1)
    centred = padded - padded.mean(axis=-1, keepdims=True)
    return centred + _trailing(shape) * point - _trailing(rate) * expanded


def _trailing(value: Array) -> Array:
    """A per-simplex value broadcast against the simplex axis."""
    return value[..., None] if getattr(value, "ndim", 0) else value


def concentration_from_precision(point: Array, precision_diagonal: Array) -> np.ndarray:
    r"""The concentration ``κ`` of a Dirichlet-like posterior from its Laplace precision.

    In PyMC's coordinates a Dirichlet(β) density with its Jacobian is ``Σ β_k log π_k``,
    whose negative Hessian in the log-ratios is ``κ(diag π − ππᵀ)`` (``κ = Σβ``), and in
    ``v`` (``w_K = −Σv``) has the diagonal ``κ(π_j + π_K − (π_j − π_K)²)``. Each diagonal
    entry of a Laplace precision gives one estimate; the median over them is returned.
    Used as the shape of the expanded mean's total, ``S ~ Gamma(κ, 1)``: then ``S ≈ κ``,
    and a step ``η`` moves ``π`` by about ``η`` of its posterior scale, as a Euclidean step
    of ``η`` does in the Laplace metric.

    Parameters
    ----------
    point : array, shape (n, K)
        The simplices' points ``π`` (at the mode).
    precision_diagonal : array, shape (n, K − 1)
        The diagonal of the negative Hessian in PyMC's coordinates there.

    Returns
    -------
    ndarray, shape (n,)
        ``κ`` per simplex; NaN where no entry gives a positive finite estimate.
    """
    point = np.asarray(point, dtype=float)
    last = point[..., -1:]
    first = point[..., :-1]
    curvature = first + last - (first - last) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        estimates = np.asarray(precision_diagonal, dtype=float) / curvature
    estimates = np.where(np.isfinite(estimates) & (estimates > 0), estimates, np.nan)
    result = np.full(point.shape[0], np.nan)
    for k, row in enumerate(estimates):
        if np.isfinite(row).any():
            result[k] = np.nanmedian(row)
    return result


@dataclass(frozen=True)
class SimplexLayout:
    """Where a flat vector holds simplices (in PyMC's coordinates) and where the rest.

    A simplex-valued variable of shape ``(..., K)`` is raveled by ``pm.sample`` into
    ``prod(...)`` consecutive runs of ``K − 1`` coordinates. Static: the index arrays are
    compiled into the trajectory as constants.

    Parameters
    ----------
    size : int
        Length of the flat vector.
    runs : tuple of (int, int, int)
        ``(start, stop, K)`` per run of whole simplices of ``K`` categories, in flat
        order, not overlapping; the coordinates outside every run are unconstrained.
    """

    size: int
    runs: tuple[tuple[int, int, int], ...]

    def __post_init__(self) -> None:
        position = 0
        for start, stop, k in self.runs:
            if start < position or stop <= start or stop > self.size:
                raise ValueError(f"runs must be ordered, disjoint and inside, got {self.runs}")
            if k < 2 or (stop - start) % (k - 1):
                raise ValueError(
                    f"a run must hold whole simplices of K >= 2 categories, got {start}:{stop} "
                    f"with K={k}"
                )
            position = stop

    @classmethod
    def from_blocks(cls, blocks: Sequence[tuple[int, int | None]]) -> SimplexLayout:
        """Layout of consecutive blocks: ``(size, K)`` per block, ``K`` None if unconstrained."""
        runs: list[tuple[int, int, int]] = []
        position = 0
        for size, k in blocks:
            if k is not None and size > 0:
                runs.append((position, position + size, k))
            position += size
        return cls(size=position, runs=tuple(runs))

    @property
    def categories(self) -> tuple[int, ...]:
        """The distinct ``K`` of the simplices, in increasing order."""
        return tuple(sorted({k for _, _, k in self.runs}))

    def rows(self, k: int) -> np.ndarray:
        """Flat indices of every simplex of ``K = k`` categories, ``n × (k − 1)``."""
        idx = [np.arange(a, b) for a, b, kk in self.runs if kk == k]
        if not idx:
            return np.zeros((0, k - 1), dtype=np.int64)
        return np.concatenate(idx).reshape(-1, k - 1)

    @property
    def n_simplices(self) -> int:
        """How many simplices, of any ``K``."""
        return sum((b - a) // (k - 1) for a, b, k in self.runs)

    def simplex_slices(self) -> list[tuple[int, slice]]:
        """``(K, slice)`` per category count: where its simplices sit among all of them.

        The per-simplex state (the totals ``S``) is one vector ordered by ``K`` first,
        then flat order.
        """
        slices, offset = [], 0
        for k in self.categories:
            n = self.rows(k).shape[0]
            slices.append((k, slice(offset, offset + n)))
            offset += n
        return slices

    @property
    def simplex_indices(self) -> np.ndarray:
        """Flat indices of every coordinate that lies in a simplex, in flat order."""
        idx = [np.arange(a, b) for a, b, _ in self.runs]
        return np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64)
