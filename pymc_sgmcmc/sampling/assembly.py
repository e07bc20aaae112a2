"""A step method's parts, assembled from the user's options and the model before any chain.

:func:`assemble` is the recipe a :class:`~pymc_sgmcmc.sampling.step.StochasticGradientStep`
follows when it is built, in this order: the sphere layout, the kernel's fixed parameters,
the data checks, the correction, the gradient estimator's name, the groups of a
hierarchical model, the data passes and the start-up (mode, anchor, adapters), the
adapters' loop and the compiled trajectory. The step stores what it returns.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, NamedTuple

import numpy as np

from pymc_sgmcmc.adaptation.base import Adapter
from pymc_sgmcmc.adaptation.step_size import StepSizeAdapter
from pymc_sgmcmc.gradients.estimators import MinibatchEstimator
from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.manifolds.sphere import SphereLayout
from pymc_sgmcmc.sampling import kernel_parameters, startup
from pymc_sgmcmc.sampling.corrections import DivergenceRestart, MetropolisTest, correction_for
from pymc_sgmcmc.sampling.data_checks import CheckedData
from pymc_sgmcmc.sampling.groups import group_minibatches
from pymc_sgmcmc.sampling.mode import ModeFinder, ModeResult
from pymc_sgmcmc.sampling.model_graph import flat_slices
from pymc_sgmcmc.sampling.non_centring import centred_normal, location_scale_locals
from pymc_sgmcmc.sampling.row_windows import row_windows
from pymc_sgmcmc.sampling.simplices import simplex_layout, simplex_shapes
from pymc_sgmcmc.sampling.spheres import sphere_layout
from pymc_sgmcmc.sampling.step_trajectory import StepTrajectory
from pymc_sgmcmc.sampling.tuning import Tuning
from pymc_sgmcmc.sampling.whole_groups import WholeGroups

PACKAGE_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""Warnings from set-up name the first line outside the package (the user's)."""


class StepParts(NamedTuple):
    """What :func:`assemble` hands a step method."""

    layout: SphereLayout | None
    """Where the sphere-valued variables are in the flat position (kernels on spheres)."""
    n_rows: list[int]
    """Rows of the data behind each ``pm.Minibatch`` call."""
    data: CheckedData
    """The minibatched data's checks (again when ``pm.set_data`` replaced an array)."""
    correction: MetropolisTest | DivergenceRestart
    gradient: str
    """The gradient estimator's name."""
    groups: WholeGroups | None
    """Minibatches of whole groups, where a hierarchical model's groups were found."""
    refresh_every_trajectory: bool
    data_passes: ModeFinder
    """The full-data and subsample passes (compiled at their first use)."""
    mode: ModeResult | None
    estimator: MinibatchEstimator
    step_size_adapter: StepSizeAdapter
    mass_adapter: Adapter | None
    minibatch_slowdown: float | None
    """How many times below its default the minibatch noise caps the step."""
    rows_touched_by_setup: int
    tuning: Tuning
    trajectory: StepTrajectory
    without_mode: tuple[str, ...] = ()
    """The locals (value-variable names) of a centred hierarchy whose joint density has no
    mode, where the step started without one (:func:`start_up_or_without_mode`)."""
    failed_search_seconds: float = 0.0
    """How long the mode search that found no mode took."""


