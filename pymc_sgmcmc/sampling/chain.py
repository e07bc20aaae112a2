"""One chain: what it carries from one draw to the next, and how it makes a draw.

The step method holds what is fixed for every chain it runs and hands it to each chain
as one :class:`ChainParts` value (the kernel, the compiled trajectory, the correction,
the adapters' loop, the groups); a :class:`Chain` holds what one chain changes as it goes,
which PyMC's ``sampling_state`` saves and restores whole, and makes one draw
(:meth:`Chain.advance`) from those parts.

After tuning, where the step's trajectory is a scan over draws, a chain computes a
:class:`Block` of draws in one compiled call and hands them out one per ``astep``. It
draws each one's randomness from the chain's generator in the order single draws would,
and keeps the generator's state before each, so a block cut short (a divergence, a point
changed from outside) leaves the generator where single draws would have: the same seed
gives the same draws whatever the block's length.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state

from pymc_sgmcmc.adaptation.base import ChainContext
from pymc_sgmcmc.gradients.estimators import NOISE_PROBES_AT_START, ChainEstimator
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.sampling.chain_checks import anchor_distance, chain_check_messages
from pymc_sgmcmc.sampling.corrections import DivergenceLog, DivergenceRestart, MetropolisTest
from pymc_sgmcmc.sampling.statistics import checked_stats, trajectory_stats
from pymc_sgmcmc.sampling.step_trajectory import StepTrajectory
from pymc_sgmcmc.sampling.tuning import Tuning


class ChainParts(NamedTuple):
    """What a step method hands each of its chains: fixed while a chain runs."""

    kernel: Kernel
    trajectory: StepTrajectory
    """The compiled trajectory and its arguments."""
    correction: MetropolisTest | DivergenceRestart
    """What keeps or restarts a trajectory's end."""
    tuning: Tuning
    """The adapters, and the kernel's current parameters."""
    groups: Any
    """Minibatches of whole groups (:class:`~pymc_sgmcmc.sampling.whole_groups.WholeGroups`),
    or None."""
    start: Callable[..., np.ndarray]
    """``start(position, rng=)``: where a chain starts
    (:func:`~pymc_sgmcmc.sampling.startup.chain_start` with the step's options)."""
    refresh_every_trajectory: bool
    minibatched: bool
    """Whether the model has ``pm.Minibatch`` data (else no gradient noise to report)."""
    sampler: str
    dim: int
    dtype: Any
    draws_per_call: int = 1
    """The longest :class:`Block` after tuning (1: a compiled call per draw)."""


