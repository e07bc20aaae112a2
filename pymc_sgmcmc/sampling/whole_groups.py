"""What a step does for a hierarchical model: minibatches of whole groups and exact moves.

:func:`~pymc_sgmcmc.sampling.groups.group_minibatches` finds the model's groups; this part
runs them inside a chain (docs/hierarchical.md). Protocol, in five lines:

- ``inputs(dtype)``: the trajectory's group constants (weights ``J/K``, rows per group) by
  compiled input name; ``draw(rng, n_minibatches)``: one trajectory's rows, bounds, mask;
- ``after_trajectory(position, rng, tune, iteration, inverse_mass, tune_iterations)``: the
  exact moves after a kept trajectory (every group's locals, from a fixed centre once
  tuning ends, the globals given them, a non-centred hierarchy's globals given its group
  vectors, then the moves along directions the likelihood does not see);
- ``inflate(noise)`` and ``widen(...)``: the answers to a chain's first noise measurement
  (noisy globals slowed, more groups per step where noise caps the step);
- its chain state (``sampling_state``) is reset by ``reset_chain()``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state

from pymc_sgmcmc.adaptation.step_size import noise_limited_step_size
from pymc_sgmcmc.gradients.estimators import Grouping, NoiseMonitor
from pymc_sgmcmc.gradients.grouped import GroupedGradient
from pymc_sgmcmc.sampling.global_updates import (
    EXACT_MOVE_MAX_GLOBALS,
    ExactGlobalMove,
    averaged_precision,
    precision_factor,
)
from pymc_sgmcmc.sampling.groups import (
    GroupFactor,
    GroupLogDensities,
    LocationScaleHierarchy,
)
from pymc_sgmcmc.sampling.interweaving import InterweavingMove, adapted_log_scales
from pymc_sgmcmc.sampling.local_updates import (
    CENTRE_FROM,
    CURVATURE_FIT_EVERY,
    LOCAL_GROUPS_PER_STEP,
    CurvatureFactors,
    ExactLocalMove,
    LocalsMean,
    averaged_blocks,
    factors_of,
    local_step_size_adapter,
    precision_blocks,
    updated_mean,
)
from pymc_sgmcmc.sampling.translations import TranslationMove


@dataclass_state
class WholeGroupsState(DataClassState):
    """A chain's state of the grouped part."""

    groups_per_step: int
    interweaving_log_scales: Any
    local_step_size: Any
    local_curvature: Any
    local_scores: Any
    global_precision: Any
    global_fits: int
    noise_inflation: Any
    locals_mean: Any
    local_centre: Any


def noise_inflation(raw_noise: np.ndarray) -> np.ndarray | None:
    """Each coordinate's mass factor: its whitened noise over the median coordinate's, ≥ 1.

    None where no coordinate is noisy.
    """
    noisy = raw_noise[raw_noise > 0]
    if noisy.size == 0:
        return None
    return np.maximum(raw_noise / np.median(noisy), 1.0)


