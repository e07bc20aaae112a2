"""Fuse a kernel's ``n_steps`` integrator steps into one compiled PyTensor function.

A Python loop over compiled single-step calls pays the call overhead at every step; here
the kernel's :attr:`~pymc_sgmcmc.kernels.base.Kernel.step` is the body of a
``pytensor.scan``, so one MCMC iteration is one call. The function's inputs and outputs
are named (:class:`CompiledTrajectory`): the kernel's state and parameters by field, the
per-iteration randomness (normal draws, minibatch rows) drawn by the step method.

Minibatch rows reach the steps in one of two ways, each a small class: fresh rows for
every step (:class:`RowsPerStep`) or one set for the whole trajectory
(:class:`RowsPerTrajectory`).

Where a step may hand out draws in blocks (:func:`over_draws`), the compiled function is a
scan over draws whose body is the trajectory: one call makes ``K`` draws, each from the
previous one's end, with each draw's randomness stacked on a leading axis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import clone_replace

from pymc_sgmcmc.core.compilation import LinkedWhereUnpickled, compile_graph
from pymc_sgmcmc.gradients.control_variates import ControlVariateGradient, SymbolicAnchor
from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.gradients.grouped import GroupedGradient
from pymc_sgmcmc.gradients.minibatch import MinibatchGradient, exact_target
from pymc_sgmcmc.gradients.saga import SAGAGradient
from pymc_sgmcmc.kernels.base import (
    STEP_INFO_REDUCTIONS,
    Kernel,
    Target,
    tree_flatten,
    tree_replace,
)

# -- how the rows reach the steps --------------------------------------------------------


class Rows:
    """The minibatch rows of one trajectory: index inputs and the gathered arrays.

    One gather for the whole trajectory, outside the loop: random rows of a large array
    are memory-bound, and a gather per step inside the loop costs more than the math.
    """

    def __init__(self, graph: FlatLogp, index_ndim: int, windows: list | None = None) -> None:
        self.indices = [
            pt.tensor(f"rows_{k}", shape=(None,) * index_ndim, dtype="int64")
            for k in range(len(graph.groups))
        ]
        windows = windows or [None] * len(graph.groups)
        self.gathered = [
            x
            for g, w, i in zip(graph.groups, windows, self.indices, strict=True)
            for x in (g if w is None else w).gathered(i)
        ]
        self.start_rows = 0
        """Leading rows reserved for the start of the trajectory (``Kernel.prepare``)."""

    def start_batch(self) -> list[Variable]:
        """Rows for the start of the trajectory."""
        raise NotImplementedError

    def sequences(self) -> list[Variable]:
        """Arrays the scan iterates over, one slice per step."""
        return []

    def non_sequences(self) -> list[Variable]:
        """Arrays every step sees whole."""
        return []

    def last_batch(self) -> list[Variable]:
        """The rows of the last step (for the final minibatch log density)."""
        raise NotImplementedError

    def shape(self, n_steps: int, batch_size: int) -> tuple[int, ...]:
        """Shape of one index array the step method draws."""
        raise NotImplementedError

    def step_batch(self, sequences: list[Variable], non_sequences: list[Variable]) -> list:
        """One step's minibatch from its slices of :meth:`sequences` and the whole arrays."""
        return sequences + non_sequences

    def step_mask(self, sequences: list[Variable]) -> Variable | None:
        """Where the step may move the position (``None``: everywhere)."""
        return None

    def target(self, estimator: Any, batch: list[Variable]) -> Target:
        """The estimator's target on one minibatch (each drawn row set's length given)."""
        return estimator.target(batch, [rows.shape[-1] for rows in self.indices])


