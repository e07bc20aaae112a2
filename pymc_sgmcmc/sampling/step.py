"""The one PyMC step method every sampler of the package is: a thin loop over parts.

:class:`StochasticGradientStep` holds the values it is handed and runs them inside
``pm.sample``: the **kernel** (:mod:`pymc_sgmcmc.kernels`, what one integrator step
does), the **gradient estimator** (:mod:`pymc_sgmcmc.gradients.estimators`, with its
anchor and noise probe), the **correction** (:mod:`pymc_sgmcmc.sampling.corrections`,
a Metropolis test or a restart), the **start-up** (:mod:`pymc_sgmcmc.sampling.startup`:
mode, Laplace covariance, chain starts) and the **adapters** (step size, mass), which
initialise themselves from the start-up. It compiles ``n_steps`` kernel steps into one
function once per step method (:mod:`pymc_sgmcmc.sampling.trajectory`) and draws all
per-iteration randomness from the chain's generator. A public sampler is a subclass
that names its kernel and passes its parameters; it overrides nothing.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, ClassVar, NamedTuple

import numpy as np
from pymc.blocking import RaveledVars, StatsType
from pymc.exceptions import SamplingError
from pymc.model import modelcontext
from pymc.pytensorf import reseed_rngs
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import continuous_types
from rich.progress import TextColumn
from rich.table import Column

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.adaptation.step_size import (
    AdaptiveStepSize,
    StepSizeAdapter,
    noise_limited_step_size,
)
from pymc_sgmcmc.adaptation.windowed_mass import WindowedMass, adaptation_windows
from pymc_sgmcmc.gradients.estimators import TuningWindows, make_estimator
from pymc_sgmcmc.gradients.full_data import Anchor
from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.gradients.minibatch import exact_target
from pymc_sgmcmc.kernels.base import Kernel, tree_flatten
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric, euclidean_metric, metric_from_inverse
from pymc_sgmcmc.sampling import arguments, noise, startup
from pymc_sgmcmc.sampling.chain_checks import chain_check_messages
from pymc_sgmcmc.sampling.corrections import Outcome, Trajectory, correction_for
from pymc_sgmcmc.sampling.data_checks import check_minibatched_data, data_value
from pymc_sgmcmc.sampling.groups import group_minibatches
from pymc_sgmcmc.sampling.interweaving import InterweavingMove, adapted_log_scales
from pymc_sgmcmc.sampling.local_updates import (
    CURVATURE_FIT_EVERY,
    LOCAL_GROUPS_PER_STEP,
    ExactLocalMove,
    averaged_curvature,
    local_step_size_adapter,
)
from pymc_sgmcmc.sampling.mode import ModeFinder, ModeResult
from pymc_sgmcmc.sampling.model_graph import flat_logp, full_data_logp
from pymc_sgmcmc.sampling.spheres import sphere_layout
from pymc_sgmcmc.sampling.trajectory import (
    ROWS,
    CompiledTrajectory,
    GroupRowsPerStep,
    build_trajectory,
    compile_trajectory,
)

_TRUE, _FALSE = np.asarray(True), np.asarray(False)
_STALE = object()

GENERIC_STATS: dict[str, tuple[Any, list]] = {
    "step_size": (np.float64, []),
    "n_steps": (np.int64, []),
    "minibatch_logp": (np.float64, []),
    "diverging": (bool, []),
    "divergences": (np.int64, []),
}
"""Statistics of every sampler."""


class DrawSlots(NamedTuple):
    """Argument positions of the compiled trajectory's per-draw inputs (None: no such input)."""

    position: int
    state: list[int]
    step_size: int
    refresh: int | None
    refresh_noise: int | None
    noise: int | None
    rows: list[int]
    row_bounds: int | None
    update_mask: int | None


@dataclass_state
class StochasticGradientState(StepMethodState):
    """What a chain needs to resume exactly where it stopped."""

    iteration: int
    tune: bool
    kernel_state: Any
    refresh_pending: bool
    divergences: int
    consecutive_divergences: int
    position_gradient: Any
    step_size_adapter: Any
    mass_adapter: Any
    anchor: Any
    anchor_windows: Any
    interweaving_log_scales: Any
    local_step_size: Any
    local_curvature: Any
    noise_inflation: Any
    groups_per_step: Any
    noise: Any
    draw_stats: dict


