"""The one PyMC step method every sampler of the package is: a thin loop over parts.

:class:`StochasticGradientStep` builds its parts from the user's options and the model
(:func:`~pymc_sgmcmc.sampling.assembly.assemble`) and runs them inside ``pm.sample``: the
**kernel** (:mod:`pymc_sgmcmc.kernels`, what one integrator step
does), the **gradient estimator** (:mod:`pymc_sgmcmc.gradients.estimators`, with its
anchor and noise probe), the **correction** (:mod:`pymc_sgmcmc.sampling.corrections`,
a Metropolis test or a restart), the **start-up** (:mod:`pymc_sgmcmc.sampling.startup`:
mode, Laplace covariance, chain starts, over the **data passes** of a
:class:`~pymc_sgmcmc.sampling.mode.ModeFinder`) and the **adapters** (step size, mass),
which initialise themselves from the start-up and are driven by a
:class:`~pymc_sgmcmc.sampling.tuning.Tuning`. Its
:class:`~pymc_sgmcmc.sampling.step_trajectory.StepTrajectory` compiles ``n_steps``
kernel steps into one function once per step method. Each chain is a
:class:`~pymc_sgmcmc.sampling.chain.Chain`, handed these parts: what it carries from draw
to draw, and its draw (``astep`` is one call of it), with all randomness from the
chain's generator. A public sampler is a subclass that names its
kernel and passes its parameters; it overrides nothing.
"""

from __future__ import annotations

import logging
import time
import warnings
from functools import partial
from typing import Any, ClassVar

import numpy as np
from pymc.blocking import RaveledVars, StatsType
from pymc.model import modelcontext
from pymc.pytensorf import reseed_rngs
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import continuous_types

from pymc_sgmcmc.adaptation.base import Adapter
from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.adaptation.step_size import AdaptiveStepSize
from pymc_sgmcmc.gradients.estimators import ChainEstimator
from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.sampling import arguments, assembly, noise, startup, worker_data
from pymc_sgmcmc.sampling.chain import Chain, ChainParts
from pymc_sgmcmc.sampling.model_graph import flat_logp, refuse_out_of_core
from pymc_sgmcmc.sampling.non_centring import (
    PRIOR_SHARE_LIMIT,
    SUFFIX,
    NonCentring,
    non_centred,
    prior_share,
)
from pymc_sgmcmc.sampling.progress import DivergencesAndStepSize
from pymc_sgmcmc.sampling.simplices import sparse_simplex_warning
from pymc_sgmcmc.sampling.statistics import GENERIC_STATS, declared_stats
from pymc_sgmcmc.sampling.trajectory import CompiledTrajectory

_log = logging.getLogger("pymc_sgmcmc")

FIRST_DRAW_REPORT_SECONDS = 1.0
"""A first draw at least this long is logged: the compiled functions are built there,
at first use, after the set-up that the step reports when it is built (measured: a
topic model's grouped step reported 4.7 s of set-up, then took 193 s for 40 draws with
empty compile caches)."""


def _taken_as_mode(options: dict[str, Any], mode: dict[str, Any]) -> dict[str, Any]:
    """``options`` whose mode search takes ``mode`` (a point by value-variable name) as is."""
    mode_kwargs = dict(options.get("mode_kwargs") or {})
    return options | {"mode_kwargs": mode_kwargs | {"start": dict(mode), "search": False}}


@dataclass_state
class StochasticGradientState(StepMethodState):
    """What a chain needs to resume exactly where it stopped."""

    chain: Any
    step_size_adapter: Any
    mass_adapter: Any
    groups: Any