class RowsPerStep(Rows):
    """Fresh rows for every gradient: ``rows_k`` has shape ``(n_steps [+ 1], B)``."""

    def __init__(self, graph: FlatLogp, windows: list | None = None) -> None:
        super().__init__(graph, index_ndim=2, windows=windows)

    def start_batch(self) -> list[Variable]:  # noqa: D102
        # The starting point gets rows of its own (row 0): sharing the first step's rows
        # between its two ends would make the trajectory irreversible, and a Metropolis
        # test would no longer correct it.
        self.start_rows = 1
        return [b[0] for b in self.gathered]

    def sequences(self) -> list[Variable]:  # noqa: D102
        return [b[self.start_rows :] for b in self.gathered]

    def last_batch(self) -> list[Variable]:  # noqa: D102
        return [b[-1] for b in self.gathered]

    def shape(self, n_steps: int, batch_size: int) -> tuple[int, ...]:  # noqa: D102
        return (n_steps + self.start_rows, batch_size)


class RowsPerTrajectory(Rows):
    """One set of rows for the whole trajectory: ``rows_k`` has shape ``(B,)``."""

    def __init__(self, graph: FlatLogp, windows: list | None = None) -> None:
        super().__init__(graph, index_ndim=1, windows=windows)

    def start_batch(self) -> list[Variable]:  # noqa: D102
        return self.gathered

    def non_sequences(self) -> list[Variable]:  # noqa: D102
        return self.gathered

    def last_batch(self) -> list[Variable]:  # noqa: D102
        return self.gathered

    def shape(self, n_steps: int, batch_size: int) -> tuple[int, ...]:  # noqa: D102
        return (batch_size,)


class GroupRowsPerStep(Rows):
    """Fresh whole groups for every step (:mod:`pymc_sgmcmc.gradients.grouped`).

    Inputs: ``rows_0`` (the rows of all steps, one after the other), ``row_bounds``
    (step ``s`` reads ``rows_0[row_bounds[s]:row_bounds[s + 1]]``; set 0 is the start's),
    ``update_mask`` (``(n_steps + 1, dim)``: 1 where step ``s`` may move), and the
    constants ``group.weights`` (``J/K`` on globals, 1 on locals), ``group.global_weight``
    (``J/K``) and ``group.n_rows`` (``N``).
    """

    def __init__(self, gradient: GroupedGradient) -> None:
        dtype = gradient.prior.dtype
        self.gradient = gradient
        self.indices = [pt.vector("rows_0", dtype="int64")]
        self.bounds = pt.vector("row_bounds", dtype="int64")
        self.mask = pt.matrix("update_mask", dtype=dtype)
        self.weights = pt.vector("group.weights", dtype=dtype)
        self.global_weight = pt.scalar("group.global_weight", dtype=dtype)
        self.total_rows = pt.scalar("group.n_rows", dtype=dtype)
        self.gathered = gradient.gathered(self.indices[0])
        self.start_rows = 1

    @property
    def inputs(self) -> dict[str, Variable]:
        """The inputs besides ``rows_0``, by name."""
        return {
            v.name: v
            for v in (self.bounds, self.mask, self.weights, self.global_weight, self.total_rows)
        }

    def start_batch(self) -> list[Variable]:  # noqa: D102
        return [g[self.bounds[0] : self.bounds[1]] for g in self.gathered]

    def sequences(self) -> list[Variable]:  # noqa: D102
        return [self.bounds[1:-1], self.bounds[2:], self.mask[1:]]

    def non_sequences(self) -> list[Variable]:  # noqa: D102
        return self.gathered

    def last_batch(self) -> list[Variable]:  # noqa: D102
        return [g[self.bounds[-2] : self.bounds[-1]] for g in self.gathered]

    def step_batch(self, sequences: list[Variable], non_sequences: list[Variable]) -> list:  # noqa: D102
        start, stop, _ = sequences
        return [g[start:stop] for g in non_sequences]

    def step_mask(self, sequences: list[Variable]) -> Variable | None:  # noqa: D102
        return sequences[2]

    def target(self, estimator: Any, batch: list[Variable]) -> Target:  # noqa: D102
        fraction = pt.cast(batch[0].shape[0], self.total_rows.dtype) / self.total_rows
        anchor = getattr(estimator, "anchor", None)
        return self.gradient.target(
            batch, fraction * self.weights, fraction * self.global_weight, anchor
        )


ROWS = {"step": RowsPerStep, "trajectory": RowsPerTrajectory}

