"""Stochastic gradient geodesic samplers on spheres: SGGMC and gSGNHT.

Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods" (slides), Algorithms 1
and 2 with scalar ``C``: the second-order "ABOBO" splitting of the dynamics into the
geodesic flow (A), the friction (B) and the stochastic-gradient kick with noise (O), each
solved exactly. Positions are one flat vector; a
:class:`~pymc_sgmcmc.manifolds.sphere.SphereLayout` says which of its coordinates form
spheres of dimension ``d`` and which are unconstrained, and these follow the same
splitting on straight lines. The mass is the identity, as in the algorithms.

A step splits position and velocity into their sphere and unconstrained parts once,
works on the parts, and joins them only where the gradient needs the flat position.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array, GradLogp, namespace
from pymc_sgmcmc.manifolds.sphere import (
    SphereLayout,
    geodesic_flow,
    project_tangent,
    retract_to_sphere,
)


class Parts(NamedTuple):
    """A flat vector split by a :class:`SphereLayout`; ``None`` marks an empty part."""

    spheres: Array | None
    euclidean: Array | None


def _decay(rate: Array, t: Array) -> Array:
    """B: the factor ``exp(−rate t)`` of the friction flow."""
    return namespace(rate, t).exp(-rate * t)


def onto_spheres(position: Array, layout: SphereLayout) -> Array:
    """``position`` with every sphere's point scaled to norm one.

    A zero vector has no direction: it goes to the first basis vector. Unconstrained
    coordinates pass unchanged. Works on NumPy arrays and PyTensor variables.
    """
    x, rest = layout.split(position)
    if x is None:
        return position
    xp = namespace(x)
    norm = xp.sqrt((x * x).sum(axis=-1, keepdims=True))
    first_axis = np.zeros(layout.d)
    first_axis[0] = 1.0
    safe_norm = xp.where(norm > 0, norm, 1.0)
    return layout.join(xp.where(norm > 0, x / safe_norm, first_axis), rest)


def _split(layout: SphereLayout, flat: Array) -> Parts:
    return Parts(*layout.split(flat))


def _join(layout: SphereLayout, parts: Parts) -> Array:
    return layout.join(parts.spheres, parts.euclidean)


def _scale(factor: Array, v: Parts) -> Parts:
    return Parts(*(None if p is None else factor * p for p in v))


def _squared_norm(v: Parts) -> Array:
    return sum((p * p).sum() for p in v if p is not None)


def _flow(x: Parts, v: Parts, t: Array) -> tuple[Parts, Parts]:
    """A on the parts: great circles (eq. 12, then retracted), straight lines elsewhere."""
    xs, vs = x.spheres, v.spheres
    if xs is not None:
        xs, vs = retract_to_sphere(*geodesic_flow(xs, vs, t))
    xe = None if x.euclidean is None else x.euclidean + t * v.euclidean
    return Parts(xs, xe), Parts(vs, v.euclidean)


def _kick(
    layout: SphereLayout,
    x: Parts,
    v: Parts,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    diffusion: Array,
    noise_estimate: Array,
) -> Parts:
    """O on the parts: ``v ← v + Λ(x)[ε ∇log π̃(x) + N(0, 2(C − B̂)ε)]``."""
    kick = (
        step_size * grad_logp(_join(layout, x))
        + (2.0 * (diffusion - noise_estimate) * step_size) ** 0.5 * noise
    )
    ks, ke = layout.split(kick)
    vs = None if ks is None else v.spheres + project_tangent(x.spheres, ks)
    ve = None if ke is None else v.euclidean + ke
    return Parts(vs, ve)


def flow_a(position: Array, velocity: Array, t: Array, layout: SphereLayout) -> tuple[Array, Array]:
    """A: geodesic flow on the spheres and straight lines elsewhere, for time ``t``.

    Parameters
    ----------
    position, velocity : array
        Flat ``x`` and tangent ``v``.
    t : scalar
        Duration of the flow.
    layout : SphereLayout
        Which coordinates form spheres and which are unconstrained.

    Returns
    -------
    position, velocity : array
        The flat state after the flow, retracted onto the spheres (eq. 12).
    """
    x, v = _flow(_split(layout, position), _split(layout, velocity), t)
    return _join(layout, x), _join(layout, v)


def project_velocity(position: Array, vector: Array, layout: SphereLayout) -> Array:
    """``Λ(x)`` applied sphere by sphere; unconstrained coordinates pass unchanged.

    Parameters
    ----------
    position : array
        Flat ``x``, unit vectors on the spheres.
    vector : array
        Flat vector to project, e.g. a velocity or a gradient.
    layout : SphereLayout
        Which coordinates form spheres and which are unconstrained.

    Returns
    -------
    array
        ``vector`` with its normal part on each sphere removed.
    """
    xs, _ = layout.split(position)
    gs, ge = layout.split(vector)
    return layout.join(None if gs is None else project_tangent(xs, gs), ge)


def sggmc_step(
    position: Array,
    velocity: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    friction: Array,
    noise_estimate: Array,
    layout: SphereLayout,
) -> tuple[Array, Array]:
    """One SGGMC step, A(ε/2) B(ε/2) O(ε) B(ε/2) A(ε/2) (Algorithm 1).

    Parameters
    ----------
    position, velocity : array
        Flat ``x`` (unit vectors on the spheres) and tangent ``v``.
    grad_logp : callable
        ``x ↦ ∇log π̃(x)`` in embedded coordinates (its normal part is projected away).
    noise : array
        Standard normal draw, same shape as ``position``.
    step_size : scalar
        ``ε``.
    friction : scalar
        ``C``.
    noise_estimate : scalar
        ``B̂ = εV/2``, ``0 ≤ B̂ ≤ C``.
    layout : SphereLayout
        Which coordinates form spheres and which are unconstrained.

    Returns
    -------
    position, velocity : array
        The flat state after the step.
    """
    half = 0.5 * step_size
    decay = _decay(friction, half)
    x, v = _split(layout, position), _split(layout, velocity)
    x, v = _flow(x, v, half)  # A
    v = _scale(decay, v)  # B: v ← exp(−Cε/2) v
    v = _kick(layout, x, v, grad_logp, noise, step_size, friction, noise_estimate)  # O
    v = _scale(decay, v)  # B
    x, v = _flow(x, v, half)  # A
    return _join(layout, x), _join(layout, v)


def gsgnht_step(
    position: Array,
    velocity: Array,
    thermostat: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    diffusion: Array,
    noise_estimate: Array,
    layout: SphereLayout,
) -> tuple[Array, Array, Array]:
    """One gSGNHT step (Algorithm 2): SGGMC's splitting with an adaptive friction ``ξ``.

    ``ξ ← ξ + (vᵀv/m − 1) ε/2`` accompanies each half flow A, and B uses
    ``exp(−ξ ε/2)``; ``C`` (``diffusion``) only sets the injected noise. ``m`` is the
    dimension of the manifold, ``layout.manifold_dim``: ``d − 1`` per sphere plus the
    unconstrained coordinates.

    Parameters
    ----------
    thermostat : scalar
        ``ξ`` before the step.
    diffusion : scalar
        ``C``, which sets the injected noise ``N(0, 2(C − B̂)ε)``.
    position, velocity, grad_logp, noise, step_size, noise_estimate, layout
        As for :func:`sggmc_step`.

    Returns
    -------
    position, velocity, thermostat : array
        The state after the step.
    """
    half = 0.5 * step_size
    m = float(max(layout.manifold_dim, 1))
    x, v = _split(layout, position), _split(layout, velocity)
    # A, with ξ* ← ξ + (vᵀv/m − 1) ε/2 from the velocity before the flow (Alg. 2)
    thermostat = thermostat + (_squared_norm(v) / m - 1.0) * half
    x, v = _flow(x, v, half)
    decay = _decay(thermostat, half)
    v = _scale(decay, v)  # B
    v = _kick(layout, x, v, grad_logp, noise, step_size, diffusion, noise_estimate)  # O
    v = _scale(decay, v)  # B
    # A, with ξ ← ξ* + (v*ᵀv*/m − 1) ε/2 from the velocity entering the flow (Alg. 2)
    thermostat = thermostat + (_squared_norm(v) / m - 1.0) * half
    x, v = _flow(x, v, half)
    return _join(layout, x), _join(layout, v), thermostat
