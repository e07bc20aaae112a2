"""``find_mode``: the posterior mode of a PyMC model, and its curvature, on large data.

Two phases, as a user with a million rows would do by hand:

1. Adam on minibatches (only when the model has ``pm.Minibatch`` data): a few hundred
   cheap steps bring a start that may be hundreds of sds away (PyMC's initial point, flat
   priors, raw-scale predictors) near the mode.
2. SciPy's L-BFGS on full-data passes (:class:`~pymc_sgmcmc.gradients.full_data.FullDataPass`,
   streamed over row chunks) to the exact mode.

The curvature is the Hessian there (the Laplace approximation's precision): dense from
forward differences of the gradient on a subsample of rows when the dimension is small,
or its diagonal from random probes on full-data passes otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.model import modelcontext
from pymc.util import get_value_vars_from_user_vars
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pymc_sgmcmc.core.validation import check_choice
from pymc_sgmcmc.gradients.full_data import FullDataPass, SubsampleGradient, WeightedRows
from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.sampling.model_graph import flat_logp, row_logp
from pymc_sgmcmc.sampling.optimize import (
    adam_ascent_step,
    adam_init,
    grouped_hessian_by_differences,
    hessian_by_differences,
    hessian_diagonal_by_forward_differences,
    hessian_diagonal_by_probes,
    laplace_covariance,
)

DENSE_CURVATURE_MAX_DIM = 200
"""Up to this dimension the curvature is a dense Hessian (D + 1 subsample gradients)."""

GROUPED_CURVATURE_MAX_GLOBALS = DENSE_CURVATURE_MAX_DIM
"""Up to this many global coordinates a grouped model's Hessian is differenced whole.

It costs ``2 (r + G)`` full-data gradients and a ``D × G`` array: a topic model whose
topics are global (28,000 coordinates) asked for 7 GiB and as many passes.
"""

CURVATURE_SUBSAMPLE_ROWS = 200_000
"""Rows per ``pm.Minibatch`` call on which a dense Hessian is differenced."""

SUBSAMPLE_FIRST_ROWS = 1_000_000
"""From this many rows (and up to ``DENSE_CURVATURE_MAX_DIM`` dimensions) the search climbs
a subsample's density first and reaches the mode by Newton steps on full-data passes."""


class ModeResult(dict):
    """A point of the model (a ``dict`` by value-variable name) with what was found there.

    Pass it where PyMC takes a point (``initvals=``) or as a sampler's ``anchor=``.

    Attributes
    ----------
    position : ndarray
        The mode in the flat order of the sampled variables.
    logp : float
        The full-data log density there.
    gradient : ndarray
        The full-data gradient there (near zero at a mode).
    covariance : ndarray or None
        The Laplace covariance ``(−H)⁻¹``: a matrix, or its diagonal ``1/(−H_ii)`` as a
        vector in high dimensions; None unless the curvature was asked for.
    converged : bool
        Whether L-BFGS met its tolerance.
    message : str
        L-BFGS's message.
    rows_touched : int
        Rows of data read (Adam's minibatches, full passes, curvature).
    seconds : float
        Wall time, compilation included.
    """

    position: np.ndarray
    logp: float
    gradient: np.ndarray
    covariance: np.ndarray | None
    converged: bool
    message: str
    rows_touched: int
    seconds: float

    def __repr__(self) -> str:
        return f"ModeResult({dict.__repr__(self)}, logp={self.logp:.6g})"


