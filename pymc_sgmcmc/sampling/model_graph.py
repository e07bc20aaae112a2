"""From a PyMC model to the graphs a stochastic-gradient trajectory needs.

The log density comes from ``model.logp()`` (every observed variable, every transform's
Jacobian, PyMC's ``total_size`` scaling), with the sampled value variables joined into one
flat vector; its only change is
:func:`~pymc_sgmcmc.gradients.log_density.simplify_log_density`, the same density in
fewer operations a row, before the gradient is taken. Each ``pm.Minibatch`` in it draws
its rows from a shared random generator inside the graph; we cut that draw out and leave a
placeholder for the minibatch. The trajectory gathers the rows of all its steps at once from integer
indices that the step method draws with NumPy from the chain's own generator. That
makes every run reproducible from ``random_seed`` and is several times cheaper per call
than drawing inside the compiled function.

Each ``total_size`` becomes a shared scalar (:func:`total_sizes_as_inputs`), so that
nothing in a compiled graph depends on how many rows the data have: PyTensor's on-disk
cache of compiled code then serves a model of the same structure at any size.
"""

from __future__ import annotations

import dataclasses
import inspect
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection
from pymc.data import MinibatchOp
from pymc.distributions.distribution import SymbolicRandomVariable
from pymc.model.fgraph import ModelNamed
from pymc.pytensorf import join_nonshared_inputs
from pymc.variational.minibatch_rv import MinibatchRandomVariable
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import ancestors, toposort
from pytensor.tensor.type_other import NoneConst

from pymc_sgmcmc.distributions import SphereTransform
from pymc_sgmcmc.gradients.graphs import (
    FlatLogp,
    MinibatchGroup,
    RowLogp,
    as_shared_data,
)
from pymc_sgmcmc.gradients.log_density import simplify_log_density
from pymc_sgmcmc.sources.buffer import ChunkBuffer, buffer_of


def is_sphere_valued(model, value_var: Variable) -> bool:
    """Whether ``value_var`` carries the sphere transform (its points live on spheres)."""
    rv = model.values_to_rvs[value_var]
    return isinstance(model.rvs_to_transforms.get(rv), SphereTransform)


def _batch_size(node: Apply) -> int:
    static = node.outputs[0].type.shape[0]
    if static is not None:
        return int(static)
    # Rare: the minibatch size is symbolic; evaluate it once from the inner graph.
    return int(node.outputs[0].shape[0].eval())


def find_minibatch_groups(logp: Variable) -> list[MinibatchGroup]:
    """Collect the ``pm.Minibatch`` calls that ``logp`` depends on, one group per call."""
    groups: dict[Variable, MinibatchGroup] = {}
    for var in ancestors([logp]):
        node = var.owner
        if node is None or not isinstance(node.op, MinibatchOp):
            continue
        rng = node.inputs[-1]
        group = groups.get(rng)
        if group is None:
            k = len(groups)
            group = MinibatchGroup(
                rng=rng,
                nodes=[],
                data=list(node.inputs[:-1]),
                batch_size=_batch_size(node),
                batches=[
                    out.type(name=f"minibatch_{k}_{j}") for j, out in enumerate(node.outputs[:-1])
                ],
                buffer=_buffer_of_call(list(node.inputs[:-1])),
            )
            groups[rng] = group
        if node not in group.nodes:
            group.nodes.append(node)
    return list(groups.values())


def _buffer_of_call(data: list[Variable]) -> ChunkBuffer | None:
    """The chunk buffer behind one ``pm.Minibatch`` call's arrays, if they are buffered."""
    buffers = [buffer_of(d) for d in data]
    if all(b is None for b in buffers):
        return None
    buffer = next(b for b in buffers if b is not None)
    if any(b is not buffer for b in buffers) or len(data) != len(buffer.sources):
        raise ValueError(
            "A pm.Minibatch call mixes arrays of a pmsg.Minibatch over out-of-core data with "
            "other arrays: its rows would not be the same rows. Pass all the arrays to one "
            "pmsg.Minibatch call (e.g. Xb, yb = pmsg.Minibatch(X_zarr, y_zarr, batch_size=B))."
        )
    return buffer


