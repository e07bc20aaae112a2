"""Geodesic samplers for models with sphere-valued variables: SGGMC and gSGNHT."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pymc.blocking import RaveledVars, StatsType

from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.dynamics.geodesic import gsgnht_step, project_velocity, sggmc_step
from pymc_sgmcmc.step_methods.base import StochasticGradientStep, check_positive
from pymc_sgmcmc.step_methods.model_graph import is_sphere_valued


def sphere_layout(model, vars, point) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices of the sphere rows (``K × d``) and of the unconstrained coordinates.

    The flat position joins ``vars`` raveled in order (as ``pm.sample`` does); a
    sphere-valued variable of shape ``(..., d)`` contributes ``prod(...)`` spheres.
    """
    rows, euclidean = [], []
    offset = 0
    dims = set()
    for var in vars:
        value = np.asarray(point[var.name])
        idx = offset + np.arange(value.size)
        if is_sphere_valued(model, var):
            d = value.shape[-1]
            dims.add(d)
            rows.append(idx.reshape(-1, d))
        else:
            euclidean.append(idx)
        offset += value.size
    if len(dims) > 1:
        raise ValueError(
            f"All sphere-valued variables of one geodesic sampler must share their "
            f"dimension, got {sorted(dims)}. Give each dimension its own sampler: "
            "step=[pmsg.SGGMC(vars=[x3], ...), pmsg.SGGMC(vars=[x10], ...)]."
        )
    sphere_rows = np.concatenate(rows) if rows else np.zeros((0, 2), dtype=np.int64)
    flat = np.concatenate(euclidean) if euclidean else np.zeros(0, dtype=np.int64)
    return sphere_rows.astype(np.int64), flat.astype(np.int64)


class GeodesicStep(StochasticGradientStep):
    """Shared glue of the geodesic samplers: sphere layout, tangent velocity, statistics."""

    supports_spheres: ClassVar[bool] = True
    _restart_note: ClassVar[str] = " with a fresh velocity"
    stats_dtypes_shapes: ClassVar[dict] = {
        **StochasticGradientStep.stats_dtypes_shapes,
        "kinetic_temperature": (np.float64, []),
    }

    def __init__(self, vars=None, **kwargs: Any) -> None:
        self._layout = None
        super().__init__(vars, **kwargs)

    @property
    def layout(self) -> tuple[np.ndarray, np.ndarray]:
        """``(sphere_rows, euclidean)`` flat indices."""
        if self._layout is None:
            self._layout = sphere_layout(self._model, self.vars, self._initial_point)
        return self._layout

    @property
    def manifold_dim(self) -> int:
        """Dimension ``m`` of the manifold: ``d − 1`` per sphere plus the rest."""
        rows, euclidean = self.layout
        return int(rows.shape[0] * (rows.shape[1] - 1) + euclidean.size)

    def _on_spheres(self, position: np.ndarray) -> np.ndarray:
        rows, _ = self.layout
        position = np.array(position, dtype=self._dtype)
        if rows.size:
            x = position[rows]
            norm = np.linalg.norm(x, axis=-1, keepdims=True)
            # A zero vector has no direction: start it at the first basis vector.
            basis = np.zeros_like(x)
            basis[:, 0] = 1.0
            position[rows] = np.where(norm > 0, x / np.where(norm > 0, norm, 1.0), basis)
        return position

    def _fresh_auxiliary(self) -> list[np.ndarray]:
        # Alg. 1: v* ~ N(0, I), v ← Λ(x) v*; projected again at the first trajectory,
        # where the position is known.
        return [self.rng.standard_normal(self.dim).astype(self._dtype)]

    def _layout_parameters(self) -> dict[str, np.ndarray]:
        rows, euclidean = self.layout
        return {"sphere_rows": rows, "euclidean": euclidean}

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """Keep the position on its spheres and the velocity tangent, then step."""
        position = self._on_spheres(q0.data)
        rows, _ = self.layout
        self.auxiliary[0] = project_velocity(position, self.auxiliary[0], rows)
        return super().astep(RaveledVars(position, q0.point_map_info))

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
            **self._layout_parameters(),
        }

    def _integrator_step(
        self,
        state,
        grad_logp,
        noise,
        *,
        step_size,
        friction,
        noise_estimate,
        sphere_rows,
        euclidean,
    ):
        position, velocity = state
        return sggmc_step(
            position,
            velocity,
            grad_logp,
            noise,
            step_size,
            friction,
            noise_estimate,
            sphere_rows,
            euclidean,
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
            "manifold_dim": np.asarray(float(max(self.manifold_dim, 1)), dtype=self._dtype),
            **self._layout_parameters(),
        }

    def _fresh_auxiliary(self) -> list[np.ndarray]:
        return [*super()._fresh_auxiliary(), np.asarray(self.diffusion, dtype=self._dtype)]

    def _auxiliary_stats(self, auxiliary: list[np.ndarray]) -> dict[str, Any]:
        return super()._auxiliary_stats(auxiliary) | {"thermostat": float(auxiliary[1])}

    def _integrator_step(
        self,
        state,
        grad_logp,
        noise,
        *,
        step_size,
        diffusion,
        noise_estimate,
        manifold_dim,
        sphere_rows,
        euclidean,
    ):
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
            sphere_rows,
            euclidean,
            manifold_dim,
        )
