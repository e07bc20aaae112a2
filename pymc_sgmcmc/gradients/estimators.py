"""Gradient estimators as values the step holds, one per ``gradient=`` choice.

An estimator says what the compiled trajectory needs from it (``name`` selects the
symbolic estimator, ``inputs`` its arrays), when its anchor moves (``next_anchor``) and
how its own noise is measured (``noise_variance``). An estimator holds only what is
fixed for the step method: its full-data passes and the anchor a chain starts from.
What one chain changes (its current anchor, the tuning windows that anchor follows,
its noise measurements) is a :class:`ChainEstimator`, which PyMC's ``sampling_state``
covers.

Protocol, in six lines:

- ``name``, ``anchored``: the symbolic estimator of the trajectory, and whether it has an anchor;
- ``initial_anchor``: the anchor a chain starts from (``None``: none, or SVRG's first move);
- ``next_anchor(anchor, position, iteration)``: the anchor of this trajectory;
- ``follows_tuning``: whether a fixed anchor moves to each tuning window's mean
  (:class:`TuningWindows`, kept by the chain's :class:`ChainEstimator`);
- ``inputs(anchor)``: its arrays of the compiled trajectory, by input name;
- ``noise_variance(position, anchor, rng, n_rows, metric)``: one whitened noise measurement;
- ``new_table(n_rows)``: a chain's table of every datum's gradient (SAGA's; else None).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState, dataclass_state

from pymc_sgmcmc.adaptation.step_size import gradient_noise_ratio
from pymc_sgmcmc.adaptation.windowed_mass import adaptation_windows
from pymc_sgmcmc.gradients.full_data import Anchor
from pymc_sgmcmc.gradients.grouped import GroupLayout
from pymc_sgmcmc.gradients.per_datum import PerDatumGradients
from pymc_sgmcmc.gradients.saga import SAGATable, saga_correction


class DataPasses(Protocol):
    """Full-data and subsample passes over the model's rows (the glue's mode finder)."""

    rows_touched: int

    def full_pass(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """Full-data log density and gradient."""

    def subsample_pass(
        self, position: np.ndarray, rows: list[np.ndarray]
    ) -> tuple[float, np.ndarray]:
        """Log density and gradient on the given rows of each minibatch group."""

    def draw_rows(
        self, rng: np.random.Generator, n_rows: list[int], sizes: list[Any]
    ) -> list[np.ndarray]:
        """Rows of each minibatch group, ``sizes[k]`` of group ``k``'s ``n_rows[k]``."""

    def on_fixed_rows(self, rows: list[np.ndarray]) -> Callable[[np.ndarray], tuple]:
        """Log density and gradient on ``rows``, gathered now, at any position later."""

    def others(self) -> dict[str, np.ndarray]:
        """The current values of the variables the step does not sample, by name."""

    def others_at(self, values: dict[str, np.ndarray]) -> AbstractContextManager:
        """Passes inside the ``with`` block read those variables at ``values``."""


class Whitening(Protocol):
    """What whitens a gradient: ``L⁻¹g`` for the mass ``M = LLᵀ``."""

    def whiten(self, vector: np.ndarray) -> np.ndarray:
        """``L⁻¹ vector``."""


@dataclass
class Grouping:
    """Minibatches of whole groups (:mod:`pymc_sgmcmc.gradients.grouped`).

    Attributes
    ----------
    layout : GroupLayout
        Rows and local coordinates of each group.
    groups_per_step : int
        ``K``, the groups of one minibatch.
    likelihood_gradient : callable
        ``(position, rows) -> (n/N) ∇L_b``: the likelihood gradient on ``rows`` as a
        plain sum (compiled on first use by the glue).
    """

    layout: GroupLayout
    groups_per_step: int
    likelihood_gradient: Callable[[np.ndarray, np.ndarray], np.ndarray]

    @property
    def weights(self) -> np.ndarray:
        """``J/K`` on globals, 1 on locals."""
        return self.layout.coordinate_weights(self.groups_per_step)


REANCHOR_DISTANCE = 0.5
"""How far (posterior sds, in the farthest coordinate) a tuning window's mean must be from
the anchor, beyond its own Monte Carlo error (:data:`REANCHOR_Z`), for the anchor to move
there: a move costs a full-data pass.

The control variates' noise at a draw grows with its squared distance from the anchor, so
over the posterior it is smallest with the anchor at the posterior mean; an anchor at
most ``d`` sds from the mean in every coordinate adds at most ``d²`` to the mean squared
distance of one sd per coordinate (≤ 25 % of the noise variance at 0.5). Where the mode
is in the bulk (flat regressions: the mode and the mean are ``O(1/√N)`` sds apart) no
window moves the anchor, which saves the five passes a chain's tuning would read (at
10⁸ rows out of core, ~37 s each); where it is not (a hierarchy's group scale many sds
off), the first window moves it, and later ones while the chain travels."""

