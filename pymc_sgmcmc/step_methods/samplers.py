"""The baseline stochastic-gradient samplers: SGLD, SGHMC and SGNHT."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.dynamics.common import kinetic_temperature
from pymc_sgmcmc.dynamics.mass import Mass, make_mass
from pymc_sgmcmc.dynamics.sghmc import sghmc_step
from pymc_sgmcmc.dynamics.sgld import sgld_step
from pymc_sgmcmc.dynamics.sgnht import sgnht_step
from pymc_sgmcmc.step_methods.base import StochasticGradientStep, check_positive

_COMMON_PARAMETERS_DOC = """
    Other Parameters
    ----------------
    step_size : float or schedule
        ``ε``: a positive number, or a schedule such as
        :class:`pymc_sgmcmc.PolynomialDecay` (``ε_t = a (b + t)^(−γ)``).
    n_steps : int, default 10
        Integrator steps per draw; one draw costs ``n_steps`` gradients, all run in one
        compiled call.
    minibatch : {"step", "trajectory"}, default "step"
        With ``pm.Minibatch`` data: draw fresh rows for every gradient ("step", the
        seeds' choice, whose gradient noise is independent from step to step as the
        dynamics assume), or one set of rows for the whole trajectory ("trajectory").
        Without ``pm.Minibatch`` every gradient uses the full data.
    vars : list, optional
        Variables to sample; by default all continuous free variables.
    model : pymc.Model, optional
    rng : RandomGenerator, optional
        Replaced by the chain's generator when ``pm.sample`` starts each chain.
    initial_point : dict, optional
        A point of the model, for shapes; the model's initial point by default.
    compile_kwargs : dict, optional
        Passed to ``pytensor.function`` (e.g. ``{"mode": "JAX"}``).