@dataclass
class ModeFinder:
    """The compiled pieces of the mode search for one model and set of variables.

    Built once per step method (or per :func:`find_mode` call); the step method keeps it
    for SVRG's anchor moves and for the anchor's full-data gradient. Nothing is built or
    compiled before the first pass.
    """

    model: Any
    vars: list
    flat: FlatLogp
    n_rows: list[int]
    chunk_rows: int | None = None
    compile_kwargs: dict | None = None
    rows_touched: int = 0
    _full: FullDataPass | None = field(default=None, init=False)
    _subsample: SubsampleGradient | None = field(default=None, init=False)
    _on_rows: WeightedRows | None = field(default=None, init=False)

    @cached_property
    def _rows(self) -> Any:
        # Built on first use: a step whose start reads no data builds no row graph.
        return row_logp(self.model, self.flat, self.vars, self.model.initial_point())

    def set_n_rows(self, n_rows: list[int]) -> None:
        """The data were replaced (``pm.set_data``): passes read this many rows now."""
        self.n_rows[:] = n_rows
        if self._full is not None:
            self._full.n_rows = list(n_rows)

    def _function(self) -> WeightedRows:
        """The one compiled function both passes call (compiled on first use)."""
        if self._on_rows is None:
            with self.model:
                self._on_rows = WeightedRows(self._rows, self.compile_kwargs)
        return self._on_rows

    @property
    def full(self) -> FullDataPass:
        """The full-data pass."""
        if self._full is None:
            self._full = FullDataPass(
                self._rows, self.flat.groups, self.n_rows, self.chunk_rows,
                function=self._function(),
            )  # fmt: skip
        return self._full

    @property
    def subsample(self) -> SubsampleGradient:
        """The subsample gradient."""
        if self._subsample is None:
            self._subsample = SubsampleGradient(
                self._rows, self.flat.groups, function=self._function()
            )
        return self._subsample

    def others(self) -> dict[str, np.ndarray]:
        """The current values of the variables the step does not sample, by name (copies).

        Another sampler of a ``CompoundStep`` sets them (``ArrayStepShared``) before each
        of the step's draws; every pass reads them.
        """
        return {
            value.name: np.array(shared.get_value(borrow=True), dtype=shared.dtype)
            for value, shared in self.flat.shared.items()
        }

    @contextmanager
    def others_at(self, values: dict[str, np.ndarray]) -> Iterator[None]:
        """Inside the block, passes read the variables the step does not sample at ``values``."""
        shared = {value.name: var for value, var in self.flat.shared.items()}
        saved = {name: shared[name].get_value(borrow=True) for name in values}
        try:
            for name, value in values.items():
                shared[name].set_value(value, borrow=True)
            yield
        finally:
            for name, value in saved.items():
                shared[name].set_value(value, borrow=True)

    def draw_rows(
        self, rng: np.random.Generator, n_rows: list[int], sizes: list[Any]
    ) -> list[np.ndarray]:
        """Rows of each minibatch group, ``sizes[k]`` of group ``k``'s ``n_rows[k]``.

        Indices into the group's data as the compiled functions read them (into the
        chunk buffer where the data are out-of-core).
        """
        return [
            group.draw(rng, n, size)
            for group, n, size in zip(self.flat.groups, n_rows, sizes, strict=True)
        ]

    def full_pass(self, position: np.ndarray) -> tuple[float, np.ndarray]:
        """Full-data log density and gradient, counting the rows read."""
        self.rows_touched += sum(self.n_rows)
        return self.full(position)

    def subsample_pass(self, position: np.ndarray, rows: list[np.ndarray]):
        """Log density and gradient on ``rows``, counting them."""
        self.rows_touched += sum(len(r) for r in rows)
        return self.subsample(position, rows)

    def on_fixed_rows(self, rows: list[np.ndarray]) -> Callable[[np.ndarray], tuple]:
        """:meth:`subsample_pass` on the same ``rows`` at every call, gathered once."""
        subsample = self.subsample
        gathered = subsample.gather(rows)
        count = sum(len(r) for r in rows)

        def gradient_pass(position: np.ndarray) -> tuple[float, np.ndarray]:
            self.rows_touched += count
            return subsample.on_rows(position, gathered)

        return gradient_pass