class StochasticGradientStep(ArrayStepShared):
    """A PyMC step method that runs a kernel: one compiled call per draw.

    Subclasses set :attr:`kernel` (and :attr:`mass_adapter_class` when they learn the
    mass) and pass the kernel's parameters to ``__init__``; nothing is overridden.

    Parameters
    ----------
    vars : list, optional
        Variables to sample; by default all continuous free variables.
    step_size : float, schedule or "auto"
        ``ε``: a positive number, a schedule such as :class:`pymc_sgmcmc.PolynomialDecay`,
        or ``"auto"``: learned during tuning
        (:class:`~pymc_sgmcmc.adaptation.step_size.AdaptiveStepSize`), from the kernel's
        :attr:`~pymc_sgmcmc.kernels.base.Kernel.default_step_size` in a metric set to the
        Laplace covariance at the mode (found before sampling).
    gradient : {"auto", "minibatch", "control_variates", "svrg"}
        The gradient estimator (:mod:`pymc_sgmcmc.gradients.estimators`); "auto" is
        "control_variates" for a model with ``pm.Minibatch`` data and "minibatch" (then
        the exact full-data gradient) without.
    anchor : dict or ModeResult, optional
        The control variates' anchor ``θ̂`` (a point by value-variable name); the mode
        found by :func:`pymc_sgmcmc.find_mode` by default.
    anchor_every : int
        SVRG only: iterations between moves of the anchor to the chain's state (each
        move is a full-data pass).
    start : {"auto", "laplace", "initial_point"}
        "laplace" starts each chain at a draw from the Laplace approximation at the mode
        (so that chains start dispersed and R-hat keeps its meaning); "initial_point"
        where ``pm.sample`` starts it. "auto" is "laplace" when a mode was found and the
        chain starts at the model's initial point (no ``initvals`` given).
    mode_kwargs : dict, optional
        Options of :func:`pymc_sgmcmc.find_mode` for the mode found before sampling.
    n_steps : int
        Integrator steps per draw, all run in one compiled call.
    minibatch : {"step", "trajectory"}
        With ``pm.Minibatch`` data: fresh rows for every gradient, or one set per draw.
    groups : {"auto", True, False}
        Minibatches of whole groups for a hierarchical model
        (:mod:`pymc_sgmcmc.gradients.grouped`): "auto" where the model's groups are found
        (``a[group_idx]`` with the group index in the ``pm.Minibatch`` call) and the
        sampler can hold a group's parameters in place; True insists (an error says why
        not); False draws rows as ``pm.Minibatch`` does.
    kernel_params : dict
        The kernel's parameters besides ``step_size``, ``metric`` and ``layout``.
    mass : float, array, optional
        The mass ``M`` of a kernel with a constant metric (identity by default).
    mass_adapter : Adapter, optional
        An adapter that owns (and learns) the metric instead, e.g.
        :class:`~pymc_sgmcmc.adaptation.em.MassEM`.
    adapt_mass : bool
        With ``step_size="auto"`` and no ``mass`` or ``mass_adapter``: rescale a diagonal
        Laplace metric (over 200 dimensions) from the tuning draws in windows
        (:class:`~pymc_sgmcmc.adaptation.windowed_mass.WindowedMass`); a dense one is
        kept. False keeps the Laplace metric.
    refresh_every_trajectory : bool
        Apply the kernel's ``refresh`` (fresh momentum) at the start of every trajectory.
    step_jitter : float
        Relative spread of the per-trajectory step size (0: none).
    allow_missing_total_size : bool
        Accept an observed variable fed by ``pm.Minibatch`` without ``total_size`` (its
        likelihood then counts one minibatch, not the data). Refused by default.
    model, blocked, rng, initial_point
        As for PyMC's step methods.
    compile_kwargs : dict, optional
        Passed to ``pytensor.function`` (e.g. ``{"mode": "JAX"}``).
    """

    name: ClassVar[str] = "sgmcmc"
    kernel: ClassVar[Kernel]
    """The sampler's kernel."""

    mass_adapter_class: ClassVar[type[Adapter] | None] = None
    """The type of the mass adapter, for the statistics it adds."""

    default_blocked = True
    _state_class = StochasticGradientState
    stats_dtypes_shapes: ClassVar[dict] = dict(GENERIC_STATS)

    max_consecutive_divergences: ClassVar[int] = 20
    """Restarts in a row after which the chain gives up with a :class:`SamplingError`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kernel = cls.__dict__.get("kernel", getattr(cls, "kernel", None))
        if kernel is None:
            return
        stats = {**GENERIC_STATS, **kernel.stats_dtypes, **correction_for(kernel).stats_dtypes}
        if cls.mass_adapter_class is not None:
            stats.update(cls.mass_adapter_class.stats_dtypes_shapes)
        elif kernel.constant_metric:
            stats.update(WindowedMass.stats_dtypes_shapes)
        if kernel.measures_noise:
            stats["gradient_noise"] = (np.float64, [])
            stats["anchor_distance"] = (np.float64, [])
        cls.stats_dtypes_shapes = stats

    def __new__(cls, *args: Any, **kwargs: Any):  # noqa: D102
        # BlockedStep.__new__ assigns *all* value variables when none are given; a PyMC
        # user expects a gradient sampler to take the continuous ones and leave discrete
        # ones to pm.sample's automatic assignment, as NUTS does.
        model = modelcontext(kwargs.get("model"))
        if not args and kwargs.get("vars") is None:
            arguments.check_model_has_continuous_vars(cls.__name__, model)
            kwargs["vars"] = model.continuous_value_vars
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        minibatch: str = "step",
        groups: bool | str = "auto",
        gradient: str = "auto",
        anchor: dict[str, np.ndarray] | None = None,
        anchor_every: int = 100,
        start: str = "auto",
        mode_kwargs: dict[str, Any] | None = None,
        kernel_params: dict[str, Any] | None = None,
        mass: Any = None,
        mass_adapter: Adapter | None = None,
        adapt_mass: bool = True,
        refresh_every_trajectory: bool = False,
        step_jitter: float = 0.0,
        allow_missing_total_size: bool = False,
        model=None,
        blocked: bool = True,
        rng=None,
        initial_point: dict[str, np.ndarray] | None = None,
        compile_kwargs: dict | None = None,
    ) -> None:
        model, kernel, name = modelcontext(model), self.kernel, type(self).__name__
        vars = get_value_vars_from_user_vars(
            model.continuous_value_vars if vars is None else vars, model
        )
        arguments.check_sampled_vars(name, kernel, vars, model)
        arguments.check_step_arguments(
            name, kernel, step_size=step_size, n_steps=n_steps, minibatch=minibatch,
            start=start, anchor_every=anchor_every, mass=mass, mass_adapter=mass_adapter,
        )  # fmt: skip
        self.n_steps, self.minibatch, self.start = int(n_steps), minibatch, start
        self.mass_adapter, self.adapt_mass = mass_adapter, bool(adapt_mass)
        self.refresh_every_trajectory = bool(refresh_every_trajectory)
        self.allow_missing_total_size = bool(allow_missing_total_size)
        self._model, self._compile_kwargs = model, compile_kwargs
        self._initial_point = model.initial_point() if initial_point is None else initial_point
        self._flat: FlatLogp = flat_logp(model, vars, self._initial_point)
        self.dim = int(sum(np.size(self._initial_point[v.name]) for v in vars))
        self._dtype = self._flat.position.dtype
        super().__init__(vars, self._flat.shared, blocked, rng=rng)
        self.layout = (
            sphere_layout(model, self.vars, self._initial_point, name)
            if kernel.supports_spheres
            else None
        )
        self._fixed_params = self._kernel_parameters(kernel_params, mass)
        self._mass_given = mass is not None or "metric" in (kernel_params or {})
        # A fixed mass reports what a learned one would: no updates.
        self._fixed_mass_stats = (
            dict.fromkeys(WindowedMass.stats_dtypes_shapes, 0) if kernel.constant_metric else {}
        )
        self._trajectory: CompiledTrajectory | None = None
        self._state_names = [f"state.{n}" for n in kernel.resamples]
        self._end_names = ["position", *self._state_names]
        self._row_names = [f"rows_{k}" for k in range(len(self._flat.groups))]
        self._unused_noise = np.zeros(self.dim, dtype=self._dtype)  # no refresh, no draw
        self._params_at_key: tuple | None = None
        self._n_rows = [g.n_rows() for g in self._flat.groups]
        self._checked_data = None
        self._check_data()
        self.correction = correction_for(kernel)
        self.gradient = startup.choose_gradient(
            name,
            gradient,
            minibatched=bool(self._flat.groups),
            spheres=self.layout is not None and any(on for _, _, on in self.layout.runs),
            allow_missing_total_size=self.allow_missing_total_size,
            anchor=anchor,
        )
        found = group_minibatches(
            model, self._flat, self.vars, self._initial_point, groups=groups, kernel=kernel,
            gradient=self.gradient, minibatch=minibatch, sampler=name,
            learns_mass=self.mass_adapter_class is not None, compile_kwargs=compile_kwargs,
        )  # fmt: skip
        self._grouped, self.grouping, hierarchy, per_group = (
            found if found is not None else (None,) * 4
        )
        # After each trajectory, drawn groups' locals get an exact update and a non-centred
        # hierarchy's globals are redrawn given its group vectors: without them, locals and
        # scale had ESS 3-15 in 4,000 draws (docs/hierarchical.md).
        self.local_move = (
            ExactLocalMove(self._grouped, self.grouping.layout, per_group, compile_kwargs)
            if self.grouping is not None
            else None
        )
        self.interweaving = (
            InterweavingMove(self._grouped.position, self._grouped.prior, hierarchy, compile_kwargs)
            if hierarchy is not None
            else None
        )
        if self.grouping is not None:
            # A group's parameters move about once per trajectory: a momentum refreshed
            # at every trajectory would never carry their gradient into their position
            # (measured: a random walk, intercepts 10 sds off). It persists instead.
            self.refresh_every_trajectory = False
        self._initial_groups_per_step = self.groups_per_step
        self._start_up(step_size, anchor, anchor_every, dict(mode_kwargs or {}), step_jitter)
        self._learning_adapters = tuple(a for a in self._adapters if a.learns)
        self._tune_iterations = self._draw_iterations = 0
        self._reset_chain()
        if self.grouping is not None and np.ndim(self.params.metric.inverse) == 2:
            if groups is True:
                raise ValueError(
                    f"{name}(groups=True) needs a diagonal mass: a dense one moves a held "
                    "group's parameters with the others' momenta. Pass a vector mass= "
                    "(or mass_structure='diagonal'), or groups='auto'."
                )
            self._grouped = self.grouping = self.estimator.grouping = None
            self.interweaving = self.local_move = None
        if kernel.validate is not None:
            logp = full_data_logp(model, self._flat, self.vars, self._initial_point)
            point = np.concatenate([np.ravel(self._initial_point[v.name]) for v in self.vars])
            position = self._flat.position
            target = exact_target(logp, position)
            kernel.validate(self.params, target, position, point.astype(self._dtype), name)

    def _kernel_parameters(self, kernel_params: dict | None, mass: Any) -> dict[str, Any]:
        """The kernel's fixed parameters: the user's, the metric from ``mass=``, the layout."""
        kernel, fixed = self.kernel, dict(kernel_params or {})
        # A noise estimate given as "auto" (SGHMC's): measured with the step size, else 0.
        noise_name = kernel.estimated_noise
        auto = noise_name is not None and fixed.get(noise_name) == "auto"
        self._estimated_noise = noise_name if auto else None
        if auto:
            fixed[noise_name] = 0.0
        if kernel.constant_metric and self.mass_adapter is None and "metric" not in fixed:
            fixed["metric"] = euclidean_metric(mass, self.dim, self._dtype)
        if kernel.supports_spheres:
            fixed["layout"] = self.layout
        return {
            key: np.asarray(value, dtype=self._dtype) if isinstance(value, float) else value
            for key, value in fixed.items()
        }

    def _start_up(
        self, step_size: Any, anchor: Any, anchor_every: int, mode_kwargs: dict, jitter: float
    ) -> None:
        """Mode, anchor, estimator, metric and step-size adapter, before any chain."""
        kernel, automatic = self.kernel, isinstance(step_size, str)
        self.mode: ModeResult | None = None
        self.mode_seconds: float | None = None
        self.rows_touched_by_setup = 0
        # How many times below its default the minibatch noise caps the step (measured
        # before sampling with gradient="minibatch" and step_size="auto").
        self.minibatch_slowdown: float | None = None
        self._finder: ModeFinder | None = None
        self._chunk_rows = mode_kwargs.pop("chunk_rows", None)
        if automatic or (self.gradient == "control_variates" and anchor is None):
            finder = self._mode_finder()
            try:
                self.mode = startup.find_start_mode(
                    finder, self.vars, self._initial_point, self._dtype, mode_kwargs, automatic
                )
            except ValueError as error:
                if self.grouping is None or self.interweaving is not None:
                    raise
                hint = startup.centred_hierarchy_hint(type(self).__name__, error)
                raise ValueError(hint) from None
            self.mode_seconds = self.mode.seconds
            self.rows_touched_by_setup += self.mode.rows_touched
        before = self._rows_touched()
        self.estimator = make_estimator(
            self.gradient,
            self._mode_finder,
            [g.batch_size for g in self._flat.groups],
            type(self).__name__,
            anchor_every=anchor_every,
        )
        self.estimator.grouping = self.grouping
        if self.estimator.anchored and anchor is not None:
            position = startup.anchor_position(
                type(self).__name__, anchor, self.vars, self._initial_point, self._dtype
            )
            self.estimator.initial_anchor = self.estimator.anchor_at(position, "anchor=")
            self.estimator.follows_tuning = False  # the user's anchor stays where it is
        elif self.estimator.anchored and self.mode is not None:
            mode = self.mode
            self.estimator.initial_anchor = Anchor(mode.position, mode.logp, mode.gradient)
        if automatic:
            self._precondition(self.mode.covariance)
            self.step_size_adapter: StepSizeAdapter = AdaptiveStepSize(
                kernel.default_step_size,
                metropolis=kernel.energy is not None,
                damping=self._noise_damping,
                jitter=jitter,
                estimates_noise=self._estimated_noise,
            )
            if self.gradient == "minibatch" and self._flat.groups and self._noise_checkable:
                self._check_minibatch_noise()
        else:
            self.step_size_adapter = StepSizeAdapter(step_size, jitter=jitter)
        self.rows_touched_by_setup += self._rows_touched() - before

    def _precondition(self, covariance: np.ndarray) -> None:
        """Start a constant metric (or the mass adapter) from the Laplace covariance.

        A position-dependent metric is the sampler's own and stays: its default step
        size is in the units it sets (e.g. the Hessian's, which are the Laplace ones at
        the mode).
        """
        if not self.kernel.constant_metric:
            return
        if self.grouping is not None and np.ndim(covariance) == 2:
            # Held coordinates must not drift with the others' momenta: a diagonal mass.
            covariance = np.diag(covariance).copy()
        if self.mass_adapter is not None:
            self.mass_adapter.precondition(covariance)
        elif not self._mass_given and self.adapt_mass:
            self.mass_adapter = WindowedMass(covariance)
        elif not self._mass_given:
            self._fixed_params["metric"] = metric_from_inverse(covariance, self._dtype)

    # -- parameters and what the step shows ---------------------------------------------

    def _read_parameters(self) -> None:
        """Assemble the kernel's parameters from the fixed ones and the adapters'."""
        values = dict(self._fixed_params)
        if self.mass_adapter is not None:
            values.update(self.mass_adapter.parameters())
        values.update(
            (key, np.asarray(value, dtype=self._dtype))
            for key, value in self.step_size_adapter.parameters().items()
        )
        values["step_size"] = np.asarray(np.nan, dtype=self._dtype)
        metric = values.get("metric")
        self._posterior_sd = None
        if isinstance(metric, EuclideanMetric):
            # Before the inflation of noisy coordinates: M⁻¹ is the chain's estimate of
            # the posterior covariance (the Laplace one, then the windows' draws).
            inverse = np.diag(metric.inverse) if metric.is_dense else metric.inverse
            self._posterior_sd = np.sqrt(np.asarray(inverse, dtype=float))
        inflation = self.__dict__.get("noise_inflation")
        if inflation is not None:
            inverse = values["metric"].inverse / inflation
            values["metric"] = metric_from_inverse(inverse, self._dtype)
        self.params = self.kernel.params_type(**values)
        # Every array but the step size, by compiled input name.
        self._param_inputs = {f"params.{k}": v for k, v in tree_flatten(self.params)[1:]}
        self._inputs_anchor = self._checked_anchor = _STALE  # assembled and checked again

    @property
    def mass(self):
        """The current metric (mass matrix ``M``), for kernels that have one."""
        return self.params.metric if self.kernel.metric != "none" else None

    @property
    def parameters(self) -> dict[str, Any]:
        """The kernel's parameters besides the step size, by name."""
        return {k: v for k, v in self.params._asdict().items() if k != "step_size"}

    @property
    def n_rows(self) -> list[int]:
        """Rows of the data behind each ``pm.Minibatch`` call (re-read when a chain starts)."""
        return list(self._n_rows)

    @property
    def manifold_dim(self) -> int:
        """Dimension of the space the chain moves on (``d − 1`` per sphere)."""
        return self.layout.manifold_dim if self.layout is not None else self.dim

    @property
    def sampling_state(self) -> StochasticGradientState:
        """The chain's state, adapters included (PyMC's ``sampling_state`` protocol)."""
        return ArrayStepShared.sampling_state.fget(self)

    @sampling_state.setter
    def sampling_state(self, state: StochasticGradientState) -> None:
        ArrayStepShared.sampling_state.fset(self, state)
        self._read_parameters()  # the adapters may own parameters, e.g. the mass

    @property
    def schedule(self):
        """The step-size schedule: a function of the iteration."""
        return self.step_size_adapter.schedule

    @schedule.setter
    def schedule(self, schedule) -> None:
        self.step_size_adapter.schedule = schedule

    @property
    def _adapters(self) -> list[Adapter]:
        return [a for a in (self.step_size_adapter, self.mass_adapter) if a is not None]

    @property
    def _record_gradient(self) -> bool:
        return self.mass_adapter is not None and self.mass_adapter.needs_gradient

    @property
    def _noise_damping(self) -> float:
        """``C`` of the gradient-noise ratio: the kernel's friction or diffusion, else 1."""
        name = self.kernel.noise_damping
        return float(self._fixed_params[name]) if name else 1.0

    @property
    def _noise_checkable(self) -> bool:
        """Whether the plain-minibatch check before sampling applies.

        To kernels that measure their noise, and to those with a Metropolis test and a
        constant mass (HMC, HMC-EM), whose acceptance the noise erodes.
        """
        kernel = self.kernel
        return kernel.measures_noise or (kernel.energy is not None and kernel.constant_metric)

    # -- compiled pieces -------------------------------------------------------------

    def _mode_finder(self) -> ModeFinder:
        """The full-data and subsample passes (compiled on first use)."""
        if self._finder is None:
            self._finder = ModeFinder(
                self._model, self.vars, self._flat, self._n_rows, self._chunk_rows,
                self._compile_kwargs,
            )  # fmt: skip
        return self._finder

    def _rows_touched(self) -> int:
        return self._finder.rows_touched if self._finder is not None else 0

    @property
    def trajectory_function(self) -> CompiledTrajectory:
        """The compiled trajectory (compiled on first use, once per step method)."""
        if self._trajectory is None:
            self._trajectory = fn = self._compile()
            slots = fn.slots
            # Where each per-draw input goes, looked up by name once.
            self._slots = DrawSlots(
                position=slots["position"],
                state=[slots[n] for n in self._state_names],
                step_size=slots["params.step_size"],
                refresh=slots.get("refresh"),
                refresh_noise=slots.get("refresh_noise"),
                noise=slots.get("noise"),
                rows=[slots[n] for n in self._row_names],
                row_bounds=slots.get("row_bounds"),
                update_mask=slots.get("update_mask"),
            )
        return self._trajectory

    def _compile(self) -> CompiledTrajectory:
        kernel = self.kernel
        zeros = np.zeros(self.dim, dtype=self._dtype)
        exact = None
        if kernel.energy is not None:
            exact = full_data_logp(self._model, self._flat, self.vars, self._initial_point)
        if self._grouped is not None:
            rows = GroupRowsPerStep(self._grouped)
        else:
            rows = ROWS[self.minibatch](self._flat)
        inputs, outputs = build_trajectory(
            kernel,
            self._flat,
            state=kernel.init(zeros, zeros, self.params),
            params=self.params,
            n_steps=self.n_steps,
            rows=rows,
            record_gradient=self._record_gradient,
            exact_logp=exact,
            gradient=self.gradient,
        )
        # Inside the model's context, PyMC's compile honours its check_bounds setting.
        with self._model:
            compiled = compile_trajectory(inputs, outputs, rows, self._compile_kwargs)
        if self._grouped is None:
            compiled.row_shapes = [
                rows.shape(self.n_steps, g.batch_size) for g in self._flat.groups
            ]
        return compiled

    def _group_inputs(self) -> dict[str, np.ndarray]:
        """The constants of minibatches of whole groups, by compiled input name."""
        grouping = self.grouping
        if grouping is None:
            return {}
        layout, k = grouping.layout, grouping.groups_per_step
        return {
            "group.weights": grouping.weights.astype(self._dtype),
            "group.global_weight": np.asarray(layout.n_groups / k, dtype=self._dtype),
            "group.n_rows": np.asarray(layout.n_rows, dtype=self._dtype),
        }

    def __getstate__(self) -> dict:
        # Compiled functions are rebuilt where they are unpickled (pm.sample with
        # cores > 1 sends the step method to worker processes).
        state = self.__dict__.copy()
        state["_trajectory"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        # The data arrived checked; in this process they are new objects.
        self._checked_data = self._data_fingerprint()

    # -- chain life cycle ------------------------------------------------------------

    def _check_data(self) -> None:
        """Check the minibatched data before sampling, again only when it has changed."""
        fingerprint = self._data_fingerprint()
        if fingerprint == self._checked_data:
            return
        check_minibatched_data(
            self._model,
            self._flat.groups,
            self._n_rows,
            type(self).__name__,
            allow_missing_total_size=self.allow_missing_total_size,
        )
        self._checked_data = fingerprint

    def _data_fingerprint(self) -> list[tuple[int, tuple[int, ...]]]:
        # pm.set_data replaces a shared variable's array: a new object, maybe a new shape.
        arrays = [data_value(d) for g in self._flat.groups for d in g.data]
        return [(id(a), a.shape) for a in arrays]

    def _chain_context(self) -> ChainContext:
        # Cached: built at every iteration it cost a microsecond. Rebuilt when the
        # generator is replaced (setup_chain, sampling_state).
        chain = self.__dict__.get("_chain")
        if chain is None or chain.rng is not self.rng:
            chain = self._chain = ChainContext(
                self.rng, self.dim, self._dtype, type(self).__name__, self._tune_iterations
            )
        return chain

    def _reset_chain(self) -> None:
        self.iteration = 0
        self.tune = True
        self.divergences = 0
        self.consecutive_divergences = 0
        self._warned_divergence = False
        self.kernel_state = None  # set from the first position the chain sees
        self.refresh_pending = False
        self.position_gradient = None
        self.anchor = self.estimator.initial_anchor
        self.anchor_windows = None
        self.interweaving_log_scales = None  # set where the chain starts
        self.local_step_size = local_step_size_adapter()
        self.local_curvature = None  # averaged over the tuning draws
        self.noise_inflation = None  # set from the first noise measurement (grouped steps)
        self.groups_per_step = self._initial_groups_per_step
        if self.estimator.follows_tuning:
            self.anchor_windows = TuningWindows(adaptation_windows(self._tune_iterations))
        self.noise = noise.NoiseMonitor(self.dim)
        noise_checks = ("gradient_noise", "anchor_distance") if self.kernel.measures_noise else ()
        checked = (*self.kernel.checked_stats, *noise_checks)
        self.draw_stats = {name: [] for name in checked}
        self.__dict__.pop("_chain", None)  # the tuning length may have changed
        for adapter in self._adapters:
            adapter.init_chain(self._chain_context())
        self._read_parameters()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """Re-seed from the chain's generator and reset the chain's state."""
        super().setup_chain(rng, tune, draws)
        # Samplers next to ours in a CompoundStep may still evaluate pm.Minibatch's own
        # in-graph generator: seed it from this chain too, so runs stay reproducible.
        rngs = [g.rng for g in self._flat.groups]
        if rngs:
            reseed_rngs(rngs, self.rng.integers(2**32))
        # Read once per chain: the data may have been replaced with pm.set_data.
        self._n_rows = [g.n_rows() for g in self._flat.groups]
        if self._data_fingerprint() != self._checked_data:
            self._check_data()
            self._mode_finder().set_n_rows(self._n_rows)
            # Without a new pass there, an anchor's full-data gradient would be stale.
            self.estimator.data_replaced()
        self._tune_iterations, self._draw_iterations = int(tune), int(draws)
        self._reset_chain()
        self.tune = tune > 0

    def stop_tuning(self) -> None:
        """End the tuning phase; adapters freeze what they learned."""
        self.tune = False
        for adapter in self._adapters:
            adapter.finalize()
        self._read_parameters()
        self.consecutive_divergences = 0
        self.noise.reset()  # measured afresh at the frozen step and metric

    @staticmethod
    def competence(var, has_grad):
        """Compatible with continuous variables; never chosen over NUTS automatically."""
        if var.dtype in continuous_types and has_grad:
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE

    # -- one iteration ---------------------------------------------------------------

    def draw_rows(self) -> list[np.ndarray]:
        """Rows of every minibatch of one trajectory, with replacement as pm.Minibatch."""
        shapes = self.trajectory_function.row_shapes
        integers = self.rng.integers
        return [integers(0, n, size=shape) for n, shape in zip(self._n_rows, shapes, strict=True)]

    def _normal(self, *shape: int) -> np.ndarray:
        return self.rng.standard_normal(shape).astype(self._dtype, copy=False)

    def _fresh_state(self, position: np.ndarray) -> Any:
        return self.kernel.init(position, self._normal(self.dim), self.params)

    def trajectory_inputs(self, position: np.ndarray, step_size: float) -> dict[str, Any]:
        """The inputs of one trajectory from ``position`` by name, drawn as a chain draws.

        Draws the normal noise and the minibatch rows from the chain's generator.
        """
        names = self.trajectory_function.input_names
        return dict(zip(names, self._trajectory_arguments(position, step_size), strict=True))

    def _trajectory_arguments(self, position: np.ndarray, step_size: float) -> list[Any]:
        """The compiled call's arguments, each in the slot of its input's name."""
        fn = self.trajectory_function
        if self.kernel_state is None:
            self.kernel_state = self._fresh_state(position)
            self.refresh_pending = False
        if self.anchor is not self._inputs_anchor:
            # Parameters and anchor change rarely: their slots are filled once each.
            self._arguments = [None] * len(fn.slots)
            constants = self._param_inputs | self.estimator.inputs(self.anchor)
            for name, value in (constants | self._group_inputs()).items():
                self._arguments[fn.slots[name]] = value
            self._inputs_anchor = self.anchor
        args, at = self._arguments.copy(), self._slots
        args[at.position] = position
        for k, value in zip(at.state, self.kernel_state[1:], strict=True):
            args[k] = value
        args[at.step_size] = np.asarray(step_size, dtype=self._dtype)
        if at.refresh is not None:
            refresh = self.refresh_every_trajectory or self.refresh_pending
            args[at.refresh] = _TRUE if refresh else _FALSE
            # Without a refresh its noise is not used: no draw for it.
            args[at.refresh_noise] = self._normal(self.dim) if refresh else self._unused_noise
        if at.noise is not None:
            args[at.noise] = self._normal(self.n_steps, self.dim + self.kernel.step_noise_extra)
        if self.grouping is not None:
            grouping = self.grouping
            rows, bounds, mask = grouping.layout.draw(
                self.rng, self.n_steps + 1, grouping.groups_per_step
            )
            args[at.rows[0]], args[at.row_bounds] = rows, bounds
            args[at.update_mask] = mask.astype(self._dtype, copy=False)
        else:
            integers = self.rng.integers
            for k, n, shape in zip(at.rows, self._n_rows, fn.row_shapes, strict=True):
                args[k] = integers(0, n, size=shape)
        if self._inputs_anchor is not self._checked_anchor:
            missing = [name for name, k in fn.slots.items() if args[k] is None]
            if missing:
                raise TypeError(f"missing trajectory inputs: {missing}")
            self._checked_anchor = self._inputs_anchor
        return args

    def _params_at(self, step_size: float) -> Any:
        """The parameters with the trajectory's step size (for the kernel's statistics)."""
        cached = self._params_at_key
        if cached is None or cached[0] is not self.params or cached[1] != step_size:
            self._params_at_key = (self.params, step_size)
            self._params_at_value = self.params._replace(step_size=step_size)
        return self._params_at_value

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """Run one trajectory of ``n_steps`` kernel steps from ``q0``."""
        fn, kernel = self.trajectory_function, self.kernel
        if self.iteration == 0 and self.kernel_state is None:
            default = np.concatenate([np.ravel(self._initial_point[v.name]) for v in self.vars])
            start = startup.chain_start(
                q0.data, start=self.start, mode=self.mode, default=default, rng=self.rng,
                dtype=self._dtype,
            )  # fmt: skip
            q0 = RaveledVars(start, q0.point_map_info)
        self.anchor = self.estimator.next_anchor(self.anchor, q0.data, self.iteration)
        if self._noise_probe_due():
            probes = noise.NOISE_PROBES_AT_START if self.iteration == 0 else 1
            self._measure_gradient_noise(q0.data, probes)
        step_size = self.step_size_adapter.current(self.iteration, self.rng)
        outputs = fn(*self._trajectory_arguments(q0.data, step_size))
        self.refresh_pending = False
        self.iteration += 1
        at = fn.index
        end = kernel.state_type(*[outputs[at[n]] for n in self._end_names])
        gradient = outputs[at["gradient"]] if self._record_gradient else None
        trajectory = Trajectory(
            kernel, self.params, q0.data, end, outputs, at, gradient, step_size, self.n_steps,
            self._fresh_state,
        )  # fmt: skip
        kept = self.correction.apply(trajectory, self.rng)
        if self.local_move is not None and kept.finite and not kept.diverging:
            kept = self._update_locals(kept)
        if self.interweaving is not None and kept.finite and not kept.diverging:
            kept = self._interweave(kept)
        if kept.diverging:
            self._record_divergence(step_size)
        else:
            self.consecutive_divergences = 0
        self.kernel_state, self.position_gradient = kept.state, kept.gradient
        stats: dict[str, Any] = {"step_size": step_size, "n_steps": self.n_steps, **kept.stats}
        finite_logp = kept.finite and not kept.diverging
        stats["minibatch_logp"] = float(outputs[at["minibatch_logp"]]) if finite_logp else np.nan
        stats["diverging"], stats["divergences"] = kept.diverging, self.divergences
        if kernel.stats_dtypes:
            stats.update(kernel.stats(kept.state, self._params_at(step_size)))
        if kernel.measures_noise:
            ratio = self.noise.ratio(step_size, self._noise_damping)
            stats["gradient_noise"] = ratio if self._flat.groups else 0.0
            stats["anchor_distance"] = self._anchor_distance(kept.state.position)
        if self.tune and self.anchor_windows is not None:
            self._follow_with_anchor(None if kept.diverging else kept.state.position)
        if self._learning_adapters:
            self._adapt(kept.state, kept.gradient, kept.diverging, kept.accept)
        mass = self.mass_adapter
        stats.update(mass.stats() if mass is not None else self._fixed_mass_stats)
        if not self.tune:
            self._record_draw(stats)
        return RaveledVars(kept.state.position, q0.point_map_info), [stats]

    # -- gradient noise --------------------------------------------------------------

    def _anchor_distance(self, position: np.ndarray) -> float:
        """Root-mean-square distance from the anchor, in posterior sds per coordinate.

        NaN without an anchor (plain minibatches) or a constant metric to scale it by.
        """
        if self.anchor is None or self._posterior_sd is None:
            return np.nan
        offset = (position - self.anchor.position) / self._posterior_sd
        return float(np.sqrt(np.mean(offset**2)))

    def _noise_probe_due(self) -> bool:
        if not (self.kernel.measures_noise and self._flat.groups):
            return False
        return self.noise.due(self.iteration, self.tune)

    def gradient_noise_variance(
        self, position: np.ndarray, *, rng: np.random.Generator | None = None, metric=None
    ) -> np.ndarray:
        """One measurement of the gradient estimate's whitened variance at ``position``.

        By the sampler's estimator (its ``noise_variance``), in the current metric
        unless ``metric`` is given, on rows from ``rng`` (the chain's generator by
        default).
        """
        return self.estimator.noise_variance(
            position,
            self.anchor,
            self.rng if rng is None else rng,
            self._n_rows,
            self.params.metric if metric is None else metric,
        )

    def _inflate_noisy_coordinates(self) -> None:
        """Raise the mass of the coordinates whose gradient noise is far above the rest.

        The step size is capped by the noisiest coordinate. With whole groups, the
        hierarchy's own globals (``mu``, ``sigma``) get their gradient from a few groups'
        sums of scores, weighted ``J/K``: measured on 2,000 groups of 100 rows, their
        whitened noise was 60-180 times the slopes', which moved with a step 100 times
        too small (ESS 3-15). Their mass is raised by that factor (over the median
        coordinate's noise), so they move that much slower in the kernel: an SGHMC
        with any constant positive mass keeps the posterior. The interweaving move
        still redraws them exactly after each trajectory.
        """
        previous = 1.0 if self.noise_inflation is None else self.noise_inflation
        raw = self.noise.mean() * previous  # in the metric without the inflation
        noisy = raw[raw > 0]
        if noisy.size == 0:
            return
        self.noise_inflation = np.maximum(raw / np.median(noisy), 1.0)
        self._read_parameters()
        self.noise.reset()
        self.noise.add(raw / self.noise_inflation)
        self.refresh_pending = self.kernel.refresh is not None

    @property
    def groups_per_step(self) -> int | None:
        """``K``: the groups of one minibatch of the present chain (None: rows)."""
        return None if self.grouping is None else self.grouping.groups_per_step

    @groups_per_step.setter
    def groups_per_step(self, value: int | None) -> None:
        if self.grouping is None or value == self.grouping.groups_per_step:
            return
        # A copy per chain: the estimator and the compiled inputs read it.
        self.grouping = dataclasses.replace(self.grouping, groups_per_step=int(value))
        self.estimator.grouping = self.grouping
        self._inputs_anchor = _STALE  # the weights J/K are inputs of the trajectory

    def _widen_group_minibatches(self) -> bool:
        """Draw more groups per step where their gradient noise caps the step size.

        With the per-group local move every row is read at every draw anyway, so a
        trajectory over more groups costs little more, while a step capped by noise
        mixes the globals that much slower: on 2,000 groups of 100 rows (centred), 10
        groups per step capped the step at 0.03 and left the slopes an ESS of 169-234
        in 2,000 draws, 50 groups reached the default 0.2 and gave them 838-1,752.
        ``K`` grows until the noise-limited step reaches the adapter's (the noise of a
        sample of ``K`` of ``J`` groups falls as ``(J − K)/K``), at most until a
        trajectory reads as many rows as there are. Returns whether ``K`` changed.
        """
        adapter, move = self.step_size_adapter, self.local_move
        if not isinstance(adapter, AdaptiveStepSize) or move is None or move.per_group is None:
            return False
        cap = noise_limited_step_size(
            self.noise.mean(), self._noise_damping, adapter.noise_tolerance
        )
        k, n_groups = self.grouping.groups_per_step, self.grouping.layout.n_groups
        most = max(k, n_groups // (self.n_steps + 1))
        if cap >= adapter.initial_step_size or k >= most:
            return False
        factor = adapter.initial_step_size / cap
        wanted = math.ceil(k * factor * n_groups / (n_groups - k + k * factor))
        self.groups_per_step = min(wanted, most)
        return self.groups_per_step != k

    def _check_minibatch_noise(self) -> None:
        """Before sampling, warn when plain minibatch noise forces a far smaller step.

        Measured at the mode, in the Laplace metric, on rows drawn from a fixed seed
        (deterministic for the model and its data, as the mode search); see
        :func:`~pymc_sgmcmc.sampling.noise.noise_limited_slowdown`.
        """
        rng = np.random.default_rng(0)
        metric = metric_from_inverse(self.mode.covariance, self._dtype)
        probes = [
            self.estimator.noise_variance(self.mode.position, None, rng, self._n_rows, metric)
            for _ in range(noise.NOISE_PROBES_AT_START)
        ]
        kernel, metropolis = self.kernel, self.kernel.energy is not None
        slowdown, cap, bound = noise.noise_limited_slowdown(
            np.mean(probes, axis=0),
            default_step_size=kernel.default_step_size,
            damping=self._noise_damping,
            metropolis=metropolis,
            n_steps=self.n_steps,
            target_accept=getattr(self.step_size_adapter, "target_accept", 0.8),
        )
        self.minibatch_slowdown = float(max(slowdown, 1.0))
        if slowdown > noise.NOISE_LIMITED_SLOWDOWN:
            message = noise.plain_minibatch_warning(
                type(self).__name__, slowdown=slowdown, cap=cap, bound=bound,
                default_step_size=kernel.default_step_size, metropolis=metropolis,
                n_steps=self.n_steps, batch_sizes=[g.batch_size for g in self._flat.groups],
            )  # fmt: skip
            warnings.warn(message, RuntimeWarning, stacklevel=5)

    def _add_noise_probes(self, position: np.ndarray, probes: int) -> None:
        for _ in range(probes):
            self.noise.add(self.gradient_noise_variance(position))

    def _measure_gradient_noise(self, position: np.ndarray, probes: int) -> None:
        self._add_noise_probes(position, probes)
        if self.grouping is not None and self.tune and probes == noise.NOISE_PROBES_AT_START:
            self._inflate_noisy_coordinates()
            if self._widen_group_minibatches():
                self.noise.reset()  # measured afresh on the larger minibatches
                self._add_noise_probes(position, probes)
                self._inflate_noisy_coordinates()
        mean = self.noise.mean()
        if self.tune and isinstance(self.step_size_adapter, AdaptiveStepSize) and mean is not None:
            self.step_size_adapter.set_noise_variance(mean)
            if self._estimated_noise is not None:
                self._read_parameters()

    # -- after the trajectory --------------------------------------------------------

    def _record_draw(self, stats: dict[str, Any]) -> None:
        for name, values in self.draw_stats.items():
            if name in stats:
                values.append(float(stats[name]))
        if self.iteration == self._tune_iterations + self._draw_iterations:
            for message in chain_check_messages(type(self).__name__, self.draw_stats):
                warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _update_locals(self, kept: Outcome) -> Outcome:
        """Move groups' locals by an exact, Metropolis-corrected step given the rest.

        With a test per group (a prior row by row), every group, in chunks of rows;
        otherwise ``4K`` groups drawn afresh, tested together.
        """
        move, n_groups = self.local_move, self.grouping.layout.n_groups
        position = kept.state.position
        if move.per_group is not None:
            # During tuning each group's curvature is fitted every CURVATURE_FIT_EVERY
            # moves and averaged, the average used in between; the kept draws use the
            # average: a fixed kernel, and no Hessian products.
            frozen = None
            fit = self.tune and (self.iteration - 1) % CURVATURE_FIT_EVERY == 0
            if self.local_curvature is not None and not fit:
                frozen = np.nan_to_num(self.local_curvature, nan=1.0)
            for groups in move.chunks(self.rng.permutation(n_groups)):
                result = move.move(position, groups, None, 0.0, self.rng, frozen)
                position = result.position
                if result.curvature is not None:
                    moved = np.zeros(self.dim, dtype=bool)
                    moved[self.grouping.layout.local_positions[groups].ravel()] = True
                    self.local_curvature = averaged_curvature(
                        self.local_curvature, result.curvature, moved
                    )
        else:
            groups = self.rng.permutation(n_groups)[
                : min(n_groups, LOCAL_GROUPS_PER_STEP * self.grouping.groups_per_step)
            ]
            step_size = float(self.local_step_size.current(self.tune))
            result = move.move(position, groups, self.params.metric.inverse, step_size, self.rng)
            position = result.position
            self.local_step_size.update(result.accept, self.tune)
        return kept._replace(state=kept.state._replace(position=position), gradient=None)

    def _interweave(self, kept: Outcome) -> Outcome:
        """Redraw a non-centred hierarchy's globals given its group vectors."""
        move, position = self.interweaving, kept.state.position
        if self.interweaving_log_scales is None:
            self.interweaving_log_scales = move.initial_log_scales(position)
        moved, acceptance = move.move(position, self.interweaving_log_scales, self.rng)
        if self.tune:
            self.interweaving_log_scales = adapted_log_scales(
                self.interweaving_log_scales, acceptance, self.iteration - 1
            )
        # The gradient there is the old position's: the adapters that asked for it get none.
        return kept._replace(state=kept.state._replace(position=moved), gradient=None)

    def _follow_with_anchor(self, position: np.ndarray | None) -> None:
        """At the end of a tuning window, move the anchor to the window's mean."""
        mean = self.anchor_windows.observe(position, self.iteration - 1)
        if mean is None:
            return
        anchor = self.estimator.anchor_if_finite(mean.astype(self._dtype))
        if anchor is not None:  # else the old anchor stays: it was finite
            self.anchor = anchor
            self.noise.reset()  # the estimate's noise depends on the anchor

    def _adapt(self, state, gradient, diverging: bool, accept: float) -> None:
        """Hand the finished iteration to the adapters that learn; re-read what changed."""
        learning = [a for a in self._learning_adapters if a.active(self.tune)]
        if not learning:
            return
        result = IterationResult(
            iteration=self.iteration - 1,
            tune=self.tune,
            position=state.position,
            state=state,
            gradient=gradient,
            step_size=self.step_size_adapter.nominal(self.iteration),
            diverging=diverging,
            accept=accept,
        )
        chain = self._chain_context()
        changed: frozenset[str] = frozenset()
        for adapter in learning:
            changed |= adapter.update(result, chain)
        if not changed:
            return
        self._read_parameters()
        if "metric" in changed:
            # A carried momentum must follow N(0, M) under the new mass.
            self.refresh_pending = self.kernel.refresh is not None
            # The step size was learned in the old metric's units.
            self.step_size_adapter.restart()
            self.noise.reset()
            if self._noise_probe_due():
                self._measure_gradient_noise(state.position, noise.NOISE_PROBES_AT_START)

    def _record_divergence(self, step_size: float) -> None:
        self.divergences += 1
        self.consecutive_divergences += 1
        if self.tune and isinstance(self.step_size_adapter, AdaptiveStepSize):
            # Part of tuning: the step size shrinks (dual averaging, or halving), and
            # PyMC's NUTS does not warn about tuning divergences either.
            return
        fresh = " and ".join(self.kernel.resamples)
        if self.kernel.energy is not None:
            restart = "the proposal was rejected"
        else:
            restart = "the chain restarted from its last finite state" + (
                f" with a fresh {fresh}" if fresh else ""
            )
        advice = (
            f"{type(self).__name__}: the trajectory at iteration {self.iteration} "
            f"(step_size={step_size:.3g}) turned non-finite or diverged; {restart}. "
            "Reduce step_size (or n_steps), standardise the data, or start nearer the "
            "posterior with initvals="
        )
        if self.consecutive_divergences >= self.max_consecutive_divergences:
            raise SamplingError(
                f"{advice}. It failed {self.consecutive_divergences} times in a row, so "
                "sampling stopped rather than return meaningless draws."
            )
        if not self._warned_divergence:
            warnings.warn(advice + ".", RuntimeWarning, stacklevel=2)
            self._warned_divergence = True

    # -- progress bar ----------------------------------------------------------------

    @staticmethod
    def _progressbar_config(n_chains=1):
        columns = [
            TextColumn("{task.fields[divergences]}", table_column=Column("Divergences", ratio=1)),
            TextColumn("{task.fields[step_size]:0.2g}", table_column=Column("Step size", ratio=1)),
        ]
        stats = {"divergences": [0] * n_chains, "step_size": [0] * n_chains}
        return columns, stats

    @staticmethod
    def _make_progressbar_update_functions():
        def update_stats(stats):
            return {key: stats[key] for key in ("divergences", "step_size")} | {
                "failing": stats["divergences"] > 0,
            }

        return (update_stats,)