def detach_minibatches(logp: Variable, groups: list[MinibatchGroup]) -> Variable:
    """Return ``logp`` with each minibatch replaced by its group's placeholder.

    The ``total_size`` scaling that PyMC put in the graph is kept: it depends on the
    batch size, not on which rows are drawn.
    """
    if not groups:
        return logp
    mapping: dict[Variable, Variable] = {}
    for group in groups:
        for node in group.nodes:
            for batch, out in zip(group.batches, node.outputs[:-1], strict=True):
                mapping[out] = batch
    return graph_replace(logp, mapping, strict=False)


_SHARED_TOTAL_SIZE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per model: the shared scalar that stands for each ``total_size`` value."""


def total_sizes_as_inputs(model, minibatch_rvs: list[Variable]) -> dict[Variable, Variable]:
    """The ``total_size`` constants of ``minibatch_rvs``, each mapped to a shared scalar.

    PyMC keeps a ``total_size`` as an integer constant of the graph, and PyTensor's
    on-disk cache of compiled code is keyed by every constant: a model rebuilt on data
    of another length compiled afresh (measured: ~30 Numba compilations and ~25 s for
    a logistic regression). A shared scalar holding the same number is read at each
    call instead. One per model and value, whichever copy of the model (PyMC's
    ``fgraph_from_model`` clones the graph) holds the constant, so that two steps built
    on one model have the same graph (their compiled functions are reused).
    """
    by_value = _SHARED_TOTAL_SIZE.setdefault(model, {})
    mapping: dict[Variable, Variable] = {}
    for rv in minibatch_rvs:
        node = rv.owner
        if node is None or not isinstance(node.op, MinibatchRandomVariable):
            continue
        for size in node.inputs[1:]:
            if not isinstance(size, Constant) or NoneConst.equals(size):
                continue
            value = int(size.data)
            if value not in by_value:
                by_value[value] = pytensor.shared(np.int64(value), name="total_size")
            mapping[size] = by_value[value]
    return mapping


_SHARED_POINT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per model: the shared variable that stands for each value variable a step does not sample."""


def flat_slices(point: dict[str, np.ndarray], vars: list[Variable]) -> dict[str, slice]:
    """Each of ``vars``' place in the flat position, by name (PyMC's raveling order)."""
    info = DictToArrayBijection.map({v.name: point[v.name] for v in vars}).point_map_info
    stops = np.cumsum([size for _, _, size, _ in info])
    return {
        name: slice(int(stop - size), int(stop))
        for (name, _, size, _), stop in zip(info, stops, strict=True)
    }


def flat_logp(model, vars: list[Variable], initial_point: dict[str, np.ndarray]) -> FlatLogp:
    """Build :class:`FlatLogp` for the value variables ``vars`` of ``model``."""
    sampled = set(vars)
    # One shared variable per model and value variable, whichever step reads it: PyMC
    # sets its value before every call of a step, and two steps built alike then have
    # the same graph (their compiled functions are reused).
    point_values = _SHARED_POINT.setdefault(model, {})
    shared = {}
    for v in model.value_vars:
        if v in sampled:
            continue
        if v not in point_values:
            point_values[v] = pytensor.shared(np.asarray(initial_point[v.name]), name=v.name)
        shared[v] = point_values[v]
        shared[v].set_value(np.asarray(initial_point[v.name]))
    logp = _model_logp(model)
    sizes = total_sizes_as_inputs(model, model.basic_RVs)
    logp = graph_replace(logp, sizes, strict=False) if sizes else logp
    [logp], position = join_nonshared_inputs(initial_point, [logp], vars, shared)
    groups = find_minibatch_groups(logp)
    flat = FlatLogp(
        logp=detach_minibatches(logp, groups), position=position, shared=shared, groups=groups
    )
    return _batches_of_any_length(model, flat, vars, initial_point) if groups else flat