def find_mode(
    model=None,
    vars=None,
    *,
    start: dict[str, np.ndarray] | None = None,
    curvature: bool | str = False,
    adam_steps: int = 500,
    learning_rate: float = 0.05,
    maxiter: int = 1000,
    gtol: float = 1e-8,
    search: bool = True,
    chunk_rows: int | None = None,
    progressbar: bool = True,
    random_seed: int | np.random.Generator | None = 0,
    compile_kwargs: dict | None = None,
) -> ModeResult:
    """Find the posterior mode of a PyMC model, streaming its data.

    Adam on minibatches first (when the model has ``pm.Minibatch`` data: each step
    reads one minibatch of every call, as a sampler's gradient does), then L-BFGS on
    full-data passes that read the data in row chunks (views, never copies) through the
    model's own log density. Works on the unconstrained (value) variables, like PyMC's
    samplers.

    Parameters
    ----------
    model : pymc.Model, optional
        The model (the one in context by default).
    vars : list, optional
        Variables to optimise (all continuous free variables by default); the others stay
        at the model's initial point.
    start : dict, optional
        Starting point by value-variable name; the model's initial point by default.
    curvature : bool or {"dense", "diagonal"}, default False
        Also compute the Laplace covariance at the mode (``ModeResult.covariance``).
        ``True`` picks dense up to 200 dimensions (forward differences of the gradient on
        up to 200,000 rows per ``pm.Minibatch`` call, D + 1 gradients) and a diagonal above
        (``1/(−H_ii)`` with ``H_ii`` from 64 random probes on full-data passes).
    adam_steps : int, default 500
        Minibatch Adam steps before L-BFGS, at most one pass over the data's rows (0 to
        skip; skipped without minibatches).
    learning_rate : float, default 0.05
        Adam's initial rate (in units of the variables), decaying as ``1/√(1 + t/50)``.
    maxiter : int, default 1000
        L-BFGS iterations at most.
    gtol : float, default 1e-8
        L-BFGS's tolerance on the gradient of ``log p / rows`` (per row, so that it does
        not depend on the size of the data).
    search : bool, default True
        False takes ``start`` as the mode: no Adam, Newton or L-BFGS steps, only the log
        density, the gradient and (with ``curvature``) the Laplace covariance there.
    chunk_rows : int, optional
        Rows per chunk of a full-data pass (about 64 MiB of data by default).
    progressbar : bool, default True
        Show the phases and the L-BFGS iterations.
    random_seed : int, Generator or None, default 0
        For Adam's minibatches and the curvature probes. The fixed default makes the
        mode a function of the model and its data alone, so that a sampler that searches
        it before ``pm.sample`` (whose ``random_seed`` does not exist yet) reproduces its
        draws; ``None`` draws fresh entropy.
    compile_kwargs : dict, optional
        Passed to PyMC's ``compile``.

    Returns
    -------
    ModeResult
        The mode as a point (a dict by value-variable name) with ``position``, ``logp``,
        ``gradient``, ``covariance``, ``converged``, ``rows_touched`` and ``seconds``.

    Raises
    ------
    ValueError
        For bad options, or when the log density is not finite at the start.
    """
    model = modelcontext(model)
    if vars is None:
        vars = model.continuous_value_vars
    vars = get_value_vars_from_user_vars(vars, model)
    point = model.initial_point() if start is None else {**model.initial_point(), **start}
    flat = flat_logp(model, vars, point)
    n_rows = [g.n_rows() for g in flat.groups]
    finder = ModeFinder(model, vars, flat, n_rows, chunk_rows, compile_kwargs)
    x0 = DictToArrayBijection.map({v.name: np.asarray(point[v.name]) for v in vars}).data
    return search_mode(
        finder,
        x0,
        point,
        curvature=curvature,
        adam_steps=adam_steps,
        learning_rate=learning_rate,
        maxiter=maxiter,
        gtol=gtol,
        search=search,
        progressbar=progressbar,
        rng=np.random.default_rng(random_seed),
    )