"""


class SGLD(StochasticGradientStep):
    """Stochastic gradient Langevin dynamics.

    ``θ ← θ + ε ∇log p̃(θ) + N(0, 2ε)`` (Bhardwaj, Khatri and Gupta, "Online MCMC based
    Bayesian inference", §2.2, with the noise variance that makes Langevin dynamics
    exact as ``ε → 0``). Each draw is the position after ``n_steps`` such steps.
    """

    __doc__ = (__doc__ or "") + _COMMON_PARAMETERS_DOC
    name = "sgld"

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(vars, step_size=step_size, n_steps=n_steps, **kwargs)

    def _parameters(self) -> dict[str, np.ndarray]:
        return {}

    def _integrator_step(self, state, grad_logp, noise, *, step_size):
        (position,) = state
        return sgld_step(position, grad_logp, noise, step_size)


class HamiltonianStep(StochasticGradientStep):
    """A stochastic-gradient sampler with momentum ``p ~ N(0, M)``."""

    stats_dtypes_shapes: ClassVar[dict] = {
        **StochasticGradientStep.stats_dtypes_shapes,
        "kinetic_temperature": (np.float64, []),
    }

    def __init__(self, vars=None, *, mass=None, **kwargs: Any) -> None:
        self._user_mass = mass
        super().__init__(vars, **kwargs)

    @property
    def mass(self) -> Mass:
        """The mass matrix ``M`` (its inverse and a factor for momentum draws)."""
        if getattr(self, "_mass", None) is None:
            user_mass = self._user_mass(self.dim) if callable(self._user_mass) else self._user_mass
            self._mass = make_mass(user_mass, self.dim, self._dtype)
        return self._mass

    _restart_note: ClassVar[str] = " with fresh momentum"
    momentum_persists: ClassVar[bool] = False
    """Whether the momentum carries over from one draw to the next."""

    def _fresh_auxiliary(self) -> list[np.ndarray]:
        return [self.mass.draw_momentum(self.rng)]

    def _draw_noise(self) -> np.ndarray:
        # Rows ~ N(0, M): the dynamics inject their noise in the metric of the mass.
        z = super()._draw_noise()
        factor = self.mass.factor
        return z @ factor.T if factor.ndim == 2 else z * factor

    def _auxiliary_stats(self, auxiliary: list[np.ndarray]) -> dict[str, Any]:
        return {"kinetic_temperature": float(kinetic_temperature(self.mass.inverse, auxiliary[0]))}


class SGHMC(HamiltonianStep):
    """Stochastic gradient Hamiltonian Monte Carlo with friction.

    Jiang and Huang, "sghmcmc: a Python package for stochastic gradient MCMC",
    Algorithm 2 (Chen, Fox and Guestrin's SGHMC)::

        θ ← θ + ε M⁻¹ r
        r ← r + ε ∇log p̃(θ) − ε C M⁻¹ r + N(0, 2(C − B̂) ε)

    without a Metropolis correction (it would need the full data). With a mass other
    than the identity, friction and noise estimate act in its metric (``C = c M``,
    ``B̂ = b M``: ``r ← r + ε∇log p̃ − εc r + N(0, 2(c − b)εM)``), see
    :mod:`pymc_sgmcmc.dynamics.sghmc`.

    Parameters
    ----------
    friction : float, default 1.0
        ``C > 0``, the friction that absorbs the minibatch gradient noise.
    noise_estimate : float, default 0.0
        ``B̂``, an estimate of the gradient-noise covariance ``ε V/2``;
        ``0 ≤ B̂ ≤ C``. The injected noise has variance ``2(C − B̂)ε``.
    mass : float, array, optional
        ``M``: identity by default; a positive number, a positive vector (diagonal) or
        a positive-definite matrix, in the order of the raveled sampled variables.
    resample_momentum : bool, default True
        Draw ``r ~ N(0, M)`` at the start of every trajectory (Algorithm 2's optional
        step); with False the momentum carries over between draws.
    """

    __doc__ = (__doc__ or "") + _COMMON_PARAMETERS_DOC
    name = "sghmc"

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        friction: float = 1.0,
        noise_estimate: float = 0.0,
        mass=None,
        resample_momentum: bool = True,
        **kwargs: Any,
    ) -> None:
        self.friction = check_positive(
            "friction", friction, "Pass the friction C > 0 of SGHMC, e.g. friction=1.0."
        )
        self.noise_estimate = check_positive(
            "noise_estimate",
            noise_estimate,
            "Pass an estimate B̂ >= 0 of the gradient noise (0 if unknown).",
            allow_zero=True,
        )
        if self.noise_estimate > self.friction:
            raise ValueError(
                f"noise_estimate ({self.noise_estimate}) exceeds friction ({self.friction}): "
                "the injected noise 2(C - B̂)ε would have negative variance. Raise friction "
                "or lower noise_estimate."
            )
        self.resample_momentum = bool(resample_momentum)
        self.momentum_persists = not self.resample_momentum
        super().__init__(vars, step_size=step_size, n_steps=n_steps, mass=mass, **kwargs)

    def _parameters(self) -> dict[str, np.ndarray]:
        return {
            "inv_mass": self.mass.inverse,
            "friction": np.asarray(self.friction, dtype=self._dtype),
            "noise_estimate": np.asarray(self.noise_estimate, dtype=self._dtype),
        }

    def _refresh_auxiliary(self, auxiliary: list[np.ndarray]) -> list[np.ndarray]:
        return self._fresh_auxiliary() if self.resample_momentum else auxiliary

    def _integrator_step(
        self, state, grad_logp, noise, *, step_size, inv_mass, friction, noise_estimate
    ):
        position, momentum = state
        return sghmc_step(
            position,
            momentum,
            grad_logp,
            noise,
            step_size,
            inv_mass,
            friction,
            noise_estimate,
        )


class SGNHT(HamiltonianStep):
    """Stochastic gradient Nosé–Hoover thermostat.

    Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
    Algorithm 2 without the M step (Ding et al.'s SGNHT with a mass matrix)::

        θ ← θ + ε M⁻¹ p
        p ← p − ε ξ M⁻¹ p + ε ∇log p̃(θ) + √(2A) N(0, ε)
        ξ ← ξ + ε (pᵀ M⁻¹ p / D − 1)

    With a mass other than the identity, friction and noise act in its metric
    (``−εξp`` and ``N(0, 2AεM)``), see :mod:`pymc_sgmcmc.dynamics.sgnht`.

    The thermostat ``ξ`` absorbs the unknown gradient noise; momentum and thermostat
    carry over from one draw to the next. A chain starts from ``p ~ N(0, M)`` and
    ``ξ = A``.

    Parameters
    ----------
    diffusion : float, default 1.0
        ``A > 0``, the injected noise intensity.
    mass : float, array, optional
        ``M``, as for :class:`SGHMC`.
    """

    __doc__ = (__doc__ or "") + _COMMON_PARAMETERS_DOC
    name = "sgnht"
    momentum_persists = True

    stats_dtypes_shapes: ClassVar[dict] = {
        **HamiltonianStep.stats_dtypes_shapes,
        "thermostat": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        diffusion: float = 1.0,
        mass=None,
        **kwargs: Any,
    ) -> None:
        self.diffusion = check_positive(
            "diffusion", diffusion, "Pass the diffusion A > 0 of SGNHT, e.g. diffusion=1.0."
        )
        super().__init__(vars, step_size=step_size, n_steps=n_steps, mass=mass, **kwargs)

    def _parameters(self) -> dict[str, np.ndarray]:
        return {
            "inv_mass": self.mass.inverse,
            "diffusion": np.asarray(self.diffusion, dtype=self._dtype),
        }

    def _fresh_auxiliary(self) -> list[np.ndarray]:
        return [self.mass.draw_momentum(self.rng), np.asarray(self.diffusion, dtype=self._dtype)]

    def _auxiliary_stats(self, auxiliary: list[np.ndarray]) -> dict[str, Any]:
        return super()._auxiliary_stats(auxiliary) | {"thermostat": float(auxiliary[1])}

    def _integrator_step(self, state, grad_logp, noise, *, step_size, inv_mass, diffusion):
        position, momentum, thermostat = state
        return sgnht_step(
            position, momentum, thermostat, grad_logp, noise, step_size, inv_mass, diffusion
        )