def assemble(
    sampler: str,
    kernel: Kernel,
    *,
    model: Any,
    vars: list,
    graph: FlatLogp,
    initial_point: dict[str, np.ndarray],
    dim: int,
    learns_mass: bool,
    step_size: Any,
    n_steps: int,
    minibatch: str,
    groups: bool | str,
    gradient: str,
    anchor: Any,
    anchor_every: int,
    mode_kwargs: dict[str, Any] | None,
    kernel_params: dict[str, Any] | None,
    mass: Any,
    mass_adapter: Adapter | None,
    adapt_mass: bool,
    refresh_every_trajectory: bool,
    step_jitter: float,
    allow_missing_total_size: bool,
    compile_kwargs: dict | None,
    twin_first: bool = False,
) -> StepParts:
    """Build a step method's parts from its options (the step's parameters) and the model.

    ``graph`` is the model's log density on the flat position of ``vars`` (``dim``
    scalars); ``learns_mass``: the sampler's class learns its mass from the draws.
    ``twin_first``: where a grouped model's locals are sampled directly and have no exact
    move per group, raise :class:`~pymc_sgmcmc.sampling.startup.CentredHierarchyError`
    before the mode search (the step then tries their non-centred twin). Where the search
    finds no mode, the start is made without one if the model allows it
    (:func:`start_up_or_without_mode`).
    """
    dtype = graph.position.dtype
    layout = sphere_layout(model, vars, initial_point, sampler) if kernel.supports_spheres else None
    simplices = simplex_layout(model, vars, initial_point) if kernel.supports_simplices else None
    fixed, estimated_noise = kernel_parameters.fixed_parameters(
        kernel, kernel_params, mass=mass, mass_adapter=mass_adapter, layout=layout, dim=dim,
        dtype=dtype, simplices=simplices,
    )  # fmt: skip
    n_rows = [g.n_rows() for g in graph.groups]
    data = CheckedData(
        model, graph.groups, sampler, allow_missing_total_size=allow_missing_total_size
    )
    data.check(n_rows)
    gradient = startup.choose_gradient(
        sampler, gradient, minibatched=bool(graph.groups),
        spheres=layout is not None and any(on for _, _, on in layout.runs),
        allow_missing_total_size=allow_missing_total_size, anchor=anchor,
    )  # fmt: skip
    if (
        gradient == "minibatch"
        and graph.groups
        and kernel.metric == "position_dependent"
        and kernel.energy is None
    ):
        warnings.warn(
            plain_minibatch_metric_warning(sampler),
            RuntimeWarning,
            skip_file_prefixes=(PACKAGE_DIRECTORY,),
        )
    found = group_minibatches(
        model, graph, vars, initial_point, groups=groups, kernel=kernel,
        minibatch=minibatch, sampler=sampler, learns_mass=learns_mass,
        compile_kwargs=compile_kwargs, gradient=gradient,
    )  # fmt: skip
    mode_kwargs = dict(mode_kwargs or {})
    passes = ModeFinder(
        model, vars, graph, n_rows, mode_kwargs.pop("chunk_rows", None), compile_kwargs
    )
    whole_groups = (
        None if found is None else WholeGroups(*found, compile_kwargs, full_pass=passes.full_pass)
    )
    direct = centred_locals(whole_groups, vars, initial_point)
    if twin_first and direct and whole_groups.local_move.per_group is None:
        raise startup.CentredHierarchyError(
            f"{sampler}: the locals {', '.join(direct)} have no exact move per group as "
            "written.", direct, searched=False,
        )  # fmt: skip
    # Locals sampled directly that the step could not sample non-centred: where their
    # joint density has no mode the step starts without one, so the search is cut short.
    twinless = bool(direct) and not any(
        centred_normal(model, v, vars) for v in vars if v.name in direct
    )
    if whole_groups is not None:
        # A group's parameters move about once per trajectory: a momentum refreshed
        # at every trajectory would never carry their gradient into their position
        # (measured: a random walk, intercepts 10 sds off). It persists instead.
        refresh_every_trajectory = False
    shapes_at = None
    if simplices is not None:

        def shapes_at(mode: ModeResult | None) -> np.ndarray:
            return np.asarray(
                simplex_shapes(
                    simplices, model=model, vars=vars, point=initial_point,
                    mode_position=None if mode is None else mode.position,
                    covariance=None if mode is None else mode.covariance,
                    given=fixed.get("simplex_shape", "auto"),
                ),
                dtype=dtype,
            )  # fmt: skip

    noise_whitening = None
    if kernel.noise_whitening is not None:

        def noise_whitening(mode: ModeResult, metric: Any) -> Any:
            shapes = {} if shapes_at is None else {"simplex_shape": shapes_at(mode)}
            params = kernel.params_type(
                **{**fixed, "metric": metric, "step_size": np.nan, **shapes}
            )
            return kernel.noise_whitening(params, mode.position, None)

    # The kernel's friction or diffusion: C of the gradient-noise ratio (else 1).
    damping = float(fixed[kernel.noise_damping]) if kernel.noise_damping else 1.0
    start, fallback = start_up_or_without_mode(
        sampler, kernel, model=model, twinless=twinless, gradient=gradient, passes=passes,
        step_size=step_size, anchor=anchor, anchor_every=anchor_every, mode_kwargs=mode_kwargs,
        jitter=step_jitter, grouping=None if whole_groups is None else whole_groups.grouping,
        centred_locals=direct,
        # a prior row by row: then no term reads two groups' locals. A second grouping
        # factor's locals would be globals of the grouped Hessian, whose dense part
        # grows with their square: such models take the general search.
        separable_locals=whole_groups is not None
        and whole_groups.local_move.per_group is not None
        and not whole_groups.secondary_moves,
        vars=vars, initial_point=initial_point, dtype=dtype,
        batch_sizes=[g.batch_size for g in graph.groups], n_rows=n_rows, n_steps=n_steps,
        mass_adapter=mass_adapter, mass_given=mass is not None or "metric" in (kernel_params or {}),
        adapt_mass=adapt_mass, damping=damping, estimated_noise=estimated_noise,
        noise_checkable=kernel.noise_erodes_it,
        decoupled=None if simplices is None else simplices.simplex_indices,
        noise_whitening=noise_whitening,
    )  # fmt: skip
    if start.metric is not None:
        fixed["metric"] = start.metric
    if shapes_at is not None:
        fixed["simplex_shape"] = shapes_at(start.mode)
    tuning = Tuning(
        start.step_size_adapter, start.mass_adapter, kernel=kernel, damping=damping,
        n_steps=n_steps, groups=whole_groups, fixed_parameters=fixed, dtype=dtype,
        noise_feeds_parameters=estimated_noise is not None,
    )  # fmt: skip
    trajectory = StepTrajectory(
        kernel, graph, model=model, vars=vars, initial_point=initial_point, dim=dim,
        n_steps=n_steps, minibatch=minibatch,
        grouped=None if whole_groups is None else whole_groups.grouped,
        record_gradient=tuning.record_gradient, gradient=gradient,
        compile_kwargs=compile_kwargs,
        windows=row_windows(
            graph.groups, gradient=gradient, whole_groups=whole_groups is not None,
            available=startup.available_memory(),
        ),
    )  # fmt: skip
    return StepParts(
        layout, n_rows, data, correction_for(kernel), gradient, whole_groups,
        refresh_every_trajectory, passes, start.mode, start.estimator, start.step_size_adapter,
        start.mass_adapter, start.minibatch_slowdown, start.rows_touched, tuning, trajectory,
        () if fallback is None else fallback.local_names,
        0.0 if fallback is None else fallback.seconds,
    )  # fmt: skip