def search_mode(
    finder: ModeFinder,
    x0: np.ndarray,
    point: dict[str, np.ndarray],
    *,
    curvature: bool | str,
    adam_steps: int,
    learning_rate: float,
    maxiter: int,
    gtol: float,
    progressbar: bool,
    rng: np.random.Generator,
    local_positions: np.ndarray | None = None,
    search: bool = True,
) -> ModeResult:
    """:func:`find_mode` on a prepared :class:`ModeFinder`, from the flat point ``x0``.

    ``local_positions`` (``(n_groups, r)``, a hierarchical model's local coordinates, as
    :class:`~pymc_sgmcmc.gradients.grouped.GroupLayout` holds them): where given, no row
    and no prior term reads the locals of two groups, and a diagonal curvature is
    differenced one kind of local and one global at a time
    (:func:`~pymc_sgmcmc.sampling.optimize.grouped_hessian_by_differences`).
    ``search=False``: ``x0`` is taken as the mode (one pass, then the curvature there).
    """
    started = time.perf_counter()
    kind = _curvature_kind(curvature, x0.size)
    for name, value in (("adam_steps", adam_steps), ("maxiter", maxiter)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}.")
    if not (learning_rate > 0 and gtol > 0):
        raise ValueError(
            f"learning_rate and gtol must be positive, got {learning_rate!r} and {gtol!r}."
        )
    for group in finder.flat.groups:
        if group.buffer is not None:
            # Its chunks from this search's generator, whatever an earlier run left.
            group.buffer.reset(rng)
    rows_before = finder.rows_touched
    total_rows = max(sum(finder.n_rows), 1)
    position = np.asarray(x0, dtype=finder.flat.position.dtype).copy()
    with _progress(progressbar) as progress:
        if not search:
            logp, gradient = finder.full_pass(position)
        if search and finder.flat.groups and adam_steps > 0:
            task = progress.add_task("Mode: Adam on minibatches", total=adam_steps)
            position = _adam(finder, position, adam_steps, learning_rate, rng, progress, task)
        covariance = newton_hessian = hessian_at = None
        newton_first = (
            search
            and x0.size <= DENSE_CURVATURE_MAX_DIM
            and total_rows >= SUBSAMPLE_FIRST_ROWS
            and maxiter
        )
        done = not search
        if newton_first:
            # Large data: the mode of a subsample, then Newton steps on full-data passes
            # (each step one pass; the subsample's mode is ~sqrt(N / n) sds off and the
            # chord steps gain two to three digits each) instead of ~12 L-BFGS passes.
            task = progress.add_task("Mode: L-BFGS on a subsample", total=None)
            rows = [
                g.draw(rng, n, CURVATURE_SUBSAMPLE_ROWS)
                for g, n in zip(finder.flat.groups, finder.n_rows, strict=True)
            ]
            position, _, _, result = _lbfgs(
                finder.on_fixed_rows(rows), position, total_rows, maxiter, gtol, progress, task
            )
            logp, gradient = finder.full_pass(position)
            if np.isfinite(logp) and np.all(np.isfinite(gradient)):
                progress.add_task("Mode: Newton steps on full-data passes", total=None)
                position, logp, gradient, newton_hessian, hessian_at, done = _newton(
                    finder, position, logp, gradient, rng
                )
        if (
            not done
            and _grouped_curvature(local_positions, x0.size)
            and x0.size > DENSE_CURVATURE_MAX_DIM
        ):
            # A grouped model: Newton steps with its whole Hessian, differenced in r + G
            # gradient pairs and solved group by group. L-BFGS, whose curvature is learnt
            # from its steps, ran out of iterations on groups of 1 to 3,000 rows.
            progress.add_task("Mode: Newton steps with the grouped Hessian", total=None)
            logp, gradient = finder.full_pass(position)
            if np.isfinite(logp) and np.all(np.isfinite(gradient)):
                position, logp, gradient, last_diagonal, done = _grouped_newton(
                    finder, position, logp, gradient, local_positions
                )
                if done:  # its last Hessian was differenced at the point returned
                    newton_hessian, hessian_at = last_diagonal, position
        if not done:
            task = progress.add_task("Mode: L-BFGS on full-data passes", total=None)
            position, logp, gradient, result = _lbfgs(
                finder.full_pass, position, total_rows, maxiter, gtol, progress, task
            )
            if x0.size <= DENSE_CURVATURE_MAX_DIM:
                # Newton steps with the differenced Hessian: L-BFGS stops on a small
                # gradient, which on a badly scaled posterior (raw-scale predictors, flat
                # priors) can still be far from the mode in the flat directions.
                progress.add_task("Mode: Newton refinement", total=None)
                position, logp, gradient, newton_hessian, hessian_at, done = _newton(
                    finder, position, logp, gradient, rng
                )
        if kind is not None:
            progress.add_task(f"Mode: {kind} curvature", total=None)
            covariance = _laplace(
                finder, position, kind, rng, newton_hessian, hessian_at,
                local_positions=local_positions,
            )  # fmt: skip
    mode = ModeResult(_unflatten(finder, position, point))
    mode.position = position
    mode.logp = logp
    mode.gradient = gradient
    mode.covariance = covariance
    # L-BFGS-B may end its line search at the rounding floor of the gradient with an
    # "ABNORMAL" message although the tolerance is met.
    mode.converged = search and (
        done
        or bool(result.success and not newton_first)
        or bool(np.max(np.abs(gradient), initial=0.0) / total_rows <= gtol)
    )
    if not search:
        mode.message = "the start taken as the mode (search=False)"
    elif done:
        mode.message = "Newton steps on full-data passes converged"
    else:
        mode.message = str(result.message)
    mode.rows_touched = finder.rows_touched - rows_before
    mode.seconds = time.perf_counter() - started
    return mode


