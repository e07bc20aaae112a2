"""Everything before the first draw: the estimator's choice, the mode, the anchor, the start.

Deterministic for a given model and data: the mode search is seeded (0 unless
``mode_kwargs`` says otherwise), because it runs when the step is built, before
``pm.sample``'s ``random_seed`` exists. What is random per chain (the Laplace start) is
drawn from the chain's generator by :func:`chain_start`.
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

import numpy as np

from pymc_sgmcmc.adaptation.base import Adapter
from pymc_sgmcmc.adaptation.step_size import AdaptiveStepSize, StepSizeAdapter
from pymc_sgmcmc.core.validation import check_choice
from pymc_sgmcmc.gradients.estimators import Grouping, MinibatchEstimator, make_estimator
from pymc_sgmcmc.gradients.full_data import Anchor
from pymc_sgmcmc.gradients.minibatch import exact_target
from pymc_sgmcmc.gradients.per_datum import PerDatumGradients
from pymc_sgmcmc.gradients.saga import table_bytes
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.sampling import kernel_parameters, noise
from pymc_sgmcmc.sampling.mode import ModeFinder, ModeResult, scale_at_start, search_mode
from pymc_sgmcmc.sampling.model_graph import full_data_logp, row_logp
from pymc_sgmcmc.sampling.trajectory import ANCHORED_GRADIENTS, GRADIENTS

MODE_SEARCH_DEFAULTS = {"adam_steps": 500, "learning_rate": 0.05, "maxiter": 1000, "gtol": 1e-8}

TWINLESS_SEARCH_ITERATIONS = 100
"""L-BFGS's iterations (instead of ``maxiter``) on a grouped model whose locals are
sampled directly and have no non-centred twin. Where such a model has no mode, the search
follows the density out of the posterior until its iterations run out, and the step then
starts without a mode anyway (:func:`start_without_mode`): on a topic model with 34,000
coordinates the search's 1,000 iterations took minutes. A search cut short where there is
a mode costs only the start's quality: the point reached is taken if it is curved
downwards, and the anchor and metric follow the tuning draws either way."""

GROUPED_STEP_SHARE = 0.5
"""A grouped step's automatic step size, as a share of the kernel's default.

The exact moves after each trajectory move a hierarchy's locals and its scale; the
trajectory's discretisation error reaches them through the slopes. At SGHMC's default
0.2, 2,000 logistic groups of lognormal sizes (23 % with 1-3 rows) had the group scale
0.105-0.129 posterior sd high in three runs; at 0.1, 0.018 sd (its Monte Carlo error
0.029), the scale's ESS per draw unchanged. The cost, measured on 2,000 balanced groups
of 100 rows, where the slopes mix slowest: 11 % of their ESS per draw; on a normal
hierarchy of 300 unbalanced groups and a radon-like linear model, no change beyond Monte
Carlo error."""
"""The mode search's settings unless ``mode_kwargs`` says otherwise."""


def choose_gradient(
    sampler: str,
    gradient: str,
    *,
    minibatched: bool,
    spheres: bool,
    allow_missing_total_size: bool,
    anchor: Any,
) -> str:
    """The gradient estimator's name: the user's choice checked, or the default.

    "auto" is "control_variates" for a model with ``pm.Minibatch`` data (and
    ``total_size``, and no sphere variables), "minibatch" otherwise.
    """
    gradient = check_choice(
        "gradient",
        gradient,
        ("auto", *GRADIENTS),
        "'control_variates' anchors minibatch gradients at the mode, 'svrg' moves the "
        "anchor along the chain, 'saga' keeps every datum's gradient, 'minibatch' is the "
        "plain estimator.",
    )
    if gradient == "auto":
        usable = minibatched and not spheres and not allow_missing_total_size
        return "control_variates" if usable else "minibatch"
    if gradient in (*ANCHORED_GRADIENTS, "saga"):
        if not minibatched:
            raise ValueError(
                f"{sampler}(gradient={gradient!r}): the model has no pm.Minibatch data, so "
                "every gradient is already exact and there is no noise to control. Use "
                "gradient='minibatch' (the default for such a model)."
            )
        if allow_missing_total_size:
            raise ValueError(
                f"{sampler}(gradient={gradient!r}) needs total_size= on every observed "
                "variable fed by pm.Minibatch: without it the minibatch density is not "
                "an estimate of the full-data one that the anchor's gradient comes from."
            )
        if gradient == "control_variates" and spheres and anchor is None:
            raise ValueError(
                f"{sampler}(gradient='control_variates') needs anchor= (a point of the "
                "model with unit vectors for the sphere variables): the mode finder "
                "does not search on spheres. Or use gradient='svrg', whose anchor "
                "follows the chain."
            )
    return gradient