def start_up_or_without_mode(
    sampler: str, kernel: Kernel, *, model: Any, twinless: bool, **options: Any
) -> tuple[startup.StartUp, startup.CentredHierarchyError | None]:
    """:func:`~pymc_sgmcmc.sampling.startup.start_up`, and without a mode where none is.

    Where the search fails on a grouped model whose directly sampled locals have no
    non-centred twin (``twinless``) and are not of a location-scale law, the start is
    made again from the initial point (``without_mode``): the graphs, groups and passes
    built so far serve it as they are. Returns the start and the search's error (None
    where the search found a mode). Location-scale locals (a Laplace hierarchy) keep the
    error, whose message names the non-centred form: started without a mode, a centred
    Laplace hierarchy fell into its funnel (docs/hierarchical.md). If the start without
    a mode fails too, the search's error is raised.
    """
    try:
        return startup.start_up(sampler, kernel, twinless=twinless, **options), None
    except startup.CentredHierarchyError as error:
        names = set(error.local_names)
        if not (error.searched and twinless):
            raise
        if location_scale_locals(model, options["vars"], names):
            raise
        try:
            start = startup.start_up(sampler, kernel, without_mode=True, **options)
        except ValueError:
            raise error from None
        return start, error


def centred_locals(
    whole_groups: WholeGroups | None, vars: list, initial_point: dict[str, np.ndarray]
) -> tuple[str, ...]:
    """Names of a grouped model's locals where they are sampled directly (no interweaving)."""
    if whole_groups is None or whole_groups.interweaving is not None:
        return ()
    places = flat_slices(initial_point, vars)
    return tuple(name for name, where in places.items() if whole_groups.is_local[where].all())


def plain_minibatch_metric_warning(sampler: str) -> str:
    """A position-dependent metric with no Metropolis test, on plain minibatch gradients."""
    return (
        f"{sampler}(gradient='minibatch'): its metric G(θ) and the derivatives of "
        "log |G(θ)| in its dynamics are computed on each step's minibatch, and their noise "
        "does not average out: on a 2-D logistic regression of 2,000 rows with batches of "
        "100 the draws' means were 7 posterior sds off (15 with the supplement's frictions), "
        "where the default gradient='control_variates' is within 0.1. Use the default, or "
        "RHMC, whose Metropolis test corrects it."
    )