START_SCALE_CAP = 1.0
"""The largest scale :func:`scale_at_start` gives a coordinate (in sds of the start's
metric), the unit scale of PyMC's own jitter of initial points. A coordinate the log
density does not curve downwards at the start (flat, or convex there) gets it; the tuning
windows learn its scale from the draws."""

START_DIAGONAL_PROBES = 16
"""Random probes (two full-data gradients each) of :func:`scale_at_start`'s diagonal above
``DENSE_CURVATURE_MAX_DIM`` coordinates: it sets each coordinate's scale only to start."""


def scale_at_start(
    finder: ModeFinder,
    x0: np.ndarray,
    point: dict[str, np.ndarray],
    *,
    curvature: bool,
    rng: np.random.Generator,
) -> ModeResult:
    """The start ``x0`` in place of a mode, with each coordinate's scale there.

    For a model whose joint density has no mode, which a search would follow out of the
    posterior (a centred hierarchy whose group scale can shrink to 0, or whose
    concentration can grow without bound, where every local joins its location). The
    "covariance" is diagonal, ``1 / max(|H_ii|, 1)`` (``H_ii`` the log density's curvature
    at ``x0``, :data:`START_SCALE_CAP`): a start's metric and the scale of the chains'
    jitter around ``x0``, not a Laplace approximation. Its ``converged`` is False.
    """
    started = time.perf_counter()
    rows_before = finder.rows_touched
    position = np.asarray(x0, dtype=finder.flat.position.dtype).copy()
    logp, gradient = finder.full_pass(position)
    if not (np.isfinite(logp) and np.all(np.isfinite(gradient))):
        raise ValueError(
            "The model's log density or its gradient is not finite at its initial point, "
            "where chains start when the joint density has no mode. Pass initvals= to "
            "pm.sample, or initial values to the model's variables (initval=)."
        )
    covariance = None
    if curvature:
        scale = np.maximum(np.abs(position), 1.0)
        if position.size <= DENSE_CURVATURE_MAX_DIM:
            diagonal = hessian_diagonal_by_forward_differences(
                lambda x: finder.full_pass(x)[1], position, scale, gradient
            )
        else:
            diagonal = hessian_diagonal_by_probes(
                lambda x: finder.full_pass(x)[1], position, scale, START_DIAGONAL_PROBES, rng
            )
        curved = np.where(np.isfinite(diagonal), np.abs(diagonal), 0.0)
        covariance = 1.0 / np.maximum(curved, 1.0 / START_SCALE_CAP**2)
    mode = ModeResult(_unflatten(finder, position, point))
    mode.position = position
    mode.logp = float(logp)
    mode.gradient = gradient
    mode.covariance = covariance
    mode.converged = False
    mode.message = "no mode: the start taken with each coordinate's scale there"
    mode.rows_touched = finder.rows_touched - rows_before
    mode.seconds = time.perf_counter() - started
    return mode


def _curvature_kind(curvature: bool | str, dim: int) -> str | None:
    if curvature is False or curvature is None:
        return None
    if curvature is True:
        return "dense" if dim <= DENSE_CURVATURE_MAX_DIM else "diagonal"
    return check_choice(
        "curvature",
        curvature,
        ("dense", "diagonal"),
        "True picks dense in low dimensions and diagonal in high ones.",
    )


