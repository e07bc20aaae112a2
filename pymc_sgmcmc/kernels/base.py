"""What a kernel is: the pure description of one sampler, with no PyMC in it.

A kernel says what a sampler's state is, how a chain starts, what happens at the start
of a trajectory, what one integrator step does, and (optionally) the energy whose change
a Metropolis–Hastings test judges. The PyMC glue (:mod:`pymc_sgmcmc.sampling`) runs
``n_steps`` of :attr:`Kernel.step` inside one compiled call; it never needs to know which
sampler it runs.

States and parameters are ``NamedTuple`` s whose leaves are arrays; the glue turns each
array leaf into a named input of the compiled trajectory (:func:`tree_flatten`). Leaves
that are not numbers (a sphere layout, a metric function) are static: they are
compiled into the graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from numbers import Number
from typing import Any, NamedTuple

import numpy as np
from pytensor.graph.basic import Variable

from pymc_sgmcmc.core.arrays import Array


class Target(NamedTuple):
    """The log density a step moves on, as functions of the position.

    In the compiled trajectory both evaluate the model on the current step's minibatch
    (scaled to the full data by ``total_size``), or on all the data for an exact target.

    Attributes
    ----------
    logp : callable
        ``θ ↦ log p̃(θ)``, a scalar.
    grad : callable
        ``θ ↦ ∇log p̃(θ)``, a vector like ``θ``.
    """

    logp: Callable[[Array], Array]
    grad: Callable[[Array], Array]


State = Any
"""A kernel's state: a ``NamedTuple`` whose first field is ``position``."""

Params = Any
"""A kernel's parameters: a ``NamedTuple`` whose first field is ``step_size``."""


METRIC_KINDS = ("euclidean", "position_dependent", "none")
"""What a kernel's ``metric`` parameter holds (:attr:`Kernel.metric`)."""

STEP_INFO_REDUCTIONS: dict[str, Callable[[Any], Any]] = {
    "sum": lambda per_step: per_step.sum(axis=0),
    "max": lambda per_step: per_step.max(axis=0),
    "last": lambda per_step: per_step[-1],
}
"""How a trajectory reduces a step-info scalar over its steps (:attr:`Kernel.step_info`);
each takes the steps' values stacked along the first axis."""


