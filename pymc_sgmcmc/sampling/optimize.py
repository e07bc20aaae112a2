"""Small pure functions of the mode finder: an Adam step and curvature estimates.

Kept free of PyMC: each takes NumPy arrays or a gradient function. The glue that feeds
them minibatches and full-data passes is :func:`pymc_sgmcmc.find_mode`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np


class AdamState(NamedTuple):
    """Adam's running moments and step count."""

    mean: np.ndarray
    second_moment: np.ndarray
    count: int


def adam_init(position: np.ndarray) -> AdamState:
    """Zero moments for a position of this shape."""
    return AdamState(np.zeros_like(position), np.zeros_like(position), 0)


def adam_ascent_step(
    position: np.ndarray,
    gradient: np.ndarray,
    state: AdamState,
    learning_rate: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> tuple[np.ndarray, AdamState]:
    """One Adam step *up* the log density (Kingma and Ba, "Adam", Algorithm 1).

    PyMC's ``pm.adam`` builds symbolic updates of shared variables for ``pm.fit``; the
    mode finder's loop runs in NumPy around a compiled gradient, so the eight lines of
    the update are written here instead.
    """
    count = state.count + 1
    mean = beta1 * state.mean + (1 - beta1) * gradient
    second = beta2 * state.second_moment + (1 - beta2) * gradient**2
    mean_hat = mean / (1 - beta1**count)
    second_hat = second / (1 - beta2**count)
    position = position + learning_rate * mean_hat / (np.sqrt(second_hat) + eps)
    return position, AdamState(mean, second, count)


def hessian_by_differences(
    gradient: Callable[[np.ndarray], np.ndarray],
    position: np.ndarray,
    scale: np.ndarray,
    *,
    forward: bool = False,
    at: np.ndarray | None = None,
) -> np.ndarray:
    """The Hessian of a log density from differences of its gradient, symmetrised.

    With ``h = 1e-4 · scale_i``, column ``i`` is the central difference
    ``(g(x + h e_i) − g(x − h e_i)) / 2h`` (``2 D`` gradients, error ``O(h²)``), or with
    ``forward`` ``(g(x + h e_i) − g(x)) / h``: ``D`` gradients besides ``at = g(x)``
    (computed when not given), error ``h/2`` times the third derivative. Taken with ``h``
    a thousandth of each sd, as the mode search takes it, the forward error is about a
    thousandth of the Hessian's change over one sd. SciPy's ``approx_fprime`` takes
    forward differences only.
    """
    dim = position.size
    if forward and at is None:
        at = gradient(position)
    hessian = np.empty((dim, dim))
    for i in range(dim):
        h = 1e-4 * float(scale[i])
        shift = np.zeros(dim)
        shift[i] = h
        if forward:
            hessian[:, i] = (gradient(position + shift) - at) / h
        else:
            hessian[:, i] = (gradient(position + shift) - gradient(position - shift)) / (2 * h)
    return 0.5 * (hessian + hessian.T)


def hessian_diagonal_by_forward_differences(
    gradient: Callable[[np.ndarray], np.ndarray],
    position: np.ndarray,
    scale: np.ndarray,
    at: np.ndarray | None = None,
) -> np.ndarray:
    """The Hessian's diagonal from forward differences, ``(g_i(x + h e_i) − g_i(x)) / h``.

    ``h = 1e-4 · scale_i``: ``D`` gradients besides ``at = g(x)`` (computed when not
    given), at an error ``O(h)``. Enough to find the scale of each coordinate before a
    Hessian is differenced at that scale.
    """
    # The same D gradients as the whole Hessian: the columns' other entries come free.
    return np.diag(hessian_by_differences(gradient, position, scale, forward=True, at=at)).copy()


def hessian_diagonal_by_probes(
    gradient: Callable[[np.ndarray], np.ndarray],
    position: np.ndarray,
    scale: np.ndarray,
    n_probes: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """An estimate of the Hessian's diagonal, ``E[v ⊙ Hv]`` over Rademacher ``v``.

    Bekas, Kokiopoulou and Saad, "An estimator for the diagonal of a matrix" (2007);
    ``Hv`` by a central difference of the gradient along ``v`` (two gradients a probe).
    Exact for a diagonal Hessian; off-diagonal terms add noise of variance ``Σ_j H_ij²``
    per probe.
    """
    total = np.zeros(position.size)
    for _ in range(n_probes):
        v = rng.choice([-1.0, 1.0], size=position.size)
        shift = 1e-4 * scale * v
        hv = (gradient(position + shift) - gradient(position - shift)) / 2e-4
        total += v * hv / scale
    return total / n_probes


@dataclass(frozen=True)
class GroupedHessian:
    """A hierarchical model's Hessian where no term reads the locals of two groups.

    Such a Hessian has three parts: every global's column, each group's block of its own
    locals, and zeros between two groups' locals. :func:`grouped_hessian_by_differences`
    differences it in ``r + G`` gradient pairs (``r`` locals per group, ``G`` globals).

    Attributes
    ----------
    local_positions : ndarray of int, shape (n_groups, r)
        The flat coordinates of each group's locals.
    global_positions : ndarray of int, shape (G,)
        The other coordinates.
    columns : ndarray, shape (D, G)
        ``H[:, g]`` for each global ``g``.
    blocks : ndarray, shape (n_groups, r, r)
        ``H`` restricted to each group's locals.
    """

    local_positions: np.ndarray
    global_positions: np.ndarray
    columns: np.ndarray
    blocks: np.ndarray

    def diagonal(self) -> np.ndarray:
        """``diag H``."""
        diagonal = np.empty(self.columns.shape[0])
        diagonal[self.global_positions] = self.columns[self.global_positions].diagonal()
        diagonal[self.local_positions] = np.diagonal(self.blocks, axis1=1, axis2=2)
        return diagonal

    @cached_property
    def _elimination(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The block elimination of ``A = −H``, computed once for both uses below.

        Each group's block ``A_jj`` (symmetrised), the coupling ``A_jg``,
        ``A_jj⁻¹ A_jg`` and the globals' Schur complement ``A_gg − Σ_j A_gj A_jj⁻¹ A_jg``.

        Raises
        ------
        np.linalg.LinAlgError
            Where a group's block is singular.
        """
        blocks = -0.5 * (self.blocks + np.swapaxes(self.blocks, 1, 2))
        coupling = -self.columns[self.local_positions]  # (n_groups, r, G)
        schur = -self.columns[self.global_positions]
        schur = 0.5 * (schur + schur.T)
        solved = np.linalg.solve(blocks, coupling) if coupling.size else np.zeros_like(coupling)
        return blocks, coupling, solved, schur - np.einsum("jrg,jrh->gh", coupling, solved)

    def negative_definite(self) -> bool:
        """Whether ``−H`` is positive definite (and finite).

        Each group's block, then the globals' Schur complement, by Cholesky factors.
        """
        try:
            blocks, _, _, schur = self._elimination
            np.linalg.cholesky(blocks)
            if schur.size:
                np.linalg.cholesky(schur)
        except np.linalg.LinAlgError:
            return False
        return bool(np.all(np.isfinite(self.columns)) and np.all(np.isfinite(self.blocks)))

    def newton_step(self, gradient: np.ndarray) -> np.ndarray:
        """The Newton step ``−H⁻¹ g``, by block elimination.

        Each group's block, then the globals' Schur complement: ``O(n_groups r³ + G³)``,
        never the dense ``D × D`` matrix.

        Raises
        ------
        np.linalg.LinAlgError
            Where a block or the Schur complement is singular.
        """
        blocks, coupling, solved, schur = self._elimination
        solved_rhs = np.linalg.solve(blocks, gradient[self.local_positions][..., None])[..., 0]
        global_rhs = gradient[self.global_positions] - np.einsum("jrg,jr->g", coupling, solved_rhs)
        globals_step = np.linalg.solve(schur, global_rhs) if schur.size else global_rhs
        step = np.empty_like(gradient, dtype=float)
        step[self.global_positions] = globals_step
        step[self.local_positions] = solved_rhs - np.einsum("jrg,g->jr", solved, globals_step)
        return step


def grouped_hessian_by_differences(
    gradient: Callable[[np.ndarray], np.ndarray],
    position: np.ndarray,
    scale: np.ndarray,
    local_positions: np.ndarray,
) -> GroupedHessian:
    """:class:`GroupedHessian` by central differences, one per kind of local and global.

    Curtis, Powell and Reid, "On the estimation of sparse Jacobian matrices" (1974): the
    coordinates of one colour share a difference when no two of them interact. Every
    group's ``k``-th local is one colour (no term reads two groups), each global its own:
    the difference along ``Σ_j h e_{j,k}`` gives each group's column ``k`` of its block,
    and along ``h e_g`` the whole column ``g``. ``h = 1e-4 · scale``. Random probes
    (:func:`hessian_diagonal_by_probes`) need many more gradients for an estimate of
    the diagonal alone.
    """
    dim = position.size
    local_positions = np.asarray(local_positions).reshape(local_positions.shape[0], -1)
    is_local = np.zeros(dim, dtype=bool)
    is_local[local_positions.ravel()] = True
    global_positions = np.flatnonzero(~is_local)
    steps = 1e-4 * np.asarray(scale, dtype=float)

    def difference(coordinates: np.ndarray) -> np.ndarray:
        shift = np.zeros(dim)
        shift[coordinates] = steps[coordinates]
        return (gradient(position + shift) - gradient(position - shift)) / 2

    columns = np.empty((dim, global_positions.size))
    for column, g in enumerate(global_positions):
        columns[:, column] = difference(np.array([g])) / steps[g]
    n_groups, r = local_positions.shape
    blocks = np.empty((n_groups, r, r))
    for k in range(r):
        kth = local_positions[:, k]
        blocks[:, :, k] = difference(kth)[local_positions] / steps[kth][:, None]
    return GroupedHessian(local_positions, global_positions, columns, blocks)


def laplace_covariance(hessian: np.ndarray) -> np.ndarray:
    """``(−H)⁻¹`` (dense) or ``1 / (−diag H)`` (a diagonal given as a vector).

    Raises
    ------
    np.linalg.LinAlgError
        When ``−H`` is not positive definite (not a mode, or a flat direction).
    """
    if hessian.ndim == 1:
        precision = -hessian
        if not np.all(np.isfinite(precision)) or np.any(precision <= 0):
            raise np.linalg.LinAlgError("the Hessian's diagonal is not negative")
        return 1.0 / precision
    factor = np.linalg.cholesky(-hessian)
    inverse = np.linalg.inv(factor)
    return inverse.T @ inverse
