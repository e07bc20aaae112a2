"""The PyMC glue every stochastic-gradient sampler shares.

A subclass supplies its update rule (a pure function from :mod:`pymc_sgmcmc.dynamics`),
its parameters and its auxiliary state; this class compiles the fused trajectory once,
draws all per-iteration randomness (normal noise, minibatch rows) from the chain's
generator, reports statistics, and restarts from the last finite state when a trajectory
blows up.
"""

from __future__ import annotations

import math
import warnings
from abc import abstractmethod
from numbers import Real
from typing import Any, ClassVar

import numpy as np
import pytensor.tensor as pt
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

from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule, as_schedule
from pymc_sgmcmc.step_methods.model_graph import FlatLogp, flat_logp, is_sphere_valued
from pymc_sgmcmc.step_methods.trajectory import build_trajectory, compile_trajectory

MINIBATCH_MODES = ("step", "trajectory")


@dataclass_state
class StochasticGradientState(StepMethodState):
    """What a chain needs to resume exactly where it stopped."""

    iteration: int
    tune: bool
    auxiliary: list
    divergences: int
    consecutive_divergences: int


def check_positive(name: str, value: Any, fix: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, or raise an error that names it and the fix."""
    if isinstance(value, bool | str | bytes) or not isinstance(value, Real | np.ndarray):
        raise TypeError(f"{name} must be a real number, got {value!r}. {fix}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}. {fix}") from None
    bad = value < 0 if allow_zero else value <= 0
    if not math.isfinite(value) or bad:
        sign = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {sign} and finite, got {value!r}. {fix}")
    return value


class StochasticGradientStep(ArrayStepShared):
    """Base class of the samplers: one compiled call runs one whole trajectory.

    Subclasses define :meth:`_integrator_step`, :meth:`_parameters`,
    :meth:`_fresh_auxiliary` and, where the auxiliary state changes between iterations,
    :meth:`_refresh_auxiliary`.
    """

    name: ClassVar[str] = "sgmcmc"
    default_blocked = True
    _state_class = StochasticGradientState

    stats_dtypes_shapes: ClassVar[dict] = {
        "step_size": (np.float64, []),
        "n_steps": (np.int64, []),
        "minibatch_logp": (np.float64, []),
        "diverging": (bool, []),
        "divergences": (np.int64, []),
    }

    supports_spheres: ClassVar[bool] = False
    """Whether the sampler keeps sphere-valued variables on their spheres."""

    _restart_note: ClassVar[str] = ""
    """What else a restart resets, for the divergence warning."""

    max_consecutive_divergences: ClassVar[int] = 20
    """Restarts in a row after which the chain gives up with a :class:`SamplingError`."""

    def __new__(cls, *args, **kwargs):  # noqa: D102
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
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        minibatch: str = "step",
        model=None,
        blocked: bool = True,
        rng=None,
        initial_point: dict[str, np.ndarray] | None = None,
        compile_kwargs: dict | None = None,
    ) -> None:
        model = modelcontext(model)
        if vars is None:
            vars = model.continuous_value_vars
        vars = get_value_vars_from_user_vars(vars, model)
        self._check_vars(vars, model)
        self.schedule = as_schedule(step_size)
        if isinstance(n_steps, bool) or not isinstance(n_steps, int | np.integer) or n_steps < 1:
            raise ValueError(
                f"n_steps must be a positive integer (integrator steps per draw), got "
                f"{n_steps!r}. The seeds use n_steps=10."
            )
        if minibatch not in MINIBATCH_MODES:
            raise ValueError(
                f"minibatch must be one of {MINIBATCH_MODES}, got {minibatch!r}: 'step' "
                "draws fresh rows for every gradient, 'trajectory' one set per draw."
            )
        self.n_steps = int(n_steps)
        self.minibatch = minibatch
        self._model = model
        if initial_point is None:
            initial_point = model.initial_point()
        self._initial_point = initial_point
        self._flat: FlatLogp = flat_logp(model, vars, initial_point)
        self.dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        self._dtype = self._flat.position.dtype
        self._compile_kwargs = compile_kwargs
        super().__init__(vars, self._flat.shared, blocked, rng=rng)
        self._fn = None
        self._n_rows = [g.n_rows() for g in self._flat.groups]
        self._reset_chain()

    # -- validation -------------------------------------------------------------------

    def _check_vars(self, vars: list[TensorVariable], model) -> None:
        if not self.supports_spheres:
            spheres = [v.name for v in vars if is_sphere_valued(model, v)]
            if spheres:
                raise ValueError(
                    f"{type(self).__name__} moves variables on straight lines, but these "
                    f"live on spheres: {spheres}. Sample them with a geodesic sampler, "
                    "pmsg.SGGMC or pmsg.GSGNHT (alone, or in a list next to this one "
                    "for the other variables)."
                )
        discrete = [v.name for v in vars if v.dtype not in continuous_types]
        if discrete:
            raise ValueError(
                f"{type(self).__name__} needs gradients, but these variables are discrete: "
                f"{discrete}. Assign them to another sampler, e.g. "
                f"step=[pmsg.{type(self).__name__}(vars=[...continuous...]), "
                "pm.Metropolis(vars=[...discrete...])], or pass only continuous variables."
            )

    # -- what a subclass provides --------------------------------------------------------

    @abstractmethod
    def _integrator_step(self, state, grad_logp, noise, **params):
        """Symbolic update of one step: the new state (a tensor, or a tuple of them)."""

    @abstractmethod
    def _parameters(self) -> dict[str, np.ndarray]:
        """Numeric values of the update rule's parameters, besides ``step_size``."""

    def _fresh_auxiliary(self) -> list[np.ndarray]:
        """Auxiliary state (momentum, thermostat) of a new chain or after a restart."""
        return []

    def _refresh_auxiliary(self, auxiliary: list[np.ndarray]) -> list[np.ndarray]:
        """Auxiliary state at the start of a trajectory (e.g. resampled momentum)."""
        return auxiliary

    def _auxiliary_stats(self, auxiliary: list[np.ndarray]) -> dict[str, Any]:
        """Per-draw statistics of the auxiliary state."""
        return {}

    def _draw_noise(self) -> np.ndarray:
        """The ``(n_steps, dim)`` noise of one trajectory: standard normal."""
        return self.rng.standard_normal((self.n_steps, self.dim)).astype(self._dtype)

    # -- compilation ---------------------------------------------------------------------

    def _symbolic_parameters(self) -> dict[str, TensorVariable]:
        symbolic = {"step_size": pt.scalar("step_size", dtype=self._dtype)}
        for key, value in self._parameters().items():
            value = np.asarray(value)
            dtype = self._dtype if value.dtype.kind == "f" else value.dtype
            symbolic[key] = pt.tensor(key, shape=(None,) * value.ndim, dtype=dtype)
        return symbolic

    def _symbolic_auxiliary(self) -> list[TensorVariable]:
        # Only the ranks matter; the current state has them and drawing a fresh one here
        # would consume the chain's random stream whenever (and wherever) we compile.
        return [
            pt.tensor(f"auxiliary_{k}", shape=(None,) * np.ndim(a), dtype=self._dtype)
            for k, a in enumerate(self.auxiliary)
        ]

    _prepare_trajectory = None
    """Optional ``(position, auxiliary, grad_logp) -> loop state`` (see build_trajectory)."""

    _record_gradient: bool = False
    """Whether the trajectory also returns the gradient at its final position."""

    def _extra_outputs(self, inputs, outputs) -> list:
        """Further outputs of the compiled trajectory (e.g. exact log densities)."""
        return []

    def _compile(self):
        inputs, outputs = build_trajectory(
            self._flat,
            self._symbolic_auxiliary(),
            self._symbolic_parameters(),
            self._integrator_step,
            minibatch_per_step=self.minibatch == "step",
            prepare=self._prepare_trajectory,
            record_gradient=self._record_gradient,
        )
        outputs = outputs + self._extra_outputs(inputs, outputs)
        # Inside the model's context, PyMC's compile honours its check_bounds setting.
        with self._model:
            return compile_trajectory(inputs, outputs, self._compile_kwargs)

    @property
    def trajectory_function(self):
        """The compiled trajectory (compiled on first use, once per step method)."""
        if self._fn is None:
            self._fn = self._compile()
        return self._fn

    def __getstate__(self):
        # Compiled functions are rebuilt where they are unpickled (pm.sample with
        # cores > 1 sends the step method to worker processes).
        state = self.__dict__.copy()
        state["_fn"] = None
        return state

    # -- chain life cycle ----------------------------------------------------------------

    def _reset_chain(self) -> None:
        self.iteration = 0
        self.tune = True
        self.divergences = 0
        self.consecutive_divergences = 0
        self._warned_divergence = False
        self.auxiliary = self._fresh_auxiliary()
        self.position_gradient = None

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
        self._reset_chain()
        self.tune = tune > 0

    def stop_tuning(self) -> None:
        """End the tuning phase (adaptation, where a sampler has any, freezes)."""
        self.tune = False

    @staticmethod
    def competence(var, has_grad):
        """Compatible with continuous variables; never chosen over NUTS automatically."""
        if var.dtype in continuous_types and has_grad:
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE

    # -- one iteration -------------------------------------------------------------------

    def _draw_indices(self) -> list[np.ndarray]:
        """Rows of every minibatch of the trajectory, with replacement as pm.Minibatch."""
        starting_gradient = int(self._prepare_trajectory is not None)
        lead = (self.n_steps + starting_gradient,) if self.minibatch == "step" else ()
        return [
            self.rng.integers(0, n_rows, size=(*lead, group.batch_size))
            for group, n_rows in zip(self._flat.groups, self._n_rows, strict=True)
        ]

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """Run one trajectory of ``n_steps`` integrator steps from ``q0``."""
        step_size = self.schedule(self.iteration)
        auxiliary = self._refresh_auxiliary(self.auxiliary)
        params = [np.asarray(step_size, dtype=self._dtype)]
        params += [np.asarray(v) for v in self._parameters().values()]
        noise = self._draw_noise()
        outputs = self.trajectory_function(
            q0.data, *auxiliary, *params, noise, *self._draw_indices()
        )
        if self._record_gradient:
            *outputs, gradient = outputs
        position, *new_auxiliary, logp = outputs
        self.iteration += 1
        # One reduction instead of a pass per array: a sum is finite only if every term
        # is (a finite overflow to inf is a blown-up trajectory all the same).
        total = logp + position.sum() + sum(float(np.sum(a)) for a in new_auxiliary)
        # A recorded gradient needs no check of its own: it entered the momentum.
        diverging = not np.isfinite(total)
        if diverging:
            position = q0.data
            new_auxiliary = self._fresh_auxiliary()
            self._record_divergence(step_size)
        else:
            self.consecutive_divergences = 0
        if self._record_gradient:
            self.position_gradient = None if diverging else gradient
        self.auxiliary = list(new_auxiliary)
        stats = {
            "step_size": step_size,
            "n_steps": self.n_steps,
            "minibatch_logp": float(logp) if not diverging else np.nan,
            "diverging": diverging,
            "divergences": self.divergences,
        }
        stats.update(self._auxiliary_stats(self.auxiliary))
        return RaveledVars(position, q0.point_map_info), [stats]

    def _record_divergence(self, step_size: float) -> None:
        self.divergences += 1
        self.consecutive_divergences += 1
        advice = (
            f"{type(self).__name__}: the trajectory at iteration {self.iteration} "
            f"(step_size={step_size:.3g}) turned non-finite; the chain restarted from its "
            f"last finite state{self._restart_note}. Reduce step_size (or n_steps), "
            "standardise the data, or start nearer the posterior with initvals="
        )
        if self.consecutive_divergences >= self.max_consecutive_divergences:
            raise SamplingError(
                f"{advice}. It failed {self.consecutive_divergences} times in a row, so "
                "sampling stopped rather than return meaningless draws."
            )
        if not self._warned_divergence:
            warnings.warn(advice + ".", RuntimeWarning, stacklevel=2)
            self._warned_divergence = True

    # -- progress bar --------------------------------------------------------------------

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