def _adam(finder, position, steps, learning_rate, rng, progress, task) -> np.ndarray:
    state = adam_init(position)
    sizes = [g.batch_size for g in finder.flat.groups]
    steps = min(steps, max(-(-n // b) for n, b in zip(finder.n_rows, sizes, strict=True)))
    progress.update(task, total=steps)
    for t in range(steps):
        rows = finder.draw_rows(rng, finder.n_rows, sizes)
        logp, gradient = finder.subsample_pass(position, rows)
        if not (np.isfinite(logp) and np.all(np.isfinite(gradient))):
            break  # leave it to L-BFGS, which starts from the last finite point
        rate = learning_rate / np.sqrt(1.0 + t / 50.0)
        position, state = adam_ascent_step(position, gradient, state, rate)
        progress.advance(task)
    return position


def _lbfgs(evaluate, position, total_rows, maxiter, gtol, progress, task):
    """L-BFGS-B on ``evaluate(x) -> (log p, gradient)`` (full-data passes or a subsample)."""
    # SciPy evaluates the start again and returns a point it has evaluated: kept by
    # position, those passes are not read twice (2 of ~14 passes of a search).
    passes: dict[bytes, tuple[float, np.ndarray]] = {}
    dtype = position.dtype

    def full_pass(x: np.ndarray) -> tuple[float, np.ndarray]:
        key = np.ascontiguousarray(x, dtype=dtype).tobytes()
        if key not in passes:
            passes[key] = evaluate(x)
        return passes[key]

    def negative(x: np.ndarray) -> tuple[float, np.ndarray]:
        logp, gradient = full_pass(x)
        if not np.isfinite(logp) or not np.all(np.isfinite(gradient)):
            return np.inf, np.zeros_like(x)
        return -logp / total_rows, -gradient / total_rows

    value, _ = negative(position)
    if not np.isfinite(value):
        raise ValueError(
            "find_mode: the model's log density is not finite at the start point, so "
            "there is no direction to climb. Pass start= a point inside the support (e.g. "
            "positive scales), or check the data for values the likelihood cannot take."
        )
    # Imported here: 0.3 s that a worker process of pm.sample, which unpickles this
    # module with the step, would pay before its first draw.
    import scipy.optimize

    result = scipy.optimize.minimize(
        negative,
        position,
        jac=True,
        method="L-BFGS-B",
        callback=lambda *_: progress.advance(task),
        options={"maxiter": maxiter, "gtol": gtol, "ftol": 1e-15, "maxcor": 20},
    )
    logp, gradient = full_pass(result.x)
    return result.x, logp, gradient.copy(), result


def _newton(finder, position, logp, gradient, rng, max_steps: int = 10):
    """Newton steps with a differenced Hessian, reused while the steps shrink fast.

    Near the mode the Hessian changes little, so one Hessian (from up to
    ``CURVATURE_SUBSAMPLE_ROWS`` rows) serves several steps (the chord method) at a
    fraction of the cost: a Hessian is D + 1 gradients, a step one full pass. It is
    differenced afresh where a step does not climb or shrinks by less than 10×. Returns
    the point, its density and gradient, the last Hessian, the point it was taken at, and
    whether the steps converged (the last below ``1e-9`` sd).
    """
    hessian, hessian_at = _dense_hessian(finder, position, rng), position
    fresh, previous = True, np.inf
    for _ in range(max_steps):
        try:
            step = -np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)):
            break
        size = np.max(np.abs(step) / _sd(hessian))
        if size < 1e-9:
            return position, logp, gradient, hessian, hessian_at, True
        if size > 0.1 * previous and not fresh:
            hessian, fresh = _dense_hessian(finder, position, rng, _sd(hessian)), True
            hessian_at = position
            continue
        new_logp, new_gradient = finder.full_pass(position + step)
        if not (np.isfinite(new_logp) and new_logp >= logp - 1e-9 * abs(logp)):
            if fresh:
                break  # not a concave neighbourhood: keep L-BFGS's point
            hessian, fresh = _dense_hessian(finder, position, rng, _sd(hessian)), True
            hessian_at = position
            continue
        position, logp, gradient = position + step, new_logp, new_gradient
        fresh, previous = False, size
    return position, logp, gradient, hessian, hessian_at, False


def _grouped_curvature(local_positions: np.ndarray | None, dim: int) -> bool:
    """Whether a grouped model's Hessian is differenced whole (few enough globals)."""
    if local_positions is None:
        return False
    return dim - np.asarray(local_positions).size <= GROUPED_CURVATURE_MAX_GLOBALS


def _grouped_newton(finder, position, logp, gradient, local_positions, max_steps: int = 30):
    """Newton steps with a grouped model's whole Hessian, each halved until it climbs.

    The Hessian (:class:`~pymc_sgmcmc.sampling.optimize.GroupedHessian`) is differenced
    afresh at each step (``2 (r + G)`` full-data gradients, at a thousandth of the last
    sds) and must be negative definite. Returns the point, its density and gradient, the
    last Hessian's diagonal (None where the steps did not converge) and whether the
    steps converged (the last below ``1e-9`` sd); a point where they do not is left to
    L-BFGS.
    """

    def full_gradient(x: np.ndarray) -> np.ndarray:
        return finder.full_pass(x)[1]

    sd = None
    for _ in range(max_steps):
        scale = np.maximum(np.abs(position), 1.0) if sd is None else 1e-3 * sd / 1e-4
        hessian = grouped_hessian_by_differences(full_gradient, position, scale, local_positions)
        if not hessian.negative_definite():
            break
        sd = _sd(hessian.diagonal())
        try:
            step = hessian.newton_step(gradient)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)):
            break
        if np.max(np.abs(step) / sd) < 1e-9:
            return position, logp, gradient, hessian.diagonal(), True
        for _ in range(20):
            new_logp, new_gradient = finder.full_pass(position + step)
            if np.isfinite(new_logp) and new_logp >= logp - 1e-9 * abs(logp):
                break
            step = step / 2
        else:
            break
        position, logp, gradient = position + step, new_logp, new_gradient
    return position, logp, gradient, None, False


