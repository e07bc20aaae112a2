"""The hypersphere ``S^(d−1) = {x ∈ R^d : |x| = 1}`` in embedded coordinates.

Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods" (slides): the projection
onto the tangent space ``Λ(x) = I − x xᵀ`` and the exact geodesic flow, eq. (12). Points
and velocities are arrays whose last axis is the embedding dimension ``d``; leading axes
index independent spheres. Every function works on NumPy arrays and PyTensor variables.

:class:`SphereLayout` says where a sampler's flat position vector holds points of
spheres and where unconstrained coordinates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pymc_sgmcmc.core.arrays import Array, namespace


def project_tangent(x: Array, g: Array) -> Array:
    """``Λ(x) g = g − x (xᵀ g)``: the part of ``g`` tangent to the sphere at ``x``."""
    return g - x * (x * g).sum(axis=-1, keepdims=True)


def geodesic_flow(x: Array, v: Array, t: Array) -> tuple[Array, Array]:
    """Move ``(x, v)`` along the great circle for time ``t`` (eq. 12).

    ``x(t) = x cos(αt) + v/α sin(αt)``, ``v(t) = −α x sin(αt) + v cos(αt)`` with
    ``α = |v|``; ``v`` must be tangent at ``x``. At ``α = 0`` the point does not move.
    """
    xp = namespace(x)
    alpha = xp.sqrt((v * v).sum(axis=-1, keepdims=True))
    cos, sin = xp.cos(alpha * t), xp.sin(alpha * t)
    # sin(αt)/α → t as α → 0; the guard keeps the division finite there.
    safe_alpha = xp.where(alpha > 0, alpha, 1.0)
    sinc_t = xp.where(alpha > 0, sin / safe_alpha, t)
    return x * cos + v * sinc_t, v * cos - x * (alpha * sin)


def retract_to_sphere(x: Array, v: Array) -> tuple[Array, Array]:
    """Renormalise ``x`` and re-project ``v``, removing floating-point drift.

    The geodesic flow keeps ``|x| = 1`` and ``xᵀv = 0`` exactly in exact arithmetic;
    rounding adds ~1e-16 per step, which this removes so that the constraints hold to
    machine precision over any number of steps. ``Λ(x/|x|) v = v − x (xᵀv)/|x|²``, so both
    corrections come from the same two sums over the sphere's coordinates.
    """
    xp = namespace(x)
    norm2 = (x * x).sum(axis=-1, keepdims=True)
    dot = (x * v).sum(axis=-1, keepdims=True)
    return x / xp.sqrt(norm2), v - x * (dot / norm2)


def _concatenate(pieces: list[Array]) -> Array:
    if len(pieces) == 1:
        return pieces[0]
    return namespace(pieces[0]).concatenate(pieces)


@dataclass(frozen=True)
class SphereLayout:
    """Where a flat vector holds points of spheres and where unconstrained coordinates.

    ``pm.sample`` ravels each variable into one contiguous run of the flat vector, so a
    sampler's position is a few runs, each either whole spheres of one dimension ``d``
    or unconstrained coordinates. :meth:`split` and :meth:`join` go between the flat
    vector and its two parts with slices, reshapes and (for several runs) one
    concatenation: views and a copy in the compiled trajectory, not the gathers and
    scatters of index arrays.

    Parameters
    ----------
    size : int
        Length of the flat vector.
    d : int
        Embedding dimension of every sphere (``S^(d−1) ⊂ R^d``); ``0`` without spheres.
    runs : tuple of (int, int, bool)
        ``(start, stop, on_spheres)`` for consecutive runs that cover ``range(size)``;
        a run on spheres holds ``(stop − start) / d`` whole spheres.
    """

    size: int
    d: int
    runs: tuple[tuple[int, int, bool], ...]

    def __post_init__(self) -> None:
        position = 0
        for start, stop, on_spheres in self.runs:
            if start != position or stop <= start:
                raise ValueError(f"runs must be consecutive and non-empty, got {self.runs}")
            if on_spheres and (self.d < 2 or (stop - start) % self.d):
                raise ValueError(
                    f"a run on spheres must hold whole spheres of dimension d >= 2, got "
                    f"the run {start}:{stop} with d={self.d}"
                )
            position = stop
        if position != self.size:
            raise ValueError(f"runs {self.runs} do not cover a vector of size {self.size}")

    @classmethod
    def from_blocks(cls, blocks: Sequence[tuple[int, int | None]]) -> SphereLayout:
        """Layout of consecutive blocks, e.g. the raveled variables of a sampler.

        Parameters
        ----------
        blocks : sequence of (int, int or None)
            ``(size, d)`` per block in flat order: ``size`` coordinates holding spheres
            of dimension ``d``, or unconstrained ones where ``d`` is ``None``. Adjacent
            blocks of one kind merge into one run; empty blocks are dropped.

        Returns
        -------
        SphereLayout

        Raises
        ------
        ValueError
            When the spheres do not all have the same dimension.
        """
        dims = {d for size, d in blocks if d is not None and size > 0}
        if len(dims) > 1:
            raise ValueError(f"all spheres must share their dimension, got {sorted(dims)}")
        runs: list[tuple[int, int, bool]] = []
        position = 0
        for size, d in blocks:
            if size == 0:
                continue
            on_spheres = d is not None
            if runs and runs[-1][2] == on_spheres:  # adjacent runs of one kind merge
                runs[-1] = (runs[-1][0], position + size, on_spheres)
            else:
                runs.append((position, position + size, on_spheres))
            position += size
        return cls(size=position, d=dims.pop() if dims else 0, runs=tuple(runs))

    @classmethod
    def from_indices(cls, sphere_rows: Array, euclidean: Array) -> SphereLayout:
        """Layout from flat indices, the form ``position[sphere_rows]`` would use.

        Parameters
        ----------
        sphere_rows : array of int, shape (K, d)
            Flat indices of each sphere; each row must be ``d`` consecutive indices.
        euclidean : array of int
            Flat indices of the unconstrained coordinates. With ``sphere_rows`` they
            must cover ``0 … size − 1`` once.

        Returns
        -------
        SphereLayout
        """
        rows = np.asarray(sphere_rows, dtype=np.int64)
        if rows.ndim != 2:
            raise ValueError(f"sphere_rows must be K × d, got shape {rows.shape}")
        flat = np.asarray(euclidean, dtype=np.int64).reshape(-1)
        k, d = rows.shape
        if k and np.any(np.diff(rows, axis=1) != 1):
            raise ValueError("each sphere row must be d consecutive flat indices")
        size = rows.size + flat.size
        covered = np.sort(np.concatenate([rows.ravel(), flat]))
        if not np.array_equal(covered, np.arange(size)):
            raise ValueError("sphere rows and euclidean indices must cover 0 … size − 1 once")
        starts, unconstrained = set(rows[:, 0].tolist()), set(flat.tolist())
        blocks = [
            (d, d) if i in starts else (1, None)
            for i in range(size)
            if i in starts or i in unconstrained
        ]
        return cls.from_blocks(blocks)

    @property
    def n_spheres(self) -> int:
        """``K``, the number of spheres."""
        return sum(b - a for a, b, s in self.runs if s) // self.d if self.d else 0

    @property
    def manifold_dim(self) -> int:
        """Dimension of the manifold: ``d − 1`` per sphere plus the unconstrained ones."""
        return self.size - self.n_spheres

    @property
    def sphere_rows(self) -> np.ndarray:
        """Flat indices of the spheres, ``K × d``, in flat order."""
        idx = [np.arange(a, b) for a, b, s in self.runs if s]
        if not idx:
            return np.zeros((0, max(self.d, 2)), dtype=np.int64)
        return np.concatenate(idx).reshape(-1, self.d)

    @property
    def euclidean(self) -> np.ndarray:
        """Flat indices of the unconstrained coordinates, in order."""
        idx = [np.arange(a, b) for a, b, s in self.runs if not s]
        return np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64)

    def split(self, flat: Array) -> tuple[Array | None, Array | None]:
        """Split a flat vector into its sphere and unconstrained parts.

        Parameters
        ----------
        flat : array
            NumPy array or PyTensor vector of length ``size``.

        Returns
        -------
        spheres : array or None
            Shape ``(d,)`` for one sphere (a vector: its sums over the embedding axis are
            scalars, which compile to less work than a ``1 × d`` matrix), ``(K, d)`` for
            several, ``None`` without spheres.
        euclidean : array or None
            The unconstrained coordinates in order, ``None`` if there are none.
        """
        if len(self.runs) == 1:  # the whole vector: no slice at all
            on_spheres, euclidean = ([flat], []) if self.runs[0][2] else ([], [flat])
        else:
            on_spheres = [flat[a:b] for a, b, s in self.runs if s]
            euclidean = [flat[a:b] for a, b, s in self.runs if not s]
        spheres = None
        if on_spheres:
            spheres = _concatenate(on_spheres)
            if self.n_spheres > 1:
                spheres = spheres.reshape((self.n_spheres, self.d))
        return spheres, _concatenate(euclidean) if euclidean else None

    def join(self, spheres: Array | None, euclidean: Array | None) -> Array:
        """Join the parts that :meth:`split` returned back into the flat vector.

        Parameters
        ----------
        spheres, euclidean : array or None
            The parts, in the shapes :meth:`split` gives them.

        Returns
        -------
        array
            The flat vector of length ``size``.
        """
        if spheres is not None and spheres.ndim != 1:
            spheres = spheres.reshape((-1,))
        if len(self.runs) == 1:
            return spheres if self.runs[0][2] else euclidean
        pieces, offset = [], {True: 0, False: 0}
        for a, b, on_spheres in self.runs:
            part = spheres if on_spheres else euclidean
            pieces.append(part[offset[on_spheres] : offset[on_spheres] + b - a])
            offset[on_spheres] += b - a
        return _concatenate(pieces)
