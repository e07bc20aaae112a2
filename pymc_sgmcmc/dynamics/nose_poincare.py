"""Stochastic Nosé–Poincaré dynamics (SG-NPHMC).

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM", §3.4.
The Nosé–Poincaré Hamiltonian (eq. 6) extends ``(θ, p)`` with a thermostat control ``s``
and its momentum ``q``::

    H = s [−L(θ) + ½ (p/s)ᵀ M⁻¹ (p/s) + q²/(2Q) + g kT log s − H₀]

Its flow on the level set ``H = 0`` visits ``(θ, p/s)`` with the canonical law
``exp(−(−L(θ) + ½ p̃ᵀM⁻¹p̃)/kT)`` when ``g`` is the number of degrees of freedom (Bond,
Leimkuhler and Laird, "The Nosé–Poincaré method for constant temperature molecular
dynamics"). Eq. 7 discretises it with the generalized leapfrog: a half step of the
momenta ``(p, q)`` (the one for ``q`` is a quadratic), a full step of ``(s, θ)``, a half
step of the momenta. With exact gradients it conserves ``H`` to ``O(ε²)``.

The noise terms. In eq. 7 the frictions ``B`` (on ``p``) and ``A`` (on ``q``) sit inside
the half steps, paired by the Fokker–Planck argument with noise ``N(0, 2√s B)`` and
``N(0, 2A)`` (the Riemannian supplement's eq. 5). Run that way, the noise moves the state
off the slice ``H = 0``, where ``−∂H/∂s`` gains a term ``−H/s`` that drives ``s`` to 0: on a
5-dimensional Gaussian with ``A = B = 1`` the chain reached ``s < 0`` (NaN) within a few
hundred steps. We therefore split each step (Leimkuhler and Reich's splitting of a
thermostat into a Hamiltonian part and an Ornstein–Uhlenbeck part):

1. an exact Ornstein–Uhlenbeck step of the real momenta, ``p̃ = p/s`` with friction ``B``
   toward ``N(0, kT M)`` and ``q`` with friction ``A`` toward ``N(0, kT Q)``; it leaves the
   canonical law of the real variables invariant, as eq. 7's friction–noise pairs intend;
2. ``H₀`` set so that ``H = 0`` at the current state (``H₀`` labels the level set and does
   not enter the real-time dynamics), and ``s = 1`` at the start of each trajectory for
   the same reason, so that ``ε`` keeps its meaning;
3. the deterministic generalized leapfrog of eq. 7 (``A = B = 0``), whose flow in real
   time is the Nosé–Hoover flow that keeps ``exp(−(−L + ½p̃ᵀM⁻¹p̃)/kT − Qξ²/(2kT))``
   invariant when ``g = D``.

The state carries the real momentum ``p̃`` (the one whose law is ``N(0, kT M)``, which
the M step and the kinetic temperature read); a step converts to the canonical ``p = s p̃``
and back.
"""

from __future__ import annotations

from typing import NamedTuple

from pymc_sgmcmc.core.arrays import Array, namespace
from pymc_sgmcmc.dynamics.common import kinetic_energy, velocity


class NosePoincareState(NamedTuple):
    """``θ``, the real momentum ``p̃ = p/s``, ``s``, ``q``, and ``L̃(θ)``, ``∇L̃(θ)``."""

    position: Array
    momentum: Array
    control: Array
    control_momentum: Array
    logp: Array
    gradient: Array


def nose_poincare_energy(
    logp: Array,
    real_momentum: Array,
    control: Array,
    control_momentum: Array,
    inv_mass: Array,
    thermostat_mass: Array,
    degrees_of_freedom: Array,
    temperature: Array,
    reference_energy: Array,
) -> Array:
    """Eq. 6: ``H = s [−L + ½ p̃ᵀM⁻¹p̃ + q²/(2Q) + g kT log s − H₀]`` with ``p̃ = p/s``."""
    xp = namespace(control, real_momentum)
    inner = (
        -logp
        + kinetic_energy(inv_mass, real_momentum)
        + control_momentum**2 / (2.0 * thermostat_mass)
        + degrees_of_freedom * temperature * xp.log(control)
        - reference_energy
    )
    return control * inner


def control_momentum_half_step(
    control_momentum: Array, force: Array, step_size: Array, thermostat_mass: Array
) -> Array:
    """Eq. 7's quadratic for ``q`` at the half step, solved for its stable root.

    ``(ε/4Q) x² + x − c = 0`` with ``c = q + (ε/2) F`` and ``F`` the terms of ``−∂H/∂s``
    other than ``−q²/(2Q)`` (:func:`control_force`). Of the two roots we take
    ``x = 2c / (1 + √(1 + εc/Q))``: it tends to the explicit update ``c`` as ``ε → 0`` (the
    other root runs off to ``−4Q/ε``), and written this way it loses no digits when
    ``εc/Q`` is small. A negative discriminant (no real root: the step is far too large)
    gives NaN, which the glue treats as a divergence.
    """
    xp = namespace(control_momentum, force)
    c = control_momentum + 0.5 * step_size * force
    return 2.0 * c / (1.0 + xp.sqrt(1.0 + step_size * c / thermostat_mass))


