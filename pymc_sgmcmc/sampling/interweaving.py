"""The interweaving move of a non-centred hierarchy, compiled for a model.

After each trajectory of a grouped step whose model is non-centred (``a = L(u) + S(u) z``,
found by :func:`~pymc_sgmcmc.sampling.groups.find_location_scale`), the globals ``u``
are redrawn from their conditional given every ``a`` and the ``z`` recentred so that each
``a`` stays (:mod:`pymc_sgmcmc.dynamics.interweaving`). The move reads no data: its cost
is a few evaluations of the prior, ``O(J)`` each.

The random-walk scale of each coordinate starts at ``2.4`` conditional sds (the optimal
one-dimensional scale for a Gaussian; the sd from a finite-difference curvature where
the chain starts) and is adapted during tuning towards an acceptance of 0.44 (Roberts and
Rosenthal, "Examples of Adaptive MCMC"), then frozen: the kept draws come from a fixed
kernel.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import clone_replace

from pymc_sgmcmc.core.compilation import compile_graph
from pymc_sgmcmc.dynamics.interweaving import (
    metropolis_coordinate_sweeps,
    recentred,
    recentred_rows,
)
from pymc_sgmcmc.sampling.groups import LocationScaleHierarchy

SWEEPS = 5
"""Coordinate sweeps per move: enough for a near-independent draw of a few globals."""

TARGET_ACCEPT = 0.44
"""The acceptance rate of an optimally scaled one-dimensional random walk."""

_OPTIMAL_SCALE = 2.4
_FALLBACK_SCALE = 0.1  # where the conditional is not concave at the start
_DIFFERENCE_STEP = 1e-4


def adapted_log_scales(
    log_scales: np.ndarray, acceptance: np.ndarray, iteration: int
) -> np.ndarray:
    """One Robbins–Monro step of the log scales towards :data:`TARGET_ACCEPT`."""
    return log_scales + (iteration + 1) ** -0.6 * (acceptance - TARGET_ACCEPT)


class InterweavingMove:
    """The globals of a non-centred hierarchy redrawn given its group-indexed vectors.

    Parameters
    ----------
    position : Variable
        The flat position of the model's log density.
    prior : Variable
        Every term of the log density that reads no minibatched row
        (:attr:`~pymc_sgmcmc.gradients.graphs.RowLogp.prior`): the likelihood reads the
        globals only through ``a``, so these are the terms that change under the move.
    hierarchy : LocationScaleHierarchy
        The affine parts and the globals' flat coordinates.
    compile_kwargs : dict, optional
        Passed to the compile.
    """

    def __init__(
        self,
        position: Variable,
        prior: Variable,
        hierarchy: LocationScaleHierarchy,
        compile_kwargs: dict | None,
    ) -> None:
        self.position, self.prior, self.hierarchy = position, prior, hierarchy
        self.compile_kwargs = compile_kwargs
        self._move = self._log_density = None

    @property
    def n_globals(self) -> int:
        """How many coordinates the move redraws."""
        return int(self.hierarchy.global_coordinates.size)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_move": None, "_log_density": None}

    def _recentred_position(self, u: Variable) -> tuple[Variable, Variable]:
        """The position with globals ``u`` and every ``z`` recentred, and ``log|∂z/∂a|``."""
        x = self.position
        coordinates = pt.as_tensor(self.hierarchy.global_coordinates.astype(np.int64))
        at_u = pt.set_subtensor(x[coordinates], u)
        moved, log_jacobian = at_u, pt.zeros((), dtype=x.dtype)
        for part in self.hierarchy.parts:
            block = part.local
            location, scale = part.location_and_scale(x, at_u)
            if part.row_size:
                z, log_dz_da = recentred_rows(part.value, location, scale)
            else:
                z, log_dz_da = recentred(part.value, location, scale)
            moved = pt.set_subtensor(moved[block.start : block.stop], z.reshape((-1,)))
            log_jacobian = log_jacobian + log_dz_da
        return moved, log_jacobian

    def _conditional(self, u: Variable) -> Variable:
        """``log p(u | a)`` up to a constant (the prior at the recentred position)."""
        moved, log_jacobian = self._recentred_position(u)
        return clone_replace(self.prior, {self.position: moved}) + log_jacobian

    def _compile(self) -> None:
        x, dtype = self.position, self.position.dtype
        u = pt.vector("globals", dtype=dtype)
        coordinates = pt.vector("coordinates", dtype="int64")
        normals = pt.vector("normals", dtype=dtype)
        log_uniforms = pt.vector("log_uniforms", dtype=dtype)
        scales = pt.vector("scales", dtype=dtype)
        start = x[pt.as_tensor(self.hierarchy.global_coordinates.astype(np.int64))]
        end, accepted = metropolis_coordinate_sweeps(
            self._conditional, start, coordinates, normals, log_uniforms, scales
        )
        moved, _ = self._recentred_position(end)
        self._move = compile_graph(
            [x, coordinates, normals, log_uniforms, scales], [moved, accepted],
            self.compile_kwargs,
        )  # fmt: skip
        self._log_density = compile_graph([x, u], [self._conditional(u)], self.compile_kwargs)

    def initial_log_scales(self, position: np.ndarray) -> np.ndarray:
        """``log(2.4 σ_k)``, ``σ_k`` from the conditional's curvature at ``position``."""
        if self._move is None:
            self._compile()
        u = position[self.hierarchy.global_coordinates]
        center = float(self._log_density(position, u)[0])
        scales = np.full(u.size, _FALLBACK_SCALE)
        for k in range(u.size):
            step = _DIFFERENCE_STEP * max(1.0, abs(float(u[k])))
            sides = []
            for sign in (-1.0, 1.0):
                shifted = u.copy()
                shifted[k] += sign * step
                sides.append(float(self._log_density(position, shifted)[0]))
            curvature = (sides[0] - 2.0 * center + sides[1]) / step**2
            if np.isfinite(curvature) and curvature < 0:
                scales[k] = _OPTIMAL_SCALE / np.sqrt(-curvature)
        return np.log(scales)

    def move(
        self, position: np.ndarray, log_scales: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Redraw the globals given every ``a``.

        Returns the new position and each coordinate's acceptance rate over the
        :data:`SWEEPS` sweeps.
        """
        if self._move is None:
            self._compile()
        d, dtype = self.n_globals, position.dtype
        coordinates = np.tile(np.arange(d, dtype=np.int64), SWEEPS)
        normals = rng.standard_normal(coordinates.size).astype(dtype, copy=False)
        log_uniforms = np.log(rng.uniform(size=coordinates.size)).astype(dtype, copy=False)
        moved, accepted = self._move(
            position, coordinates, normals, log_uniforms, np.exp(log_scales).astype(dtype)
        )
        return moved, accepted.reshape(SWEEPS, d).mean(axis=0)