def start_mode(
    sampler: str,
    finder: ModeFinder,
    vars: list,
    initial_point: dict[str, np.ndarray],
    dtype: Any,
    options: dict[str, Any],
    *,
    curvature: bool,
    centred_locals: tuple[str, ...],
    local_positions: np.ndarray | None = None,
    twinless: bool = False,
) -> ModeResult:
    """The mode (and, with ``curvature``, the Laplace covariance) before sampling.

    Where a grouped model's locals are sampled directly (``centred_locals``, their names)
    and the search fails, a :class:`CentredHierarchyError` names the funnel.
    ``local_positions``: a grouped model's local coordinates where no term reads two
    groups' locals (:func:`~pymc_sgmcmc.sampling.mode.search_mode`). ``twinless``: those
    locals have no non-centred twin (:data:`TWINLESS_SEARCH_ITERATIONS`).
    """
    options = dict(options)
    if twinless:
        options.setdefault("maxiter", TWINLESS_SEARCH_ITERATIONS)
    options.setdefault("curvature", curvature)
    options.setdefault("progressbar", True)
    rng, point, x0 = _search_start(options, initial_point, vars, dtype)
    options.pop("random_seed", None)
    options.pop("start", None)
    options.pop("chunk_rows", None)  # the finder's, already applied
    unknown = set(options) - {*MODE_SEARCH_DEFAULTS, "curvature", "progressbar", "search"}
    if unknown:
        raise TypeError(f"mode_kwargs: unknown options {sorted(unknown)}.")
    started = time.perf_counter()
    try:
        return search_mode(
            finder, x0, point, rng=rng, local_positions=local_positions,
            **(MODE_SEARCH_DEFAULTS | options),
        )  # fmt: skip
    except ValueError as error:
        if not centred_locals:
            raise
        raise CentredHierarchyError(
            centred_hierarchy_hint(sampler, error),
            centred_locals,
            seconds=time.perf_counter() - started,
        ) from None


def start_without_mode(
    passes: ModeFinder,
    vars: list,
    initial_point: dict[str, np.ndarray],
    dtype: Any,
    options: dict[str, Any],
    curvature: bool,
) -> ModeResult:
    """The initial point (or ``mode_kwargs``' ``start``) in place of a mode that does not exist.

    Seeded as :func:`start_mode`'s search is (``random_seed``, 0 by default).
    """
    rng, point, x0 = _search_start(options, initial_point, vars, dtype)
    return scale_at_start(passes, x0, point, curvature=curvature, rng=rng)


def _search_start(
    options: dict[str, Any], initial_point: dict[str, np.ndarray], vars: list, dtype: Any
) -> tuple[np.random.Generator, dict[str, np.ndarray], np.ndarray]:
    """The search's generator, start point and flat start, from ``mode_kwargs``.

    Deterministic by default (``random_seed`` 0): the search runs before ``pm.sample``'s
    ``random_seed`` exists, and an unseeded search gave every new step a slightly
    different anchor. ``start`` overrides the initial point's values.
    """
    rng = np.random.default_rng(options.get("random_seed", 0))
    point = {**initial_point, **(options.get("start") or {})}
    return rng, point, np.concatenate([np.ravel(point[v.name]) for v in vars]).astype(dtype)


