"""Kernels of the geodesic samplers on spheres: SGGMC and gSGNHT.

Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods", Algorithms 1 and 2; the
update rules are :func:`pymc_sgmcmc.dynamics.geodesic.sggmc_step` and
:func:`~pymc_sgmcmc.dynamics.geodesic.gsgnht_step`. The parameters carry the
:class:`~pymc_sgmcmc.manifolds.sphere.SphereLayout` of the sampled variables (static:
compiled into the trajectory). Each trajectory starts with the point on its spheres and the
velocity in their tangent spaces (:func:`prepare`): the flows keep them there, and a point
moved in between (by the user, a restart) is put back. The velocity carries over between
draws.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.core.validation import friction_and_noise
from pymc_sgmcmc.dynamics import geodesic as rules
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.manifolds.sphere import SphereLayout


class SGGMCState(NamedTuple):
    """SGGMC's state: position ``x`` and tangent velocity ``v``."""

    position: Array
    velocity: Array


class SGGMCParams(NamedTuple):
    """SGGMC's parameters: ``ε``, friction ``C``, noise estimate ``B̂`` and the layout."""

    step_size: Array
    friction: Array
    noise_estimate: Array
    layout: SphereLayout


class GSGNHTState(NamedTuple):
    """gSGNHT's state: position ``x``, tangent velocity ``v`` and thermostat ``ξ``."""

    position: Array
    velocity: Array
    thermostat: Array


class GSGNHTParams(NamedTuple):
    """gSGNHT's parameters: ``ε``, diffusion ``C``, noise estimate ``B̂`` and the layout."""

    step_size: Array
    diffusion: Array
    noise_estimate: Array
    layout: SphereLayout


def sggmc_parameters(friction: float = 1.0, noise_estimate: float = 0.0) -> dict:
    """Validated ``friction`` (``C > 0``) and ``noise_estimate`` (``0 ≤ B̂ ≤ C``)."""
    friction, noise_estimate = friction_and_noise(
        "friction", friction, noise_estimate, "Pass C > 0, e.g. friction=1.0."
    )
    return {"friction": friction, "noise_estimate": noise_estimate}


def gsgnht_parameters(diffusion: float = 1.0, noise_estimate: float = 0.0) -> dict:
    """Validated ``diffusion`` (``C > 0``) and ``noise_estimate`` (``0 ≤ B̂ ≤ C``)."""
    diffusion, noise_estimate = friction_and_noise(
        "diffusion", diffusion, noise_estimate, "Pass C > 0, e.g. diffusion=1.0."
    )
    return {"diffusion": diffusion, "noise_estimate": noise_estimate}


def prepare(state, target: Target, params):
    """The point on its spheres and the velocity tangent there (Alg. 1: ``v ← Λ(x) v``)."""
    position = rules.onto_spheres(state.position, params.layout)
    velocity = rules.project_velocity(position, state.velocity, params.layout)
    return state._replace(position=position, velocity=velocity)


def kinetic_temperature(velocity: Array, layout: SphereLayout) -> Array:
    """``vᵀv / m`` with ``m`` the manifold's dimension (1 on average at equilibrium)."""
    return (velocity * velocity).sum() / max(layout.manifold_dim, 1)


def sggmc_init(position: Array, normal: Array, params: SGGMCParams) -> SGGMCState:
    """Alg. 1: ``v ~ N(0, I)``, projected onto the tangent space by :func:`prepare`."""
    return SGGMCState(position, normal)


def sggmc_step(state: SGGMCState, target: Target, noise: Array, params: SGGMCParams):
    """One A B O B A step (Alg. 1)."""
    return SGGMCState(
        *rules.sggmc_step(
            state.position,
            state.velocity,
            target.grad,
            noise,
            params.step_size,
            params.friction,
            params.noise_estimate,
            params.layout,
        )
    )


def sggmc_stats(state: SGGMCState, info: dict, params: SGGMCParams) -> dict:
    """The kinetic temperature of the velocity."""
    return {"kinetic_temperature": kinetic_temperature(state.velocity, params.layout)}


def gsgnht_init(position: Array, normal: Array, params: GSGNHTParams) -> GSGNHTState:
    """Alg. 2: ``v ~ N(0, I)`` (projected by :func:`prepare`) and ``ξ = C``."""
    return GSGNHTState(position, normal, np.array(params.diffusion, dtype=normal.dtype))


def gsgnht_step(state: GSGNHTState, target: Target, noise: Array, params: GSGNHTParams):
    """One step of Alg. 2: SGGMC's splitting with the thermostat as friction."""
    return GSGNHTState(
        *rules.gsgnht_step(
            state.position,
            state.velocity,
            state.thermostat,
            target.grad,
            noise,
            params.step_size,
            params.diffusion,
            params.noise_estimate,
            params.layout,
        )
    )


def gsgnht_stats(state: GSGNHTState, info: dict, params: GSGNHTParams) -> dict:
    """The kinetic temperature of the velocity and the thermostat ``ξ``."""
    return {
        "kinetic_temperature": kinetic_temperature(state.velocity, params.layout),
        "thermostat": state.thermostat,
    }


SGGMC = Kernel(
    name="sggmc",
    state_type=SGGMCState,
    params_type=SGGMCParams,
    init=sggmc_init,
    prepare=prepare,
    step=sggmc_step,
    stats=sggmc_stats,
    stats_dtypes={"kinetic_temperature": (np.float64, [])},
    checked_stats=("kinetic_temperature",),
    supports_spheres=True,
)

GSGNHT = Kernel(
    name="gsgnht",
    state_type=GSGNHTState,
    params_type=GSGNHTParams,
    init=gsgnht_init,
    prepare=prepare,
    step=gsgnht_step,
    stats=gsgnht_stats,
    stats_dtypes={"kinetic_temperature": (np.float64, []), "thermostat": (np.float64, [])},
    checked_stats=("kinetic_temperature", "thermostat"),
    supports_spheres=True,
)
