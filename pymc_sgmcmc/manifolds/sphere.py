"""The hypersphere ``S^(d−1) = {x ∈ R^d : |x| = 1}`` in embedded coordinates.

Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods" (slides): the projection
onto the tangent space ``Λ(x) = I − x xᵀ`` and the exact geodesic flow, eq. (12). Points
and velocities are arrays whose last axis is the embedding dimension ``d``; leading axes
index independent spheres. Every function works on NumPy arrays and PyTensor variables.
"""

from __future__ import annotations

from pymc_sgmcmc.dynamics.common import Array


def _xp(a):
    # NumPy or PyTensor namespace for the few functions that are not operators.
    if type(a).__module__.startswith("numpy"):
        import numpy

        return numpy
    import pytensor.tensor

    return pytensor.tensor


def project_tangent(x: Array, g: Array) -> Array:
    """``Λ(x) g = g − x (xᵀ g)``: the part of ``g`` tangent to the sphere at ``x``."""
    return g - x * (x * g).sum(axis=-1, keepdims=True)


def geodesic_flow(x: Array, v: Array, t: Array) -> tuple[Array, Array]:
    """Move ``(x, v)`` along the great circle for time ``t`` (eq. 12).

    ``x(t) = x cos(αt) + v/α sin(αt)``, ``v(t) = −α x sin(αt) + v cos(αt)`` with
    ``α = |v|``; ``v`` must be tangent at ``x``. At ``α = 0`` the point does not move.
    """
    xp = _xp(x)
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
    machine precision over any number of steps.
    """
    xp = _xp(x)
    x = x / xp.sqrt((x * x).sum(axis=-1, keepdims=True))
    return x, project_tangent(x, v)