def _batches_of_any_length(model, flat: FlatLogp, vars: list[Variable], initial_point) -> FlatLogp:
    """``flat`` with its log density rebuilt on minibatch placeholders of any length.

    PyMC builds a ``pm.Minibatch`` graph with its batch size fixed: the minibatch's shape
    and the ``total_size / batch_size`` scale are constants, so each batch size compiled
    afresh (measured: 68 Numba compilations and 10.8 s for a logistic regression). The
    terms of :func:`row_logp` scale by the rows they are fed, so one compiled trajectory
    serves every batch size.

    Each group's number of rows is a scalar of its own (``MinibatchGroup.batch_rows``),
    declared as the placeholders' length: a caller feeds it from outside a loop, and the
    scale ``total_size / rows`` is then computed once per call, not at every step (read
    from the gathered rows inside the trajectory's loop, it doubled Numba's first compile).
    """
    rows = row_logp(model, flat, vars, initial_point)
    logp = pt.add(rows.prior, *(term for terms in rows.terms for term in terms))
    groups, length_of = [], {}
    for k, (group, placeholders) in enumerate(zip(flat.groups, rows.placeholders, strict=True)):
        batch_rows = pt.scalar(f"batch_rows_{k}", dtype="int64")
        length_of.update(dict.fromkeys(placeholders, batch_rows))
        groups.append(dataclasses.replace(group, batches=list(placeholders), batch_rows=batch_rows))
    declared = {p: pt.specify_shape(p, (n, *(None,) * (p.ndim - 1))) for p, n in length_of.items()}
    logp = graph_replace(logp, declared, strict=False)
    # Shape inference then reads every length (of a cast, a sum, ...) off the scalars,
    # and the scale total_size / rows is a function of them alone.
    logp = rewrite_graph(logp, include=("ShapeOpt", "canonicalize"))
    return FlatLogp(logp=logp, position=flat.position, shared=flat.shared, groups=groups)


def refuse_out_of_core(flat: FlatLogp, sampler: str = "This sampler") -> None:
    """Refuse a sampler that needs the exact log density where the data are out of core."""
    if any(group.buffer is not None for group in flat.groups):
        raise ValueError(
            f"{sampler} evaluates the exact log density on all rows inside its compiled "
            "trajectory (a Metropolis-Hastings test, or a metric computed on the full data), "
            "which cannot read data that pmsg.Minibatch keeps out of core. Use a "
            "stochastic-gradient sampler that reads minibatches (pmsg.SGHMC, pmsg.SGLD, "
            "pmsg.SGNHT, pmsg.SGNPHMC and their EM variants), or load the data into memory "
            "(numpy.asarray) for this one."
        )


def full_data_logp(model, flat: FlatLogp, vars: list[Variable], initial_point) -> Variable:
    """The exact log density on all rows, as a function of ``flat.position``.

    :func:`row_logp` with every placeholder fed its group's full data, so that PyMC's
    ``total_size`` scaling becomes 1. Used where a sampler needs the exact density, e.g.
    a Metropolis–Hastings test. (Not PyMC's ``remove_minibatched_nodes``: it cannot
    rebuild a multivariate observed variable, see :func:`_rebuilt_node`.)
    """
    if not flat.groups:
        return flat.logp
    refuse_out_of_core(flat)
    rows = row_logp(model, flat, vars, initial_point)
    total = rows.prior
    for terms in rows.terms:
        for term in terms:
            total = total + term
    data = {
        placeholder: as_shared_data(array)
        for placeholders, group in zip(rows.placeholders, flat.groups, strict=True)
        for placeholder, array in zip(placeholders, group.data, strict=True)
    }
    return graph_replace(total, data, strict=False)


