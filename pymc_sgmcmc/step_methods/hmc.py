"""Hamiltonian Monte Carlo with a full-data Metropolis–Hastings test."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pymc.blocking import RaveledVars, StatsType
from pymc.model import modelcontext
from pytensor.graph.replace import clone_replace

from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.dynamics.common import kinetic_energy
from pymc_sgmcmc.dynamics.hmc import leapfrog_step, metropolis_log_acceptance
from pymc_sgmcmc.step_methods.model_graph import full_data_logp
from pymc_sgmcmc.step_methods.samplers import HamiltonianStep

MAX_ENERGY_ERROR = 1000.0
"""An energy error above this flags the trajectory as divergent (PyMC's ``Emax``)."""


class HMC(HamiltonianStep):
    """Hamiltonian Monte Carlo with a fixed mass.

    Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
    Algorithm 1 without its M step: ``p ~ N(0, M)``, ``n_steps`` leapfrog steps, then a
    Metropolis–Hastings test on ``H(θ, p) = −L(θ) + pᵀM⁻¹p/2`` with the **full-data** log
    density, also when the model's gradient is minibatched (then the leapfrog steps use
    minibatch gradients and the test corrects for them, at the cost of a pass over the
    data per draw).

    Parameters
    ----------
    mass : float, array, optional
        ``M``: identity by default; a positive number, a positive vector (diagonal) or a
        positive-definite matrix, in the order of the raveled sampled variables.
    step_jitter : float, default 0.15
        Each trajectory's step size is drawn uniformly from
        ``step_size × [1 − step_jitter, 1 + step_jitter]``, as PyMC's own HMC does. A
        fixed trajectory length can resonate with the target (on a Gaussian whitened by
        a learned mass every direction has one period, and a trajectory of exactly one
        period returns to its start); the jitter breaks that. ``0`` turns it off.
    """

    name = "hmc"

    stats_dtypes_shapes: ClassVar[dict] = {
        **HamiltonianStep.stats_dtypes_shapes,
        "accept": (np.float64, []),
        "accepted": (bool, []),
        "energy_error": (np.float64, []),
        "model_logp": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        mass=None,
        step_jitter: float = 0.15,
        **kwargs: Any,
    ) -> None:
        if isinstance(step_jitter, bool) or not (
            isinstance(step_jitter, int | float) and 0.0 <= step_jitter < 1.0
        ):
            raise ValueError(
                f"step_jitter must lie in [0, 1) (the relative spread of the step size), "
                f"got {step_jitter!r}. PyMC's HMC uses 0.15; 0 turns the jitter off."
            )
        self.step_jitter = float(step_jitter)
        super().__init__(vars, step_size=step_size, n_steps=n_steps, mass=mass, **kwargs)
        self._zero_noise = np.zeros((self.n_steps, self.dim), dtype=self._dtype)

    def _parameters(self) -> dict[str, np.ndarray]:
        return {"inv_mass": self.mass.inverse}

    @staticmethod
    def _prepare_trajectory(position, auxiliary, grad_logp):
        # Leapfrog carries the gradient at the current position from step to step.
        (momentum,) = auxiliary
        return [momentum, grad_logp(position)]

    def _integrator_step(self, state, grad_logp, noise, *, step_size, inv_mass):
        position, momentum, gradient = state
        return leapfrog_step(position, momentum, gradient, grad_logp, step_size, inv_mass)

    def _extra_outputs(self, inputs, outputs) -> list:
        model = modelcontext(self._model)
        exact = full_data_logp(model, self._flat, self.vars, self._initial_point)
        start, end = inputs.state[0], outputs[0]
        return [
            clone_replace(exact, {self._flat.position: start}),
            clone_replace(exact, {self._flat.position: end}),
        ]

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """One HMC iteration: fresh momentum, leapfrog trajectory, full-data MH test."""
        step_size = self.schedule(self.iteration)
        if self.step_jitter:
            step_size *= self.rng.uniform(1.0 - self.step_jitter, 1.0 + self.step_jitter)
        inv_mass = self.mass.inverse
        momentum = self.mass.draw_momentum(self.rng)
        (
            end,
            end_momentum,
            end_gradient,
            minibatch_logp,
            start_gradient,
            logp_start,
            logp_end,
        ) = self.trajectory_function(
            q0.data,
            momentum,
            np.asarray(step_size, dtype=self._dtype),
            inv_mass,
            self._zero_noise,
            *self._draw_indices(),
        )
        self.iteration += 1
        energy_start = -logp_start + kinetic_energy(inv_mass, momentum)
        energy_end = -logp_end + kinetic_energy(inv_mass, end_momentum)
        energy_error = float(energy_end - energy_start)
        log_accept = metropolis_log_acceptance(float(energy_start), float(energy_end))
        finite = bool(np.all(np.isfinite(end)) and np.all(np.isfinite(end_momentum)))
        diverging = not finite or not energy_error < MAX_ENERGY_ERROR
        accepted = finite and np.log(self.rng.uniform()) < log_accept
        if accepted:
            position, self.auxiliary, model_logp = end, [end_momentum], float(logp_end)
            self.position_gradient = end_gradient
        else:
            position, self.auxiliary, model_logp = q0.data, [momentum], float(logp_start)
            self.position_gradient = start_gradient
        if diverging:
            self._record_divergence(step_size)
        else:
            self.consecutive_divergences = 0
        stats = {
            "step_size": step_size,
            "n_steps": self.n_steps,
            "minibatch_logp": float(minibatch_logp) if finite else np.nan,
            "diverging": diverging,
            "divergences": self.divergences,
            "accept": float(np.exp(log_accept)),
            "accepted": bool(accepted),
            "energy_error": energy_error if np.isfinite(energy_error) else np.inf,
            "model_logp": model_logp,
        }
        stats.update(self._auxiliary_stats(self.auxiliary))
        return RaveledVars(position, q0.point_map_info), [stats]