def control_force(
    logp: Array,
    real_momentum: Array,
    control: Array,
    inv_mass: Array,
    degrees_of_freedom: Array,
    temperature: Array,
    reference_energy: Array,
) -> Array:
    """``−∂H/∂s`` without its ``−q²/(2Q)`` term: ``L + ½ p̃ᵀM⁻¹p̃ − g kT (1 + log s) + H₀``."""
    xp = namespace(control, real_momentum)
    return (
        logp
        + kinetic_energy(inv_mass, real_momentum)
        - degrees_of_freedom * temperature * (1.0 + xp.log(control))
        + reference_energy
    )


def level_set_energy(
    state: NosePoincareState,
    inv_mass: Array,
    thermostat_mass: Array,
    degrees_of_freedom: Array,
    temperature: Array,
) -> Array:
    """The ``H₀`` that puts ``state`` on the level set ``H = 0`` of eq. 6."""
    return (
        nose_poincare_energy(
            state.logp,
            state.momentum,
            state.control,
            state.control_momentum,
            inv_mass,
            thermostat_mass,
            degrees_of_freedom,
            temperature,
            0.0,
        )
        / state.control
    )


def ornstein_uhlenbeck_momenta(
    state: NosePoincareState,
    momentum_noise: Array,
    control_noise: Array,
    step_size: Array,
    momentum_friction: Array,
    control_friction: Array,
    thermostat_mass: Array,
    temperature: Array,
) -> NosePoincareState:
    """The noise terms of eq. 7 as an exact Ornstein–Uhlenbeck step of ``p̃`` and ``q``.

    ``p̃ ← e^(−εB) p̃ + √(kT (1 − e^(−2εB))) ξ_M`` with ``ξ_M ~ N(0, M)``, and the same for
    ``q`` with ``A`` and ``N(0, Q)``: friction and noise paired so that ``N(0, kT M)`` and
    ``N(0, kT Q)`` stay invariant (the Fokker–Planck correction of the supplement's
    Theorem 2, solved exactly over the step instead of inside the half steps).
    """
    xp = namespace(state.momentum, momentum_noise)
    keep_p = xp.exp(-step_size * momentum_friction)
    keep_q = xp.exp(-step_size * control_friction)
    momentum = keep_p * state.momentum + xp.sqrt(temperature * (1.0 - keep_p**2)) * (momentum_noise)
    control_momentum = (
        keep_q * state.control_momentum
        + xp.sqrt(temperature * thermostat_mass * (1.0 - keep_q**2)) * control_noise
    )
    return state._replace(momentum=momentum, control_momentum=control_momentum)


def nose_poincare_step(
    state: NosePoincareState,
    logp_and_grad,
    step_size: Array,
    inv_mass: Array,
    thermostat_mass: Array,
    degrees_of_freedom: Array,
    temperature: Array,
    reference_energy: Array,
) -> NosePoincareState:
    """One deterministic generalized leapfrog step of eq. 7 (``A = B = 0``).

    ``state.logp`` and ``state.gradient`` must be ``L̃`` and ``∇L̃`` at its position;
    ``logp_and_grad`` is ``θ ↦ (L̃(θ), ∇L̃(θ))`` on this step's minibatch.
    """
    eps, s = step_size, state.control
    # Eq. 7, p half step (explicit without friction): p' = s p̃ + ε/2 s ∇L̃(θ).
    p_half = s * state.momentum + 0.5 * eps * s * state.gradient
    # Eq. 7, q half step: the quadratic in q'.
    force = control_force(
        state.logp, p_half / s, s, inv_mass, degrees_of_freedom, temperature, reference_energy
    )
    q_half = control_momentum_half_step(state.control_momentum, force, eps, thermostat_mass)
    # Eq. 7, s full step: s' = s + ε/2 (s + s') q'/Q, solved for s'.
    rate = 0.5 * eps * q_half / thermostat_mass
    s_new = s * (1.0 + rate) / (1.0 - rate)
    # Eq. 7, θ full step: θ' = θ + ε/2 M⁻¹p' (1/s + 1/s').
    position = state.position + 0.5 * eps * velocity(inv_mass, p_half) * (1.0 / s + 1.0 / s_new)
    logp, gradient = logp_and_grad(position)
    # Eq. 7, p second half step: p'' = p' + ε/2 s' ∇L̃(θ').
    p_new = p_half + 0.5 * eps * s_new * gradient
    # Eq. 7, q second half step: q'' = q' + ε/2 [F(θ', s', p') − q'²/(2Q)].
    force_new = control_force(
        logp, p_half / s_new, s_new, inv_mass, degrees_of_freedom, temperature, reference_energy
    )
    q_new = q_half + 0.5 * eps * (force_new - q_half**2 / (2.0 * thermostat_mass))
    return NosePoincareState(position, p_new / s_new, s_new, q_new, logp, gradient)
