"""Compiling the package's functions of the model graph: one place for the settings.

Every function the samplers and the mode search call on the model (the trajectory, a
full-data pass, a subsample gradient) is compiled here, so that they share the same
choices and ``random_seed`` reproduces a run in any process.

A compiled function is kept, per model, under a structural key of its graph
(:func:`graph_key`): a step built afresh on the same model (a notebook cell run again, a
test that builds two steps) reuses it instead of paying PyTensor's graph rewriting again,
which is most of a compile for the samplers whose trajectory holds nested scans (measured:
~35 s of RHMC's and SGR-NPHMC's ~40 s). The store is dropped with the model.
"""

from __future__ import annotations

import hashlib
import pickle
import weakref
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.model import Model
from pymc.pytensorf import compile as pm_compile
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.op import HasInnerGraph
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.graph.traversal import toposort
from pytensor.scan.op import Scan
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.math import Dot

_COMPILED: weakref.WeakKeyDictionary[Model, dict[tuple, Any]] = weakref.WeakKeyDictionary()
"""Compiled functions by model, then by :func:`graph_key` (and the compile settings)."""
_DIGESTS: weakref.WeakKeyDictionary[Constant, str] = weakref.WeakKeyDictionary()
"""A digest of each constant's data, computed once (a full-data model's observations)."""


LINK_FLAGS = {"numba__fastmath": False}
"""PyTensor settings read when a function is linked (compiled, or unpickled): see
:func:`compile_graph` for why fast-math is off."""


class LinkedWhereUnpickled:
    """A compiled function to pickle: it unpickles linked as :func:`compile_graph` links.

    PyTensor pickles a compiled function as its rewritten graph and links it again where
    it is unpickled, so a worker process of ``pm.sample(cores > 1)`` skips the graph
    rewriting, most of a compile. Unpickling this gives the function itself, or None
    where the rewritten graph does not unpickle (PyTensor re-checks a scan's inner types
    and refused one whose rewritten recurrent state had a static length): compile anew
    then. Two differences from PyTensor's own pickling, each measured to matter:

    - the link uses :data:`LINK_FLAGS` (PyTensor's own links under whatever is set when
      unpickling, fast-math on by default, and a worker's draws rounded 2e-16 apart from
      the parent's);
    - the inputs' containers travel, not copies of their data: a shared variable's
      container is the model's, pickled with it, so the function still reads what PyMC
      sets there (the other step methods' variables in a ``CompoundStep``).
    """

    def __init__(self, function: Any) -> None:
        self.function = function

    def __reduce__(self) -> tuple:
        function = self.function
        function.free()  # intermediate results are not pickled
        maker = pickle.dumps(function.maker)
        return (_link, (maker, list(function.input_storage), function.trust_input))


def _link(maker: bytes, storage: list, trust_input: bool) -> Any:
    with pytensor.config.change_flags(**LINK_FLAGS):
        try:
            function = pickle.loads(maker).create(storage)
        except (TypeError, ValueError):
            return None
    function.trust_input = trust_input
    return function


def upcast_mixed_dot(fgraph: Any, node: Any) -> list | None:
    """A product of float32 data with float64 parameters, computed on float64 inputs.

    ``pm.Minibatch`` keeps float32 data as float32, so a logistic regression's ``X @ w``
    multiplies float32 by float64. PyTensor's BLAS rewrites skip a ``Dot`` whose inputs
    differ in type, and Numba's product of mixed types loops without BLAS (measured at
    10⁶ × 16: a log density and gradient took 0.69-0.85 s against 0.14 s in float64;
    0.29 s with this rewrite). The cast goes below any transpose, so that the log
    density's ``X @ w`` and its gradient's ``X.T @ r`` share one cast of ``X``.
    """
    dtype = node.outputs[0].type.dtype
    if all(x.type.dtype == dtype for x in node.inputs):
        return None
    return [node.op(*(_cast_below_transposes(x, dtype) for x in node.inputs))]


def _cast_below_transposes(x: Variable, dtype: str) -> Variable:
    if x.type.dtype == dtype:
        return x
    if x.owner is not None and isinstance(x.owner.op, DimShuffle):
        return x.owner.op(_cast_below_transposes(x.owner.inputs[0], dtype))
    return pt.cast(x, dtype)


# Not applied as a decorator: the compiled function's pickle (worker processes) refers
# to the function by its name, which the decorated object would take over.
_UPCAST_MIXED_DOT = dfs_rewriter(node_rewriter([Dot])(upcast_mixed_dot), name="upcast_mixed_dot")

UPCAST_MIXED_DOT_POSITION = 2.5
"""After PyTensor's ``specialize`` (2), which lifts transposes through products, and
before its in-place and fusion passes."""


def compile_mode(mode: Any = None) -> Mode:
    """PyTensor's ``mode`` (the configured default for None) with :func:`upcast_mixed_dot`.

    The mode's rewrites also rewrite the inner graphs of scans, so the trajectory's
    minibatch products are rewritten too.
    """
    return get_mode(mode).register((_UPCAST_MIXED_DOT, UPCAST_MIXED_DOT_POSITION))