def _rebuilt_node(node: Apply, inputs: list[Variable]) -> Apply:
    """``node`` made anew from ``inputs``, whose static shapes may be less specific.

    ``clone_with_new_inputs`` keeps an op's input types and pins a less specific input to
    the old static shape with ``specify_shape``, which is wrong here (the minibatch's
    placeholder has any number of rows) and hides a random variable from PyMC's log
    density (a mixture's components became ``SpecifyShape``, which PyMC's mixture log
    density cannot read, neither with our rewrite nor with PyMC's own
    ``remove_minibatched_nodes``). Two ops are made anew instead:

    - PyMC's symbolic random variables (mixtures, ...), through their ``rv_op`` from the
      new parameters, as PyMC itself does when a size changes type;
    - ``MinibatchRandomVariable``, whose ``make_node`` stores ``NoneConst`` for a dimension
      without ``total_size`` but refuses it when the node is made again (every
      multivariate observed variable has such a dimension).
    """
    op = node.op
    if isinstance(op, MinibatchRandomVariable):
        rv, *total_size = inputs
        return op.make_node(rv, *(None if NoneConst.equals(t) else t for t in total_size))
    if (
        isinstance(op, SymbolicRandomVariable)
        and op.extended_signature is not None
        and hasattr(op, "rv_op")
        and any(
            not old.type.is_super(new.type) for old, new in zip(node.inputs, inputs, strict=True)
        )
    ):
        (rng_idxs, size_idx, param_idxs), _ = op.get_input_output_type_idxs(op.extended_signature)
        params = [inputs[i] for i in param_idxs]
        options = {} if size_idx is None else {"size": inputs[size_idx]}
        if "rng" in inspect.signature(op.rv_op).parameters and len(rng_idxs) == 1:
            options["rng"] = inputs[rng_idxs[0]]
        rebuilt = op.rv_op(*params, **options).owner
        if len(rebuilt.outputs) == len(node.outputs):
            return rebuilt
    return node.clone_with_new_inputs(inputs, strict=False)


def keep_the_models_data(fgraph, model) -> None:
    """Put ``model``'s named data (``pm.Data``) back in ``fgraph``, a copy of ``model``.

    PyMC's ``fgraph_from_model`` deep-copies every named shared variable. A graph that
    read the copies would keep the values they had when the step was built (a later
    ``pm.set_data`` would not reach it, while the step's other functions, built on the
    model itself, would follow), hold the data twice, and differ from the graph of
    another step on the same model (so its compiled function could not be reused).
    """
    for node in list(fgraph.apply_nodes):
        if isinstance(node.op, ModelNamed):
            copy, original = node.inputs[0], model.named_vars.get(node.op.name)
            if isinstance(copy, SharedVariable) and isinstance(original, SharedVariable):
                fgraph.replace(copy, original, import_missing=True)


def _replace_rebuilding(
    outputs: list[Variable], replacements: dict[Variable, Variable]
) -> list[Variable]:
    """``clone_replace`` of ``outputs`` that remakes each node with :func:`_rebuilt_node`."""
    memo: dict[Variable, Variable] = dict(replacements)
    for node in toposort(outputs):
        inputs = [memo.get(i, i) for i in node.inputs]
        if all(new is old for new, old in zip(inputs, node.inputs, strict=True)):
            continue
        rebuilt = _rebuilt_node(node, inputs)
        memo.update(zip(node.outputs, rebuilt.outputs, strict=True))
    return [memo.get(o, o) for o in outputs]