@dataclass(frozen=True)
class Kernel:
    """One sampler family's update rule and what surrounds it.

    Attributes
    ----------
    name : str
        Short name, e.g. ``"sghmc"``.
    state_type, params_type : type
        ``NamedTuple`` types. The state's first field is ``position``; the parameters'
        first field is ``step_size``. A parameter field ``metric`` receives the sampler's
        metric and a field ``layout`` the sphere layout of the sampled variables.
    init : callable
        ``(position, normal, params) -> state``, with NumPy: the state of a new chain (or
        of a chain restarted after a divergence) at ``position``; ``normal`` is a standard
        normal vector like the position, for a fresh momentum. A kernel whose momentum law
        needs the model (``N(0, G(θ))``) sets :attr:`refresh_first` instead.
    step : callable
        ``(state, target, noise, params) -> state``, symbolic: one integrator step;
        ``noise`` is a standard normal vector like the position (``None`` when
        ``step_noise`` is false).
    refresh : callable, optional
        ``(state, target, normal, params) -> state``, symbolic: resample the momentum (and
        what goes with it) at the start of a trajectory; ``target`` is there for a metric
        built from the model. The glue applies it when the sampler
        resamples every trajectory, after a change of the metric, and (with
        :attr:`refresh_first`) on a new chain's first trajectory.
    refresh_first : bool
        Whether a new (or restarted) chain's first trajectory starts with
        :attr:`refresh`, because :attr:`init` cannot evaluate the model to draw the
        momentum.
    prepare : callable, optional
        ``(state, target, params) -> state``, symbolic: complete the state at the start
        of every trajectory (e.g. the gradient a leapfrog step carries, a point put back
        on its spheres). When it calls the target with per-step minibatches, it gets rows
        of its own.
    energy : callable, optional
        ``(state, target, params) -> scalar``, symbolic: the Hamiltonian. Its presence
        makes the glue run a Metropolis–Hastings test with the full-data target.
    stats : callable
        ``(state, info, params) -> dict`` of per-draw statistics, symbolic: computed
        inside the compiled trajectory from the state kept (its end, or the start of a
        rejected proposal) and the reduced :attr:`step_info`. A chain restarted after a
        divergence reports NaN for each floating-point statistic.
    stats_dtypes : dict
        ``name -> (dtype, shape)`` of those statistics.
    step_info : dict
        ``name -> reduction`` of the scalars :attr:`step` returns beside the state (then
        it returns ``(state, info)``): what the statistics need from inside the
        trajectory (an energy error, a fixed-point residual), reduced over its steps by
        ``"sum"``, ``"max"`` or ``"last"``. They are not state: nothing carries them from
        one trajectory to the next.
    checked_stats : tuple of str
        Statistics the end-of-chain checks read (:mod:`pymc_sgmcmc.sampling.chain_checks`):
        ``"kinetic_temperature"`` (averages 1 for a correct chain) and ``"thermostat"``
        (settles).
    metric : {"euclidean", "position_dependent", "none"}
        What the parameter field ``metric`` holds. "euclidean": a constant mass
        (:class:`~pymc_sgmcmc.metrics.EuclideanMetric`), which the glue builds from
        ``mass=``, sets to the Laplace covariance with ``step_size="auto"``, lets an
        adapter learn, and whitens the measured gradient noise with. "position_dependent":
        the sampler's own ``G(θ)`` (:class:`~pymc_sgmcmc.metrics.PositionDependentMetric`),
        which the glue leaves alone and refuses ``mass=`` for. "none": no metric field.
    validate : callable, optional
        ``(params, target, position, point, sampler) -> None``: refuse parameters that
        cannot work on this model, once, when the sampler is built (``target``: the
        full-data target, a function of the symbolic flat ``position``; ``point``: the
        initial position; ``sampler``: the class name, for the message).
    coordinatewise : bool
        Whether, with a diagonal metric, :attr:`step` moves each coordinate from the
        gradient and that coordinate's own state fields only (no thermostat or other
        field shared by all coordinates). Then a step can hold any coordinates in place
        (their state fields zero going in, restored coming out), which minibatches of
        whole groups need (:mod:`pymc_sgmcmc.gradients.grouped`).
    held_step : callable, optional
        ``(state, target, noise, params, moving) -> state``: :attr:`step` for a kernel
        that is not coordinatewise but can still hold coordinates in place when told
        which move (``moving``: 1 where a coordinate moves, 0 where it is held; the
        metric diagonal), e.g. a thermostat that then reads the moving coordinates
        alone. Used, as the coordinatewise step is, for minibatches of whole groups.
    estimated_noise : str, optional
        A parameter the glue sets from the measured gradient noise during tuning when
        the user passes "auto" (SGHMC's ``noise_estimate``).
    step_noise : bool
        Whether :attr:`step` takes a standard normal draw per step.
    step_noise_extra : int or callable
        Standard normal numbers a step needs beyond one per coordinate (the draw is then
        a vector of ``D + step_noise_extra``), e.g. for a thermostat's own noise; or
        ``params -> int`` where the count depends on the model (one per simplex).
    gradient_at_end : bool
        Whether the last gradient :attr:`step` evaluates is at the position it returns
        (then the glue hands it to adapters for free).
    supports_spheres : bool
        Whether the kernel keeps sphere-valued variables on their spheres.
    noise_whitening : callable, optional
        ``(params, position, state) -> whitening``: what whitens a gradient's error for
        this kernel's gradient-noise ratio (an object with ``whiten(vector)``; ``state``
        may be None), where the metric alone does not (SGRLD's simplices). None: the
        metric.
    supports_simplices : bool
        Whether the kernel moves simplex-valued variables (PyMC's ``simplex`` transform)
        on their simplices; its parameters then have a ``simplices`` field (the
        :class:`~pymc_sgmcmc.manifolds.simplex.SimplexLayout`) and a ``simplex_shape``.
    default_step_size : float, optional
        The step size of ``step_size="auto"``, in units of the posterior's scale: the
        glue preconditions the chain with the Laplace covariance at the mode (its
        ``metric``), where every direction has about unit scale. None: no default.
    tuning_parameter : str, optional
        A parameter the glue sets to 1 while the chain tunes and to 0 after (pSGLD's
        ``adapting``: its preconditioner learns only during tuning).
    target_accept : float
        With an :attr:`energy` (a Metropolis–Hastings test), the mean acceptance that
        ``step_size="auto"`` tunes the step size to: 0.8 for trajectories of several
        leapfrog steps, as PyMC's NUTS; lower for one step (MALA's optimum is ~0.574).
    noise_damping : str, optional
        The parameter that the gradient noise must stay below (SGHMC's ``friction``,
        SGNHT's ``diffusion``); None: the injected noise is the step's own (SGLD), or
        there is none (HMC). See :func:`pymc_sgmcmc.adaptation.step_size.gradient_noise_ratio`.
    compensates_noise : bool
        Whether the step makes room for the gradient's noise itself (SGFS, whose
        preconditioner holds the noise's covariance, which its adapter measures): the glue
        then neither measures the noise nor caps the step size for it.
    maximum_step_size : float, optional
        A bound the step size must stay below (SGFS's ``h < 2``); a step size given by hand
        at or above it is refused before sampling.
    """

    name: str
    state_type: type
    params_type: type
    init: Callable[..., State]
    step: Callable[..., State]
    refresh: Callable[..., State] | None = None
    prepare: Callable[..., State] | None = None
    energy: Callable[..., Array] | None = None
    stats: Callable[..., dict[str, Any]] = lambda state, info, params: {}
    stats_dtypes: dict[str, tuple[Any, list]] = field(default_factory=dict)
    step_info: dict[str, str] = field(default_factory=dict)
    refresh_first: bool = False
    step_noise: bool = True
    step_noise_extra: int | Callable[..., int] = 0
    gradient_at_end: bool = False
    supports_spheres: bool = False
    supports_simplices: bool = False
    noise_whitening: Callable[..., Any] | None = None
    default_step_size: float | None = None
    target_accept: float = 0.8
    tuning_parameter: str | None = None
    noise_damping: str | None = None
    compensates_noise: bool = False
    maximum_step_size: float | None = None
    checked_stats: tuple[str, ...] = ()
    metric: str = "none"
    estimated_noise: str | None = None
    coordinatewise: bool = False
    held_step: Callable[..., State] | None = None
    validate: Callable[..., None] | None = None

    def __post_init__(self) -> None:
        if self.state_type._fields[0] != "position":
            raise TypeError(f"{self.name}: the state's first field must be 'position'.")
        fields = self.params_type._fields
        if fields[0] != "step_size":
            raise TypeError(f"{self.name}: the parameters' first field must be 'step_size'.")
        if self.metric not in METRIC_KINDS:
            raise ValueError(f"{self.name}: metric must be one of {METRIC_KINDS}.")
        if (self.metric != "none") != ("metric" in fields):
            raise TypeError(
                f"{self.name}: metric={self.metric!r} and a 'metric' field go together."
            )
        if self.supports_spheres != ("layout" in fields):
            raise TypeError(f"{self.name}: supports_spheres and a 'layout' field go together.")
        if self.supports_simplices != ("simplices" in fields):
            raise TypeError(f"{self.name}: supports_simplices and a 'simplices' field go together.")
        unknown = {self.estimated_noise, self.noise_damping} - {None, *fields}
        if unknown:
            raise TypeError(f"{self.name}: no parameter field {sorted(unknown)}.")
        reductions = set(self.step_info.values()) - set(STEP_INFO_REDUCTIONS)
        if reductions:
            raise ValueError(
                f"{self.name}: step_info reductions must be among "
                f"{sorted(STEP_INFO_REDUCTIONS)}, not {sorted(reductions)}."
            )
        if self.refresh_first and self.refresh is None:
            raise TypeError(f"{self.name}: refresh_first needs a refresh.")

    def step_with_info(
        self, state: State, target: Target, noise: Any, params: Params
    ) -> tuple[State, dict[str, Any]]:
        """One step as ``(state, info)``, whether or not the kernel has step info."""
        if self.step_info:
            return self.step(state, target, noise, params)
        return self.step(state, target, noise, params), {}

    def step_holding(
        self, state: State, target: Target, noise: Any, params: Params, moving: Any
    ) -> tuple[State, dict[str, Any]]:
        """One step that holds the coordinates where ``moving`` is 0, as ``(state, info)``.

        The caller zeroes the held coordinates' per-coordinate fields going in and
        restores them coming out; :attr:`held_step` is told which coordinates move.
        """
        if self.held_step is not None:
            return self.held_step(state, target, noise, params, moving), {}
        return self.step_with_info(state, target, noise, params)

    def extra_normals(self, params: Params) -> int:
        """How many standard normal numbers a step takes beyond one per coordinate."""
        extra = self.step_noise_extra
        return int(extra(params) if callable(extra) else extra)

    @property
    def holds_coordinates(self) -> bool:
        """Whether a step can hold some coordinates in place (whole groups)."""
        return self.coordinatewise or self.held_step is not None

    @cached_property
    def constant_metric(self) -> bool:
        """Whether the kernel moves with a constant (Euclidean) mass."""
        return self.metric == "euclidean"

    @cached_property
    def measures_noise(self) -> bool:
        """Whether the glue measures its gradient noise (whitened by the constant mass).

        Kernels that inject noise compare the gradient noise with it; a position-dependent
        metric has no constant mass to whiten with; a kernel that compensates the noise
        measures it its own way.
        """
        return self.step_noise and self.constant_metric and not self.compensates_noise

    @cached_property
    def noise_erodes_it(self) -> bool:
        """Whether plain minibatch noise can spoil this kernel's chain unnoticed.

        Kernels that measure their noise, and those with a Metropolis test and a constant
        mass (HMC, HMC-EM), whose acceptance the noise erodes: the glue checks the noise
        of plain minibatches before sampling for them.
        """
        return self.measures_noise or (self.energy is not None and self.constant_metric)

    @cached_property
    def resamples(self) -> tuple[str, ...]:
        """Fields of the state other than the position (what a restart draws afresh)."""
        return self.state_type._fields[1:]