REANCHOR_Z = 3.0
"""The window mean's own error, in its standard errors ``1/√n`` sds for ``n`` draws (an
ESS of one per draw; fewer make it larger), added to :data:`REANCHOR_DISTANCE`: the first
windows hold 25 and 50 draws, whose means are 0.2-0.3 sds off in each coordinate by
chance alone, and the farthest of 20 coordinates ~2.5 times that. Measured on a 2 × 10⁵
× 20 logistic regression: without it, 5 of a chain pair's 10 windows moved its anchor;
with it, none."""


@dataclass
class TuningWindows:
    """A chain's tuning windows, over which a fixed anchor follows the draws' mean.

    The joint mode, where control variates are anchored first, need not be in the bulk
    of the posterior: in a non-centred hierarchical model it sits at a group scale many
    posterior sds too large, and the estimate's variance grows with the squared distance
    from the anchor. The variance averaged over the posterior is smallest for an anchor
    at the posterior mean, so during tuning the anchor moves to the mean of each window's
    draws (the windows of the mass, Stan's schedule), and stays at the last one's.

    Parameters
    ----------
    windows : list of (int, int)
        Iterations ``[start, end)`` of each window.
    """

    windows: list[tuple[int, int]]
    total: np.ndarray | None = None
    count: int = 0
    closed: int = 0
    last_count: int = 0
    """Draws in the last window closed."""

    def observe(self, position: np.ndarray | None, iteration: int) -> np.ndarray | None:
        """Add the draw of ``iteration`` (``None``: a divergent one, left out).

        Returns the window's mean when that draw closes a window of at least 10 draws.
        """
        if self.closed >= len(self.windows):
            return None
        start, end = self.windows[self.closed]
        if iteration >= start and position is not None:
            self.total = position.astype(float) + (0.0 if self.total is None else self.total)
            self.count += 1
        if iteration + 1 < end:
            return None
        mean = self.total / self.count if self.count >= 10 else None
        self.last_count = self.count
        self.total, self.count, self.closed = None, 0, self.closed + 1
        return mean