def row_logp(
    model, flat: FlatLogp, vars: list[Variable], initial_point, *, elementwise: bool = False
) -> RowLogp:
    """The log density of ``model`` with placeholders of any length for its minibatches.

    With ``elementwise``, every term is PyMC's elementwise log density of its variable
    (``sum=False``: a likelihood term has the rows on its leading axis), and the prior's
    terms are kept one by one.

    Every ``pm.Minibatch`` output is replaced in the model (as PyMC's own
    ``remove_minibatched_nodes`` does) by a placeholder whose length is not fixed, and the
    log density is built one variable's term at a time, in the flat position of ``flat``.

    Raises
    ------
    ValueError
        When a term reads the rows of two ``pm.Minibatch`` calls (their rows could not be
        matched chunk by chunk).
    """
    from pytensor.graph.replace import clone_replace

    terms_of_model = _terms_of_model(model, flat.groups, elementwise)
    placeholders = terms_of_model.placeholders
    names = {v.name for v in vars}
    values = {v.name: v for v in terms_of_model.value_vars}
    row_vars = [values[v.name] for v in vars]
    shared_by_name = {v.name: s for v, s in flat.shared.items()}
    row_shared = {
        v: shared_by_name[v.name] for v in terms_of_model.value_vars if v.name not in names
    }
    variables, raw_terms = terms_of_model.variables, terms_of_model.raw_terms
    joined, position = join_nonshared_inputs(initial_point, raw_terms, row_vars, row_shared)
    joined = clone_replace(joined, {position: flat.position})

    prior_terms: list[Variable] = []
    terms: list[list[Variable]] = [[] for _ in flat.groups]
    scaled: list[list[bool]] = [[] for _ in flat.groups]
    for rv, term in zip(variables, joined, strict=True):
        term_ancestors = set(ancestors([term]))
        reads = [k for k, group in enumerate(placeholders) if term_ancestors.intersection(group)]
        if not reads:
            prior_terms.append(term)
            continue
        if len(reads) > 1:
            raise ValueError(
                f"the log density term of {rv.name!r} reads the rows of {len(reads)} "
                "pm.Minibatch calls, whose rows cannot be matched chunk by chunk. Slice "
                "all the arrays of one observation with one pm.Minibatch call."
            )
        terms[reads[0]].append(term)
        owner = getattr(rv, "owner", None)
        scaled[reads[0]].append(owner is not None and isinstance(owner.op, MinibatchRandomVariable))
    summed = [term.sum() for term in prior_terms] if elementwise else prior_terms
    prior = pt.add(*summed) if summed else pt.zeros((), dtype=flat.logp.dtype)
    return RowLogp(
        prior=prior, terms=terms, scaled=scaled, placeholders=placeholders,
        position=flat.position, prior_terms=prior_terms,
    )  # fmt: skip


class _TermsOfModel(NamedTuple):
    """The per-variable log density terms of a model rebuilt on minibatch placeholders."""

    variables: list[Variable]
    """The rebuilt model's random variables and potentials, one per term."""
    raw_terms: list[Variable]
    """Their terms, in the rebuilt model's value variables."""
    value_vars: list[Variable]
    placeholders: list[list[Variable]]
    """Per group, one placeholder per array of its ``pm.Minibatch`` call."""


def _structure(model) -> tuple:
    """What ``model``'s log density is built from; a variable added since changes it."""
    return (
        tuple(map(id, model.basic_RVs)),
        tuple(map(id, model.potentials)),
        tuple(map(id, model.value_vars)),
        tuple((id(rv), id(transform)) for rv, transform in model.rvs_to_transforms.items()),
    )


_MODEL_LOGP: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per model: its simplified log density (:func:`_model_logp`) by structure."""


def _model_logp(model) -> Variable:
    """``model.logp()``, simplified, built once per model structure (as :func:`_terms_of_model`)."""
    built = _MODEL_LOGP.setdefault(model, {})
    key = _structure(model)
    if key not in built:
        [built[key]] = simplify_log_density([model.logp()])
    return built[key]


_TERMS_OF_MODEL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per model: :func:`_terms_of_model` by the model's structure, the groups and the form."""


