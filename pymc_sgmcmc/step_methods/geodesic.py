"""Geodesic samplers for models with sphere-valued variables: SGGMC and gSGNHT."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pymc.blocking import RaveledVars, StatsType
from pymc.distributions.mixture import MixtureRV

from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.distributions.sphere import SphereUniformRV, VonMisesFisherRV
from pymc_sgmcmc.dynamics.geodesic import gsgnht_step, project_velocity, sggmc_step
from pymc_sgmcmc.manifolds.sphere import SphereLayout
from pymc_sgmcmc.step_methods.base import StochasticGradientStep, check_positive
from pymc_sgmcmc.step_methods.model_graph import is_sphere_valued


def _mixes_sphere_distributions(rv) -> bool:
    """Whether ``rv`` is a ``pm.Mixture`` whose components all lie on spheres."""
    if rv.owner is None or not isinstance(rv.owner.op, MixtureRV):
        return False
    _, _, *components = rv.owner.inputs  # rng, weights, components
    sphere_ops = (VonMisesFisherRV, SphereUniformRV)
    return all(c.owner is not None and isinstance(c.owner.op, sphere_ops) for c in components)


def sphere_layout(model, vars, point, sampler: str = "SGGMC") -> SphereLayout:
    """Where the flat position of ``vars`` holds spheres and where the rest.

    The flat position joins ``vars`` raveled in order (as ``pm.sample`` does); a
    sphere-valued variable of shape ``(..., d)`` contributes ``prod(...)`` spheres.

    Raises
    ------
    ValueError
        For a layout the geodesic samplers cannot move on, naming the variables and the
        fix: spheres of different dimensions in one sampler, a sphere-valued variable
        without an embedding axis of length ``d >= 2``, or a mixture of distributions on
        spheres whose value variable is not on the sphere.
    """
    blocks: list[tuple[int, int | None]] = []
    by_dim: dict[int, list[str]] = {}
    for var in vars:
        value = np.asarray(point[var.name])
        name = model.values_to_rvs[var].name
        if not is_sphere_valued(model, var):
            if _mixes_sphere_distributions(model.values_to_rvs[var]):
                raise ValueError(
                    f"{sampler}: {name!r} mixes distributions on a sphere, but its value "
                    "variable has no sphere transform, so it would move through all of "
                    f"R^{value.shape[-1]}, where its density is not normalised. Leave out "
                    "default_transform= (or pass default_transform="
                    "pmsg.distributions.sphere_transform) in pm.Mixture."
                )
            blocks.append((value.size, None))
            continue
        if value.ndim == 0 or value.shape[-1] < 2:
            raise ValueError(
                f"{sampler}: the sphere-valued variable {name!r} has shape {value.shape}, "
                "but points of a sphere S^(d-1) need a last axis of length d >= 2 (the "
                "embedding dimension). Give it shape (..., d) with d >= 2, or remove the "
                "sphere transform from a variable that is not a direction."
            )
        by_dim.setdefault(value.shape[-1], []).append(name)
        blocks.append((value.size, value.shape[-1]))
    if len(by_dim) > 1:
        found = ", ".join(f"d={d} for {names}" for d, names in sorted(by_dim.items()))
        split = ", ".join(
            f"pmsg.{sampler}(vars=[{', '.join(names)}], ...)" for _, names in sorted(by_dim.items())
        )
        raise ValueError(
            f"{sampler}: all sphere-valued variables of one geodesic sampler must share "
            f"their dimension, got {sorted(by_dim)} ({found}). Give each dimension its "
            f"own sampler: step=[{split}]."
        )
    return SphereLayout.from_blocks(blocks)


class GeodesicStep(StochasticGradientStep):
    """Shared glue of the geodesic samplers: sphere layout, tangent velocity, statistics.

    The layout is fixed when the step method is created (a model it cannot sample is
    refused there) and compiled into the trajectory as constants.
    """

    supports_spheres: ClassVar[bool] = True
    _restart_note: ClassVar[str] = " with a fresh velocity"
    stats_dtypes_shapes: ClassVar[dict] = {
        **StochasticGradientStep.stats_dtypes_shapes,
        "kinetic_temperature": (np.float64, []),
    }

    def __init__(self, vars=None, **kwargs: Any) -> None:
        super().__init__(vars, **kwargs)
        self.layout: SphereLayout = sphere_layout(
            self._model, self.vars, self._initial_point, type(self).__name__
        )
        # Dimension m of the manifold: d − 1 per sphere plus the unconstrained coordinates.
        self.manifold_dim: int = self.layout.manifold_dim
        self._start_on_spheres: tuple[bytes, np.ndarray] | None = None

    def _on_spheres(self, position: np.ndarray) -> np.ndarray:
        """``position`` with every sphere's point scaled to norm one.

        A zero vector has no direction: it starts at the first basis vector.
        """
        position = np.array(position, dtype=self._dtype)
        x, rest = self.layout.split(position)
        if x is None:
            return position
        norm = np.linalg.norm(x, axis=-1, keepdims=True)
        basis = np.zeros_like(x)
        basis[..., 0] = 1.0
        x = np.where(norm > 0, x / np.where(norm > 0, norm, 1.0), basis)
        return self.layout.join(x, rest)

    def _fresh_auxiliary(self) -> list[np.ndarray]:
        # Alg. 1: v* ~ N(0, I), v ← Λ(x) v*; projected in astep, where x is known.
        return [self.rng.standard_normal(self.dim).astype(self._dtype)]

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """Put the position on its spheres and the velocity in its tangent space, then step.

        Every trajectory ends exactly there (each flow retracts), so the work is skipped
        when the chain continues from the last trajectory's end with its velocity.
        """
        position = q0.data
        start = self._start_on_spheres
        if start is None or start[1] is not self.auxiliary[0] or start[0] != position.tobytes():
            position = self._on_spheres(position)
            self.auxiliary[0] = project_velocity(position, self.auxiliary[0], self.layout)
        q, stats = super().astep(RaveledVars(position, q0.point_map_info))
        # A diverging trajectory restarts with a fresh velocity, which is not tangent.
        self._start_on_spheres = (
            None if stats[0]["diverging"] else (q.data.tobytes(), self.auxiliary[0])
        )
        return q, stats

    def _auxiliary_stats(self, auxiliary: list[np.ndarray]) -> dict[str, Any]:
        v = auxiliary[0]
        return {"kinetic_temperature": float(v @ v) / max(self.manifold_dim, 1)}


class SGGMC(GeodesicStep):
    """Stochastic gradient geodesic Monte Carlo.

    Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods", Algorithm 1 (scalar
    ``C``): each of ``n_steps`` steps is A(ε/2) B(ε/2) O(ε) B(ε/2) A(ε/2) with the exact
    geodesic flow on the spheres (A), friction ``v ← e^(−Cε/2) v`` (B) and the projected
    stochastic-gradient kick ``v ← v + Λ(x)[ε∇log π̃ + N(0, 2(C − B̂)ε)]`` (O). Sphere-valued
    variables (``pmsg.VonMisesFisher``, ``pmsg.SphereUniform``) move on their spheres in
    embedded coordinates; other continuous variables follow the same splitting on
    straight lines. The velocity carries over between draws.

    Parameters
    ----------
    step_size : float or schedule
        ``ε``.
    n_steps : int, default 10
        Integrator steps per draw.
    friction : float, default 1.0
        ``C > 0``.
    noise_estimate : float, default 0.0
        ``B̂ = εV/2`` (the slides' ``V`` term), ``0 ≤ B̂ ≤ C``.
    **kwargs
        ``minibatch``, ``vars``, ``model``, ``compile_kwargs`` as for :class:`SGHMC`.
    """

    name = "sggmc"

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        friction: float = 1.0,
        noise_estimate: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.friction = check_positive("friction", friction, "Pass C > 0, e.g. friction=1.0.")
        self.noise_estimate = check_positive(
            "noise_estimate", noise_estimate, "Pass B̂ >= 0 (0 if unknown).", allow_zero=True
        )
        if self.noise_estimate > self.friction:
            raise ValueError(
                f"noise_estimate ({self.noise_estimate}) exceeds friction ({self.friction}): "
                "the injected noise would have negative variance. Raise friction or lower "
                "noise_estimate."
            )
        super().__init__(vars, step_size=step_size, n_steps=n_steps, **kwargs)

    def _parameters(self) -> dict[str, np.ndarray]:
        return {
            "friction": np.asarray(self.friction, dtype=self._dtype),
            "noise_estimate": np.asarray(self.noise_estimate, dtype=self._dtype),
        }

    def _integrator_step(self, state, grad_logp, noise, *, step_size, friction, noise_estimate):
        position, velocity = state
        return sggmc_step(
            position,
            velocity,
            grad_logp,
            noise,
            step_size,
            friction,
            noise_estimate,
            self.layout,
        )


class GSGNHT(GeodesicStep):
    """Geodesic stochastic gradient Nosé–Hoover thermostat.

    Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods", Algorithm 2 (scalar
    ``C``): SGGMC's ABOBO splitting with the friction replaced by a thermostat ``ξ`` that
    follows ``ξ ← ξ + (vᵀv/m − 1) ε/2`` at each half flow. ``C`` (``diffusion``) sets the
    injected noise and the thermostat's start, ``ξ = C``.

    Parameters
    ----------
    step_size : float or schedule
        ``ε``.
    n_steps : int, default 10
        Integrator steps per draw.
    diffusion : float, default 1.0
        ``C > 0``.
    noise_estimate : float, default 0.0
        ``B̂ = εV/2``, ``0 ≤ B̂ ≤ C``.
    **kwargs
        ``minibatch``, ``vars``, ``model``, ``compile_kwargs`` as for :class:`SGHMC`.
    """

    name = "gsgnht"
    stats_dtypes_shapes: ClassVar[dict] = {
        **GeodesicStep.stats_dtypes_shapes,
        "thermostat": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        diffusion: float = 1.0,
        noise_estimate: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.diffusion = check_positive("diffusion", diffusion, "Pass C > 0, e.g. diffusion=1.0.")
        self.noise_estimate = check_positive(
            "noise_estimate", noise_estimate, "Pass B̂ >= 0 (0 if unknown).", allow_zero=True
        )
        if self.noise_estimate > self.diffusion:
            raise ValueError(
                f"noise_estimate ({self.noise_estimate}) exceeds diffusion ({self.diffusion}): "
                "the injected noise would have negative variance."
            )
        super().__init__(vars, step_size=step_size, n_steps=n_steps, **kwargs)

    def _parameters(self) -> dict[str, np.ndarray]:
        return {
            "diffusion": np.asarray(self.diffusion, dtype=self._dtype),
            "noise_estimate": np.asarray(self.noise_estimate, dtype=self._dtype),
        }

    def _fresh_auxiliary(self) -> list[np.ndarray]:
        return [*super()._fresh_auxiliary(), np.asarray(self.diffusion, dtype=self._dtype)]

    def _auxiliary_stats(self, auxiliary: list[np.ndarray]) -> dict[str, Any]:
        return super()._auxiliary_stats(auxiliary) | {"thermostat": float(auxiliary[1])}

    def _integrator_step(self, state, grad_logp, noise, *, step_size, diffusion, noise_estimate):
        position, velocity, thermostat = state
        return gsgnht_step(
            position,
            velocity,
            thermostat,
            grad_logp,
            noise,
            step_size,
            diffusion,
            noise_estimate,
            self.layout,
        )