@dataclass
class Block:
    """Draws computed ahead in one compiled call, handed out one at a time.

    Attributes
    ----------
    outputs : list of ndarray
        The compiled call's outputs, one entry per draw on the leading axis.
    start : ndarray
        The position the first draw started from.
    ends : ndarray
        Each draw's end position (the next one's start), one row per draw.
    step_sizes : list of float
        Each draw's step size.
    generator_states : list of dict
        The chain generator's state before each draw's randomness, and after the last.
    params : NamedTuple
        The kernel's parameters of every draw.
    served : int
        Draws handed out so far.
    """

    outputs: list[np.ndarray]
    start: np.ndarray
    ends: np.ndarray
    step_sizes: list[float]
    generator_states: list[dict]
    params: Any
    served: int = 0

    def __len__(self) -> int:
        return len(self.step_sizes)


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
    parts : ChainParts
        What the step method hands its chains.
    estimator : ChainEstimator
        The chain's gradient estimator (its anchor, tuning windows and noise record).
    n_rows : list of int
        Rows of the data behind each ``pm.Minibatch`` call.
    tune_iterations, draw_iterations : int
        Lengths of the chain's two phases.

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
        parts: ChainParts,
        estimator: ChainEstimator,
        n_rows: list[int],
        tune_iterations: int,
        draw_iterations: int,
    ) -> None:
        self.parts, self.estimator, self.n_rows = parts, estimator, n_rows
        self.tune_iterations, self.draw_iterations = tune_iterations, draw_iterations
        self.iteration = 0
        self.tune = True
        self.kernel_state: Any = None
        self.refresh_pending = False
        self.position_gradient: np.ndarray | None = None
        self.divergence_log = DivergenceLog()
        # Checked when the chain ends (chain_checks.chain_check_messages).
        self.draw_stats: dict[str, list[float]] = {name: [] for name in checked_stats(parts.kernel)}
        self._context: ChainContext | None = None
        self.block: Block | None = None
        """Draws computed ahead and not yet handed out (not part of the saved state)."""
        self.blocks_off = False
        """Set when the point was changed from outside: single draws from then on."""

    def record_draw(self, stats: dict[str, Any], sampler: str) -> None:
        """Keep a draw's checked statistics; at the chain's last draw, warn on them."""
        for name, values in self.draw_stats.items():
            if name in stats:
                values.append(float(stats[name]))
        if self.iteration == self.tune_iterations + self.draw_iterations:
            for message in chain_check_messages(sampler, self.draw_stats):
                # Past astep: PyMC's step, whose caller is its sampling loop.
                warnings.warn(message, RuntimeWarning, stacklevel=3)

    def context(self, rng: np.random.Generator) -> ChainContext:
        """What the adapters may know of the chain (kept while ``rng`` is the same)."""
        # Built at every iteration it cost a microsecond.
        if self._context is None or self._context.rng is not rng:
            parts = self.parts
            self._context = ChainContext(
                rng, parts.dim, parts.dtype, parts.sampler, self.tune_iterations
            )
        return self._context

    def fresh_state(self, position: np.ndarray, rng: np.random.Generator) -> Any:
        """A new kernel state at ``position`` (its momentum drawn from ``rng``)."""
        parts = self.parts
        momentum = rng.standard_normal(parts.dim).astype(parts.dtype, copy=False)
        return parts.kernel.init(position, momentum, parts.tuning.params)

    def noise_variance(
        self, position: np.ndarray, rng: np.random.Generator, metric: Any = None
    ) -> np.ndarray:
        """One measurement of the gradient estimate's whitened variance at ``position``.

        By the chain's estimator at its anchor, in the current metric unless ``metric``
        is given, on rows drawn from ``rng``.
        """
        if metric is None:
            params, kernel = self.parts.tuning.params, self.parts.kernel
            metric = params.metric
            if kernel.noise_whitening is not None:
                metric = kernel.noise_whitening(params, position, self.kernel_state)
        return self.estimator.noise_variance(position, rng, self.n_rows, metric)

    def inputs(self, position: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
        """What a trajectory from ``position`` takes from the chain (a fresh state at first).

        The keyword arguments of
        :meth:`~pymc_sgmcmc.sampling.step_trajectory.StepTrajectory.arguments` besides
        the parameters, the position and the step size.
        """
        parts = self.parts
        if self.kernel_state is None:
            self.kernel_state = self.fresh_state(position, rng)
            self.refresh_pending = parts.kernel.refresh_first
        return dict(
            state_fields=self.kernel_state[1:],
            refresh=parts.refresh_every_trajectory or self.refresh_pending,
            rng=rng, n_rows=self.n_rows, estimator=self.estimator, groups=parts.groups,
        )  # fmt: skip

    def block_length(self) -> int:
        """Draws the next compiled call may make: up to the next event that needs Python.

        One during tuning (the adapters learn from every draw), and before a noise probe,
        an anchor's move or the chain's end, which a block does not cross.
        """
        parts = self.parts
        if self.tune or self.blocks_off or not parts.trajectory.blocks:
            return 1
        remaining = self.tune_iterations + self.draw_iterations - self.iteration
        length = max(1, min(parts.draws_per_call, remaining))
        for ahead in range(1, length):
            if self.estimator.event_due(self.iteration + ahead):
                return ahead
        return length

    def _compute_block(self, position: np.ndarray, rng: np.random.Generator, length: int) -> Block:
        """``length`` draws from ``position`` in one call, randomness as single draws take it."""
        parts = self.parts
        tuning, states = parts.tuning, [rng.bit_generator.state]
        draws, step_sizes = [], []
        for ahead in range(length):
            step_sizes.append(tuning.step_size_adapter.current(self.iteration + ahead, rng))
            if ahead == 0:
                inputs = self.inputs(position, rng)
            else:  # a kept draw leaves no refresh pending
                inputs["refresh"] = parts.refresh_every_trajectory
            draws.append(
                parts.trajectory.arguments(
                    tuning.params, position, step_size=step_sizes[-1], **inputs
                )
            )
            states.append(rng.bit_generator.state)
        outputs = parts.trajectory.run_block(draws)
        ends = outputs[parts.trajectory.compiled(tuning.params).index["position"]]
        return Block(outputs, position, ends, step_sizes, states, tuning.params)

    def _restart_in_block(
        self, block: Block, served: int, rng: np.random.Generator, position: np.ndarray
    ) -> Any:
        """A fresh state after the block's draw ``served`` diverged.

        The generator goes back to where that draw's randomness ended, as if the later
        draws of the block had never been drawn.
        """
        rng.bit_generator.state = block.generator_states[served + 1]
        return self.fresh_state(position, rng)

    def drop_block(self, rng: np.random.Generator | None) -> None:
        """Forget the draws computed ahead; ``rng`` goes back to before the next one's."""
        if self.block is not None and rng is not None:
            rng.bit_generator.state = self.block.generator_states[self.block.served]
        self.block = None

    def _next_trajectory(self, position: np.ndarray, rng: np.random.Generator):
        """The trajectory of this draw and its step size: from a block, or computed now."""
        parts = self.parts
        block = self.block
        if block is None:
            # In this order: the chain's start (at its first draw), the estimator's
            # anchor and noise probe, then one draw or a block of them.
            tuning = parts.tuning
            if self.iteration == 0 and self.kernel_state is None:
                position = parts.start(position, rng=rng)
            self.estimator.before_trajectory(position, self.iteration)
            if self.estimator.probe_due(self.iteration, self.tune):
                probes = NOISE_PROBES_AT_START if self.iteration == 0 else 1
                tuning.probe_noise(self, position, probes, rng)
            length = self.block_length()
            if length == 1:
                step_size = tuning.step_size_adapter.current(self.iteration, rng)
                trajectory = parts.trajectory.run(
                    tuning.params, position, step_size=step_size,
                    fresh_state=partial(self.fresh_state, rng=rng), **self.inputs(position, rng),
                )  # fmt: skip
                return trajectory, step_size
            block = self.block = self._compute_block(position, rng, length)
        served = block.served
        block.served += 1
        if block.served == len(block):
            self.block = None
        start = block.start if served == 0 else block.ends[served - 1]
        step_size = block.step_sizes[served]
        trajectory = parts.trajectory.trajectory(
            block.params, start, [out[served] for out in block.outputs], step_size,
            partial(self._restart_in_block, block, served, rng),
        )  # fmt: skip
        return trajectory, step_size

    def advance(
        self, position: np.ndarray, rng: np.random.Generator, *, continued: bool = True
    ) -> tuple[np.ndarray, dict]:
        """One draw from ``position``: its kept position and its statistics.

        In this order: the chain's start (at its first draw), the estimator's anchor and
        noise probe, the step size, one compiled trajectory (or the next draw of a
        block), the correction, the groups' exact moves, the divergence record, the
        statistics, the adapters. ``continued``: ``position`` is the chain's last draw
        (else a block computed ahead is dropped, and no more are computed).
        """
        parts = self.parts
        kernel, tuning = parts.kernel, parts.tuning
        if not continued and self.block is not None:
            # Another sampler (a CompoundStep) or the user moved the point: the draws
            # computed ahead no longer follow from it.
            self.drop_block(rng)
            self.blocks_off = True
        trajectory, step_size = self._next_trajectory(position, rng)
        self.iteration += 1
        kept = parts.correction.apply(trajectory, rng)
        self.estimator.after_trajectory(kept.state.position)
        if kept.restarted:
            self.block = None  # its later draws continued from the divergent end
        # A fresh state's momentum may be the first trajectory's to draw.
        self.refresh_pending = kept.restarted and kernel.refresh_first
        if parts.groups is not None and kept.finite and not kept.diverging:
            moved = parts.groups.after_trajectory(
                kept.state.position, rng, tune=self.tune, iteration=self.iteration - 1,
                inverse_mass=tuning.params.metric.inverse, tune_iterations=self.tune_iterations,
            )  # fmt: skip
            # The gradient there is the old position's: the adapters that asked get none.
            kept = kept._replace(state=kept.state._replace(position=moved), gradient=None)
        self.divergence_log.record(
            kept.diverging, sampler=parts.sampler, kernel=kernel, iteration=self.iteration,
            step_size=step_size,
            # Part of tuning: the step size shrinks (dual averaging, or halving).
            tuning_step_size=self.tune and tuning.step_size_adapter.learns,
        )  # fmt: skip
        self.kernel_state, self.position_gradient = kept.state, kept.gradient
        stats = trajectory_stats(trajectory, kept, self.divergence_log.divergences)
        if kernel.measures_noise:
            ratio = self.estimator.noise.ratio(step_size, tuning.damping)
            stats["gradient_noise"] = ratio if parts.minibatched else 0.0
            anchor = self.estimator.anchor
            stats["anchor_distance"] = anchor_distance(
                kept.state.position, None if anchor is None else anchor.position,
                tuning.posterior_sd,
            )  # fmt: skip
        if self.tune:
            at = None if kept.diverging else kept.state.position
            self.estimator.follow_tuning(
                at, self.iteration - 1, parts.dtype, posterior_sd=tuning.posterior_sd
            )
        tuning.after_iteration(
            self, self.context(rng), kept.state, kept.gradient, diverging=kept.diverging,
            accept=kept.accept,
        )  # fmt: skip
        stats.update(tuning.stats())
        if not self.tune:
            self.record_draw(stats, parts.sampler)
        return kept.state.position, stats