def _terms_of_model(model, groups: list[MinibatchGroup], elementwise: bool) -> _TermsOfModel:
    """PyMC's log density terms of ``model``, its minibatches replaced by placeholders.

    Built once per model structure (its variables, values, potentials and transforms),
    groups and form (summed or ``elementwise``): PyMC's ``model.logp`` takes ~0.1 s a
    variable on a small model, and a step asked for these terms three times, each step
    on a model again (measured: ~45 % of building a step on a 60-row model, compile
    cache warm). Later calls get the same graphs, placeholders included; the data are
    the model's shared variables, so ``pm.set_data`` reaches them all the same.
    """
    from pymc.model.fgraph import fgraph_from_model, model_from_fgraph
    from pytensor.graph.fg import FunctionGraph

    key = (
        _structure(model),
        tuple((id(g.rng), *map(id, g.data)) for g in groups),
        elementwise,
    )
    built = _TERMS_OF_MODEL.setdefault(model, {})
    if key in built:
        return built[key]
    placeholders: list[list[Variable]] = [[] for _ in groups]
    if groups:
        with initial_values_set_aside(model):
            fgraph, _ = fgraph_from_model(model)
        keep_the_models_data(fgraph, model)
        replacements = {}
        for node in fgraph.apply_nodes:
            if not isinstance(node.op, MinibatchOp):
                continue
            k = _group_of(node, groups)
            if not placeholders[k]:
                # Only the number of rows varies; a static column count keeps shape
                # inference (and Numba's first compile) as cheap as with fixed rows.
                placeholders[k] = [
                    out.type.clone(shape=(None, *out.type.shape[1:]))(name=f"rows_{k}_{j}")
                    for j, out in enumerate(node.outputs[:-1])
                ]
            replacements.update(zip(node.outputs[:-1], placeholders[k], strict=True))
        outputs = _replace_rebuilding(fgraph.outputs, replacements)
        rebuilt = FunctionGraph(outputs=outputs, clone=False)
        rebuilt._coords = fgraph._coords  # lost by the rebuild, as PyMC notes
        rebuilt._dim_lengths = fgraph._dim_lengths
        row_model = model_from_fgraph(rebuilt, mutate_fgraph=True)
    else:
        row_model = model
    variables = [*row_model.basic_RVs, *row_model.potentials]
    raw_terms = [row_model.logp(vars=[rv], sum=not elementwise) for rv in variables]
    if elementwise:
        raw_terms = [term for (term,) in raw_terms]
    raw_terms = simplify_log_density(raw_terms)
    sizes = total_sizes_as_inputs(model, row_model.basic_RVs)
    raw_terms = graph_replace(raw_terms, sizes, strict=False) if sizes else raw_terms
    built[key] = _TermsOfModel(variables, raw_terms, list(row_model.value_vars), placeholders)
    return built[key]


@contextmanager
def initial_values_set_aside(model) -> Iterator[None]:
    """The model without its ``initval``s, for PyMC's ``fgraph_from_model``.

    PyMC refuses to copy a model whose variables carry initial values
    (``NotImplementedError``), which PyMC's docs advise for ordered transforms. The
    copies made here only give log densities, evaluated at points passed in (the initial
    point was computed with the initial values), so they are set aside for the copy and
    restored after it, whatever happens.
    """
    saved = model.rvs_to_initial_values
    model.rvs_to_initial_values = dict.fromkeys(saved)
    try:
        yield
    finally:
        model.rvs_to_initial_values = saved


def _group_of(node: Apply, groups: list[MinibatchGroup]) -> int:
    """Which of ``groups`` (found in the model's logp) a ``MinibatchOp`` node belongs to."""
    for k, group in enumerate(groups):
        if _same_data(node.inputs[-1], group.rng) or all(
            _same_data(a, b) for a, b in zip(node.inputs[:-1], group.data, strict=False)
        ):
            return k
    # PyMC's copy of the model may clone shared data (pm.Data) with a copy of its value:
    # match by name and shape then.
    for k, group in enumerate(groups):
        if all(
            a.name is not None and a.name == b.name and _shape_of(a) == _shape_of(b)
            for a, b in zip(node.inputs[:-1], group.data, strict=True)
        ):
            return k
    if len(groups) == 1:
        return 0
    raise ValueError("a pm.Minibatch call of the model was not found in its log density.")


def _shape_of(var: Variable) -> tuple[int, ...] | None:
    if isinstance(var, SharedVariable):
        return np.shape(var.get_value(borrow=True))
    if isinstance(var, Constant):
        return np.shape(var.data)
    return None


def _same_data(candidate: Variable, array: Variable) -> bool:
    if candidate is array:
        return True
    if isinstance(candidate, SharedVariable) and isinstance(array, SharedVariable):
        # PyMC's model copy may clone a shared variable around the same value.
        return candidate.get_value(borrow=True) is array.get_value(borrow=True)
    if isinstance(candidate, Constant) and isinstance(array, Constant):
        a, b = candidate.data, array.data
        return a is b or (
            getattr(a, "shape", None) == getattr(b, "shape", None)
            and getattr(a, "size", 0) > 0
            and np.shares_memory(a, b)
        )
    return False