class StochasticGradientStep(DivergencesAndStepSize, ArrayStepShared):
    """A PyMC step method that runs a kernel: one compiled call per draw.

    Subclasses set :attr:`kernel` (and :attr:`mass_adapter_class` when they learn the
    mass) and pass the kernel's parameters to ``__init__``; nothing is overridden.

    Parameters
    ----------
    vars, step_size, gradient, anchor, anchor_every, start, mode_kwargs, n_steps, minibatch
        As for every public sampler (their "Other Parameters").
    groups : {"auto", True, False}
        Minibatches of whole groups for a hierarchical model
        (:class:`~pymc_sgmcmc.sampling.whole_groups.WholeGroups`): "auto" where the model's
        groups are found (``a[group_idx]`` with the group index in the ``pm.Minibatch``
        call) and the sampler can hold a group's parameters in place; True insists (an
        error says why not); False draws rows as ``pm.Minibatch`` does.
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
    draws_per_call : int
        After tuning, the most draws computed in one compiled call where the step may
        (:meth:`blocks_possible`); 1 (the default) compiles no scan over draws.
    allow_missing_total_size, model, blocked, rng, initial_point, compile_kwargs
        As for every public sampler, and PyMC's step methods.
    """

    name: ClassVar[str] = "sgmcmc"
    kernel: ClassVar[Kernel]
    """The sampler's kernel."""

    mass_adapter_class: ClassVar[type[Adapter] | None] = None
    """The type of the mass adapter, for the statistics it adds."""

    fixed_n_steps: ClassVar[int | None] = None
    """The integrator steps of every draw where the sampler fixes them (MALA's one), in
    which case it takes no ``n_steps``; None where ``n_steps`` is the user's."""

    default_blocked = True
    _state_class = StochasticGradientState
    first_draw_seconds: float | None = None
    """Wall time of this step's first draw (compiling at first use included)."""
    stats_dtypes_shapes: ClassVar[dict] = dict(GENERIC_STATS)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kernel = cls.__dict__.get("kernel", getattr(cls, "kernel", None))
        if kernel is not None:
            cls.stats_dtypes_shapes = declared_stats(kernel, cls.mass_adapter_class)

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
        draws_per_call: int = 1,
        allow_missing_total_size: bool = False,
        model=None,
        blocked: bool = True,
        rng=None,
        initial_point: dict[str, np.ndarray] | None = None,
        compile_kwargs: dict | None = None,
    ) -> None:
        started = time.perf_counter()
        model, kernel, name = modelcontext(model), self.kernel, type(self).__name__
        user_model = model  # the non-centred twin, where one is sampled, replaces `model`
        vars = get_value_vars_from_user_vars(
            model.continuous_value_vars if vars is None else vars, model
        )
        arguments.check_sampled_vars(name, kernel, vars, model)
        arguments.check_step_arguments(
            name, kernel, step_size=step_size, n_steps=n_steps, minibatch=minibatch,
            start=start, anchor_every=anchor_every, mass=mass, mass_adapter=mass_adapter,
            draws_per_call=draws_per_call,
        )  # fmt: skip
        self.draws_per_call = int(draws_per_call)
        self.n_steps, self.minibatch, self.start = int(n_steps), minibatch, start
        self.refresh_every_trajectory = bool(refresh_every_trajectory)
        self.allow_missing_total_size = bool(allow_missing_total_size)
        self._initial_point = model.initial_point() if initial_point is None else initial_point
        options = dict(
            step_size=step_size, n_steps=self.n_steps, minibatch=minibatch, groups=groups,
            gradient=gradient, anchor=anchor, anchor_every=anchor_every, mode_kwargs=mode_kwargs,
            kernel_params=kernel_params, mass=mass, mass_adapter=mass_adapter,
            adapt_mass=bool(adapt_mass), refresh_every_trajectory=self.refresh_every_trajectory,
            step_jitter=step_jitter, allow_missing_total_size=self.allow_missing_total_size,
            compile_kwargs=compile_kwargs,
        )  # fmt: skip
        self.non_centring: NonCentring | None = None
        twin_first, unsearched = True, False
        while True:
            try:
                parts = self._assemble(model, vars, vars, blocked, rng, options, twin_first)
                twin, share = self._weak_centred_twin(model, vars, parts)
                break
            except startup.CentredHierarchyError as error:
                twin, share = non_centred(model, vars, set(error.local_names)), None
                if error.searched and twin is None:
                    # Locals of a location-scale law (started without a mode, a Laplace
                    # hierarchy fell into its funnel: the message names the non-centred
                    # form to write), or no start without a mode either (assembly).
                    raise
                if error.searched or (twin is not None and twin.has_rows):
                    # Rows of correlated effects: their twin has a move per group, so
                    # the search of the model as written (1,000 L-BFGS iterations into
                    # a collapsed covariance, 13 of 19 s of set-up at 10⁵ rows) is skipped.
                    unsearched = not error.searched
                    break
                twin_first = False  # no such twin: the model as written is searched
        if twin is not None:
            # A centred hierarchy without a mode in its bulk: sampled non-centred.
            self.non_centring = twin
            at_centred_mode = None
            if share is not None and "start" not in (options["mode_kwargs"] or {}):
                # The twin's own joint mode is no guide (measured: a group scale of 13.4
                # against a posterior of 1.0, after 1,108 passes' worth of rows); the
                # centred mode, mapped, is in the bulk: only its curvature is taken.
                at_centred_mode = twin.options_to_sampled(_taken_as_mode(options, parts.mode), vars)
            options = twin.options_to_sampled(options, vars)
            self._initial_point = twin.point_to_sampled(self._initial_point, vars)
            model = twin.model
            parts = None
            if at_centred_mode is not None:
                try:
                    parts = self._assemble(model, twin.vars, vars, blocked, rng, at_centred_mode)
                except ValueError:
                    parts = None  # no Laplace approximation there: the twin's own search
            if parts is None:
                parts = self._assemble(model, twin.vars, vars, blocked, rng, options)
            if unsearched:
                reason = "has rows of correlated effects, which have no exact move per group"
            elif share is None:
                reason = "has no joint mode"
            elif share > PRIOR_SHARE_LIMIT:
                reason = f"has its mode where the prior gives {share:.0%} of the locals' precision"
            else:
                reason = "has rows of correlated effects, which have no exact move per group"
            _log.info(
                "%s: the centred hierarchy of %s %s; sampled non-centred, as loc + scale * %s.",
                name, ", ".join(twin.names), reason, ", ".join(n + SUFFIX for n in twin.names),
            )  # fmt: skip
        (
            self.layout, self._n_rows, self._data, self.correction, self.gradient, self.groups,
            self.refresh_every_trajectory, self.data_passes, self.mode, self.estimator,
            self.step_size_adapter, self.mass_adapter, self.minibatch_slowdown,
            self.rows_touched_by_setup, self.tuning, self._trajectory, without_mode,
            failed_search_seconds,
        ) = parts  # fmt: skip
        self.mode_seconds = None if self.mode is None else self.mode.seconds
        self.without_mode: tuple[str, ...] = ()
        if without_mode:
            rvs = {v.name: model.values_to_rvs[v].name for v in model.value_vars}
            self.without_mode = tuple(rvs.get(n, n) for n in without_mode)
            if self.mode_seconds is not None:
                self.mode_seconds += failed_search_seconds  # the search that found none
            _log.info(
                "%s: the joint density has no mode (the centred hierarchy of %s: its group "
                "scale or concentration runs off, every local at its location); chains "
                "start around the initial point at each coordinate's scale there, and the "
                "metric and the anchor follow the tuning draws. Give tuning draws enough to "
                "reach the posterior, and check R-hat.",
                name, ", ".join(self.without_mode),
            )  # fmt: skip
        self._tune_iterations = self._draw_iterations = 0
        self._returned: np.ndarray | None = None
        self._reset_chain()
        if self.groups is not None and np.ndim(self.params.metric.inverse) == 2:
            if groups is True:
                raise ValueError(
                    f"{name}(groups=True) needs a diagonal mass: a dense one moves a held "
                    "group's parameters with the others' momenta. Pass a vector mass= "
                    "(or mass_structure='diagonal'), or groups='auto'."
                )
            self.groups = self.estimator.grouping = self.tuning.groups = None
            self._trajectory.grouped = None
        self._trajectory.blocks = self.blocks_possible()
        self.chain.parts = self._chain_parts()
        if kernel.validate is not None:
            startup.validate_kernel(
                name,
                kernel,
                self.params,
                model,
                self._flat,
                self._sampled_vars,
                self._initial_point,
            )
        beside = self._flat.groups and arguments.discrete_beside_minibatch(name, user_model)
        if beside:
            warnings.warn(beside, RuntimeWarning, skip_file_prefixes=(assembly.PACKAGE_DIRECTORY,))
        # Its concentrations are read from a Laplace covariance, which a start without a
        # mode does not have (its scales are capped at 1).
        sparse = (
            not kernel.supports_simplices and not self.without_mode
        ) and sparse_simplex_warning(
            name, model, self._sampled_vars, self._initial_point, self.mode
        )
        if sparse:
            warnings.warn(sparse, RuntimeWarning, skip_file_prefixes=(assembly.PACKAGE_DIRECTORY,))
        for buffer in self._buffers():
            # Filled again at each chain's start; meanwhile, pickling (pm.sample's chain
            # processes) does not copy it.
            buffer.release()
        self.setup_seconds = time.perf_counter() - started
        _log.info(
            startup.setup_summary(
                name, self.setup_seconds, self.mode_seconds, self.rows_touched_by_setup,
                sum(self._n_rows),
            )
        )  # fmt: skip

    def _assemble(
        self,
        model,
        vars: list,
        user_vars: list,
        blocked: bool,
        rng,
        options: dict,
        twin_first: bool = False,
    ) -> assembly.StepParts:
        """The step's parts for the value variables ``vars`` of ``model``.

        ``user_vars``: the variables ``pm.sample`` records, ``vars`` themselves unless the
        model is sampled in other coordinates (:attr:`non_centring`); ``twin_first``: see
        :func:`~pymc_sgmcmc.sampling.assembly.assemble`.
        """
        self._sampled_vars = vars
        self._flat: FlatLogp = flat_logp(model, vars, self._initial_point)
        if self.kernel.energy is not None or self.kernel.validate is not None:
            refuse_out_of_core(self._flat, type(self).__name__)  # before any pass
        self.dim = int(sum(np.size(self._initial_point[v.name]) for v in vars))
        self._dtype = self._flat.position.dtype
        super().__init__(user_vars, self._flat.shared, blocked, rng=rng)
        return assembly.assemble(
            type(self).__name__, self.kernel, model=model, vars=vars, graph=self._flat,
            initial_point=self._initial_point, dim=self.dim,
            learns_mass=self.mass_adapter_class is not None, twin_first=twin_first, **options,
        )  # fmt: skip

    def _weak_centred_twin(
        self, model, vars: list, parts: assembly.StepParts
    ) -> tuple[NonCentring | None, float | None]:
        """The non-centred twin where the mode leaves centred locals to their prior.

        Also where the locals are rows of correlated effects without a move per group.
        Returns the twin (None where the step keeps the model as written) and the mean
        share of the locals' precision their prior gives at the mode
        (:func:`~pymc_sgmcmc.sampling.non_centring.prior_share`).
        """
        mode = parts.mode
        names = assembly.centred_locals(parts.groups, vars, self._initial_point)
        if not names or mode is None or mode.covariance is None:
            return None, None
        twin = non_centred(model, vars, set(names))
        if twin is None:
            return None, None
        share = prior_share(twin, mode.position, mode.covariance)
        # Rows of correlated effects sampled as written have no exact move per group (a
        # MvNormal prior is not split by row), only the Hamiltonian move of a few groups
        # together; their twin has both that move and the interweaving.
        without_moves = parts.groups.local_move.per_group is None and twin.has_rows
        return (twin, share) if share > PRIOR_SHARE_LIMIT or without_moves else (None, None)

    def blocks_possible(self) -> bool:
        """Whether, after tuning, the step may compute several draws in one compiled call.

        Where the user asked for blocks (``draws_per_call > 1``) and nothing between two
        draws needs Python but the bookkeeping: no Metropolis
        test (a kernel with an energy), no per-group moves, no chunk buffer (its refills
        would replace rows drawn ahead), no SAGA table, no other sampler's variables in the model (a
        ``CompoundStep`` moves them between draws), and no adapter that learns after
        tuning. The trajectory is then compiled as a scan over draws (a block of one
        during tuning); its draws equal those of the single-draw function bit for bit
        (tested), so any block length gives the same draws.
        """
        tuning = self.tuning
        return (
            self.draws_per_call > 1
            and self.kernel.energy is None
            and self.groups is None
            and not self._buffers()
            and not self._flat.shared
            and self.gradient != "saga"  # its table is refreshed between draws
            and not any(adapter.active(False) for adapter in tuning.learning)
        )

    # -- parameters and what the step shows ---------------------------------------------

    @property
    def params(self) -> Any:
        """The kernel's current parameters (the step size NaN: it is set per trajectory)."""
        return self.tuning.params

    @property
    def mass(self):
        """The current metric (mass matrix ``M``), for kernels that have one."""
        return self.params.metric if self.kernel.metric != "none" else None

    @property
    def parameters(self) -> dict[str, Any]:
        """The kernel's parameters besides the step size, by name."""
        return {k: v for k, v in self.params._asdict().items() if k != "step_size"}

    @property
    def tune(self) -> bool:
        """Whether the current chain is tuning (PyMC's sampling loop sets it too)."""
        return self.chain.tune

    @tune.setter
    def tune(self, tune: bool) -> None:
        self.chain.tune = bool(tune)

    @property
    def anchor(self):
        """The current chain's control-variate anchor (``None`` without one)."""
        return self.chain.estimator.anchor

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
        """The chain's state, adapters included (PyMC's ``sampling_state`` protocol).

        Draws computed ahead are dropped first (and the generator goes back to before the
        next one's randomness): the state is that of a chain of single draws.
        """
        self.chain.drop_block(self.rng)
        return ArrayStepShared.sampling_state.fget(self)

    @sampling_state.setter
    def sampling_state(self, state: StochasticGradientState) -> None:
        ArrayStepShared.sampling_state.fset(self, state)
        self.tuning.follow_tuning(self.chain.tune)
        self.tuning.read_parameters()  # the adapters may own parameters, e.g. the mass
        self.chain.drop_block(None)  # computed ahead from the state replaced
        self._returned = None

    @property
    def schedule(self):
        """The step-size schedule: a function of the iteration."""
        return self.step_size_adapter.schedule

    @schedule.setter
    def schedule(self, schedule) -> None:
        self.step_size_adapter.schedule = schedule

    # -- compiled pieces -------------------------------------------------------------

    @property
    def trajectory_function(self) -> CompiledTrajectory:
        """The compiled trajectory (compiled on first use, once per step method)."""
        return self._trajectory.compiled(self.params)

    def __getstate__(self) -> dict:
        # pm.sample(cores > 1) with a "spawn" or "forkserver" start method sends the step
        # method to each worker process, compiled trajectory included: a worker only
        # links it again (core/compilation.py's LinkedWhereUnpickled), where it spent
        # 53 s compiling RHMC's.
        self.trajectory_function  # noqa: B018 - compiled once, before pickling
        if worker_data.pickled_for_pymc_workers() and worker_data.share_data_with_workers(
            self.__dict__
        ):
            self._data.trust()  # the same values, in new arrays
        return self.__dict__.copy()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._data.trust()  # the data arrived checked; in this process, new objects
        for windows in self._trajectory.windows:
            if windows is not None:
                windows.trust()  # its copy arrived shuffled

    # -- chain life cycle ------------------------------------------------------------

    def _buffers(self) -> list:
        """The chunk buffers behind out-of-core minibatches (:func:`pymc_sgmcmc.Minibatch`)."""
        return [g.buffer for g in self._flat.groups if g.buffer is not None]

    def _chain_parts(self) -> ChainParts:
        default = np.concatenate(
            [np.ravel(self._initial_point[v.name]) for v in self._sampled_vars]
        )
        start = partial(
            startup.chain_start, start=self.start, mode=self.mode, default=default,
            dtype=self._dtype,
        )  # fmt: skip
        return ChainParts(
            self.kernel, self._trajectory, self.correction, self.tuning, self.groups, start,
            self.refresh_every_trajectory, bool(self._flat.groups), type(self).__name__,
            self.dim, self._dtype, self.draws_per_call,
        )  # fmt: skip

    def _reset_chain(self) -> None:
        estimator = ChainEstimator(
            self.estimator, self.dim, self._tune_iterations,
            measures_noise=self.kernel.measures_noise and bool(self._flat.groups),
            n_rows=self._n_rows, dtype=self._dtype,
        )  # fmt: skip
        self.chain = Chain(
            self._chain_parts(), estimator, self._n_rows, self._tune_iterations,
            self._draw_iterations,
        )  # fmt: skip
        self._returned = None
        if self.groups is not None:
            self.groups.reset_chain()
        self.tuning.init_chain(self.chain.context(self.rng))
        self.tuning.read_parameters()

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """Re-seed from the chain's generator and reset the chain's state."""
        super().setup_chain(rng, tune, draws)
        # Samplers next to ours in a CompoundStep may still evaluate pm.Minibatch's own
        # in-graph generator: seed it from this chain too, so runs stay reproducible.
        rngs = [g.rng for g in self._flat.groups]
        if rngs:
            reseed_rngs(rngs, self.rng.integers(2**32))
        for buffer in self._buffers():
            buffer.reset(self.rng)  # its chunks chosen from the chain's generator
        # Read once per chain: the data may have been replaced with pm.set_data.
        self._n_rows = [g.n_rows() for g in self._flat.groups]
        for windows in self._trajectory.windows:
            if windows is not None:
                windows.follow_data()
        if self._data.check(self._n_rows):
            self.data_passes.set_n_rows(self._n_rows)
            # Without a new pass there, an anchor's full-data gradient would be stale.
            self.estimator.data_replaced()
        self._tune_iterations, self._draw_iterations = int(tune), int(draws)
        self._reset_chain()
        self.chain.tune = tune > 0

    def stop_tuning(self) -> None:
        """End the tuning phase; adapters freeze what they learned."""
        self.chain.tune = False
        self.tuning.finalize()
        self.tuning.read_parameters()
        adapter = self.tuning.step_size_adapter
        warned = (self.minibatch_slowdown or 0.0) >= noise.NOISE_LIMITED_SLOWDOWN  # before
        if isinstance(adapter, AdaptiveStepSize) and not adapter.metropolis and not warned:
            message = noise.tuned_step_warning(
                type(self).__name__, start=adapter.initial_step_size, tuned=adapter.frozen,
                shrink=adapter.shrink, noise_cap=adapter.noise_cap,
            )  # fmt: skip
            if message:
                warnings.warn(message, RuntimeWarning, stacklevel=2)
        self.chain.divergence_log.consecutive = 0
        self.chain.estimator.noise.reset()  # measured afresh at the frozen step and metric

    @staticmethod
    def competence(var, has_grad):
        """Compatible with continuous variables; never chosen over NUTS automatically."""
        if var.dtype in continuous_types and has_grad:
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE

    # -- one iteration ---------------------------------------------------------------

    def draw_rows(self) -> list[np.ndarray]:
        """Rows of every minibatch of one trajectory, as the compiled call takes them.

        For each ``pm.Minibatch`` call, indices into its rows in :attr:`row_orders`'
        order: windows of consecutive rows where it has an order, else rows drawn with
        replacement as ``pm.Minibatch`` draws them.
        """
        return self._trajectory.draw_rows(self.params, self.rng, self._n_rows)

    @property
    def row_orders(self) -> list[np.ndarray | None]:
        """For each ``pm.Minibatch`` call, the data's row behind each index of its rows.

        The order of the shuffled copy that the trajectory reads its minibatches from
        (:mod:`pymc_sgmcmc.sampling.row_windows`); None where it reads the data's rows.
        """
        return [None if w is None else w.order for w in self._trajectory.windows]

    def trajectory_inputs(self, position: np.ndarray, step_size: float) -> dict[str, Any]:
        """The inputs of one trajectory from ``position`` by name, drawn as a chain draws.

        Draws the normal noise and the minibatch rows from the chain's generator.
        """
        names = self.trajectory_function.input_names
        arguments = self._trajectory.arguments(
            self.params, position, step_size=step_size, **self.chain.inputs(position, self.rng)
        )
        return dict(zip(names, arguments, strict=True))

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """Run one trajectory of ``n_steps`` kernel steps from ``q0`` (a chain's draw).

        Where ``q0`` is the draw this step returned last, the chain goes on from its own
        kept position (in the sampled coordinates, with no round trip through the model's),
        and a block of draws computed ahead goes on being handed out.
        """
        centring, chain = self.non_centring, self.chain
        returned = self._returned
        continued = (
            returned is not None
            and chain.kernel_state is not None
            and np.array_equal(q0.data, returned)
        )
        if continued:
            position = chain.kernel_state.position
        else:
            position = q0.data if centring is None else centring.to_sampled(q0.data)
        first = self.first_draw_seconds is None
        started = time.perf_counter() if first else 0.0
        position, stats = chain.advance(position, self.rng, continued=continued)
        if first:
            self._log_first_draw(time.perf_counter() - started)
        position = position if centring is None else centring.to_model(position)
        self._returned = position.copy()
        return RaveledVars(position, q0.point_map_info), [stats]

    def _log_first_draw(self, seconds: float) -> None:
        """Keep the first draw's time; log it where it is long (compiling at first use)."""
        self.first_draw_seconds = seconds
        if seconds >= FIRST_DRAW_REPORT_SECONDS:
            _log.info(
                f"{type(self).__name__}: the first draw took {seconds:.1f} s (functions "
                "compiled at first use: the trajectory and the moves that follow it)"
            )

    # -- gradient noise --------------------------------------------------------------

    def gradient_noise_variance(
        self, position: np.ndarray, *, rng: np.random.Generator | None = None, metric=None
    ) -> np.ndarray:
        """One measurement of the gradient estimate's whitened variance at ``position``.

        By the sampler's estimator (its ``noise_variance``), in the current metric
        unless ``metric`` is given, on rows from ``rng`` (the chain's generator by
        default).
        """
        return self.chain.noise_variance(position, self.rng if rng is None else rng, metric)
