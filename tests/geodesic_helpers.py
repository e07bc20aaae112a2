"""Shared by the geodesic tests: unit vectors, tangent vectors, the reference rotation,
and a flat position that holds a batch of spheres next to Euclidean coordinates.

Imported by ``test_manifolds_sphere.py``, ``test_dynamics_geodesic.py`` and
``test_samplers_geodesic.py`` as ``from geodesic_helpers import ...`` (``tests/`` is on
``sys.path`` when pytest runs them).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pymc_sgmcmc.manifolds.sphere import SphereLayout


def unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def random_tangent(rng, x, scale=1.0):
    g = rng.normal(scale=scale, size=x.shape)
    return g - x * np.sum(x * g, axis=-1, keepdims=True)


def rotation(x, v, t):
    """Reference flow: ``exp(αt G)`` with ``G = u xᵀ − x uᵀ``, ``u = v/α``, applied to x, v.

    The great circle through ``x`` with tangent ``u`` is the orbit of the rotation in the
    plane spanned by ``x`` and ``u``; ``expm`` of its generator owes nothing to eq. 12.
    """
    alpha = np.linalg.norm(v)
    if alpha == 0.0:
        return x.copy(), v.copy()
    u = v / alpha
    rot = scipy.linalg.expm(alpha * t * (np.outer(u, x) - np.outer(x, u)))
    return rot @ x, rot @ v


# -- a flat position holding batched spheres and Euclidean coordinates -------------------

# Three spheres of S² and four unconstrained coordinates, deliberately interleaved in
# the flat vector (as pm.sample ravels the variables in model order).
ROWS = np.array([[1, 2, 3], [4, 5, 6], [8, 9, 10]])
EUCLIDEAN = np.array([0, 7, 11, 12])
DIM = 13
MANIFOLD_DIM = 3 * 2 + 4
LAYOUT = SphereLayout.from_indices(ROWS, EUCLIDEAN)