def compile_graph(inputs: list, outputs: list, compile_kwargs: dict | None = None) -> Any:
    """PyMC's ``compile`` of ``outputs``, with trusted inputs and reproducible arithmetic.

    - PyMC's ``compile`` turns the parameter checks of a log density (``sigma > 0``) into
      ``-inf`` rather than an exception; call it inside the model's context so that it
      honours the model's ``check_bounds``.
    - No random variable is left in the graphs (the step method draws all randomness
      from the chain's generator), so no generator is seeded here.
    - Numba's fast-math flags are off. With them, the machine code that Numba compiles
      afresh and the code it loads from PyTensor's on-disk cache round differently
      (measured: 3e-16 after one draw, and HMC draws 0.2 apart after 500 iterations),
      so the first run of a script and every later one gave different draws for one
      ``random_seed``. Off, both agree bit for bit, at about 5 % of the sampling time.
    - ``trust_input``: the callers build their inputs with the right types.
    - Products of float32 data and float64 parameters are computed in float64 with
      BLAS (:func:`upcast_mixed_dot`), in ``compile_kwargs``'s ``mode`` if it has one.
    - Inside a model's context and without ``compile_kwargs``, a function compiled
      before on that model from a graph with the same :func:`graph_key` is returned
      instead of a new one (its inputs and outputs in the same order).
    """
    model = Model.get_context(error_if_none=False)
    key = None
    if model is not None and not compile_kwargs:
        key = graph_key(list(inputs), list(outputs))
        if key is not None:
            key = (key, pytensor.config.mode, pytensor.config.linker, pytensor.config.floatX)
            cached = _COMPILED.get(model, {}).get(key)
            if cached is not None:
                return cached
    kwargs = {"on_unused_input": "ignore"} | dict(compile_kwargs or {})
    kwargs["mode"] = compile_mode(kwargs.get("mode"))
    with pytensor.config.change_flags(**LINK_FLAGS):
        function = pm_compile(list(inputs), list(outputs), random_seed=False, **kwargs)
    function.trust_input = True
    if key is not None:
        _COMPILED.setdefault(model, {})[key] = function
    return function


def graph_key(inputs: list[Variable], outputs: list[Variable]) -> tuple | None:
    """A hashable key that two graphs share exactly when they compute the same function.

    PyTensor's own notion of equal computations, made hashable: every node is its ``Op``
    (compared with the ``Op``'s equality, as PyTensor's merge rewrite does) and the
    positions of its inputs; a scan is its settings and the key of its inner graph
    (``Scan`` compares inner graphs by identity, so two scans built alike would never
    be equal); a constant is its type and a digest of its data; a shared variable is
    itself (it is read at every call, so the data it holds then is what counts); an
    input is its position. ``None`` where a graph holds an ``Op`` that cannot be
    hashed, or one with an inner graph other than a scan or an ``OpFromGraph``, so
    such a graph is never matched.
    """
    ids: dict[Variable, tuple] = {}
    for position, variable in enumerate(inputs):
        ids[variable] = ("input", position, variable.type)
    nodes = []
    try:
        for node in toposort(outputs, blockers=inputs):
            op = _op_key(node.op)
            if op is None:
                return None
            arguments = tuple(_variable_key(v, ids) for v in node.inputs)
            nodes.append((op, arguments))
            for index, output in enumerate(node.outputs):
                ids[output] = ("node", len(nodes) - 1, index)
        result = tuple(_variable_key(v, ids) for v in outputs)
        return (tuple(nodes), result)
    except TypeError:  # an unhashable Op or type
        return None


def _op_key(op: Any) -> Any:
    if isinstance(op, Scan):
        inner = graph_key(list(op.inner_inputs), list(op.inner_outputs))
        if inner is None:
            return None
        settings = (op.info, op.truncate_gradient, op.name, op.allow_gc, op.mode, op.profile)
        return (Scan, settings, inner)
    if isinstance(op, HasInnerGraph) and not isinstance(op, OpFromGraph):
        return None  # another Op with an inner graph: not matched
    # An OpFromGraph (a SymbolicOp such as AllocDiag, or the derivative of a log-sum-exp
    # that a mixture's gradient holds) compares its frozen inner graph by structure and
    # constants by value: PyTensor's own equality, which its merge rewrite trusts. Not
    # matching them left every mixture model's functions uncached (measured: a second
    # step on the same mixture built in 3.9 s, 1.6 s with them matched).
    hash(op)
    return op


def _variable_key(variable: Variable, ids: dict[Variable, tuple]) -> tuple:
    if variable in ids:
        return ids[variable]
    if isinstance(variable, Constant):
        data = np.asarray(variable.data)
        if variable not in _DIGESTS:
            raw = repr(data).encode() if data.dtype == object else np.ascontiguousarray(data).data
            _DIGESTS[variable] = hashlib.sha256(raw).hexdigest()
        key = ("constant", variable.type, data.dtype.str, data.shape, _DIGESTS[variable])
    elif isinstance(variable, SharedVariable):
        key = ("shared", id(variable))
    else:
        key = ("free", id(variable))
    ids[variable] = key
    return key