class CentredHierarchyError(ValueError):
    """The mode search failed on a grouped model whose locals are sampled directly.

    ``local_names``: those locals' value variables. The step then samples the model
    non-centred where it can (:mod:`pymc_sgmcmc.sampling.non_centring`). ``searched``:
    False where it was raised before any search, because the locals have no exact move
    per group as written (the step searches the model as written if it has no twin).
    """

    def __init__(
        self,
        message: str,
        local_names: tuple[str, ...],
        searched: bool = True,
        seconds: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.local_names = local_names
        self.searched = searched
        self.seconds = seconds
        """How long the failed search took."""


def anchored_estimator(
    sampler: str,
    gradient: str,
    passes: ModeFinder,
    batch_sizes: list[int],
    *,
    anchor_every: int,
    anchor: Any,
    mode: ModeResult | None,
    grouping: Grouping | None,
    vars: list,
    initial_point: dict[str, np.ndarray],
    dtype: Any,
) -> MinibatchEstimator:
    """The gradient estimator with the anchor a chain starts from.

    The user's ``anchor=`` stays where it is; the mode found before sampling follows
    the tuning windows' draws (:class:`~pymc_sgmcmc.gradients.estimators.TuningWindows`).
    """
    estimator = make_estimator(gradient, passes, batch_sizes, sampler, anchor_every=anchor_every)
    estimator.grouping = grouping
    if gradient == "saga":
        dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        estimator.per_datum = saga_gradients(sampler, passes, dim, dtype)
    if estimator.anchored and anchor is not None:
        position = anchor_position(sampler, anchor, vars, initial_point, dtype)
        estimator.initial_anchor = estimator.anchor_at(position, "anchor=")
        estimator.follows_tuning = False
    elif estimator.anchored and mode is not None:
        estimator.initial_anchor = Anchor(mode.position, mode.logp, mode.gradient, passes.others())
    return estimator


SAGA_MEMORY_SHARE = 0.5
"""The share of the memory available when the sampler is built that SAGA's tables (one
per chain of ``pm.sample``'s default ``cores``) may take."""


def available_memory() -> int | None:
    """Bytes of memory available now (None where the system does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def saga_gradients(sampler: str, passes: ModeFinder, dim: int, dtype: Any) -> PerDatumGradients:
    """Each row's gradient for SAGA's tables, once the data and memory are checked.

    Refused for data out of core (a table row per datum), for an observed variable
    without ``total_size`` (the correction scales the table's rows as PyMC scales the
    minibatch), and where the tables of the chains run side by side would not fit.
    """
    if any(group.buffer is not None for group in passes.flat.groups):
        raise ValueError(
            f"{sampler}(gradient='saga') keeps every datum's gradient in memory, for data "
            "held in RAM: pmsg.Minibatch keeps these data out of core. Use "
            "gradient='control_variates' (the default), whose memory does not grow with "
            "the data."
        )
    model = passes.model
    with model:
        rows = row_logp(model, passes.flat, passes.vars, model.initial_point(), elementwise=True)
    if not all(all(flags) for flags in rows.scaled):
        raise ValueError(
            f"{sampler}(gradient='saga') needs total_size= on every observed variable fed "
            "by pm.Minibatch: its table's sum stands for the full data."
        )
    per_chain = table_bytes(passes.n_rows, dim, dtype)
    chains = min(4, os.cpu_count() or 1)  # pm.sample's default cores: tables side by side
    available = available_memory()
    if available is not None and chains * per_chain > SAGA_MEMORY_SHARE * available:
        raise MemoryError(
            f"{sampler}(gradient='saga') keeps every datum's gradient: {sum(passes.n_rows):,} "
            f"rows x {dim} coordinates = {per_chain / 2**20:,.0f} MiB per chain, "
            f"{chains} chains side by side, with {available / 2**20:,.0f} MiB available. "
            "Use gradient='control_variates' (the default), whose memory does not grow "
            "with the data, or gradient='svrg'."
        )
    return PerDatumGradients(rows, passes.compile_kwargs)


class StartUp(NamedTuple):
    """What the start-up hands a step before any chain (:func:`start_up`)."""

    mode: ModeResult | None
    """The mode search's result (with the Laplace covariance where it was asked)."""
    estimator: MinibatchEstimator
    """The gradient estimator, with the anchor a chain starts from."""
    step_size_adapter: StepSizeAdapter
    mass_adapter: Adapter | None
    metric: Any
    """The Laplace metric where it replaces the kernel's default, else None."""
    minibatch_slowdown: float | None
    """How many times below its default plain minibatch noise caps the step (measured
    with ``gradient="minibatch"`` and an automatic step size, else None)."""
    rows_touched: int
    """Data rows the mode search and the anchor read."""


def start_up(
    sampler: str,
    kernel: Kernel,
    *,
    gradient: str,
    passes: ModeFinder,
    step_size: Any,
    anchor: Any,
    anchor_every: int,
    mode_kwargs: dict,
    jitter: float,
    grouping: Grouping | None,
    centred_locals: tuple[str, ...],
    separable_locals: bool,
    vars: list,
    initial_point: dict[str, np.ndarray],
    dtype: Any,
    batch_sizes: list[int],
    n_rows: list[int],
    n_steps: int,
    mass_adapter: Adapter | None,
    mass_given: bool,
    adapt_mass: bool,
    damping: float,
    estimated_noise: Any,
    noise_checkable: bool,
    decoupled: np.ndarray | None = None,
    noise_whitening: Any = None,
    without_mode: bool = False,
    twinless: bool = False,
) -> StartUp:
    """Mode, anchor, estimator, metric and step-size adapter, in that order, before any chain.

    An automatic step size (a string) searches the mode with its curvature, takes the
    Laplace metric (:func:`~pymc_sgmcmc.sampling.kernel_parameters.preconditioned`) and
    dual-averages the step; control variates without an ``anchor=`` search the mode for
    their anchor. ``passes`` are the full-data and subsample passes (compiled on first
    use), which count the rows they read. ``without_mode``: the joint density has no mode
    (the search failed on a centred hierarchy without a twin): the initial point stands in
    for it, with each coordinate's scale there (:func:`~pymc_sgmcmc.sampling.mode.scale_at_start`),
    and the tuning windows move the metric and the anchor to the draws. ``twinless``: a
    grouped model's directly sampled locals have no non-centred twin (a shorter search).
    """
    automatic = isinstance(step_size, str)
    mode, rows_touched = None, 0
    if without_mode and (automatic or (gradient == "control_variates" and anchor is None)):
        mode = start_without_mode(passes, vars, initial_point, dtype, mode_kwargs, automatic)
        rows_touched += mode.rows_touched
    elif automatic or (gradient == "control_variates" and anchor is None):
        separable = grouping is not None and separable_locals
        mode = start_mode(
            sampler, passes, vars, initial_point, dtype, mode_kwargs, curvature=automatic,
            centred_locals=centred_locals, twinless=twinless,
            local_positions=grouping.layout.local_positions if separable else None,
        )  # fmt: skip
        rows_touched += mode.rows_touched
    before = passes.rows_touched
    estimator = anchored_estimator(
        sampler, gradient, passes, batch_sizes, anchor_every=anchor_every, anchor=anchor,
        mode=mode, grouping=grouping, vars=vars, initial_point=initial_point, dtype=dtype,
    )  # fmt: skip
    metric = slowdown = None
    if automatic:
        mass_adapter, metric = kernel_parameters.preconditioned(
            kernel, mode.covariance, mass_adapter=mass_adapter, mass_given=mass_given,
            adapt_mass=adapt_mass, diagonal=grouping is not None, dtype=dtype,
            decoupled=decoupled,
        )  # fmt: skip
        share = 1.0 if grouping is None else GROUPED_STEP_SHARE
        step_size_adapter: StepSizeAdapter = AdaptiveStepSize(
            share * kernel.default_step_size,
            metropolis=kernel.energy is not None,
            target_accept=kernel.target_accept,
            damping=damping,
            jitter=jitter,
            estimates_noise=estimated_noise,
        )
        if gradient == "minibatch" and batch_sizes and noise_checkable:
            slowdown = noise.check_plain_minibatch_noise(
                sampler, estimator, mode, n_rows, kernel=kernel, damping=damping,
                n_steps=n_steps, target_accept=step_size_adapter.target_accept,
                batch_sizes=batch_sizes, dtype=dtype, decoupled=decoupled,
                whitening=noise_whitening,
            )  # fmt: skip
    else:
        step_size_adapter = StepSizeAdapter(step_size, jitter=jitter)
    rows_touched += passes.rows_touched - before
    return StartUp(mode, estimator, step_size_adapter, mass_adapter, metric, slowdown, rows_touched)


def centred_hierarchy_hint(sampler: str, error: ValueError) -> str:
    """The mode search's failure on a grouped model whose locals are sampled directly.

    The step samples a centred Normal hierarchy non-centred instead of raising this
    (:mod:`pymc_sgmcmc.sampling.non_centring`); the message serves the other ones.
    """
    return (
        f"{sampler}: {error}\n\nThis model's group parameters are sampled directly "
        "(a[group_idx] with a sampled a). If a is a centred hierarchy, its joint density "
        "has no mode when groups have few rows: it grows without bound as the group scale "
        "goes to 0 with every a_j at its location (the funnel), so there is no start, mass "
        "or anchor to take from it. A centred Normal, a ~ Normal(mu, sigma), is sampled "
        "non-centred by itself; this one is not (another distribution, a transform, or a "
        "location or scale that reads a variable this step does not sample). Write it "
        "non-centred, e.g. a = mu + sigma * z with z of a's law at location 0 and scale 1 "
        "(z ~ Normal(0, 1) for a Normal a): the samplers then redraw mu and sigma given a "
        "after every draw (docs/hierarchical.md), and check R-hat."
    )


def anchor_position(
    sampler: str, anchor: Any, vars: list, initial_point: dict[str, np.ndarray], dtype: Any
) -> np.ndarray:
    """The user's ``anchor=`` (a point by value-variable name, or a mode) as a flat vector."""
    if isinstance(anchor, ModeResult):
        return np.asarray(anchor.position, dtype=dtype)
    if not isinstance(anchor, dict):
        raise TypeError(
            f"{sampler}: anchor= must be a point (dict by value-variable name) or the "
            f"result of pmsg.find_mode(), got {type(anchor).__name__}."
        )
    missing = [v.name for v in vars if v.name not in anchor]
    if missing:
        raise ValueError(
            f"{sampler}: anchor= lacks the sampled variables {missing}. Pass a point "
            "of the model by value-variable name, e.g. pmsg.find_mode()."
        )
    parts = []
    for v in vars:
        value = np.asarray(anchor[v.name], dtype=dtype)
        expected = np.shape(initial_point[v.name])
        if value.shape != expected:
            raise ValueError(
                f"{sampler}: anchor[{v.name!r}] has shape {value.shape}, the variable "
                f"{expected}. Pass a point of the model, e.g. pmsg.find_mode()."
            )
        parts.append(value.ravel())
    return np.concatenate(parts)


def chain_start(
    position: np.ndarray,
    *,
    start: str,
    mode: ModeResult | None,
    default: np.ndarray,
    rng: np.random.Generator,
    dtype: Any,
) -> np.ndarray:
    """Where a chain starts: a draw from the Laplace approximation, or ``position``.

    ``start="auto"`` draws from the Laplace approximation when a mode with its covariance
    was found and the chain starts at the model's initial point ``default`` (a user who
    chose the start with ``initvals`` keeps it).
    """
    if start == "initial_point" or mode is None or mode.covariance is None:
        return position
    if start == "auto" and not np.array_equal(position, default):
        return position
    covariance = mode.covariance
    z = rng.standard_normal(position.size)
    if covariance.ndim == 1:
        offset = np.sqrt(covariance) * z
    else:
        offset = np.linalg.cholesky(covariance) @ z
    return (mode.position + offset).astype(dtype)


def validate_kernel(
    sampler: str,
    kernel: Kernel,
    params: Any,
    model: Any,
    graph: Any,
    vars: list,
    initial_point: dict[str, np.ndarray],
) -> None:
    """The kernel's own check of its parameters on the model's full-data log density.

    At the initial point, before any chain (e.g. a Riemannian metric evaluated once:
    the kernel's ``validate``).
    """
    logp = full_data_logp(model, graph, vars, initial_point)
    point = np.concatenate([np.ravel(initial_point[v.name]) for v in vars])
    position = graph.position
    target = exact_target(logp, position)
    kernel.validate(params, target, position, point.astype(position.dtype), sampler)


def setup_summary(
    sampler: str, seconds: float, mode_seconds: float | None, rows_read: int, n_rows: int
) -> str:
    """One line on what the set-up cost: its time, the mode search's, the rows read."""
    parts = []
    if mode_seconds is not None:
        parts.append(f"mode search {mode_seconds:.1f} s")
    if n_rows and rows_read:
        parts.append(f"rows read: {rows_read / n_rows:.1f}× the data")
    detail = f" ({'; '.join(parts)})" if parts else ""
    return f"{sampler}: set-up took {seconds:.1f} s{detail}"