GRADIENTS = ("minibatch", "control_variates", "svrg", "saga")
ANCHORED_GRADIENTS = ("control_variates", "svrg")
"""Gradient estimators that need an anchor (a point and its full-data gradient)."""


# -- the compiled function ---------------------------------------------------------------


@dataclass
class CompiledTrajectory:
    """One compiled trajectory with named inputs and outputs.

    :meth:`named` runs it with the inputs by name (as
    :meth:`~pymc_sgmcmc.sampling.step.StochasticGradientStep.trajectory_inputs` returns
    them) and returns the outputs by name; calling it directly takes and returns them in
    :attr:`input_names` and :attr:`output_names` order.

    Inputs: ``position``, ``state.<field>`` for the kernel's other state fields,
    ``params.<path>`` for every array of its parameters, ``anchor.position``,
    ``anchor.logp``, ``anchor.gradient`` and ``anchor.others.<name>`` for each variable the
    step does not sample (control variates only), ``refresh`` (whether to apply
    the kernel's ``refresh``) and ``refresh_noise``, ``noise`` (``(n_steps, dim)``
    standard normal), ``rows_<k>`` (one index array per ``pm.Minibatch`` call).

    Outputs: ``position``, ``state.<field>`` (the final state), ``minibatch_logp`` (on
    the last step's rows), ``gradient`` (the last one evaluated, where asked) and, for a
    kernel with an energy, ``start.<field>`` (the state after ``refresh`` and
    ``prepare``), ``start_gradient``, ``energy_start``, ``energy_end``, ``logp_start``,
    ``logp_end`` (full-data log densities).

    Where the function is a scan over draws (:attr:`over_draws`, :func:`over_draws`),
    :meth:`block` runs ``K`` draws in one call; calling it with one draw's inputs runs a
    block of one.
    """

    function: Callable
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    rows: Rows
    over_draws: bool = False
    """Whether :attr:`function` is a scan over draws (:func:`over_draws`)."""
    index: dict[str, int] = field(init=False)
    """Where each output is in the returned list, by name."""
    slots: dict[str, int] = field(init=False)
    """Where each input goes in the argument list, by name."""
    row_shapes: list[tuple[int, ...]] = field(default_factory=list)
    """Shapes of the ``rows_<k>`` inputs (set by the step method, which knows the sizes)."""

    stacked: tuple[bool, ...] = field(init=False)
    """Per input: whether a block takes it with one entry per draw on a leading axis."""

    def __post_init__(self) -> None:
        self.index = {name: k for k, name in enumerate(self.output_names)}
        self.slots = {name: k for k, name in enumerate(self.input_names)}
        self.stacked = tuple(self.over_draws and per_draw_input(n) for n in self.input_names)

    def __getstate__(self) -> dict:
        # Unpickled, the function is linked again, not compiled (None where it cannot be).
        return self.__dict__ | {"function": LinkedWhereUnpickled(self.function)}

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        """Run one trajectory; inputs and outputs in their names' order."""
        if not self.over_draws:
            return self.function(*inputs)
        outputs = self.function(
            *(np.asarray(x)[None] if s else x for x, s in zip(inputs, self.stacked, strict=True))
        )
        return [out[0] for out in outputs]

    def block(self, *inputs: Any) -> list[np.ndarray]:
        """Run ``K`` trajectories, each from the last one's end, in one call.

        The inputs that :attr:`stacked` marks hold one entry per draw on a leading axis
        of length ``K``; every output has that axis.
        """
        return self.function(*inputs)

    def named(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the trajectory with named inputs; return the outputs by name."""
        missing = set(self.input_names) - set(inputs)
        if missing:
            raise TypeError(f"missing trajectory inputs: {sorted(missing)}")
        outputs = self(*(inputs[name] for name in self.input_names))
        return dict(zip(self.output_names, outputs, strict=True))


def _symbolic_like(name: str, value: Any, dtype: str) -> Variable:
    value = np.asarray(value)
    kind_dtype = dtype if value.dtype.kind == "f" else str(value.dtype)
    return pt.tensor(name, shape=(None,) * value.ndim, dtype=kind_dtype)


def _recording(target: Target, record: list) -> Target:
    """``target`` whose gradient evaluations are appended to ``record``."""

    def grad(x: Variable) -> Variable:
        gradient = target.grad(x)
        record.append(gradient)
        return gradient

    return Target(logp=target.logp, grad=grad)


def _lazy(make: Callable[[], Target]) -> Target:
    """A target built on first use (so that rows are reserved only when needed)."""
    built: list[Target] = []

    def get() -> Target:
        if not built:
            built.append(make())
        return built[0]

    return Target(logp=lambda x: get().logp(x), grad=lambda x: get().grad(x))


def build_trajectory(
    kernel: Kernel,
    graph: FlatLogp,
    *,
    state: Any,
    params: Any,
    n_steps: int,
    rows: Rows,
    record_gradient: bool,
    exact_logp: Variable | None = None,
    gradient: str = "minibatch",
) -> tuple[dict[str, Variable], dict[str, Variable]]:
    """The symbolic trajectory of ``kernel`` on ``graph``: named inputs and outputs.

    Parameters
    ----------
    kernel : Kernel
        The sampler's kernel.
    graph : FlatLogp
        The model's log density in the flat position.
    state, params : NamedTuple
        Numeric templates of the kernel's state and parameters (for ranks and dtypes).
    n_steps : int
        Steps per trajectory, where no per-step input sets the number.
    rows : Rows
        How the minibatch rows reach the steps.
    record_gradient : bool
        Also return the last gradient the final step evaluated.
    exact_logp : Variable, optional
        The full-data log density, for a kernel with an energy.
    gradient : {"minibatch", "control_variates", "svrg", "saga"}
        The gradient estimator; the anchored two add the inputs ``anchor.position``,
        ``anchor.logp``, ``anchor.gradient`` and ``anchor.others.<name>``
        (:class:`~pymc_sgmcmc.gradients.control_variates.SymbolicAnchor`); "saga" adds
        ``saga.correction``, one row per minibatch of the rows
        (:class:`~pymc_sgmcmc.gradients.saga.SAGAGradient`).
    """
    dtype = graph.position.dtype
    inputs: dict[str, Variable] = {"position": graph.position}
    for name, value in zip(kernel.state_type._fields[1:], state[1:], strict=True):
        inputs[f"state.{name}"] = _symbolic_like(f"state.{name}", value, dtype)
    leaves = {
        path: _symbolic_like(f"params.{path}", value, dtype) for path, value in tree_flatten(params)
    }
    inputs.update({f"params.{path}": var for path, var in leaves.items()})
    symbolic_params = tree_replace(params, leaves)

    start = kernel.state_type(graph.position, *(inputs[f"state.{n}"] for n in kernel.resamples))
    estimator: Any = MinibatchGradient(graph)
    if gradient in ANCHORED_GRADIENTS:
        # Another sampler's variables, at their values when the anchor was taken.
        others = {
            shared: shared.type(name=f"anchor.others.{value.name}")
            for value, shared in graph.shared.items()
        }
        anchor = SymbolicAnchor(
            position=pt.vector("anchor.position", dtype=dtype),
            logp=pt.scalar("anchor.logp", dtype=dtype),
            gradient=pt.vector("anchor.gradient", dtype=dtype),
            others=others,
        )
        inputs.update(
            {f"anchor.{name}": getattr(anchor, name) for name in ("position", "logp", "gradient")}
        )
        inputs.update({var.name: var for var in others.values()})
        estimator = ControlVariateGradient(estimator, anchor)
    elif gradient == "saga":
        # One correction per minibatch, sliced as the rows are: a batch's last array.
        correction = pt.tensor("saga.correction", shape=(None,) * rows.indices[0].ndim, dtype=dtype)
        rows.gathered = [*rows.gathered, correction]
        inputs["saga.correction"] = correction
        estimator = SAGAGradient(estimator)
    start_record: list[Variable] = []
    # Refresh and prepare share the rows of the start (reserved only if they use them).
    start_target = _recording(
        _lazy(lambda: rows.target(estimator, rows.start_batch())), start_record
    )
    if kernel.refresh is not None:
        inputs["refresh"] = pt.scalar("refresh", dtype="bool")
        inputs["refresh_noise"] = pt.vector("refresh_noise", dtype=dtype)
        refreshed = kernel.refresh(start, start_target, inputs["refresh_noise"], symbolic_params)
        start = type(start)(
            *(
                old if new is old else pt.switch(inputs["refresh"], new, old)
                for new, old in zip(refreshed, start, strict=True)
            )
        )
    if kernel.prepare is not None:
        start = kernel.prepare(start, start_target, symbolic_params)
    if kernel.step_noise:
        inputs["noise"] = pt.matrix("noise", dtype=dtype)
    sequences = ([inputs["noise"]] if kernel.step_noise else []) + rows.sequences()
    non_sequences = rows.non_sequences()
    n_batched, n_fields = len(rows.sequences()), len(start)
    # The fields a step mask holds in place: those of the position's shape (momenta).
    per_coordinate = [np.shape(value) == np.shape(state[0]) for value in state]

    def body(*args: Variable) -> list[Variable]:
        args = list(args)  # scan order: sequences, carried state, non-sequences
        noise_t = args.pop(0) if kernel.step_noise else None
        step_sequences = args[:n_batched]
        batch = rows.step_batch(step_sequences, args[n_batched + n_fields :])
        state_t = kernel.state_type(*args[n_batched : n_batched + n_fields])
        record: list[Variable] = []
        target = _recording(rows.target(estimator, batch), record)
        mask = rows.step_mask(step_sequences)
        moving = state_t
        if mask is not None:
            # A held coordinate has no momentum going in, so that it does not drift
            # (the metric is diagonal) while the others' gradients are evaluated.
            moving = kernel.state_type(
                *(
                    value * mask if held and k > 0 else value
                    for k, (value, held) in enumerate(zip(state_t, per_coordinate, strict=True))
                )
            )
        if mask is None:
            new, info = kernel.step_with_info(moving, target, noise_t, symbolic_params)
        else:
            new, info = kernel.step_holding(moving, target, noise_t, symbolic_params, mask)
        if mask is not None:
            new = kernel.state_type(
                *(
                    pt.switch(mask > 0, n, o) if held else n
                    for n, o, held in zip(new, state_t, per_coordinate, strict=True)
                )
            )
        per_step = [info[name] for name in kernel.step_info]
        return [*new, *per_step, record[-1]] if record_gradient else [*new, *per_step]

    n_info = len(kernel.step_info)
    scanned = pytensor.scan(
        body,
        sequences=sequences,
        outputs_info=[*start, *[None] * n_info, *([None] if record_gradient else [])],
        non_sequences=non_sequences,
        n_steps=None if sequences else n_steps,
        return_updates=False,
    )
    if not isinstance(scanned, list | tuple):
        scanned = [scanned]
    final = [out[-1] for out in scanned]
    end = kernel.state_type(*final[:n_fields])
    info = {
        name: STEP_INFO_REDUCTIONS[reduction](per_step)
        for (name, reduction), per_step in zip(
            kernel.step_info.items(), scanned[n_fields : n_fields + n_info], strict=True
        )
    }
    outputs: dict[str, Variable] = {"position": end.position}
    outputs.update({f"state.{n}": getattr(end, n) for n in kernel.resamples})
    for name, value in kernel.stats(end, info, symbolic_params).items():
        outputs[f"stats.{name}"] = pt.as_tensor_variable(value)
    if kernel.energy is not None:
        # A rejected proposal keeps the start: its statistics are the start's.
        for name, value in kernel.stats(start, info, symbolic_params).items():
            outputs[f"start_stats.{name}"] = pt.as_tensor_variable(value)
    # The log density is not needed inside the loop; evaluating it there at every step
    # costs more than the gradient's own arithmetic on a small minibatch.
    outputs["minibatch_logp"] = rows.target(estimator, rows.last_batch()).logp(end.position)
    if record_gradient:
        outputs["gradient"] = final[-1]
    if kernel.energy is not None:
        exact = exact_target(exact_logp, graph.position)
        outputs.update({f"start.{n}": v for n, v in zip(start._fields, start, strict=True)})
        if start_record:
            outputs["start_gradient"] = start_record[-1]
        outputs["energy_start"] = kernel.energy(start, exact, symbolic_params)
        outputs["energy_end"] = kernel.energy(end, exact, symbolic_params)
        outputs["logp_start"] = exact.logp(start.position)
        outputs["logp_end"] = exact.logp(end.position)
    inputs.update({idx.name: idx for idx in rows.indices})
    inputs.update(getattr(rows, "inputs", {}))
    return inputs, outputs


def per_draw_input(name: str) -> bool:
    """Whether a trajectory input is drawn afresh for every draw (the position aside)."""
    return (name in PER_DRAW_INPUTS and name != "position") or name.startswith("rows_")


def over_draws(
    inputs: dict[str, Variable], outputs: dict[str, Variable]
) -> tuple[dict[str, Variable], dict[str, Variable]]:
    """The trajectory as the body of a scan over draws: ``K`` draws in one call.

    Each draw starts from the previous one's end (``position`` and ``state.<field>``
    carried), takes its own slice of every per-draw input (:func:`per_draw_input`, which
    get a leading axis of length ``K``) and sees the other inputs whole. Every output gets
    the leading axis. Inputs and outputs keep their names.

    A Python loop of single-draw calls pays a compiled call, the argument handling and the
    step method's bookkeeping at every draw; here those are paid once per block.
    """
    carried = ["position", *(name for name in inputs if name.startswith("state."))]
    per_draw = [name for name in inputs if per_draw_input(name)]
    constant = [name for name in inputs if name not in carried and name not in per_draw]
    stacked = {
        name: pt.tensor(name, shape=(None, *inputs[name].type.shape), dtype=inputs[name].dtype)
        for name in per_draw
    }
    # A carried value of a static length (a model of one coordinate) would make the
    # scans' recurrent types disagree once rewritten, which PyTensor refuses when it
    # rebuilds them: the block's start has no static shape.
    starts = {
        name: pt.tensor(name, shape=(None,) * inputs[name].ndim, dtype=inputs[name].dtype)
        for name in carried
    }
    others = [name for name in outputs if name not in carried]
    body_inputs = [inputs[name] for name in (*per_draw, *carried, *constant)]

    def body(*args: Variable) -> list[Variable]:
        # scan order: slices of the sequences, carried state, non-sequences
        replace = dict(zip(body_inputs, args, strict=True))
        return clone_replace([outputs[name] for name in (*carried, *others)], replace=replace)

    scanned = pytensor.scan(
        body,
        sequences=[stacked[name] for name in per_draw],
        outputs_info=[*(starts[name] for name in carried), *[None] * len(others)],
        non_sequences=[inputs[name] for name in constant],
        return_updates=False,
    )
    if not isinstance(scanned, list | tuple):
        scanned = [scanned]
    by_name = dict(zip((*carried, *others), scanned, strict=True))
    return (
        {name: stacked.get(name, starts.get(name, var)) for name, var in inputs.items()},
        {name: by_name[name] for name in outputs},
    )


def compile_trajectory(
    inputs: dict[str, Variable],
    outputs: dict[str, Variable],
    rows: Rows,
    compile_kwargs: dict | None = None,
    *,
    blocks: bool = False,
) -> CompiledTrajectory:
    """Compile the trajectory (:func:`~pymc_sgmcmc.core.compilation.compile_graph`).

    A step out of the support is then an ordinary rejected or divergent trajectory, as in
    PyMC's own samplers. Call it inside the model's context. ``blocks``: compile it as a
    scan over draws (:func:`over_draws`).
    """
    names = (tuple(inputs), tuple(outputs))
    if blocks:
        inputs, outputs = over_draws(inputs, outputs)
    fn = compile_graph(list(inputs.values()), list(outputs.values()), compile_kwargs)
    return CompiledTrajectory(fn, *names, rows, over_draws=blocks)


# -- one call's arguments, by name ---------------------------------------------------------

_TRUE, _FALSE = np.asarray(True), np.asarray(False)

PER_DRAW_INPUTS = frozenset(
    (
        "position",
        "params.step_size",
        "refresh",
        "refresh_noise",
        "noise",
        "row_bounds",
        "update_mask",
        "saga.correction",
    )
)
"""Inputs filled at every call (with ``state.<field>`` and ``rows_<k>``); the others are
constants, filled once per change of the parameters, the anchor or the groups per step."""


def compile_step_trajectory(
    kernel: Kernel,
    graph: FlatLogp,
    params: Any,
    *,
    model: Any,
    dim: int,
    n_steps: int,
    minibatch: str,
    grouped: GroupedGradient | None,
    record_gradient: bool,
    exact_logp: Variable | None,
    gradient: str,
    compile_kwargs: dict | None,
    blocks: bool = False,
    windows: list | None = None,
) -> CompiledTrajectory:
    """A step method's trajectory, built (:func:`build_trajectory`) and compiled.

    ``grouped``: minibatches of whole groups (:class:`GroupRowsPerStep`); otherwise rows
    as ``minibatch`` says (:data:`ROWS`), read from each ``pm.Minibatch`` call's
    :class:`~pymc_sgmcmc.sampling.row_windows.RowWindows` where ``windows`` has one.
    ``model``: its context makes PyMC's compile honour the model's ``check_bounds``;
    ``dim``: the position's size. ``blocks``: a scan over draws (:func:`over_draws`).
    """
    rows = ROWS[minibatch](graph, windows) if grouped is None else GroupRowsPerStep(grouped)
    zeros = np.zeros(dim, dtype=graph.position.dtype)
    inputs, outputs = build_trajectory(
        kernel, graph, state=kernel.init(zeros, zeros, params), params=params,
        n_steps=n_steps, rows=rows, record_gradient=record_gradient, exact_logp=exact_logp,
        gradient=gradient,
    )  # fmt: skip
    with model:
        compiled = compile_trajectory(inputs, outputs, rows, compile_kwargs, blocks=blocks)
    if grouped is None:
        compiled.row_shapes = [rows.shape(n_steps, g.batch_size) for g in graph.groups]
    return compiled


class TrajectoryArguments:
    """The compiled trajectory's argument list, bound by input name.

    :meth:`set_constants` fills the inputs that change rarely (the kernel's parameters,
    the anchor, the group weights) and refuses a list that lacks one; :meth:`draw` fills
    the per-call inputs and draws the randomness from the chain's generator, always in
    this order: the refresh's normal vector (only when the kernel refreshes), the steps'
    normal noise, the rows (or whole groups).

    Parameters
    ----------
    compiled : CompiledTrajectory
        The trajectory.
    kernel : Kernel
        Its kernel (the state's fields, the extra noise per step).
    n_steps, dim : int
        Integrator steps per call and the position's size.
    extra_normals : int
        Normal numbers each step takes beyond one per coordinate
        (:meth:`~pymc_sgmcmc.kernels.base.Kernel.extra_normals` of the parameters).
    dtype : dtype
        The position's dtype (of every normal draw).
    groups : list of MinibatchGroup or RowWindows
        For each ``pm.Minibatch`` call, what draws its rows: the call
        (:meth:`~pymc_sgmcmc.gradients.graphs.MinibatchGroup.draw`) or its windows
        (:meth:`~pymc_sgmcmc.sampling.row_windows.RowWindows.draw`).
    """

    def __init__(
        self,
        compiled: CompiledTrajectory,
        kernel: Kernel,
        n_steps: int,
        dim: int,
        extra_normals: int,
        dtype: Any,
        groups: list,
    ) -> None:
        self.groups = groups  # what draws each pm.Minibatch call's rows (`draw_rows`)
        slots = compiled.slots
        self.n_slots = len(slots)
        self.slots = slots
        self.position = slots["position"]
        self.state = [slots[f"state.{name}"] for name in kernel.resamples]
        self.step_size = slots["params.step_size"]
        self.refresh, self.refresh_noise = slots.get("refresh"), slots.get("refresh_noise")
        self.noise = slots.get("noise")
        n_minibatched = sum(name.startswith("rows_") for name in slots)
        self.rows = [slots[f"rows_{k}"] for k in range(n_minibatched)]
        self.row_bounds, self.update_mask = slots.get("row_bounds"), slots.get("update_mask")
        self.row_shapes = compiled.row_shapes
        self.noise_shape = (n_steps, dim + extra_normals)
        self.n_minibatches = n_steps + 1
        self.dtype = dtype
        self.unused_noise = np.zeros(dim, dtype=dtype)  # no refresh, no draw
        self.constants: list[Any] | None = None
        self.stacked = [k for k, stacked in enumerate(compiled.stacked) if stacked]

    def set_constants(self, constants: dict[str, Any]) -> None:
        """Fill the rarely changing inputs; every input must be one of them or per call."""
        arguments = [None] * self.n_slots
        for name, value in constants.items():
            arguments[self.slots[name]] = value
        missing = [
            name
            for name, k in self.slots.items()
            if arguments[k] is None
            and name not in PER_DRAW_INPUTS
            and not name.startswith(("state.", "rows_"))
        ]
        if missing:
            raise TypeError(f"missing trajectory inputs: {missing}")
        self.constants = arguments

    def _normal(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape).astype(self.dtype, copy=False)

    def draw(
        self,
        position: np.ndarray,
        state_fields: Any,
        step_size: float,
        *,
        refresh: bool,
        rng: np.random.Generator,
        n_rows: list[int],
        groups: Any = None,
    ) -> list[Any]:
        """One call's arguments: the constants, the chain's state, fresh randomness.

        ``groups`` (:class:`~pymc_sgmcmc.sampling.whole_groups.WholeGroups`) draws whole
        groups; without it each ``pm.Minibatch`` call's rows are drawn by
        :meth:`draw_rows`.
        """
        args = self.constants.copy()
        args[self.position] = position
        for k, value in zip(self.state, state_fields, strict=True):
            args[k] = value
        args[self.step_size] = np.asarray(step_size, dtype=self.dtype)
        if self.refresh is not None:
            args[self.refresh] = _TRUE if refresh else _FALSE
            # Without a refresh its noise is not used: no draw for it.
            args[self.refresh_noise] = (
                self._normal(rng, self.unused_noise.shape) if refresh else self.unused_noise
            )
        if self.noise is not None:
            args[self.noise] = self._normal(rng, self.noise_shape)
        if groups is not None:
            rows, bounds, mask = groups.draw(rng, self.n_minibatches)
            args[self.rows[0]], args[self.row_bounds] = rows, bounds
            args[self.update_mask] = mask.astype(self.dtype, copy=False)
        else:
            for k, rows in zip(self.rows, self.draw_rows(rng, n_rows), strict=True):
                args[k] = rows
        return args

    def stack(self, draws: list[list[Any]]) -> list[Any]:
        """A block's arguments from the :meth:`draw` of each of its draws, in order.

        The first draw's position and state start the block; each per-draw input is
        stacked on a leading axis.
        """
        args = draws[0].copy()
        for k in self.stacked:
            args[k] = np.stack([draw[k] for draw in draws])
        return args

    def draw_rows(self, rng: np.random.Generator, n_rows: list[int]) -> list[np.ndarray]:
        """Each ``pm.Minibatch`` call's rows of its ``n_rows``, by its ``draw``.

        A :class:`~pymc_sgmcmc.gradients.graphs.MinibatchGroup` draws them with
        replacement, as ``pm.Minibatch`` does; a
        :class:`~pymc_sgmcmc.sampling.row_windows.RowWindows`, windows of its shuffled copy.
        """
        return [
            group.draw(rng, n, shape)
            for group, n, shape in zip(self.groups, n_rows, self.row_shapes, strict=True)
        ]
