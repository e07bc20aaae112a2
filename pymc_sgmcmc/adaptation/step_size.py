"""The step-size adapter: a schedule, optionally jittered from trajectory to trajectory."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext
from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule, as_schedule
from pymc_sgmcmc.validation import check_in_range


@dataclass_state
class StepSizeState(DataClassState):
    """A schedule carries no per-chain state (an adapted step size will)."""


class StepSizeAdapter(Adapter):
    """The step size of each iteration: ``schedule(t)``, times a uniform jitter.

    Parameters
    ----------
    step_size : float or schedule
        A positive number, or a schedule such as :class:`pymc_sgmcmc.PolynomialDecay`.
    jitter : float
        Each trajectory's step size is drawn uniformly from
        ``schedule(t) × [1 − jitter, 1 + jitter]``; ``0`` turns the jitter off.
    """

    _state_class: ClassVar[type[DataClassState]] = StepSizeState

    def __init__(self, step_size: float | StepSizeSchedule, jitter: float = 0.0) -> None:
        self.schedule = as_schedule(step_size)
        self.jitter = check_in_range(
            "step_jitter",
            jitter,
            0.0,
            1.0,
            "It is the relative spread of the step size; PyMC's HMC uses 0.15, 0 turns "
            "the jitter off.",
        )

    def init_chain(self, chain: ChainContext) -> None:
        """Nothing to reset: the schedule is a function of the iteration."""

    def nominal(self, iteration: int) -> float:
        """The schedule's step size at ``iteration``, without jitter."""
        return float(self.schedule(iteration))

    def current(self, iteration: int, rng: np.random.Generator) -> float:
        """The step size of the trajectory at ``iteration`` (jittered, if asked)."""
        step_size = self.nominal(iteration)
        if self.jitter:
            step_size *= rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return step_size
