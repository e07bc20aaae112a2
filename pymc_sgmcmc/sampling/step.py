"""The one PyMC step method every sampler of the package is.

:class:`StochasticGradientStep` runs a kernel (:mod:`pymc_sgmcmc.kernels`) inside
``pm.sample``: it turns the model into a flat log density with its minibatches cut out,
compiles ``n_steps`` kernel steps into one function (:mod:`pymc_sgmcmc.sampling.trajectory`)
once per step method, draws all per-iteration randomness (normal noise, minibatch rows)
from the chain's generator, runs a Metropolis–Hastings test where the kernel has an
energy, restarts from the last finite state when a trajectory blows up, reports
statistics and calls its adapters (step size, mass). A public sampler is a subclass that
names its kernel and passes its parameters; it overrides nothing.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import numpy as np
import scipy.linalg
from pymc.blocking import RaveledVars, StatsType
from pymc.exceptions import SamplingError
from pymc.model import modelcontext
from pymc.pytensorf import reseed_rngs
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import continuous_types
from pytensor.tensor.variable import TensorVariable
from rich.progress import TextColumn
from rich.table import Column

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.adaptation.step_size import (
    NOISE_TOLERANCE,
    AdaptiveStepSize,
    StepSizeAdapter,
    acceptance_limited_step_size,
    gradient_noise_ratio,
    noise_limited_step_size,
)
from pymc_sgmcmc.adaptation.windowed_mass import WindowedMass
from pymc_sgmcmc.core.validation import check_choice
from pymc_sgmcmc.dynamics.hmc import metropolis_log_acceptance
from pymc_sgmcmc.gradients.full_data import Anchor
from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.kernels.base import Kernel, tree_flatten
from pymc_sgmcmc.metrics.euclidean import (
    EuclideanMetric,
    euclidean_metric,
    metric_from_inverse,
)
from pymc_sgmcmc.sampling.chain_checks import chain_check_messages
from pymc_sgmcmc.sampling.data_checks import check_minibatched_data, data_value
from pymc_sgmcmc.sampling.mode import ModeFinder, ModeResult, search_mode
from pymc_sgmcmc.sampling.model_graph import flat_logp, full_data_logp, is_sphere_valued
from pymc_sgmcmc.sampling.spheres import sphere_layout
from pymc_sgmcmc.sampling.trajectory import (
    ANCHORED_GRADIENTS,
    GRADIENTS,
    ROWS,
    CompiledTrajectory,
    build_trajectory,
    compile_trajectory,
)

MINIBATCH_MODES = tuple(ROWS)

MAX_ENERGY_ERROR = 1000.0
"""An energy error above this flags the trajectory as divergent (PyMC's ``Emax``)."""

RUNAWAY_FACTOR = 10.0
"""A trajectory of a kernel without an energy that moves this many times farther than a
stable one can is a divergence (:func:`runaway_trajectory`)."""


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


GENERIC_STATS: dict[str, tuple[Any, list]] = {
    "step_size": (np.float64, []),
    "n_steps": (np.int64, []),
    "minibatch_logp": (np.float64, []),
    "diverging": (bool, []),
    "divergences": (np.int64, []),
}
"""Statistics of every sampler."""

METROPOLIS_STATS: dict[str, tuple[Any, list]] = {
    "accept": (np.float64, []),
    "accepted": (bool, []),
    "energy_error": (np.float64, []),
    "model_logp": (np.float64, []),
}
"""Statistics of a sampler whose kernel has an energy (a Metropolis–Hastings test)."""

NOISE_PROBES_AT_START = 8
"""Gradient-noise measurements at a chain's start and after each change of the metric."""

NOISE_LIMITED_SLOWDOWN = 10.0
"""A noise-capped step this many times below the kernel's default warns before sampling."""

NOISE_PROBE_EVERY = {True: 5, False: 20}
"""Iterations between gradient-noise measurements, during tuning and after it."""


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
    noise_sum: Any
    noise_probes: int
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
        The gradient estimator (:mod:`pymc_sgmcmc.gradients`); "auto" is
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
    kernel_params : dict
        The kernel's parameters besides ``step_size``, ``metric`` and ``layout``.
    mass : float, array, optional
        The mass ``M`` of a kernel with a ``metric`` parameter (identity by default).
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
        stats = {**GENERIC_STATS, **kernel.stats_dtypes}
        if kernel.energy is not None:
            stats.update(METROPOLIS_STATS)
        if cls.mass_adapter_class is not None:
            stats.update(cls.mass_adapter_class.stats_dtypes_shapes)
        elif kernel.constant_metric:
            stats.update(WindowedMass.stats_dtypes_shapes)
        if kernel.measures_noise:
            stats["gradient_noise"] = (np.float64, [])
        cls.stats_dtypes_shapes = stats

    def __new__(cls, *args: Any, **kwargs: Any):  # noqa: D102
        # BlockedStep.__new__ assigns *all* value variables when none are given; a PyMC
        # user expects a gradient sampler to take the continuous ones and leave discrete
        # ones to pm.sample's automatic assignment, as NUTS does.
        model = modelcontext(kwargs.get("model"))
        if not args and kwargs.get("vars") is None:
            if not model.value_vars:
                raise ValueError(
                    f"{cls.__name__}: the model has no free random variables, so there is "
                    "nothing to sample. Add unobserved random variables (priors) to the "
                    "model, or use pm.sample_prior_predictive for a model of data only."
                )
            if not model.continuous_value_vars:
                raise ValueError(
                    f"{cls.__name__} samples continuous variables only, and the model has "
                    "none. Let pm.sample choose a sampler (e.g. Metropolis) for discrete "
                    "variables."
                )
            kwargs["vars"] = model.continuous_value_vars
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        minibatch: str = "step",
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
        model = modelcontext(model)
        kernel = self.kernel
        if vars is None:
            vars = model.continuous_value_vars
        vars = get_value_vars_from_user_vars(vars, model)
        _check_vars(type(self).__name__, kernel, vars, model)
        if isinstance(n_steps, bool) or not isinstance(n_steps, int | np.integer) or n_steps < 1:
            raise ValueError(
                f"n_steps must be a positive integer (integrator steps per draw), got "
                f"{n_steps!r}. The seeds use n_steps=10."
            )
        self.n_steps = int(n_steps)
        self.minibatch = check_choice(
            "minibatch",
            minibatch,
            MINIBATCH_MODES,
            "'step' draws fresh rows for every gradient, 'trajectory' one set per draw.",
        )
        self.mass_adapter = mass_adapter
        self.adapt_mass = bool(adapt_mass)
        if isinstance(step_size, str) and step_size != "auto":
            raise TypeError(
                f"step_size must be a real number, a schedule or 'auto', got {step_size!r}."
            )
        self.start = check_choice(
            "start",
            start,
            ("auto", "laplace", "initial_point"),
            "'laplace' draws each chain's start from the Laplace approximation at the mode.",
        )
        if (
            isinstance(anchor_every, bool)
            or not isinstance(anchor_every, int | np.integer)
            or anchor_every < 1
        ):
            raise ValueError(
                f"anchor_every must be a positive integer (iterations between SVRG's anchor "
                f"moves), got {anchor_every!r}."
            )
        self.anchor_every = int(anchor_every)
        if mass_adapter is not None and mass_adapter.needs_gradient and not kernel.gradient_at_end:
            raise TypeError(
                f"{type(mass_adapter).__name__} needs the gradient at the kept position, "
                f"which the {kernel.name} kernel does not evaluate."
            )
        self.refresh_every_trajectory = bool(refresh_every_trajectory)
        self._model = model
        if initial_point is None:
            initial_point = model.initial_point()
        self._initial_point = initial_point
        self._flat: FlatLogp = flat_logp(model, vars, initial_point)
        self.dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        self._dtype = self._flat.position.dtype
        self._compile_kwargs = compile_kwargs
        super().__init__(vars, self._flat.shared, blocked, rng=rng)
        self.layout = (
            sphere_layout(model, self.vars, initial_point, type(self).__name__)
            if kernel.supports_spheres
            else None
        )
        fixed = dict(kernel_params or {})
        # A noise estimate given as "auto" (SGHMC's): measured with the step size, else 0.
        self._estimated_noise = (
            kernel.estimated_noise
            if kernel.estimated_noise is not None and fixed.get(kernel.estimated_noise) == "auto"
            else None
        )
        if self._estimated_noise is not None:
            fixed[self._estimated_noise] = 0.0
        if kernel.metric == "position_dependent" and (mass is not None or mass_adapter is not None):
            raise TypeError(
                f"{type(self).__name__} moves with a position-dependent metric G(θ), so it "
                "has no constant mass: pass metric= (a function of the position) instead of "
                "mass= or a mass adapter."
            )
        if kernel.constant_metric and mass_adapter is None and "metric" not in fixed:
            fixed["metric"] = euclidean_metric(mass, self.dim, self._dtype)
        if kernel.supports_spheres:
            fixed["layout"] = self.layout
        self._fixed_params = {
            key: np.asarray(value, dtype=self._dtype) if isinstance(value, float) else value
            for key, value in fixed.items()
        }
        self._mass_given = mass is not None or "metric" in (kernel_params or {})
        # A fixed mass reports what a learned one would: no updates.
        self._fixed_mass_stats = (
            dict.fromkeys(WindowedMass.stats_dtypes_shapes, 0) if kernel.constant_metric else {}
        )
        self._trajectory: CompiledTrajectory | None = None
        self._unused_noise = np.zeros(self.dim, dtype=self._dtype)  # no refresh, no draw
        self.allow_missing_total_size = bool(allow_missing_total_size)
        self._n_rows = [g.n_rows() for g in self._flat.groups]
        self._checked_data = None
        self._check_data()
        self.gradient = self._choose_gradient(gradient, anchor)
        # The mode found before sampling (with its Laplace covariance), where needed.
        self.mode: ModeResult | None = None
        self.mode_seconds: float | None = None
        self.rows_touched_by_setup = 0
        # How many times below its default the minibatch noise caps the step (measured
        # before sampling with gradient="minibatch" and step_size="auto").
        self.minibatch_slowdown: float | None = None
        self._finder: ModeFinder | None = None
        self._initial_anchor: Anchor | None = None
        precondition = isinstance(step_size, str)
        if precondition and kernel.default_step_size is None:
            raise ValueError(
                f"{type(self).__name__} has no automatic step size yet: pass step_size= "
                "(a positive number or a schedule)."
            )
        if precondition or (self.gradient == "control_variates" and anchor is None):
            self._find_mode(dict(mode_kwargs or {}), curvature=precondition)
        if self.gradient in ANCHORED_GRADIENTS:
            self._initial_anchor = self._make_anchor(anchor)
        if precondition:
            self._precondition()
            self.step_size_adapter: StepSizeAdapter = AdaptiveStepSize(
                kernel.default_step_size,
                metropolis=kernel.energy is not None,
                damping=self._noise_damping,
                jitter=step_jitter,
                estimates_noise=self._estimated_noise,
            )
            if self.gradient == "minibatch" and self._flat.groups and _noise_checkable(kernel):
                self._check_minibatch_noise()
        else:
            self.step_size_adapter = StepSizeAdapter(step_size, jitter=step_jitter)
        self._learning_adapters = tuple(
            a for a in (self.step_size_adapter, self.mass_adapter) if a is not None and a.learns
        )
        self._tune_iterations = 0
        self._draw_iterations = 0
        self._reset_chain()

    # -- gradient estimator, mode and anchor ------------------------------------------

    def _choose_gradient(self, gradient: str, anchor: Any) -> str:
        name = type(self).__name__
        gradient = check_choice(
            "gradient",
            gradient,
            ("auto", *GRADIENTS),
            "'control_variates' anchors minibatch gradients at the mode, 'svrg' moves the "
            "anchor along the chain, 'minibatch' is the plain estimator.",
        )
        minibatched = bool(self._flat.groups)
        if gradient == "auto":
            spheres = self.layout is not None and any(on for _, _, on in self.layout.runs)
            usable = minibatched and not spheres and not self.allow_missing_total_size
            return "control_variates" if usable else "minibatch"
        if gradient in ANCHORED_GRADIENTS:
            if not minibatched:
                raise ValueError(
                    f"{name}(gradient={gradient!r}): the model has no pm.Minibatch data, so "
                    "every gradient is already exact and there is no noise to control. Use "
                    "gradient='minibatch' (the default for such a model)."
                )
            if self.allow_missing_total_size:
                raise ValueError(
                    f"{name}(gradient={gradient!r}) needs total_size= on every observed "
                    "variable fed by pm.Minibatch: without it the minibatch density is not "
                    "an estimate of the full-data one that the anchor's gradient comes from."
                )
            spheres = self.layout is not None and any(on for _, _, on in self.layout.runs)
            if gradient == "control_variates" and spheres and anchor is None:
                raise ValueError(
                    f"{name}(gradient='control_variates') needs anchor= (a point of the "
                    "model with unit vectors for the sphere variables): the mode finder "
                    "does not search on spheres. Or use gradient='svrg', whose anchor "
                    "follows the chain."
                )
        return gradient

    def _find_mode(self, options: dict[str, Any], curvature: bool) -> None:
        """Find the mode (and the Laplace covariance) before sampling."""
        options.setdefault("curvature", curvature)
        options.setdefault("progressbar", True)
        # Deterministic by default: the mode search runs before pm.sample's random_seed
        # exists, and an unseeded search gave every new step a slightly different anchor.
        options.setdefault("random_seed", 0)
        rng = np.random.default_rng(options.pop("random_seed"))
        chunk_rows = options.pop("chunk_rows", None)
        finder = self._mode_finder(chunk_rows)
        point = self._initial_point
        start = options.pop("start", None)
        if start is not None:
            point = {**point, **start}
        x0 = np.concatenate([np.ravel(point[v.name]) for v in self.vars]).astype(self._dtype)
        defaults = {"adam_steps": 500, "learning_rate": 0.05, "maxiter": 1000, "gtol": 1e-8}
        unknown = set(options) - {*defaults, "curvature", "progressbar"}
        if unknown:
            raise TypeError(f"mode_kwargs: unknown options {sorted(unknown)}.")
        self.mode = search_mode(finder, x0, point, rng=rng, **(defaults | options))
        self.mode_seconds = self.mode.seconds
        self.rows_touched_by_setup += self.mode.rows_touched

    def _mode_finder(self, chunk_rows: int | None = None) -> ModeFinder:
        if self._finder is None:
            self._finder = ModeFinder(
                self._model, self.vars, self._flat, self._n_rows, chunk_rows, self._compile_kwargs
            )
        return self._finder

    def _make_anchor(self, anchor: Any) -> Anchor | None:
        """The anchor of control variates: the given point, else the mode."""
        if anchor is None:
            if self.mode is None:
                return None  # SVRG: the chain's start, when it is known
            return Anchor(self.mode.position, self.mode.logp, self.mode.gradient)
        name = type(self).__name__
        if isinstance(anchor, ModeResult):
            position = np.asarray(anchor.position, dtype=self._dtype)
        elif isinstance(anchor, dict):
            missing = [v.name for v in self.vars if v.name not in anchor]
            if missing:
                raise ValueError(
                    f"{name}: anchor= lacks the sampled variables {missing}. Pass a point "
                    "of the model by value-variable name, e.g. pmsg.find_mode()."
                )
            parts = []
            for v in self.vars:
                value = np.asarray(anchor[v.name], dtype=self._dtype)
                expected = np.shape(self._initial_point[v.name])
                if value.shape != expected:
                    raise ValueError(
                        f"{name}: anchor[{v.name!r}] has shape {value.shape}, the variable "
                        f"{expected}. Pass a point of the model, e.g. pmsg.find_mode()."
                    )
                parts.append(value.ravel())
            position = np.concatenate(parts)
        else:
            raise TypeError(
                f"{name}: anchor= must be a point (dict by value-variable name) or the "
                f"result of pmsg.find_mode(), got {type(anchor).__name__}."
            )
        return self._anchor_at(position, "anchor=")

    def _anchor_at(self, position: np.ndarray, what: str) -> Anchor:
        """An anchor at ``position``: a full-data pass there."""
        finder = self._mode_finder()
        before = finder.rows_touched
        logp, gradient = finder.full_pass(position)
        self.rows_touched_by_setup += finder.rows_touched - before
        if not (np.isfinite(logp) and np.all(np.isfinite(gradient))):
            raise ValueError(
                f"{type(self).__name__}: the full-data log density or its gradient is not "
                f"finite at the {what} point (log p = {logp}), so control variates cannot "
                "be anchored there. Pass an anchor inside the support, e.g. "
                "pmsg.find_mode()."
            )
        return Anchor(np.asarray(position, dtype=self._dtype), float(logp), gradient)

    def _precondition(self) -> None:
        """Set the metric (or the EM's starting mass) from the Laplace covariance.

        A position-dependent metric is the sampler's own and stays: its default step
        size is in the units it sets (e.g. the Hessian's, which are the Laplace ones at
        the mode).
        """
        if not self.kernel.constant_metric:
            return
        covariance = self.mode.covariance
        if self.mass_adapter is not None:
            self.mass_adapter.precondition(covariance)
            return
        if not self._mass_given:
            if self.adapt_mass:
                self.mass_adapter = WindowedMass(covariance)
            else:
                self._fixed_params["metric"] = metric_from_inverse(covariance, self._dtype)

    # -- parameters ------------------------------------------------------------------

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
        self.params = self.kernel.params_type(**values)
        # Every array but the step size, in the compiled function's input order.
        self._param_arrays = [value for _, value in tree_flatten(self.params)[1:]]

    @property
    def mass(self):
        """The current metric (mass matrix ``M``), for kernels that have one."""
        return self.params.metric if self.kernel.metric != "none" else None

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
    def parameters(self) -> dict[str, Any]:
        """The kernel's parameters besides the step size, by name."""
        return {k: v for k, v in self.params._asdict().items() if k != "step_size"}

    # -- compilation -----------------------------------------------------------------

    @property
    def trajectory_function(self) -> CompiledTrajectory:
        """The compiled trajectory (compiled on first use, once per step method)."""
        if self._trajectory is None:
            self._trajectory = self._compile()
        return self._trajectory

    def _compile(self) -> CompiledTrajectory:
        kernel = self.kernel
        zeros = np.zeros(self.dim, dtype=self._dtype)
        template = kernel.init(zeros, zeros, self.params)
        exact = None
        if kernel.energy is not None:
            exact = full_data_logp(self._model, self._flat, self.vars, self._initial_point)
        rows = ROWS[self.minibatch](self._flat)
        inputs, outputs = build_trajectory(
            kernel,
            self._flat,
            state=template,
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
        compiled.row_shapes = [rows.shape(self.n_steps, g.batch_size) for g in self._flat.groups]
        return compiled

    @property
    def _record_gradient(self) -> bool:
        return self.mass_adapter is not None and self.mass_adapter.needs_gradient

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
        self.anchor = self._initial_anchor
        self.noise_sum = np.zeros(self.dim)
        self.noise_probes = 0
        self.draw_stats = {"kinetic_temperature": [], "thermostat": [], "gradient_noise": []}
        self.__dict__.pop("_chain", None)  # the tuning length may have changed
        for adapter in self._adapters:
            adapter.init_chain(self._chain_context())
        self._read_parameters()

    @property
    def _adapters(self) -> list[Adapter]:
        return [a for a in (self.step_size_adapter, self.mass_adapter) if a is not None]

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
        changed = self._data_fingerprint() != self._checked_data
        self._check_data()
        if changed and self._initial_anchor is not None:
            # The anchor's full-data gradient belongs to the old data: without a new
            # pass the control variates would be biased.
            self._mode_finder().set_n_rows(self._n_rows)
            self._initial_anchor = self._anchor_at(self._initial_anchor.position, "anchor")
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
        # The noise is measured afresh at the frozen step and metric.
        self.noise_sum = np.zeros(self.dim)
        self.noise_probes = 0

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

    def trajectory_inputs(self, position: np.ndarray, step_size: float) -> list:
        """The inputs of one trajectory from ``position``, drawn as a chain draws them.

        Draws the normal noise and the minibatch rows from the chain's generator. The
        list follows ``trajectory_function.input_names``.
        """
        kernel = self.kernel
        if self.kernel_state is None:
            self.kernel_state = kernel.init(position, self._normal(self.dim), self.params)
            self.refresh_pending = False
        inputs = [position, *self.kernel_state[1:], np.asarray(step_size, dtype=self._dtype)]
        inputs += self._param_arrays
        if self.gradient in ANCHORED_GRADIENTS:
            anchor = self.anchor
            inputs += [anchor.position, np.asarray(anchor.logp, dtype=self._dtype), anchor.gradient]
        refresh = kernel.refresh is not None and (
            self.refresh_every_trajectory or self.refresh_pending
        )
        if kernel.refresh is not None:
            # Without a refresh its noise is not used: no draw for it.
            noise = self._normal(self.dim) if refresh else self._unused_noise
            inputs += [np.asarray(refresh), noise]
        if kernel.step_noise:
            inputs.append(self._normal(self.n_steps, self.dim + kernel.step_noise_extra))
        return inputs + self.draw_rows()

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """Run one trajectory of ``n_steps`` kernel steps from ``q0``."""
        fn = self.trajectory_function
        kernel = self.kernel
        if self.iteration == 0 and self.kernel_state is None:
            q0 = RaveledVars(self._chain_start(q0.data), q0.point_map_info)
        if self.gradient == "svrg" and (
            self.anchor is None or (self.iteration > 0 and self.iteration % self.anchor_every == 0)
        ):
            # SVRG (Dubey et al.): move the anchor to the chain's state, a full-data pass.
            self.anchor = self._anchor_at(q0.data, "chain's")
        if self._noise_probe_due():
            self._measure_gradient_noise(
                q0.data, NOISE_PROBES_AT_START if self.iteration == 0 else 1
            )
        step_size = self.step_size_adapter.current(self.iteration, self.rng)
        outputs = fn(*self.trajectory_inputs(q0.data, step_size))
        self.refresh_pending = False
        self.iteration += 1
        n_fields = len(end_fields := outputs[: len(kernel.state_type._fields)])
        end = kernel.state_type(*end_fields)
        logp = outputs[n_fields]
        gradient = outputs[fn.index["gradient"]] if self._record_gradient else None
        stats: dict[str, Any] = {"step_size": step_size, "n_steps": self.n_steps}
        if kernel.energy is None:
            # One reduction instead of a pass per array: a sum is finite only if every
            # term is (a finite overflow to inf is a blown-up trajectory all the same).
            total = float(logp)
            for field in end_fields:
                total += field.sum()
            finite = math.isfinite(total)
            diverging = not finite or (
                kernel.constant_metric
                and runaway_trajectory(
                    self.params.metric, q0.data, end.position, step_size, self.n_steps
                )
            )
            accept = 1.0
            if diverging:
                end = kernel.init(q0.data, self._normal(self.dim), self.params)
                gradient = None
        else:
            end, gradient, finite, diverging, accept, test_stats = self._metropolis(
                fn, outputs, end, gradient
            )
            stats.update(test_stats)
        if diverging:
            self._record_divergence(step_size)
        else:
            self.consecutive_divergences = 0
        self.kernel_state = end
        self.position_gradient = gradient
        stats["minibatch_logp"] = float(logp) if finite and not diverging else np.nan
        stats["diverging"] = diverging
        stats["divergences"] = self.divergences
        if kernel.stats_dtypes:
            stats.update(kernel.stats(end, self.params._replace(step_size=step_size)))
        if kernel.measures_noise:
            stats["gradient_noise"] = self._gradient_noise_ratio(step_size)
        if self._learning_adapters:
            self._adapt(end, gradient, diverging, accept)
        if self.mass_adapter is not None:
            stats.update(self.mass_adapter.stats())
        else:
            stats.update(self._fixed_mass_stats)
        if not self.tune:
            self._record_draw(stats)
        return RaveledVars(end.position, q0.point_map_info), [stats]

    # -- gradient noise and the chain's checks ---------------------------------------

    def _noise_probe_due(self) -> bool:
        if not (self.kernel.measures_noise and self._flat.groups):
            return False
        every = NOISE_PROBE_EVERY[bool(self.tune)]
        return self.noise_probes == 0 or self.iteration % every == 0

    def gradient_noise_variance(
        self,
        position: np.ndarray,
        *,
        rng: np.random.Generator | None = None,
        metric: EuclideanMetric | None = None,
    ) -> np.ndarray:
        """One measurement of the gradient estimate's variance at ``position``, whitened.

        Two independent minibatches (of the sampler's batch sizes) give two estimates
        ``g₁``, ``g₂`` of the gradient by the sampler's estimator (plain, or anchored
        control variates); ``d = L⁻¹(g₁ − g₂)`` with ``M = LLᵀ`` the metric (the current
        one unless ``metric`` is given), and ``d²/2`` is an unbiased estimate of
        ``diag(L⁻¹VL⁻ᵀ)``. The rows come from ``rng``, the chain's generator by default.
        """
        finder = self._mode_finder()
        rng = self.rng if rng is None else rng
        batch_sizes = [g.batch_size for g in self._flat.groups]
        draws = [
            [rng.integers(0, n, size=b) for n, b in zip(self._n_rows, batch_sizes, strict=True)]
            for _ in range(2)
        ]
        first, second = (finder.subsample_pass(position, rows)[1] for rows in draws)
        difference = first - second
        if self.gradient in ANCHORED_GRADIENTS and self.anchor is not None:
            at_anchor = [finder.subsample_pass(self.anchor.position, rows)[1] for rows in draws]
            difference -= at_anchor[0] - at_anchor[1]
        metric = self.params.metric if metric is None else metric
        if metric.is_dense:
            whitened = scipy.linalg.solve_triangular(metric.factor, difference, lower=True)
        else:
            whitened = difference / metric.factor
        return np.asarray(whitened, dtype=float) ** 2 / 2.0

    def _check_minibatch_noise(self) -> None:
        """Before sampling, warn when plain minibatch noise forces a far smaller step.

        The gradient noise is measured at the mode, in the Laplace metric, on rows drawn
        from a fixed seed (deterministic for the model and its data, as the mode search).
        It caps the step size: for a kernel that injects noise, so that the gradient noise
        adds at most ``NOISE_TOLERANCE`` to the chain's temperature (which bounds the
        variance it adds, :func:`noise_limited_step_size`); for a kernel with a Metropolis
        test, so that the energy error it adds alone still lets the acceptance reach its
        target (:func:`acceptance_limited_step_size`). When that cap is
        :data:`NOISE_LIMITED_SLOWDOWN` times below the kernel's default step, the draws
        stay accurate in law but a chain moves that much less per gradient, and a run of
        ordinary length is strongly autocorrelated (measured: at 10⁵ rows, SGHMC's cap was
        19× below its default and the means were 1.7 sds off after 2 × 2,000 draws; HMC's
        min ESS was 2.6 after 2 × 3,000 draws).
        """
        rng = np.random.default_rng(0)
        metric = metric_from_inverse(self.mode.covariance, self._dtype)
        before = self._mode_finder().rows_touched
        probes = [
            self.gradient_noise_variance(self.mode.position, rng=rng, metric=metric)
            for _ in range(NOISE_PROBES_AT_START)
        ]
        self.rows_touched_by_setup += self._mode_finder().rows_touched - before
        noise = np.mean(probes, axis=0)
        if self.kernel.energy is None:
            cap = noise_limited_step_size(noise, self._noise_damping)
            bound = f"so that it adds at most {NOISE_TOLERANCE:.0%} to the chain's temperature"
            fix = "gradient='control_variates' (the default, exact at the mode)"
            cost = 1.0  # ε ∝ 1/V: the gradients scale as the slowdown
        else:
            target = self.step_size_adapter.target_accept
            cap = acceptance_limited_step_size(noise, self.n_steps, target)
            bound = (
                f"so that the energy error it adds over {self.n_steps} leapfrog steps "
                f"still lets {target:.0%} of the trajectories be accepted"
            )
            fix = (
                "gradient='control_variates' (the default: its noise at the mode is nil, "
                "and the Metropolis test keeps the draws exact)"
            )
            cost = 2.0  # ε ∝ 1/√(nV): the gradients scale as the slowdown squared
        slowdown = self.kernel.default_step_size / cap
        self.minibatch_slowdown = float(max(slowdown, 1.0))
        if not slowdown > NOISE_LIMITED_SLOWDOWN:
            return
        name = type(self).__name__
        batches = ", ".join(str(g.batch_size) for g in self._flat.groups)
        factor = slowdown**cost
        warnings.warn(
            f"{name}(gradient='minibatch'): at the mode, the minibatch gradient noise "
            f"limits the step size to {cap:.3g} ({bound}), {slowdown:.0f}x below the "
            f"default {self.kernel.default_step_size} of control-variate gradients. The "
            f"draws keep the right law, but each moves about {slowdown:.0f}x less: a run "
            "of ordinary length stays autocorrelated and its means and sds can be far off. "
            f"Use {fix}, or pay for the plain estimator with about {factor:.0f}x the "
            f"gradients: n_steps={math.ceil(self.n_steps * factor)} or a batch_size "
            f"about {factor:.0f}x the present {batches}.",
            RuntimeWarning,
            stacklevel=4,
        )

    def _measure_gradient_noise(self, position: np.ndarray, probes: int) -> None:
        for _ in range(probes):
            variance = self.gradient_noise_variance(position)
            if np.all(np.isfinite(variance)):
                self.noise_sum = self.noise_sum + variance
                self.noise_probes += 1
        if self.tune and isinstance(self.step_size_adapter, AdaptiveStepSize) and self.noise_probes:
            self.step_size_adapter.set_noise_variance(self.noise_sum / self.noise_probes)
            if self._estimated_noise is not None:
                self._read_parameters()

    def _gradient_noise_ratio(self, step_size: float) -> float:
        """``B̂/C`` of the measured noise at ``step_size`` (0 for exact gradients)."""
        if not self._flat.groups:
            return 0.0
        if not self.noise_probes:
            return np.nan
        variance = self.noise_sum / self.noise_probes
        return gradient_noise_ratio(step_size, variance, self._noise_damping)

    @property
    def _noise_damping(self) -> float:
        """``C`` of the gradient-noise ratio: the kernel's friction or diffusion, else 1."""
        name = self.kernel.noise_damping
        return float(self._fixed_params[name]) if name else 1.0

    def _record_draw(self, stats: dict[str, Any]) -> None:
        for name, values in self.draw_stats.items():
            if name in stats:
                values.append(float(stats[name]))
        if self.iteration == self._tune_iterations + self._draw_iterations:
            for message in chain_check_messages(type(self).__name__, self.draw_stats):
                warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _chain_start(self, position: np.ndarray) -> np.ndarray:
        """Where a chain starts: a draw from the Laplace approximation, or ``position``."""
        mode = self.mode
        if self.start == "initial_point" or mode is None or mode.covariance is None:
            return position
        if self.start == "auto":
            default = np.concatenate([np.ravel(self._initial_point[v.name]) for v in self.vars])
            if not np.array_equal(position, default):
                return position  # the user chose the start (initvals)
        covariance = mode.covariance
        z = self.rng.standard_normal(self.dim)
        if covariance.ndim == 1:
            offset = np.sqrt(covariance) * z
        else:
            offset = np.linalg.cholesky(covariance) @ z
        return (mode.position + offset).astype(self._dtype)

    def _metropolis(self, fn: CompiledTrajectory, outputs: list, end, gradient):
        """The Metropolis–Hastings test of a kernel with an energy, on the full data."""
        kernel = self.kernel
        n_fields = len(kernel.state_type._fields)
        first = fn.index["start.position"]
        start = kernel.state_type(*outputs[first : first + n_fields])
        energy_start = float(outputs[fn.index["energy_start"]])
        energy_end = float(outputs[fn.index["energy_end"]])
        energy_error = energy_end - energy_start
        log_accept = metropolis_log_acceptance(energy_start, energy_end)
        finite = bool(np.isfinite(end.position).all() and all(np.isfinite(a).all() for a in end))
        diverging = not finite or not energy_error < MAX_ENERGY_ERROR
        accepted = finite and np.log(self.rng.uniform()) < log_accept
        if accepted:
            kept, model_logp = end, float(outputs[fn.index["logp_end"]])
        else:
            kept, model_logp = start, float(outputs[fn.index["logp_start"]])
            if gradient is not None:
                gradient = outputs[fn.index["start_gradient"]]
        test_stats = {
            "accept": float(np.exp(log_accept)),
            "accepted": bool(accepted),
            "energy_error": energy_error if np.isfinite(energy_error) else np.inf,
            "model_logp": model_logp,
        }
        return kept, gradient, finite, diverging, float(np.exp(log_accept)), test_stats

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
        if changed:
            self._read_parameters()
            if "metric" in changed:
                if self.kernel.refresh is not None:
                    # A carried momentum must follow N(0, M) under the new mass.
                    self.refresh_pending = True
                # The step size was learned in the old metric's units.
                self.step_size_adapter.restart()
                self.noise_sum = np.zeros(self.dim)
                self.noise_probes = 0
                if self._noise_probe_due():
                    self._measure_gradient_noise(state.position, NOISE_PROBES_AT_START)

    def _record_divergence(self, step_size: float) -> None:
        self.divergences += 1
        self.consecutive_divergences += 1
        if self.tune and isinstance(self.step_size_adapter, AdaptiveStepSize):
            # Part of tuning: the step size shrinks (dual averaging, or halving), and
            # PyMC's NUTS does not warn about tuning divergences either.
            return
        fresh = " and ".join(self.kernel.resamples)
        restart = (
            f"the chain restarted from its last finite state with a fresh {fresh}"
            if self.kernel.energy is None and fresh
            else "the proposal was rejected"
            if self.kernel.energy is not None
            else "the chain restarted from its last finite state"
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


def _noise_checkable(kernel: Kernel) -> bool:
    """Whether the plain-minibatch check before sampling applies to the kernel.

    Kernels that measure their noise, and those with a Metropolis test and a constant
    mass (HMC, HMC-EM), whose acceptance the noise erodes.
    """
    return kernel.measures_noise or (kernel.energy is not None and kernel.constant_metric)


def _check_vars(sampler: str, kernel: Kernel, vars: list[TensorVariable], model) -> None:
    """Refuse variables the kernel cannot move: spheres for a Euclidean one, discrete ones."""
    if not kernel.supports_spheres:
        spheres = [v.name for v in vars if is_sphere_valued(model, v)]
        if spheres:
            raise ValueError(
                f"{sampler} moves variables on straight lines, but these live on spheres: "
                f"{spheres}. Sample them with a geodesic sampler, pmsg.SGGMC or "
                "pmsg.GSGNHT (alone, or in a list next to this one for the other variables)."
            )
    discrete = [v.name for v in vars if v.dtype not in continuous_types]
    if discrete:
        raise ValueError(
            f"{sampler} needs gradients, but these variables are discrete: {discrete}. "
            f"Assign them to another sampler, e.g. step=[pmsg.{sampler}(vars=[...continuous"
            "...]), pm.Metropolis(vars=[...discrete...])], or pass only continuous variables."
        )
