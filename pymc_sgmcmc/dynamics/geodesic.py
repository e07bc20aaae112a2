"""Stochastic gradient geodesic samplers on spheres: SGGMC and gSGNHT.

Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods" (slides), Algorithms 1
and 2 with scalar ``C``: the second-order "ABOBO" splitting of the dynamics into the
geodesic flow (A), the friction (B) and the stochastic-gradient kick with noise (O), each
solved exactly. Positions are one flat vector: ``sphere_rows`` (``K × d`` integer indices)
picks the coordinates of ``K`` spheres of dimension ``d``, ``euclidean`` (integer
indices) the unconstrained coordinates, which follow the same splitting on straight
lines. The mass is the identity, as in the algorithms.
"""

from __future__ import annotations

import numpy as np

from pymc_sgmcmc.dynamics.common import Array, GradLogp
from pymc_sgmcmc.manifolds.sphere import geodesic_flow, project_tangent, retract_to_sphere


def _set(flat: Array, rows: Array, values: Array) -> Array:
    if isinstance(flat, np.ndarray):
        out = flat.copy()
        out[rows] = values
        return out
    import pytensor.tensor as pt

    return pt.set_subtensor(flat[rows], values)


def flow_a(
    position: Array, velocity: Array, t: Array, sphere_rows: Array, euclidean: Array
) -> tuple[Array, Array]:
    """A: geodesic flow on the spheres and straight lines elsewhere, for time ``t``."""
    x, v = geodesic_flow(position[sphere_rows], velocity[sphere_rows], t)
    x, v = retract_to_sphere(x, v)
    position = _set(position, sphere_rows, x)
    velocity = _set(velocity, sphere_rows, v)
    position = _set(position, euclidean, position[euclidean] + t * velocity[euclidean])
    return position, velocity


def project_velocity(position: Array, vector: Array, sphere_rows: Array) -> Array:
    """``Λ(x)`` applied sphere by sphere; unconstrained coordinates pass unchanged."""
    return _set(vector, sphere_rows, project_tangent(position[sphere_rows], vector[sphere_rows]))


def kick_o(
    position: Array,
    velocity: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    diffusion: Array,
    noise_estimate: Array,
    sphere_rows: Array,
) -> Array:
    """O: ``v ← v + Λ(x)[ε ∇log π̃(x) + N(0, 2(C − B̂)ε)]`` (Alg. 1, O step).

    The slides write the noise as ``N(0, (2C − εV)ε)``; ``B̂ = εV/2`` is our
    ``noise_estimate``, as in SGHMC.
    """
    kick = (
        step_size * grad_logp(position)
        + (2.0 * (diffusion - noise_estimate) * step_size) ** 0.5 * noise
    )
    return velocity + project_velocity(position, kick, sphere_rows)


def sggmc_step(
    position: Array,
    velocity: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    friction: Array,
    noise_estimate: Array,
    sphere_rows: Array,
    euclidean: Array,
) -> tuple[Array, Array]:
    """One SGGMC step, A(ε/2) B(ε/2) O(ε) B(ε/2) A(ε/2) (Algorithm 1).

    Parameters
    ----------
    position, velocity : array
        Flat ``x`` (unit rows on the spheres) and tangent ``v``.
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
    sphere_rows, euclidean : integer arrays
        Flat indices of the spheres (``K × d``) and of the unconstrained coordinates.
    """
    half = 0.5 * step_size
    decay = _exp(-friction * half)
    position, velocity = flow_a(position, velocity, half, sphere_rows, euclidean)  # A
    velocity = decay * velocity  # B: v ← exp(−Cε/2) v
    velocity = kick_o(
        position, velocity, grad_logp, noise, step_size, friction, noise_estimate, sphere_rows
    )  # O
    velocity = decay * velocity  # B
    return flow_a(position, velocity, half, sphere_rows, euclidean)  # A


def gsgnht_step(
    position: Array,
    velocity: Array,
    thermostat: Array,
    grad_logp: GradLogp,
    noise: Array,
    step_size: Array,
    diffusion: Array,
    noise_estimate: Array,
    sphere_rows: Array,
    euclidean: Array,
    manifold_dim: Array,
) -> tuple[Array, Array, Array]:
    """One gSGNHT step (Algorithm 2): SGGMC's splitting with an adaptive friction ``ξ``.

    ``ξ ← ξ + (vᵀv/m − 1) ε/2`` accompanies each half flow A, and B uses
    ``exp(−ξ ε/2)``; ``C`` (``diffusion``) only sets the injected noise. ``m`` is the
    dimension of the manifold: ``d − 1`` per sphere plus the unconstrained coordinates.
    """
    half = 0.5 * step_size
    # A, with ξ* ← ξ + (vᵀv/m − 1) ε/2 from the velocity before the flow (Alg. 2)
    thermostat = thermostat + ((velocity * velocity).sum() / manifold_dim - 1.0) * half
    position, velocity = flow_a(position, velocity, half, sphere_rows, euclidean)
    decay = _exp(-thermostat * half)
    velocity = decay * velocity  # B
    velocity = kick_o(
        position, velocity, grad_logp, noise, step_size, diffusion, noise_estimate, sphere_rows
    )  # O
    velocity = decay * velocity  # B
    # A, with ξ ← ξ* + (v*ᵀv*/m − 1) ε/2 from the velocity entering the flow (Alg. 2)
    thermostat = thermostat + ((velocity * velocity).sum() / manifold_dim - 1.0) * half
    position, velocity = flow_a(position, velocity, half, sphere_rows, euclidean)
    return position, velocity, thermostat


def _exp(a: Array) -> Array:
    if isinstance(a, np.ndarray | float | np.floating):
        return np.exp(a)
    import pytensor.tensor as pt

    return pt.exp(a)