# -- trees of NamedTuples --------------------------------------------------------------------
#
# A small version of JAX's pytrees, for NamedTuples of arrays: enough to turn a kernel's
# state and parameters into named inputs of a compiled function and back.


def is_leaf_dynamic(value: Any) -> bool:
    """Whether a leaf is data (an input of the compiled call) rather than static."""
    if isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, np.ndarray | np.generic | Number | Variable)


def _is_node(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def tree_flatten(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """The dynamic leaves of a tree of NamedTuples as ``(dotted path, leaf)`` pairs."""
    if _is_node(tree):
        leaves = []
        for name, value in zip(tree._fields, tree, strict=True):
            leaves += tree_flatten(value, f"{prefix}.{name}" if prefix else name)
        return leaves
    return [(prefix, tree)] if is_leaf_dynamic(tree) else []


def tree_replace(tree: Any, leaves: dict[str, Any], prefix: str = "") -> Any:
    """``tree`` with the dynamic leaves at the given dotted paths replaced."""
    if _is_node(tree):
        return type(tree)(
            *(
                tree_replace(value, leaves, f"{prefix}.{name}" if prefix else name)
                for name, value in zip(tree._fields, tree, strict=True)
            )
        )
    return leaves.get(prefix, tree) if is_leaf_dynamic(tree) else tree