def widened_groups_per_step(
    groups_per_step: int, n_groups: int, n_steps: int, cap: float, wanted_step: float
) -> int:
    """``K`` for which a noise-limited step ``cap`` would reach ``wanted_step``.

    The noise of a sample of ``K`` of ``J`` groups falls as ``(J − K)/K``; ``K`` grows at
    most until a trajectory of ``n_steps + 1`` minibatches reads as many rows as the data.
    """
    k = groups_per_step
    most = max(k, n_groups // (n_steps + 1))
    if cap >= wanted_step or k >= most:
        return k
    factor = wanted_step / cap
    wanted = math.ceil(k * factor * n_groups / (n_groups - k + k * factor))
    return min(wanted, most)


class WholeGroups(WithSamplingState):
    """Minibatches of whole groups and the exact moves of a hierarchical model's step.

    After each trajectory, every group's locals get an exact, Metropolis-corrected move
    given the rest, then the globals given the locals (where the locals' move reads every
    row: ``full_pass`` given), and a non-centred hierarchy's globals are redrawn given its
    group vectors: without them, locals and scale had ESS 3-15 in 4,000 draws
    (docs/hierarchical.md).

    Parameters
    ----------
    grouped : GroupedGradient
        The model's log density split into groups.
    grouping : Grouping
        The groups' layout and ``K``, shared with the gradient estimator (which reads
        ``K`` from it).
    hierarchy : LocationScaleHierarchy, optional
        The non-centred form ``a = L(u) + S(u) z`` where the model has one.
    per_group : GroupLogDensities, optional
        Each group's conditional log density, where the locals' prior is row by row.
    secondary : tuple of GroupFactor
        The model's other grouping factors (crossed effects). The trajectory reads their
        locals like globals (weighted ``J/K``); after it each factor's groups get the
        same per-group move as ``per_group``'s, one factor after the other.
    compile_kwargs : dict, optional
        Passed to ``pytensor.function``.
    full_pass : callable, optional
        ``position -> (log p, ∇log p)`` on all rows, for the globals' exact move (only
        with ``per_group``: a move of every group reads every row anyway).
    """

    _state_class = WholeGroupsState

    def __init__(
        self,
        grouped: GroupedGradient,
        grouping: Grouping,
        hierarchy: LocationScaleHierarchy | None,
        per_group: GroupLogDensities | None,
        secondary: tuple[GroupFactor, ...],
        compile_kwargs: dict | None,
        full_pass: Any = None,
    ) -> None:
        self.grouped, self.grouping = grouped, grouping
        self.local_move = ExactLocalMove(grouped, grouping.layout, per_group, compile_kwargs)
        self.secondary_moves = [
            ExactLocalMove(grouped, factor.layout, factor.per_group, compile_kwargs)
            for factor in secondary
        ]
        self.is_local = np.logical_or.reduce(
            [grouping.layout.is_local, *(factor.layout.is_local for factor in secondary)]
        )
        self.layouts = [grouping.layout, *(factor.layout for factor in secondary)]
        self.global_move = None
        global_positions = np.flatnonzero(~self.is_local)
        if (
            per_group is not None
            and full_pass is not None
            and global_positions.size <= EXACT_MOVE_MAX_GLOBALS
        ):
            self.global_move = ExactGlobalMove(full_pass, global_positions)
        self.translations = TranslationMove(
            grouped.position, grouped.prior, hierarchy, compile_kwargs
        )
        self.interweaving = (
            InterweavingMove(grouped.position, grouped.prior, hierarchy, compile_kwargs)
            if hierarchy is not None
            else None
        )
        self.initial_groups_per_step = grouping.groups_per_step
        self.reset_chain()

    def reset_chain(self) -> None:
        """A new chain: ``K`` from the user's batch size, nothing adapted."""
        self.groups_per_step = self.initial_groups_per_step
        self.interweaving_log_scales = None  # set where the chain starts
        self.local_step_size = local_step_size_adapter()
        # Each factor's groups' precision blocks and scores' outer products, averaged
        # over the tuning draws.
        self.local_curvature = [None] * (1 + len(self.secondary_moves))
        self.local_scores = [None] * (1 + len(self.secondary_moves))
        self.global_precision = None  # fitted where the chain starts, averaged in tuning
        self.global_fits = 0
        self.noise_inflation = None  # set from the first noise measurement
        self.locals_mean: LocalsMean | None = None  # of the locals' draws during tuning
        self.local_centre = None  # the anchored move's, fixed where tuning ends

    @property
    def local_curvature(self) -> list[np.ndarray | None]:
        """Each grouping factor's groups' precision blocks ``(J, r, r)``, averaged in tuning."""
        return self._local_curvature

    @local_curvature.setter
    def local_curvature(self, value: list[np.ndarray | None]) -> None:
        self._local_curvature = list(value)
        self._local_factors: list[CurvatureFactors] | None = None  # found again when used

    @property
    def groups_per_step(self) -> int:
        """``K``: the groups of one minibatch of the present chain."""
        return self.grouping.groups_per_step

    @groups_per_step.setter
    def groups_per_step(self, value: int) -> None:
        self.grouping.groups_per_step = int(value)

    @property
    def n_groups(self) -> int:
        """``J``: the model's groups."""
        return self.grouping.layout.n_groups

    def inputs(self, dtype: np.dtype) -> dict[str, np.ndarray]:
        """The trajectory's constants of minibatches of whole groups, by compiled input name."""
        layout = self.grouping.layout
        return {
            "group.weights": self.grouping.weights.astype(dtype),
            "group.global_weight": np.asarray(layout.n_groups / self.groups_per_step, dtype=dtype),
            "group.n_rows": np.asarray(layout.n_rows, dtype=dtype),
        }

    def draw(self, rng: np.random.Generator, n_minibatches: int):
        """Rows, per-minibatch bounds and update mask of one trajectory."""
        return self.grouping.layout.draw(rng, n_minibatches, self.groups_per_step)

    # -- after each trajectory -----------------------------------------------------------

    def after_trajectory(
        self,
        position: np.ndarray,
        rng: np.random.Generator,
        *,
        tune: bool,
        iteration: int,
        inverse_mass: np.ndarray,
        tune_iterations: int = 0,
    ) -> np.ndarray:
        """The exact moves after a kept trajectory: locals, then the globals given them.

        ``tune_iterations``: the chain's tuning length, which sets where the locals' mean
        (the centre of their anchored move once tuning ends) starts to be taken.
        """
        position = self._update_locals(position, rng, tune, iteration, inverse_mass)
        if self.global_move is not None:
            position = self._update_globals(position, rng, tune, iteration, inverse_mass)
        if self.interweaving is not None:
            position = self._interweave(position, rng, tune, iteration)
        position = self._translate(position, rng)
        measured = iteration >= CENTRE_FROM * tune_iterations
        if tune and measured and self.local_move.per_group is not None:
            self.locals_mean = updated_mean(self.locals_mean, position[self.is_local])
        return position

    def _update_locals(
        self, position: np.ndarray, rng, tune: bool, iteration: int, inverse_mass: np.ndarray
    ) -> np.ndarray:
        """Move groups' locals by an exact, Metropolis-corrected step given the rest.

        With a test per group (a prior row by row), every group, in chunks of rows, then
        every group of each other grouping factor: by the Newton move from the chain's
        point during tuning, by the anchored move after it (its centre the locals' mean
        over the second half of tuning). Otherwise ``4K`` groups drawn afresh, tested
        together.
        """
        move, n_groups = self.local_move, self.n_groups
        if move.per_group is None:
            groups = rng.permutation(n_groups)[
                : min(n_groups, LOCAL_GROUPS_PER_STEP * self.groups_per_step)
            ]
            step_size = float(self.local_step_size.current(tune))
            result = move.move(position, groups, inverse_mass, step_size, rng)
            self.local_step_size.update(result.accept, tune)
            return result.position
        # During tuning each group's precision block is fitted every CURVATURE_FIT_EVERY
        # moves and averaged, the average used in between; the kept draws use the
        # average: a fixed kernel, and no Hessian products.
        fit = tune and iteration % CURVATURE_FIT_EVERY == 0
        factor_moves = [move, *self.secondary_moves]
        frozen = None
        if not fit and all(blocks is not None for blocks in self.local_curvature):
            frozen = self._frozen_factors()
        centre = None if tune or frozen is None else self._centre(position)
        for k, factor_move in enumerate(factor_moves):
            for chunk in factor_move.sweep_chunks():
                if centre is not None:
                    result = factor_move.anchored_move(position, chunk, rng, frozen[k], centre)
                else:
                    result = factor_move.newton_move(
                        position, chunk, rng, None if frozen is None else frozen[k]
                    )
                position = result.position
                if result.curvature is not None:
                    n_groups = factor_move.layout.n_groups
                    self.local_curvature[k] = averaged_blocks(
                        self.local_curvature[k], result.curvature, chunk.groups, n_groups
                    )
                    self.local_scores[k] = averaged_blocks(
                        self.local_scores[k], result.scores, chunk.groups, n_groups
                    )
                    self._local_factors = None
        return position

    def _frozen_factors(self) -> list[CurvatureFactors]:
        """The factors of each grouping factor's averaged precision blocks (cached).

        Each block is the averaged Hessian's, raised where the averaged scores say the
        group is more concentrated (:func:`~pymc_sgmcmc.sampling.local_updates.precision_blocks`).
        """
        if self._local_factors is None:
            self._local_factors = [
                factors_of(precision_blocks(blocks, scores), layout)
                for blocks, scores, layout in zip(
                    self.local_curvature, self.local_scores, self.layouts, strict=True
                )
            ]
        return self._local_factors

    def _centre(self, position: np.ndarray) -> np.ndarray | None:
        """The anchored move's centre: the locals' mean over tuning, fixed where it ends.

        ``None`` without tuning draws (the Newton move from the chain's point instead).
        """
        if self.local_centre is None and self.locals_mean is not None:
            self.local_centre = position.copy()
            self.local_centre[self.is_local] = self.locals_mean.mean
        return self.local_centre

    def _update_globals(
        self, position: np.ndarray, rng, tune: bool, iteration: int, inverse_mass: np.ndarray
    ) -> np.ndarray:
        """Move the globals given the locals by a dense Newton proposal and its test.

        The precision is differenced where the chain starts and every
        :meth:`~pymc_sgmcmc.sampling.global_updates.ExactGlobalMove.fit_every` tuning
        draws, averaged, then frozen for the kept draws. Where it is not positive definite
        the globals are left to the kernel until the next fit.
        """
        move = self.global_move
        first = self.global_fits == 0
        if first or (tune and iteration % move.fit_every() == 0):
            self.global_fits += 1
            scale = np.sqrt(np.asarray(inverse_mass, dtype=float)[move.global_positions])
            fitted = move.fitted_precision(position, scale)
            if fitted is not None:
                self.global_precision = averaged_precision(self.global_precision, fitted)
        factor = precision_factor(self.global_precision)
        if factor is None:
            return position
        return move.move(position, factor, rng).position

    def _translate(self, position: np.ndarray, rng) -> np.ndarray:
        """Move along the directions the likelihood does not see (found at the first call)."""
        move = self.translations
        if move.directions is None:
            move.find(
                position,
                self.grouping.likelihood_gradient,
                self.grouping.layout.n_rows,
                self.layouts,
                np.flatnonzero(~self.is_local),
            )
        if not move.directions:
            return position
        return move.move(position, rng).position

    def _interweave(self, position: np.ndarray, rng, tune: bool, iteration: int) -> np.ndarray:
        """Redraw a non-centred hierarchy's globals given its group vectors."""
        move = self.interweaving
        if self.interweaving_log_scales is None:
            self.interweaving_log_scales = move.initial_log_scales(position)
        moved, acceptance = move.move(position, self.interweaving_log_scales, rng)
        if tune:
            self.interweaving_log_scales = adapted_log_scales(
                self.interweaving_log_scales, acceptance, iteration
            )
        return moved

    # -- answers to the gradient noise ---------------------------------------------------

    def inflate(self, noise: NoiseMonitor) -> bool:
        """Raise the mass of the coordinates whose gradient noise is far above the rest.

        The step size is capped by the noisiest coordinate. With whole groups, the
        hierarchy's own globals (``mu``, ``sigma``) get their gradient from a few groups'
        sums of scores, weighted ``J/K``: measured on 2,000 groups of 100 rows, their
        whitened noise was 60-180 times the slopes', which moved with a step 100 times
        too small (ESS 3-15). Their mass is raised by that factor (over the median
        coordinate's noise), so they move that much slower in the kernel: an SGHMC
        with any constant positive mass keeps the posterior. The interweaving move
        still redraws them exactly after each trajectory. ``noise`` is re-expressed in
        the new metric. Returns whether the inflation changed (the step then re-reads
        its parameters).
        """
        if noise.mean() is None:  # no finite measurement
            return False
        previous = 1.0 if self.noise_inflation is None else self.noise_inflation
        raw = noise.mean() * previous  # in the metric without the inflation
        inflation = noise_inflation(raw)
        if inflation is None:
            return False
        self.noise_inflation = inflation
        noise.reset()
        noise.add(raw / inflation)
        return True

    def widen(
        self, noise: np.ndarray, damping: float, step_size_adapter: Any, n_steps: int
    ) -> bool:
        """Draw more groups per step where their gradient noise caps the step size.

        With the per-group local move every row is read at every draw anyway, so a
        trajectory over more groups costs little more, while a step capped by noise
        mixes the globals that much slower: on 2,000 groups of 100 rows (centred), 10
        groups per step capped the step at 0.03 and left the slopes an ESS of 169-234
        in 2,000 draws, 50 groups reached the default 0.2 and gave them 838-1,752
        (:func:`widened_groups_per_step`). Returns whether ``K`` changed.
        """
        adapter = step_size_adapter
        if not adapter.learns or self.local_move.per_group is None:
            return False
        cap = noise_limited_step_size(noise, damping, adapter.noise_tolerance)
        k = self.groups_per_step
        self.groups_per_step = widened_groups_per_step(
            k, self.n_groups, n_steps, cap, adapter.initial_step_size
        )
        return self.groups_per_step != k
