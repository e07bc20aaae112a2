"""What happens to a finished trajectory: a Metropolis–Hastings test, or a restart.

A kernel with an energy gets :class:`MetropolisTest` (full-data energies at both ends,
computed in the compiled call); any other gets :class:`DivergenceRestart`, which keeps
the end unless it is not finite or ran away, and then restarts the chain from the
trajectory's start with a fresh state. Protocol, in five lines:

- ``stats_dtypes``: the statistics it adds to every draw;
- ``apply(trajectory, rng) -> Outcome``: the kept state, the gradient there (where known),
  whether the end was finite and whether the trajectory diverged, the acceptance
  probability (1 without a test), the statistics, and whether it kept the end or drew
  a fresh state;
- it draws from the chain's generator only what its decision needs (a uniform for the test,
  a normal vector for a restart's fresh state), after the trajectory's own draws.

:class:`DivergenceLog` counts what either flags as a divergence, warns once, and stops
a chain that keeps diverging.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import numpy as np
from pymc.exceptions import SamplingError
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state

from pymc_sgmcmc.dynamics.hmc import metropolis_log_acceptance
from pymc_sgmcmc.kernels.base import Kernel

MAX_ENERGY_ERROR = 1000.0
"""An energy error above this flags the trajectory as divergent (PyMC's ``Emax``)."""

RUNAWAY_FACTOR = 10.0
"""A trajectory of a kernel without an energy that moves this many times farther than a
stable one can is a divergence (:func:`runaway_trajectory`)."""

METROPOLIS_STATS: dict[str, tuple[Any, list]] = {
    "accept": (np.float64, []),
    "accepted": (bool, []),
    "energy_error": (np.float64, []),
    "model_logp": (np.float64, []),
}
"""Statistics of a sampler whose kernel has an energy (a Metropolis–Hastings test)."""


def runaway_trajectory(
    metric: Any, start: np.ndarray, end: np.ndarray, step_size: float, n_steps: int
) -> bool:
    """Whether a finite trajectory blew up: it moved too far for its step size.

    In the metric's units a stable step moves about ``ε|p| ≈ ε√D`` (a kinetic step) or
    ``√(εD)`` (a Langevin step), so ``n`` steps move at most ``n max(ε, √ε) √D`` up to
    fluctuations. A trajectory that went :data:`RUNAWAY_FACTOR` times farther left the
    region where the step is stable: its end is finite but meaningless (1e14 was seen on a
    hierarchical model, after which every trajectory overflowed). Checking finiteness
    alone keeps such a state; this rejects it as PyMC's ``Emax`` rejects a leapfrog
    trajectory whose energy error exceeds 1000.
    """
    scale = n_steps * max(step_size, math.sqrt(step_size)) * math.sqrt(start.size)
    return metric.whitened_length(end - start) > RUNAWAY_FACTOR * scale


class Trajectory(NamedTuple):
    """A finished trajectory, as a correction sees it.

    Attributes
    ----------
    kernel : Kernel
        The sampler's kernel.
    params : NamedTuple
        Its parameters.
    start : ndarray
        The position the trajectory started from.
    end : NamedTuple
        The kernel's state at its end.
    outputs : list
        The compiled call's outputs.
    index : dict
        Where each output is in ``outputs``, by name.
    gradient : ndarray or None
        The last gradient, where the adapters asked for it.
    step_size : float
        The step size it ran with.
    n_steps : int
        Its integrator steps.
    fresh_state : callable
        ``position -> state``: a new chain's state there (draws a normal vector).
    """

    kernel: Kernel
    params: Any
    start: np.ndarray
    end: Any
    outputs: list[np.ndarray]
    index: dict[str, int]
    gradient: np.ndarray | None
    step_size: float
    n_steps: int
    fresh_state: Callable[[np.ndarray], Any]


class Outcome(NamedTuple):
    """What a correction keeps of a trajectory.

    ``at_end``: the state kept is the trajectory's end (not its start); ``restarted``: it
    is a fresh state.
    """

    state: Any
    gradient: np.ndarray | None
    finite: bool
    diverging: bool
    accept: float
    stats: dict[str, Any]
    at_end: bool = True
    restarted: bool = False


class MetropolisTest:
    """The Metropolis–Hastings test on the full-data energy (kernels with an energy).

    A rejected or non-finite proposal keeps the start (after the kernel's refresh and
    prepare), with its gradient; an energy error above :data:`MAX_ENERGY_ERROR` or a
    non-finite end is a divergence.
    """

    stats_dtypes: ClassVar[dict[str, tuple[Any, list]]] = METROPOLIS_STATS

    def apply(self, trajectory: Trajectory, rng: np.random.Generator) -> Outcome:
        """Accept the end with probability ``min(1, exp(H_start − H_end))``."""
        kernel, end = trajectory.kernel, trajectory.end
        outputs, at = trajectory.outputs, trajectory.index
        start = kernel.state_type(*(outputs[at[f"start.{n}"]] for n in kernel.state_type._fields))
        energy_start = float(outputs[at["energy_start"]])
        energy_end = float(outputs[at["energy_end"]])
        energy_error = energy_end - energy_start
        log_accept = metropolis_log_acceptance(energy_start, energy_end)
        finite = bool(np.isfinite(end.position).all() and all(np.isfinite(a).all() for a in end))
        diverging = not finite or not energy_error < MAX_ENERGY_ERROR
        accepted = finite and np.log(rng.uniform()) < log_accept
        gradient = trajectory.gradient
        if accepted:
            kept, model_logp = end, float(outputs[at["logp_end"]])
        else:
            kept, model_logp = start, float(outputs[at["logp_start"]])
            if gradient is not None:
                gradient = outputs[at["start_gradient"]]
        accept = float(np.exp(log_accept))
        stats = {
            "accept": accept,
            "accepted": bool(accepted),
            "energy_error": energy_error if np.isfinite(energy_error) else np.inf,
            "model_logp": model_logp,
        }
        return Outcome(kept, gradient, finite, diverging, accept, stats, at_end=bool(accepted))


class DivergenceRestart:
    """No test: keep the end, unless it is not finite or ran away (then restart).

    A runaway (:func:`runaway_trajectory`) is judged in the units of a constant metric;
    a kernel without one is judged on finiteness alone.
    """

    stats_dtypes: ClassVar[dict[str, tuple[Any, list]]] = {}

    def apply(self, trajectory: Trajectory, rng: np.random.Generator) -> Outcome:
        """The end, or a fresh state at the start when the trajectory diverged."""
        end = trajectory.end
        # One reduction instead of a pass per array: a sum is finite only if every term
        # is (a finite overflow to inf is a blown-up trajectory all the same).
        total = float(trajectory.outputs[trajectory.index["minibatch_logp"]])
        for field in end:
            total += field.sum()
        finite = math.isfinite(total)
        diverging = not finite or (
            trajectory.kernel.constant_metric
            and runaway_trajectory(
                trajectory.params.metric,
                trajectory.start,
                end.position,
                trajectory.step_size,
                trajectory.n_steps,
            )
        )
        if diverging:
            fresh = trajectory.fresh_state(trajectory.start)
            return Outcome(fresh, None, finite, True, 1.0, {}, at_end=False, restarted=True)
        return Outcome(end, trajectory.gradient, finite, False, 1.0, {})


def correction_for(kernel: Kernel) -> MetropolisTest | DivergenceRestart:
    """The test a kernel with an energy gets, else the restart."""
    return MetropolisTest() if kernel.energy is not None else DivergenceRestart()


@dataclass_state
class DivergenceLogState(DataClassState):
    """A chain's divergences so far."""

    divergences: int
    consecutive: int
    warned: bool


class DivergenceLog(WithSamplingState):
    """A chain's divergences: counted, warned about once, fatal after too many in a row.

    Divergences during tuning with a learned step size are part of tuning (the step
    shrinks), and PyMC's NUTS does not warn about those either.
    """

    _state_class = DivergenceLogState

    max_consecutive: ClassVar[int] = 20
    """Restarts in a row after which the chain gives up with a :class:`SamplingError`."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new chain."""
        self.divergences = self.consecutive = 0
        self.warned = False

    def record(
        self,
        diverging: bool,
        *,
        sampler: str,
        kernel: Kernel,
        iteration: int,
        step_size: float,
        tuning_step_size: bool,
    ) -> None:
        """Count one trajectory; warn (once) or raise about a divergence outside tuning."""
        if not diverging:
            self.consecutive = 0
            return
        self.divergences += 1
        self.consecutive += 1
        if tuning_step_size:
            return
        fresh = " and ".join(kernel.resamples)
        if kernel.energy is not None:
            restart = "the proposal was rejected"
        else:
            restart = "the chain restarted from its last finite state" + (
                f" with a fresh {fresh}" if fresh else ""
            )
        advice = (
            f"{sampler}: the trajectory at iteration {iteration} "
            f"(step_size={step_size:.3g}) turned non-finite or diverged; {restart}. "
            "Reduce step_size (or n_steps), standardise the data, or start nearer the "
            "posterior with initvals="
        )
        if self.consecutive >= self.max_consecutive:
            raise SamplingError(
                f"{advice}. It failed {self.consecutive} times in a row, so "
                "sampling stopped rather than return meaningless draws."
            )
        if not self.warned:
            warnings.warn(advice + ".", RuntimeWarning, stacklevel=2)
            self.warned = True