REUSED_HESSIAN_MAX_SDS = 0.01
"""Newton's last Hessian is the Laplace curvature when taken this close to the mode (sds)."""


def _within(
    position: np.ndarray, hessian_at: np.ndarray | None, hessian: np.ndarray | None
) -> bool:
    """Whether ``hessian``, differenced at ``hessian_at``, stands for the one at ``position``.

    Newton's steps from L-BFGS's point are usually tiny (measured: 1e-5 sd on a 10⁶-row
    logistic regression), and a Hessian a hundredth of an sd away differs from the one
    at the mode by far less than its subsample error: differencing it again (2D
    gradients, ~1 s at 10⁶ rows) bought nothing.
    """
    if hessian is None or hessian_at is None:
        return False
    return bool(np.max(np.abs(position - hessian_at) / _sd(hessian)) <= REUSED_HESSIAN_MAX_SDS)


def _sd(hessian: np.ndarray) -> np.ndarray:
    """The Laplace sds ``1 / sqrt(−H_ii)`` (of the conditionals), the differences' scale.

    ``hessian`` is the matrix or only its diagonal.
    """
    diagonal = hessian if hessian.ndim == 1 else np.diag(hessian)
    return 1.0 / np.sqrt(np.maximum(-diagonal, 1e-300))


def _at_sd_scale(
    estimate, position: np.ndarray, sd: np.ndarray | None, rough_diagonal=None
) -> np.ndarray:
    """``estimate(scale)`` (a Hessian or its diagonal) with steps a thousandth of each sd.

    The differencing routines step ``1e-4 × scale``; a thousandth of the sd is accurate
    whatever the posterior's scale. Without ``sd`` a first round with unit-scale steps
    finds the sds: ``rough_diagonal(scale)``, a cheaper estimate of the diagonal alone
    where there is one, else ``estimate`` itself.
    """
    if sd is None:
        sd = _sd((rough_diagonal or estimate)(np.maximum(np.abs(position), 1.0)))
    return estimate(1e-3 * sd / 1e-4)


def _dense_hessian(finder, position, rng, sd: np.ndarray | None = None) -> np.ndarray:
    """The Hessian by forward differences (:func:`_at_sd_scale`).

    With ``pm.Minibatch`` data the gradients are on up to ``CURVATURE_SUBSAMPLE_ROWS``
    random rows (scaled to the data): the curvature's relative error is then about
    ``1 / sqrt(rows)``.
    """
    if finder.flat.groups:
        cap = CURVATURE_SUBSAMPLE_ROWS
        rows = [
            # All rows in order, where the data (or a buffer holding all of them) are small.
            np.arange(n) if n <= cap and getattr(g.buffer, "whole", True) else g.draw(rng, n, cap)
            for g, n in zip(finder.flat.groups, finder.n_rows, strict=True)
        ]
        on_rows = finder.on_fixed_rows(rows)

        def gradient(x: np.ndarray) -> np.ndarray:
            return on_rows(x)[1]
    else:

        def gradient(x: np.ndarray) -> np.ndarray:
            return finder.full_pass(x)[1]

    # Forward differences, sharing the gradient at the point: D + 1 gradients where
    # central ones take 2 D (at 10⁶ × 20, 20 gradients on 200,000 rows, ~0.4 s). Their
    # O(h) error at a thousandth of an sd is below the subsample's (1 / sqrt(rows)).
    at = gradient(position)
    return _at_sd_scale(
        lambda scale: hessian_by_differences(gradient, position, scale, forward=True, at=at),
        position,
        sd,
        lambda scale: hessian_diagonal_by_forward_differences(gradient, position, scale, at),
    )


