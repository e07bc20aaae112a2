"""One chain's progress: what a step method carries from one draw to the next.

The step method holds what is fixed for every chain it runs (the kernel, the compiled
trajectory, the estimator, the correction); a :class:`Chain` holds what one chain
changes as it goes, and PyMC's ``sampling_state`` saves and restores it whole.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state

from pymc_sgmcmc.gradients.estimators import ChainEstimator
from pymc_sgmcmc.sampling.chain_checks import chain_check_messages
from pymc_sgmcmc.sampling.corrections import DivergenceLog


@dataclass_state
class ChainState(DataClassState):
    """What a chain needs to resume exactly where it stopped (its adapters aside)."""

    iteration: int
    tune: bool
    kernel_state: Any
    refresh_pending: bool
    position_gradient: Any
    divergence_log: Any
    estimator: Any
    draw_stats: dict


class Chain(WithSamplingState):
    """One chain of a step method, from ``setup_chain`` to its last draw.

    Parameters
    ----------
    estimator : ChainEstimator
        The chain's gradient estimator (its anchor, tuning windows and noise record).
    tune_iterations, draw_iterations : int
        Lengths of the chain's two phases.
    stat_names : iterable of str
        The statistics checked when the chain ends
        (:func:`~pymc_sgmcmc.sampling.chain_checks.chain_check_messages`).

    Attributes
    ----------
    iteration : int
        Draws made so far, tuning included.
    tune : bool
        Whether the chain is still tuning.
    kernel_state : NamedTuple or None
        The kernel's state at the last draw; ``None`` until the chain's first position.
    refresh_pending : bool
        The next trajectory starts with the kernel's ``refresh`` (a new metric, a fresh
        state whose momentum the refresh draws).
    position_gradient : ndarray or None
        The gradient at the last draw, where the trajectory recorded it.
    divergence_log : DivergenceLog
        The chain's divergences.
    draw_stats : dict of list
        The checked statistics of every draw after tuning.
    """

    _state_class = ChainState

    def __init__(
        self,
        estimator: ChainEstimator,
        tune_iterations: int,
        draw_iterations: int,
        stat_names: Any,
    ) -> None:
        self.estimator = estimator
        self.tune_iterations, self.draw_iterations = tune_iterations, draw_iterations
        self.iteration = 0
        self.tune = True
        self.kernel_state: Any = None
        self.refresh_pending = False
        self.position_gradient: np.ndarray | None = None
        self.divergence_log = DivergenceLog()
        self.draw_stats: dict[str, list[float]] = {name: [] for name in stat_names}

    def record_draw(self, stats: dict[str, Any], sampler: str) -> None:
        """Keep a draw's checked statistics; at the chain's last draw, warn on them."""
        for name, values in self.draw_stats.items():
            if name in stats:
                values.append(float(stats[name]))
        if self.iteration == self.tune_iterations + self.draw_iterations:
            for message in chain_check_messages(sampler, self.draw_stats):
                # Past astep: PyMC's step, whose caller is its sampling loop.
                warnings.warn(message, RuntimeWarning, stacklevel=3)
