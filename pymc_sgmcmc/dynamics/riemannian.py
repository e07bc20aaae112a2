"""Generalized leapfrog steps for position-dependent metrics.

Girolami and Calderhead, "Riemann manifold Langevin and Hamiltonian Monte Carlo
methods" (RMHMC): the generalized leapfrog for a Hamiltonian ``H(θ, p)`` that does not
separate into a potential and a kinetic part, with its two implicit updates solved by
fixed-point iterations. Roychowdhury, Kulis and Parthasarathy, "Robust Monte Carlo
Sampling using Riemannian Nosé-Poincaré Hamiltonian Dynamics" (SGR-NPHMC): the same
integrator on the extended state ``(θ, s; p, q)`` (supplement, eqs. 1 and 3), with the
friction and noise of eq. 2 as an exact Ornstein–Uhlenbeck step between leapfrog steps.

Each function takes the Hamiltonian's partial derivatives as callables, so it runs on
NumPy arrays (tests with an analytic metric) and on PyTensor variables (the compiled
trajectory, where the derivatives come from ``pytensor.grad``) alike. The number of
fixed-point iterations is static (a NumPy loop, or a PyTensor ``scan``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_sgmcmc.core.arrays import Array, is_symbolic, namespace


def _max_abs_change(new: tuple[Array, ...], old: tuple[Array, ...]) -> Array:
    """``max |new − old|`` over every component of a tuple of arrays."""
    xp = namespace(*new, *old)
    changes = [xp.max(xp.abs(a - b)) for a, b in zip(new, old, strict=True)]
    largest = changes[0]
    for change in changes[1:]:
        largest = xp.maximum(largest, change)
    return largest


@dataclass(frozen=True)
class FixedPoint:
    """Fixed-point iterations ``x ← f(x)`` for an implicit update, a static count of them.

    Parameters
    ----------
    steps : int
        Iterations per implicit update (Girolami and Calderhead use 5 or 6).
    """

    steps: int = 6

    def solve(
        self, update: Callable[[tuple[Array, ...]], tuple[Array, ...]], start: tuple[Array, ...]
    ) -> tuple[tuple[Array, ...], Array]:
        """Iterate ``update`` from ``start``; return the last iterate and its residual.

        The residual is the largest absolute change made by the last iteration: for a
        contraction it bounds (up to the contraction factor) the distance to the exact
        solution, so it measures how far the step is from being reversible.
        """
        if is_symbolic(*start):
            return self._solve_symbolic(update, start)
        value = start
        residual = None
        for _ in range(self.steps):
            new = update(value)
            residual = _max_abs_change(new, value)
            value = new
        return value, residual

    def _solve_symbolic(
        self, update: Callable[[tuple[Array, ...]], tuple[Array, ...]], start: tuple[Array, ...]
    ) -> tuple[tuple[Array, ...], Array]:
        # A loop, not an unrolled one: one copy of the update's graph (which holds
        # derivatives of the metric) instead of one per iteration keeps compilation short.
        import pytensor.tensor as pt

        from pymc_sgmcmc.core.loops import loop

        def body(*carried: Array) -> list[Array]:
            value = carried[:-1]  # the last is the previous residual
            new = tuple(update(value))
            return [*new, _max_abs_change(new, value)]

        residual0 = pt.as_tensor_variable(np.asarray(0.0, dtype=start[0].dtype))
        *values, residuals = (out[-1] for out in loop(body, [*start, residual0], self.steps))
        return tuple(values), residuals


def generalized_leapfrog_step(
    position: Array,
    momentum: Array,
    grad_position: Callable[[Array, Array], Array],
    velocity: Callable[[Array, Array], Array],
    step_size: Array,
    solver: FixedPoint,
) -> tuple[Array, Array, Array]:
    """One generalized leapfrog step of ``H(θ, p)`` (RMHMC, §5: its three updates).

    Parameters
    ----------
    position, momentum : array
        ``θ`` and ``p``.
    grad_position : callable
        ``(θ, p) ↦ ∂H/∂θ`` with ``p`` held fixed.
    velocity : callable
        ``(θ, p) ↦ ∂H/∂p = G(θ)⁻¹ p``.
    step_size : scalar
        ``ε``.
    solver : FixedPoint
        The iterations of the two implicit updates.

    Returns
    -------
    new_position, new_momentum, residual
        The residual is the larger of the two implicit updates' last changes.
    """
    half = 0.5 * step_size
    # RMHMC leapfrog, update 1: p½ = p − ε/2 ∂θH(θ, p½), implicit in p½.
    (half_momentum,), residual_p = solver.solve(
        lambda v: (momentum - half * grad_position(position, v[0]),), (momentum,)
    )
    start_velocity = velocity(position, half_momentum)
    # RMHMC leapfrog, update 2: θ' = θ + ε/2 [G(θ)⁻¹ + G(θ')⁻¹] p½, implicit in θ'
    # (iterated from an Euler step).
    (new_position,), residual_theta = solver.solve(
        lambda v: (position + half * (start_velocity + velocity(v[0], half_momentum)),),
        (position + step_size * start_velocity,),
    )
    # RMHMC leapfrog, update 3: p' = p½ − ε/2 ∂θH(θ', p½), explicit.
    new_momentum = half_momentum - half * grad_position(new_position, half_momentum)
    xp = namespace(residual_p, residual_theta)
    return new_position, new_momentum, xp.maximum(residual_p, residual_theta)


class NosePoincareDerivatives:
    """The partial derivatives of the Riemannian Nosé–Poincaré Hamiltonian (eq. 1).

    Callables of ``(θ, p, s, q)`` with ``p`` the canonical momentum; each holds the other
    arguments fixed.
    """

    def __init__(
        self,
        d_position: Callable[..., Array],
        d_momentum: Callable[..., Array],
        d_s: Callable[..., Array],
        d_q: Callable[..., Array],
    ) -> None:
        self.d_position = d_position
        self.d_momentum = d_momentum
        self.d_s = d_s
        self.d_q = d_q


def riemannian_ornstein_uhlenbeck(
    real_momentum: Array,
    control_momentum: Array,
    momentum_noise: Array,
    control_noise: Array,
    log_det_metric: Array,
    step_size: Array,
    momentum_friction: Array,
    control_friction: Array,
    temperature: Array,
) -> tuple[Array, Array]:
    """Eq. 2's friction and noise as an exact Ornstein–Uhlenbeck step at fixed ``θ``.

    Under eq. 1 at the level set, ``(θ, p̃ = p/s, q)`` has the law
    ``exp(−[−L + ½ p̃ᵀG⁻¹p̃ + ½ |G|⁻¹q²]/kT) |G|^(−(1+kT)/2)``: given ``θ``,
    ``p̃ ~ N(0, kT G(θ))`` and ``q ~ N(0, kT |G(θ)|)``. The step

        p̃ ← e^(−εB) p̃ + √(kT (1 − e^(−2εB))) ξ_G,    ξ_G ~ N(0, G(θ))
        q ← e^(−εA) q + √(kT |G| (1 − e^(−2εA))) ξ,    ξ ~ N(0, 1)

    keeps both conditionals invariant, which is what eq. 2's friction–noise pairs (the
    supplement's Theorem 2) ask of the noise; solved exactly here instead of inside the
    half steps of eq. 3 (see :mod:`pymc_sgmcmc.dynamics.nose_poincare` for why).

    Parameters
    ----------
    real_momentum, control_momentum : array
        ``p̃`` and ``q``.
    momentum_noise : array
        ``ξ_G``, a draw of ``N(0, G(θ))`` like ``p̃``.
    control_noise : scalar
        A standard normal draw, independent of ``momentum_noise``.
    log_det_metric : scalar
        ``log |G(θ)|``.
    step_size, momentum_friction, control_friction, temperature : scalar
        ``ε``, ``B``, ``A`` and ``kT``.
    """
    xp = namespace(real_momentum, momentum_noise)
    keep_p = xp.exp(-step_size * momentum_friction)
    keep_q = xp.exp(-step_size * control_friction)
    momentum = keep_p * real_momentum + xp.sqrt(temperature * (1.0 - keep_p**2)) * momentum_noise
    # √|G| as exp(½ log|G|): the determinant itself over- or underflows long before its log.
    scale_q = xp.sqrt(temperature * (1.0 - keep_q**2)) * xp.exp(0.5 * log_det_metric)
    return momentum, keep_q * control_momentum + scale_q * control_noise


def nose_poincare_step(
    position: Array,
    momentum: Array,
    s: Array,
    q: Array,
    derivatives: NosePoincareDerivatives,
    step_size: Array,
    solver: FixedPoint,
) -> tuple[Array, Array, Array, Array, Array]:
    """One generalized leapfrog step of eq. 1's Hamiltonian (supplement, eq. 3, ``A = B = 0``).

    Positions ``(θ, s)``, canonical momenta ``(p, q)``::

        (p½, q½) = (p, q) − ε/2 (∂θH, ∂sH)(θ, s, p½, q½)          implicit
        (θ', s') = (θ, s) + ε/2 [(∂pH, ∂qH)(θ, s, p½, q½)
                                + (∂pH, ∂qH)(θ', s', p½, q½)]     implicit
        (p', q') = (p½, q½) − ε/2 (∂θH, ∂sH)(θ', s', p½, q½)       explicit

    The two implicit updates are solved by ``solver``. Symplectic, reversible and
    conserving ``H`` to ``O(ε²)`` up to the solver's residual. (The supplement's eq. 3
    writes ``p½/s'`` in both terms of the ``θ`` update; the generalized leapfrog, which
    the text says it uses, has ``∂pH = G⁻¹p/s`` at each end, ``s`` then ``s'``.)

    Parameters
    ----------
    position, momentum : array
        ``θ`` and ``p``.
    s, q : scalar
        The thermostat's control ``s > 0`` and its momentum ``q``.
    derivatives : NosePoincareDerivatives
        ``∂H/∂θ``, ``∂H/∂p``, ``∂H/∂s``, ``∂H/∂q`` of eq. 1 (minibatch ``L̃``).
    step_size : scalar
        ``ε``.
    solver : FixedPoint
        The iterations of the two implicit updates.

    Returns
    -------
    new_position, new_momentum, new_s, new_q, residual
        The residual is the larger of the two implicit updates' last changes.
    """
    d = derivatives
    half = 0.5 * step_size
    xp = namespace(position, momentum, s, q)

    def first_half(v: tuple[Array, Array]) -> tuple[Array, Array]:
        # Eq. 3, first two lines.
        p_half, q_half = v
        return (
            momentum - half * d.d_position(position, p_half, s, q_half),
            q - half * d.d_s(position, p_half, s, q_half),
        )

    (p_half, q_half), residual_half = solver.solve(first_half, (momentum, q))
    start_velocity = d.d_momentum(position, p_half, s, q_half)
    start_rate = d.d_q(position, p_half, s, q_half)

    def drift(v: tuple[Array, Array]) -> tuple[Array, Array]:
        # Eq. 3, third and fourth lines, started from an Euler step.
        new_theta, new_s = v
        velocity = d.d_momentum(new_theta, p_half, new_s, q_half)
        rate = d.d_q(new_theta, p_half, new_s, q_half)
        return position + half * (start_velocity + velocity), s + half * (start_rate + rate)

    (new_position, new_s), residual_drift = solver.solve(
        drift, (position + step_size * start_velocity, s + step_size * start_rate)
    )
    # Eq. 3, last two lines: explicit.
    new_momentum = p_half - half * d.d_position(new_position, p_half, new_s, q_half)
    new_q = q_half - half * d.d_s(new_position, p_half, new_s, q_half)
    return new_position, new_momentum, new_s, new_q, xp.maximum(residual_half, residual_drift)