def _laplace(
    finder,
    position,
    kind,
    rng,
    near: np.ndarray | None = None,
    near_at: np.ndarray | None = None,
    local_positions: np.ndarray | None = None,
) -> np.ndarray:
    """The Laplace covariance at ``position``.

    ``near`` is a Hessian close by, differenced at ``near_at``: its scale sets the
    differences, and a dense one taken within :data:`REUSED_HESSIAN_MAX_SDS` of
    ``position`` is used as it is. ``local_positions``: a grouped model's locals (no term
    reads two groups'), whose Hessian is differenced whole in ``r + G`` gradient pairs and
    checked negative definite (:class:`~pymc_sgmcmc.sampling.optimize.GroupedHessian`);
    random probes estimate the diagonal alone without them.
    """
    sd = None if near is None else _sd(near)
    if kind == "diagonal":

        def gradient(x: np.ndarray) -> np.ndarray:
            return finder.full_pass(x)[1]

        grouped_curvature = _grouped_curvature(local_positions, position.size)
        if grouped_curvature and near is not None and _within(position, near_at, near):
            # The grouped Newton steps' last Hessian (its diagonal), taken at this point
            # and negative definite there.
            hessian = near
        elif grouped_curvature:

            def grouped(scale: np.ndarray):
                return grouped_hessian_by_differences(gradient, position, scale, local_positions)

            def diagonal(scale: np.ndarray) -> np.ndarray:
                hessian = grouped(scale)
                # The diagonal alone cannot show a point that is no mode (a centred
                # funnel's neck, where the search stops on an unbounded density): the
                # whole Hessian must be negative definite for a Laplace approximation.
                if hessian.negative_definite():
                    return hessian.diagonal()
                return np.full_like(position, np.nan)

            hessian = _at_sd_scale(diagonal, position, sd, lambda scale: grouped(scale).diagonal())
        else:
            hessian = _at_sd_scale(
                lambda scale: hessian_diagonal_by_probes(gradient, position, scale, 64, rng),
                position,
                sd,
            )
    elif _within(position, near_at, near):
        hessian = near
    else:
        hessian = _dense_hessian(finder, position, rng, sd)
    try:
        covariance = laplace_covariance(hessian) if np.all(np.isfinite(hessian)) else None
    except np.linalg.LinAlgError:
        covariance = None
    # A Hessian that is not finite (measured: at the neck of a centred hierarchy's funnel,
    # a group scale of 5e-9) has no Laplace approximation either.
    if covariance is None or not np.all(np.isfinite(covariance)):
        raise ValueError(
            "find_mode: the log density is not curved downwards at the point found (the "
            "Hessian there is not finite and negative definite), so there is no Laplace "
            "approximation: the posterior may be improper along some direction (a flat "
            "prior on a parameter the data do not inform), or the search did not reach a "
            "mode. Give that parameter a proper prior, or pass mass= and step_size= to "
            "the sampler yourself."
        )
    return covariance


def _unflatten(finder: ModeFinder, position: np.ndarray, point: dict) -> dict[str, np.ndarray]:
    mapped = DictToArrayBijection.map({v.name: point[v.name] for v in finder.vars})
    values = DictToArrayBijection.rmap(RaveledVars(position, mapped.point_map_info))
    return {**point, **{name: np.asarray(value) for name, value in values.items()}}


class _NoProgress:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass

    def advance(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _progress(enabled: bool):
    if not enabled:
        return _NoProgress()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed} steps"),
        TimeElapsedColumn(),
    )
