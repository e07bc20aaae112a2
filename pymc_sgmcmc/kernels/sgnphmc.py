"""Kernel of stochastic gradient Nosé–Poincaré HMC (SG-NPHMC).

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM", §3.4,
eqs. 6–7; the update rules are in :mod:`pymc_sgmcmc.dynamics.nose_poincare` (why the noise
terms are an Ornstein–Uhlenbeck step is explained there). Momentum and thermostat momentum
carry over from one draw to the next; each trajectory starts at ``s = 1``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array, namespace
from pymc_sgmcmc.core.validation import check_positive
from pymc_sgmcmc.dynamics.common import kinetic_temperature
from pymc_sgmcmc.dynamics.nose_poincare import (
    NosePoincareState,
    level_set_energy,
    nose_poincare_energy,
    nose_poincare_step,
    ornstein_uhlenbeck_momenta,
)
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric


class SGNPHMCState(NamedTuple):
    """θ, the real momentum ``p̃ = p/s``, ``s``, ``q``, and ``L̃(θ)``, ``∇L̃(θ)`` there.

    The last two are the integrator's own: eq. 7's leapfrog reuses them from one step
    to the next, and :func:`prepare` evaluates them afresh at each trajectory's start.
    """

    position: Array
    momentum: Array
    control: Array
    control_momentum: Array
    logp: Array
    gradient: Array


class SGNPHMCParams(NamedTuple):
    """``ε``, the frictions ``B`` and ``A``, ``Q``, ``kT``, ``g`` and the mass ``M``.

    ``thermostat_mass`` and ``degrees_of_freedom`` at 0 stand for the number of sampled
    scalars ``D``, known only inside the trajectory.
    """

    step_size: Array
    friction: Array
    diffusion: Array
    thermostat_mass: Array
    temperature: Array
    degrees_of_freedom: Array
    metric: EuclideanMetric


def parameters(
    friction: float = 1.0,
    diffusion: float = 0.01,
    thermostat_mass: float | None = None,
    temperature: float = 1.0,
    degrees_of_freedom: float | None = None,
) -> dict[str, Any]:
    """Validated parameters; ``None`` for ``Q`` or ``g`` means the dimension ``D``."""
    values = {
        "friction": check_positive(
            "friction", friction, "Pass the momentum friction B > 0, e.g. friction=1.0."
        ),
        "diffusion": check_positive(
            "diffusion", diffusion, "Pass the thermostat friction A > 0, e.g. diffusion=0.01."
        ),
        "temperature": check_positive(
            "temperature", temperature, "Pass kT > 0; kT = 1 samples the posterior."
        ),
    }
    for name, value, fix in (
        ("thermostat_mass", thermostat_mass, "Pass Q > 0, or None for Q = D."),
        ("degrees_of_freedom", degrees_of_freedom, "Pass g > 0, or None for g = D."),
    ):
        values[name] = 0.0 if value is None else check_positive(name, value, fix)
    return values


def or_dimension(value: Array, position: Array) -> Array:
    """``value``, or the dimension ``D`` where ``value`` is 0 (the "None" default)."""
    xp = namespace(value, position)
    dimension = position.shape[0]
    return xp.where(value > 0, value, dimension) if xp is not np else value or dimension


def thermostat_friction(diffusion: Array, control: Array, thermostat_mass: Array) -> Array:
    """``A s/Q``: eq. 7's friction ``−A ∂H/∂q = −A s q/Q`` on ``q``, as a rate.

    So that ``diffusion`` is the paper's ``A`` (its experiments use 0.01). The rate is
    taken at the step's start.
    """
    return diffusion * control / thermostat_mass


def init(position: Array, normal: Array, params: SGNPHMCParams) -> SGNPHMCState:
    """A chain at ``position`` with ``p̃ ~ N(0, M)``, ``s = 1`` and ``q = 0``."""
    momentum = params.metric.momentum(position, normal)
    zero = np.zeros((), dtype=momentum.dtype)
    return SGNPHMCState(position, momentum, zero + 1.0, zero, zero, np.zeros_like(position))


def refresh(
    state: SGNPHMCState, target: Target, normal: Array, params: SGNPHMCParams
) -> SGNPHMCState:
    """A fresh ``p̃ ~ N(0, M)`` (after the mass changed); ``q`` carries on."""
    return state._replace(momentum=params.metric.momentum(state.position, normal))


def prepare(state: SGNPHMCState, target: Target, params: SGNPHMCParams) -> SGNPHMCState:
    """Each trajectory starts at ``s = 1`` with the gradient at its position.

    ``s`` does not enter the real-time dynamics (the real momentum ``p̃`` is kept), so
    resetting it keeps the step size's meaning from drifting along a long chain.
    """
    return state._replace(control=state.control * 0.0 + 1.0, gradient=target.grad(state.position))


def step(
    state: SGNPHMCState, target: Target, noise: Array, params: SGNPHMCParams
) -> tuple[SGNPHMCState, dict]:
    """One step: Ornstein–Uhlenbeck noise, ``H₀`` on the level set, eq. 7's leapfrog.

    Its info is the step's ``energy_error``: eq. 6 after the step.
    """
    metric = params.metric
    dim = state.position.shape[0]
    thermostat_mass = or_dimension(params.thermostat_mass, state.position)
    degrees = or_dimension(params.degrees_of_freedom, state.position)
    # L̃ at the start on this step's rows: the change of L̃ that drives q then has no
    # minibatch-to-minibatch noise in it.
    core = NosePoincareState(*state)._replace(logp=target.logp(state.position))
    core = ornstein_uhlenbeck_momenta(
        core,
        metric.momentum(state.position, noise[:dim]),
        noise[dim],
        params.step_size,
        params.friction,
        thermostat_friction(params.diffusion, state.control, thermostat_mass),
        thermostat_mass,
        params.temperature,
    )
    inverse = metric.inverse
    reference = level_set_energy(core, inverse, thermostat_mass, degrees, params.temperature)
    new = nose_poincare_step(
        core,
        lambda x: (target.logp(x), target.grad(x)),
        params.step_size,
        inverse,
        thermostat_mass,
        degrees,
        params.temperature,
        reference,
    )
    # Eq. 6 after the step: 0 for the exact flow, the step's energy error otherwise.
    error = nose_poincare_energy(
        new.logp,
        new.momentum,
        new.control,
        new.control_momentum,
        inverse,
        thermostat_mass,
        degrees,
        params.temperature,
        reference,
    )
    return SGNPHMCState(*new), {"energy_error": error}


def stats(state: SGNPHMCState, info: dict, params: SGNPHMCParams) -> dict:
    """Kinetic temperature ``p̃ᵀM⁻¹p̃ / D``, ``s``, ``q`` and the trajectory's energy drift."""
    return {
        "kinetic_temperature": kinetic_temperature(params.metric.inverse, state.momentum)
        * temperature_scale(params.step_size, params),
        "control": state.control,
        "control_momentum": state.control_momentum,
        "energy_drift": info["energy_error"],
    }


def temperature_scale(step_size: Array, params: SGNPHMCParams) -> Array:
    """``1/kT``: the real momentum's law is ``N(0, kT M)``, so ``p̃ᵀM⁻¹p̃ / D`` averages ``kT``.

    SGR-NPHMC shares it (with ``G(θ)`` for ``M``).

    Scaled, the reported kinetic temperature averages 1 at any chosen ``kT`` and its check
    measures a departure from the intended law, not the choice of ``kT``.
    """
    return 1.0 / params.temperature


KERNEL = Kernel(
    name="sgnphmc",
    state_type=SGNPHMCState,
    params_type=SGNPHMCParams,
    init=init,
    refresh=refresh,
    prepare=prepare,
    step=step,
    stats=stats,
    stats_dtypes={
        "kinetic_temperature": (np.float64, []),
        "control": (np.float64, []),
        "control_momentum": (np.float64, []),
        "energy_drift": (np.float64, []),
    },
    step_info={"energy_error": "sum"},
    step_noise_extra=1,
    gradient_at_end=True,
    noise_damping="friction",
    default_step_size=0.2,
    checked_stats=("kinetic_temperature",),
    metric="euclidean",
)