class MinibatchEstimator:
    """The plain minibatch estimator: no anchor, no inputs of its own.

    Parameters
    ----------
    passes : DataPasses
        The model's full-data and subsample passes (compiled on their first use).
    batch_sizes : list of int
        Rows per minibatch, one per ``pm.Minibatch`` call.
    sampler : str
        The sampler's name, for messages.
    every : int
        Iterations between moves of an anchor that follows the chain (SVRG).
    """

    name: ClassVar[str] = "minibatch"
    anchored: ClassVar[bool] = False
    follows_tuning: bool = False

    def __init__(
        self,
        passes: DataPasses,
        batch_sizes: list[int],
        sampler: str,
        every: int = 100,
    ) -> None:
        self.passes = passes
        self.batch_sizes = list(batch_sizes)
        self.sampler = sampler
        self.every = int(every)
        self.initial_anchor: Anchor | None = None
        self.grouping: Grouping | None = None
        """Set where minibatches are whole groups (a hierarchical model)."""

    def next_anchor(self, anchor: Anchor | None, position: np.ndarray, iteration: int):
        """The anchor of the trajectory that starts at ``position`` (unchanged here)."""
        return anchor

    def moves_anchor_at(self, iteration: int) -> bool:
        """Whether :meth:`next_anchor` moves a set anchor before this iteration."""
        return False

    def inputs(self, anchor: Anchor | None) -> dict[str, np.ndarray]:
        """Arrays of the compiled trajectory that belong to the estimator."""
        return {}

    def data_replaced(self) -> None:
        """The data changed (``pm.set_data``): what was computed from them is stale."""

    def new_table(self, n_rows: list[int], dtype: Any) -> SAGATable | None:
        """A chain's table of every datum's gradient; None: the estimator keeps none."""
        return None

    def noise_variance(
        self,
        position: np.ndarray,
        anchor: Anchor | None,
        rng: np.random.Generator,
        n_rows: list[int],
        metric: Whitening,
        table: SAGATable | None = None,
    ) -> np.ndarray:
        """One measurement of the estimate's variance at ``position``, whitened.

        Two independent minibatches (of the sampler's batch sizes, rows from ``rng``; of
        ``K`` whole groups each where the step draws groups, the locals then exact) give
        two estimates ``g₁``, ``g₂`` of the gradient; ``d = L⁻¹(g₁ − g₂)`` with ``M = LLᵀ``
        and ``d²/2`` is an unbiased estimate of ``diag(L⁻¹VL⁻ᵀ)``.
        """
        if self.grouping is not None:
            difference = self._grouped_difference(position, anchor, rng)
        else:
            # Each minibatch gathered as soon as it is drawn: a buffer of out-of-core
            # chunks may refill at the next draw, and its indices are valid until then.
            draws = [
                self.passes.on_fixed_rows(self.passes.draw_rows(rng, n_rows, self.batch_sizes))
                for _ in range(2)
            ]
            difference = self._difference(position, anchor, draws)
        return np.asarray(metric.whiten(difference), dtype=float) ** 2 / 2.0

    def _difference(
        self, position: np.ndarray, anchor: Anchor | None, draws: list[Callable]
    ) -> np.ndarray:
        first, second = (on_rows(position)[1] for on_rows in draws)
        return first - second

    def _grouped_difference(
        self, position: np.ndarray, anchor: Anchor | None, rng: np.random.Generator
    ) -> np.ndarray:
        grouping = self.grouping
        estimates = []
        for _ in range(2):
            rows, _, _ = grouping.layout.draw(rng, 1, grouping.groups_per_step)
            estimate = grouping.likelihood_gradient(position, rows)
            if anchor is not None and self.anchored:
                with self.passes.others_at(anchor.others):
                    at_anchor = grouping.likelihood_gradient(anchor.position, rows)
                estimate = estimate - at_anchor
            estimates.append(grouping.weights * estimate)
        return np.where(grouping.layout.is_local, 0.0, estimates[0] - estimates[1])

    def anchor_if_finite(self, position: np.ndarray) -> Anchor | None:
        """An anchor at ``position``, or ``None`` where the full-data pass is not finite."""
        logp, gradient = self.passes.full_pass(position)
        if np.isfinite(logp) and np.all(np.isfinite(gradient)):
            return Anchor(np.asarray(position), float(logp), gradient, self.passes.others())
        return None

    def anchor_at(self, position: np.ndarray, what: str) -> Anchor:
        """An anchor at ``position``: one full-data pass there, refused where not finite."""
        logp, gradient = self.passes.full_pass(position)
        if not (np.isfinite(logp) and np.all(np.isfinite(gradient))):
            raise ValueError(
                f"{self.sampler}: the full-data log density or its gradient is not finite "
                f"at the {what} point (log p = {logp}), so control variates cannot be "
                "anchored there. Pass an anchor inside the support, e.g. pmsg.find_mode()."
            )
        return Anchor(np.asarray(position), float(logp), gradient, self.passes.others())


class ControlVariates(MinibatchEstimator):
    """Control variates at a fixed anchor ``θ̂`` (the mode by default).

    ``∇log p̃_b(θ) − ∇log p̃_b(θ̂) + ∇log p(θ̂)``: both minibatch terms on the same rows
    (:class:`~pymc_sgmcmc.gradients.control_variates.ControlVariateGradient`).
    """

    name: ClassVar[str] = "control_variates"
    anchored: ClassVar[bool] = True
    follows_tuning: bool = True
    """Whether the anchor moves to each tuning window's mean (:class:`TuningWindows`);
    the glue turns it off for an anchor the user chose."""

    def inputs(self, anchor: Anchor | None) -> dict[str, np.ndarray]:  # noqa: D102
        dtype = anchor.position.dtype
        return {
            "anchor.position": anchor.position,
            "anchor.logp": np.asarray(anchor.logp, dtype=dtype),
            "anchor.gradient": anchor.gradient,
        } | {f"anchor.others.{name}": value for name, value in anchor.others.items()}

    def data_replaced(self) -> None:
        """The anchor's full-data gradient belongs to the old data: a new pass there."""
        if self.initial_anchor is not None:
            self.initial_anchor = self.anchor_at(self.initial_anchor.position, "anchor")

    def _difference(
        self, position: np.ndarray, anchor: Anchor | None, draws: list[Callable]
    ) -> np.ndarray:
        difference = super()._difference(position, anchor, draws)
        if anchor is not None:
            with self.passes.others_at(anchor.others):
                difference -= super()._difference(anchor.position, None, draws)
        return difference


class SVRG(ControlVariates):
    """SVRG (Dubey et al.): control variates whose anchor moves to the chain.

    The first trajectory anchors at the chain's start, then every ``every`` iterations at
    the chain's state (one full-data pass each).
    """

    name: ClassVar[str] = "svrg"
    follows_tuning: bool = False  # it follows the chain itself

    def next_anchor(self, anchor: Anchor | None, position: np.ndarray, iteration: int):  # noqa: D102
        if anchor is None or (iteration > 0 and iteration % self.every == 0):
            return self.anchor_at(position, "chain's")
        return anchor

    def moves_anchor_at(self, iteration: int) -> bool:  # noqa: D102
        return iteration > 0 and iteration % self.every == 0


class SAGA(MinibatchEstimator):
    """SAGA (Dubey et al.; the online-MCMC survey's §3.6): a table of every datum's gradient.

    No anchor: each chain keeps its own table (:class:`~pymc_sgmcmc.gradients.saga.SAGATable`,
    filled at the chain's first trajectory, refreshed after each one), and the trajectory
    adds each step's correction to the plain minibatch gradient. ``per_datum`` (each
    row's gradient) is set by the start-up, which builds it from the model.
    """

    name: ClassVar[str] = "saga"
    per_datum: PerDatumGradients | None = None

    def new_table(self, n_rows: list[int], dtype: Any) -> SAGATable:  # noqa: D102
        return SAGATable(self.per_datum, self.passes.subsample.gather, n_rows, dtype)

    def noise_variance(  # noqa: D102
        self,
        position: np.ndarray,
        anchor: Anchor | None,
        rng: np.random.Generator,
        n_rows: list[int],
        metric: Whitening,
        table: SAGATable | None = None,
    ) -> np.ndarray:
        estimates = []
        for _ in range(2):
            rows = self.passes.draw_rows(rng, n_rows, self.batch_sizes)
            estimate = self.passes.on_fixed_rows(rows)(position)[1]
            if table is not None and table.filled:
                for stored, total, index, n in zip(
                    table.tables, table.sums, rows, n_rows, strict=True
                ):
                    estimate = estimate + saga_correction(total, stored[index], n, len(index))
            estimates.append(estimate)
        difference = estimates[0] - estimates[1]
        return np.asarray(metric.whiten(difference), dtype=float) ** 2 / 2.0


ESTIMATORS: dict[str, type[MinibatchEstimator]] = {
    cls.name: cls for cls in (MinibatchEstimator, ControlVariates, SVRG, SAGA)
}
"""The estimators by their ``gradient=`` name."""


def make_estimator(
    name: str,
    passes: DataPasses,
    batch_sizes: list[int],
    sampler: str,
    anchor_every: int = 100,
) -> MinibatchEstimator:
    """The estimator called ``name``: "minibatch", "control_variates", "svrg" or "saga".

    Its ``initial_anchor`` is set by the start-up (the mode, or the user's point).
    """
    return ESTIMATORS[name](passes, batch_sizes, sampler, every=anchor_every)


NOISE_PROBES_AT_START = 8
"""Gradient-noise measurements at a chain's start and after each change of the metric."""

NOISE_PROBE_EVERY = {True: 5, False: 20}
"""Iterations between gradient-noise measurements, during tuning and after it."""


@dataclass_state
class NoiseMonitorState(DataClassState):
    """A chain's gradient-noise measurements so far."""

    total: Any
    probes: int


class NoiseMonitor(WithSamplingState):
    """The gradient noise one chain has measured: the mean whitened variance.

    Reset when the metric changes (the variance is in its units) and when tuning ends
    (measured afresh at the frozen step and metric); PyMC's ``sampling_state`` carries it.
    """

    _state_class = NoiseMonitorState

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.reset()

    def reset(self) -> None:
        """Forget every measurement."""
        self.total = np.zeros(self.dim)
        self.probes = 0

    def due(self, iteration: int, tune: bool) -> bool:
        """Whether the chain measures before this iteration's trajectory."""
        return self.probes == 0 or iteration % NOISE_PROBE_EVERY[bool(tune)] == 0

    def add(self, variance: np.ndarray) -> None:
        """One measurement (a non-finite one, far out in a tail, is left out)."""
        if np.all(np.isfinite(variance)):
            self.total = self.total + variance
            self.probes += 1

    def mean(self) -> np.ndarray | None:
        """The mean whitened variance per coordinate; None before any measurement."""
        return self.total / self.probes if self.probes else None

    def ratio(self, step_size: float, damping: float) -> float:
        """``B̂/C`` at ``step_size`` (:func:`gradient_noise_ratio`); NaN before any measurement."""
        mean = self.mean()
        return np.nan if mean is None else gradient_noise_ratio(step_size, mean, damping)


@dataclass_state
class ChainEstimatorState(DataClassState):
    """A chain's anchor (or SAGA's table), the tuning windows and the noise measured so far."""

    anchor: Any
    windows: Any
    noise: Any
    table: Any


class ChainEstimator(WithSamplingState):
    """One chain's gradient estimator: the estimator with the chain's own state.

    The estimator holds what is fixed for the step method (its full-data passes, the
    anchor a chain starts from); this holds what one chain changes: the current anchor,
    the tuning windows a fixed anchor follows (:class:`TuningWindows`) and the noise
    measurements (:class:`NoiseMonitor`). PyMC's ``sampling_state`` carries all three.

    Parameters
    ----------
    estimator : MinibatchEstimator
        The step method's estimator.
    dim : int
        Coordinates of the position.
    tune : int
        Tuning iterations of the chain (the windows' schedule).
    measures_noise : bool
        Whether the chain measures its gradient noise at all (a kernel that uses it, on
        minibatched data).
    """

    _state_class = ChainEstimatorState

    def __init__(
        self,
        estimator: MinibatchEstimator,
        dim: int,
        tune: int,
        *,
        measures_noise: bool = True,
        n_rows: list[int] | None = None,
        dtype: Any = "float64",
    ) -> None:
        self.estimator = estimator
        self.measures_noise = measures_noise
        self.anchor: Anchor | None = estimator.initial_anchor
        self.windows = TuningWindows(adaptation_windows(tune)) if estimator.follows_tuning else None
        self.noise = NoiseMonitor(dim)
        self.table = estimator.new_table(list(n_rows or []), dtype)

    def before_trajectory(self, position: np.ndarray, iteration: int) -> None:
        """Move the anchor where the estimator's schedule says (SVRG's snapshots).

        SAGA's table is filled at ``position`` before the chain's first trajectory.
        """
        self.anchor = self.estimator.next_anchor(self.anchor, position, iteration)
        if self.table is not None and not self.table.filled:
            self.table.fill(position)

    def correction(self, rows: list[np.ndarray]) -> np.ndarray:
        """SAGA's correction of each minibatch of this trajectory's ``rows``."""
        return self.table.correction(rows)

    def after_trajectory(self, position: np.ndarray) -> None:
        """SAGA: the last trajectory's rows get their gradients at the kept ``position``."""
        if self.table is not None:
            self.table.refresh(position)

    def probe_due(self, iteration: int, tune: bool) -> bool:
        """Whether the chain measures its noise before this iteration's trajectory."""
        return self.measures_noise and self.noise.due(iteration, tune)

    def event_due(self, iteration: int) -> bool:
        """Whether, after tuning, this iteration starts with a noise probe or an anchor's move.

        A block of draws computed ahead ends before it.
        """
        return self.probe_due(iteration, False) or self.estimator.moves_anchor_at(iteration)

    def inputs(self) -> dict[str, np.ndarray]:
        """The estimator's arrays of the compiled trajectory, at the current anchor."""
        return self.estimator.inputs(self.anchor)

    def noise_variance(
        self, position: np.ndarray, rng: np.random.Generator, n_rows: list[int], metric
    ) -> np.ndarray:
        """One whitened noise measurement at ``position`` (the estimator's ``noise_variance``)."""
        return self.estimator.noise_variance(
            position, self.anchor, rng, n_rows, metric, table=self.table
        )

    def follow_tuning(
        self,
        position: np.ndarray | None,
        iteration: int,
        dtype,
        posterior_sd: np.ndarray | None = None,
    ) -> None:
        """At the end of a tuning window, move the anchor to the window's mean.

        ``position`` is the draw of ``iteration`` (``None``: a divergent one). Where the
        full-data pass at the mean is not finite, the old anchor stays: it was finite.
        With ``posterior_sd``, a mean within :data:`REANCHOR_DISTANCE` posterior sds of
        the anchor in every coordinate, beyond the window's Monte Carlo error
        (:data:`REANCHOR_Z`), leaves it too, without a pass, where the step
        samples every variable (no ``anchor.others``). Nothing moves an anchor that does
        not follow tuning (no windows).
        """
        if self.windows is None:
            return
        mean = self.windows.observe(position, iteration)
        if mean is None:
            return
        # In a compound step the other samplers' variables move the noise too, and the
        # sds say nothing of them: such an anchor moves at every window.
        if self.anchor is not None and posterior_sd is not None and not self.anchor.others:
            distance = np.abs(mean - self.anchor.position) / posterior_sd
            chance = REANCHOR_Z / np.sqrt(self.windows.last_count)
            if np.max(distance, initial=0.0) <= REANCHOR_DISTANCE + chance:
                return
        anchor = self.estimator.anchor_if_finite(mean.astype(dtype))
        if anchor is not None:
            self.anchor = anchor
            self.noise.reset()  # the estimate's noise depends on the anchor
