"""Compiling the package's functions of the model graph: one place for the settings.

Every function the samplers and the mode search call on the model (the trajectory, a
full-data pass, a subsample gradient) is compiled here, so that they share the same
choices and ``random_seed`` reproduces a run in any process.

A compiled function is kept, per model, under a structural key of its graph
(:func:`graph_key`): a step built afresh on the same model (a notebook cell run again, a
test that builds two steps) reuses it instead of paying PyTensor's graph rewriting again,
which is most of a compile for the samplers whose trajectory holds nested scans (measured:
~35 s of RHMC's and SGR-NPHMC's ~40 s). The store is dropped with the model.

The rewritten graph is also kept on disk, beside PyTensor's own compile cache, under a
digest of a portable form of the same key (:func:`portable_graph_key`), so that another
process (the script run again, a test worker) links it without rewriting it:
:class:`RewrittenGraphStore`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import inspect
import io
import os
import pickle
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pymc
import pytensor
import pytensor.tensor as pt
from pymc.model import Model
from pymc.pytensorf import compile as pm_compile
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode, get_mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import AbstractFunctionGraph
from pytensor.graph.op import HasInnerGraph
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.graph.traversal import toposort
from pytensor.link.basic import Container
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_default_op_cache_key
from pytensor.link.numba.linker import NumbaLinker
from pytensor.link.utils import compile_function_src
from pytensor.scan.op import Scan
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.math import Dot
from pytensor.tensor.shape import SpecifyShape

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
    where the rewritten graph does not unpickle: compile anew then. Four differences
    from PyTensor's own pickling, each seen to matter:

    - the link uses :data:`LINK_FLAGS` (PyTensor's own links under whatever is set when
      unpickling, fast-math on by default, and a worker's draws rounded 2e-16 apart from
      the parent's);
    - the inputs' containers travel, not copies of their data: a shared variable's
      container is the model's, pickled with it, so the function still reads what PyMC
      sets there (the other step methods' variables in a ``CompoundStep``);
    - rewritten scans unpickle (:func:`_rewritten_scans_unpickle`);
    - an ``OpFromGraph``'s gradient caches are left out (:class:`_GraphPickler`).
    """

    def __init__(self, function: Any) -> None:
        self.function = function

    def __reduce__(self) -> tuple:
        function = self.function
        referenced: list[Any] = []
        positions: dict[int, int] = {}

        class Pickler(_GraphPickler):
            # The shared variables and containers the graph reads travel in the outer
            # pickle, beside the function's input storage and the step's own references
            # to them, so that their data are pickled once (pickled with the graph, a
            # model's data went twice into the step sent to each worker process).
            def persistent_id(self, obj: Any) -> int | None:
                if not isinstance(obj, SharedVariable | Container):
                    return None
                if id(obj) not in positions:
                    positions[id(obj)] = len(referenced)
                    referenced.append(obj)
                return positions[id(obj)]

        maker = _pickled_maker(function, Pickler)
        arguments = (maker, referenced, list(function.input_storage), function.trust_input)
        return (_link, arguments)


class _GraphPickler(pickle.Pickler):
    """Pickles a rewritten graph, leaving out what a compiled function never calls.

    An ``OpFromGraph`` caches the operations of its gradient in local functions, which do
    not pickle (a mixture's log-sum-exp derivative holds one), so neither did the graph.
    They are built again on demand; a compiled function computes no gradient.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, OpFromGraph):
            state = vars(obj) | {"_lop_op_cache": {}, "_rop_op_cache": None}
            state |= {"_frozen_lop": None, "_frozen_rop": None}
            return (_bare_instance, (type(obj),), state)
        return NotImplemented


def _bare_instance(kind: type) -> Any:
    return kind.__new__(kind)


def _pickled_maker(function: Any, pickler: type[pickle.Pickler]) -> bytes:
    """``function``'s rewritten graph (its ``FunctionMaker``), pickled by ``pickler``."""
    function.free()  # intermediate results are not pickled
    buffer = io.BytesIO()
    pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(function.maker)
    return buffer.getvalue()


def _link(maker: bytes, referenced: list, storage: list, trust_input: bool) -> Any:
    class Unpickler(pickle.Unpickler):
        def persistent_load(self, position: int) -> Any:
            return referenced[position]

    with pytensor.config.change_flags(**LINK_FLAGS), _rewritten_scans_unpickle():
        try:
            function = Unpickler(io.BytesIO(maker)).load().create(storage)
        except (TypeError, ValueError):
            return None
    function.trust_input = trust_input
    return function


@contextlib.contextmanager
def _rewritten_scans_unpickle() -> Iterator[None]:
    """Unpickle scans without re-checking the types of their recurrent states.

    PyTensor checks, when a scan unpickles, that each recurrent state's inner input and
    output have the same broadcastable pattern, a check its rewrites do not keep: the
    trajectory of a one-parameter model came out of them with a state read as
    ``shape=(1,)`` and written as ``shape=(None,)``, so its rewritten graph, which had
    compiled and run, did not unpickle (every worker of ``pm.sample(cores=2)`` compiled
    it again). The check only raises; it sets nothing, so it is skipped while loading a
    graph that PyTensor's rewriting produced. Not thread-safe.
    """
    check = Scan.validate_inner_graph
    Scan.validate_inner_graph = lambda self: None
    try:
        yield
    finally:
        Scan.validate_inner_graph = check


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


class TrustedShape(SpecifyShape):
    """``SpecifyShape`` without its check: the output is the input, of the stated type.

    The package's compiled functions take inputs that it builds itself, of the shapes
    their graphs state (``trust_input``), so a ``SpecifyShape`` there never fails. Numba
    compiles each one with the formatting of its error message, which is costly at a
    first compile (measured with empty caches on the quickstart's model, ``pmsg.SGHMC()``:
    the first draw, where the trajectory is compiled, took 13.6-17.5 s instead of
    24.1-25.6 s; docs/benchmarks.md, "A first compile without shape checks"). A subclass, so that
    every rewrite that knows ``SpecifyShape`` treats it alike; made by
    :func:`trust_specify_shape` in the package's compile mode only.
    """

    def perform(self, node: Apply, inputs: list, outputs: list) -> None:  # noqa: D102
        outputs[0][0] = inputs[0]


@register_funcify_default_op_cache_key(TrustedShape)
def _numba_trusted_shape(op: TrustedShape, node: Apply, **kwargs: Any) -> Any:
    # A function of the node's arity (its shape inputs are ignored), written out because
    # the generated graph function calls it with every input in place.
    names = "".join(f", shape_{k}" for k in range(len(node.inputs) - 1))
    source = f"def trusted_shape(x{names}):\n    return x\n"
    return numba_njit(compile_function_src(source, "trusted_shape", {}))


def trust_specify_shape(fgraph: Any, node: Any) -> list | None:
    """A ``SpecifyShape`` as a :class:`TrustedShape` of the same inputs and type."""
    if type(node.op) is not SpecifyShape:
        return None
    return [TrustedShape()(*node.inputs)]


_TRUST_SPECIFY_SHAPE = dfs_rewriter(
    node_rewriter([SpecifyShape])(trust_specify_shape), name="trust_specify_shape"
)

TRUST_SPECIFY_SHAPE_POSITION = 49.05
"""After PyTensor's elementwise fusion (49), before its in-place passes (49.5 on)."""


def compile_mode(mode: Any = None) -> Mode:
    """PyTensor's ``mode`` (the configured default for None) with the package's rewrites.

    :func:`upcast_mixed_dot`, and for Numba's linker :func:`trust_specify_shape`. The
    mode's rewrites also rewrite the inner graphs of scans, so the trajectory's minibatch
    products are rewritten too.
    """
    mode = get_mode(mode)
    rewrites = [(_UPCAST_MIXED_DOT, UPCAST_MIXED_DOT_POSITION)]
    if isinstance(mode.linker, NumbaLinker):
        rewrites.append((_TRUST_SPECIFY_SHAPE, TRUST_SPECIFY_SHAPE_POSITION))
    return mode.register(*rewrites)


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
      instead of a new one (its inputs and outputs in the same order); failing that, a
      graph rewritten before in any process with the same :func:`portable_graph_key` is
      linked from disk (:class:`RewrittenGraphStore`).
    """
    model = Model.get_context(error_if_none=False)
    key = None
    stored = None
    if model is not None and not compile_kwargs:
        key = graph_key(list(inputs), list(outputs))
        if key is not None:
            key = (key, pytensor.config.mode, pytensor.config.linker, pytensor.config.floatX)
            cached = _COMPILED.get(model, {}).get(key)
            if cached is not None:
                return cached
            stored = RewrittenGraphStore.find(list(inputs), list(outputs))
    function = None if stored is None else stored.load()
    if function is None:
        kwargs = {"on_unused_input": "ignore"} | dict(compile_kwargs or {})
        kwargs["mode"] = compile_mode(kwargs.get("mode"))
        with pytensor.config.change_flags(**LINK_FLAGS):
            function = pm_compile(list(inputs), list(outputs), random_seed=False, **kwargs)
        if stored is not None:
            stored.save(function)
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
    try:
        return _graph_structure(inputs, outputs, _op_key, _variable_key)
    except TypeError:  # an unhashable Op or type
        return None


def _graph_structure(
    inputs: list[Variable],
    outputs: list[Variable],
    op_key: Any,
    leaf_key: Any,
    type_key: Any = lambda type_: type_,
) -> tuple | None:
    """Every node as ``op_key(op)`` and the places of its inputs; leaves by ``leaf_key``."""
    ids: dict[Variable, Any] = {}
    for position, variable in enumerate(inputs):
        ids[variable] = ("input", position, type_key(variable.type))
    nodes = []
    for node in toposort(outputs, blockers=inputs):
        op = op_key(node.op)
        if op is None:
            return None
        arguments = tuple(ids[v] if v in ids else leaf_key(v, ids) for v in node.inputs)
        nodes.append((op, arguments))
        for index, output in enumerate(node.outputs):
            ids[output] = ("node", len(nodes) - 1, index)
    result = tuple(ids[v] if v in ids else leaf_key(v, ids) for v in outputs)
    return (tuple(nodes), result)


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


def _constant_key(variable: Constant) -> tuple:
    data = np.asarray(variable.data)
    if variable not in _DIGESTS:
        raw = repr(data).encode() if data.dtype == object else np.ascontiguousarray(data).data
        _DIGESTS[variable] = hashlib.sha256(raw).hexdigest()
    return ("constant", variable.type, data.dtype.str, data.shape, _DIGESTS[variable])


def _variable_key(variable: Variable, ids: dict[Variable, Any]) -> tuple:
    if isinstance(variable, Constant):
        key = _constant_key(variable)
    elif isinstance(variable, SharedVariable):
        key = ("shared", id(variable))
    else:
        key = ("free", id(variable))
    ids[variable] = key
    return key


# The on-disk store of rewritten graphs.


class _NotPortableError(Exception):
    """A graph, or a function's pickle, that the on-disk store cannot hold."""


STORE_CONSTANT_BYTES = 16 * 2**20
"""A graph whose constants hold more bytes than this is not stored on disk: its pickle
would copy them (a full-data model's observations); data given as shared variables are
never copied."""

STORE_MAX_AGE_DAYS = 30
"""Stored graphs not used for this long are deleted, as PyTensor ages its own cache."""

STORE_DISABLE_VARIABLE = "PYMC_SGMCMC_NO_GRAPH_STORE"
"""Set this environment variable to any non-empty value to neither read nor write the
on-disk store of rewritten graphs."""


def portable_graph_key(
    inputs: list[Variable], outputs: list[Variable]
) -> tuple[str, list[SharedVariable]] | None:
    r"""A digest of :func:`graph_key`'s structure that is the same in every process.

    ``graph_key`` compares ``Op``\s by their equality and shared variables by identity,
    neither of which outlives the process. Here every ``Op`` is its class and the values
    of its ``__props__`` (what PyTensor's equality compares for such ``Op``\s), a scan or
    an ``OpFromGraph`` its settings and its inner graph, a type its class and props, and
    a shared variable its type and the order in which the graph first reads it. The
    digest also covers the versions of the packages that rewrite and link the graph, this
    module's source (its rewrite) and the configuration that changes either.

    Returns the digest and the graph's shared variables in that order (a graph rewritten
    for another set of shared variables of the same types is linked to these), or None
    where something in the graph has no such form (an ``Op`` without ``__props__``, a
    variable that is neither an input, a constant nor shared) or its constants exceed
    :data:`STORE_CONSTANT_BYTES`.
    """
    shared: list[SharedVariable] = []
    constant_bytes = [0]

    def leaf(variable: Variable, ids: dict[Variable, Any]) -> tuple:
        if isinstance(variable, Constant):
            constant_bytes[0] += np.asarray(variable.data).nbytes
            _, type_, dtype, shape, digest = _constant_key(variable)
            key = ("constant", _portable(type_), dtype, shape, digest)
        elif isinstance(variable, SharedVariable):
            key = ("shared", len(shared), _portable(variable.type))
            shared.append(variable)
        else:
            raise _NotPortableError(f"a free variable {variable}")
        ids[variable] = key
        return key

    try:
        structure = _portable_structure(inputs, outputs, leaf)
    except (_NotPortableError, RecursionError):
        return None
    if constant_bytes[0] > STORE_CONSTANT_BYTES:
        return None
    text = repr((structure, _environment()))
    return hashlib.sha256(text.encode()).hexdigest(), shared


def _portable_structure(inputs: list[Variable], outputs: list[Variable], leaf: Any) -> tuple:
    def inner_leaf(variable: Variable, ids: dict[Variable, Any]) -> tuple:
        if isinstance(variable, Constant):
            return leaf(variable, ids)
        raise _NotPortableError(f"an inner graph reads {variable} from outside")

    structure = _graph_structure(
        inputs, outputs, lambda op: _portable_op(op, inner_leaf), leaf, type_key=_portable
    )
    if structure is None:
        raise _NotPortableError("an Op without a portable form")
    return structure


def _portable_op(op: Any, leaf: Any) -> tuple:
    name = _qualified_name(type(op))
    if isinstance(op, Scan):
        inner = _portable_structure(list(op.inner_inputs), list(op.inner_outputs), leaf)
        settings = (op.info, op.truncate_gradient, op.name, op.allow_gc, op.mode, op.profile)
        return (name, _portable(settings), inner)
    if isinstance(op, OpFromGraph):
        inner = _portable_structure(list(op.fgraph.inputs), list(op.fgraph.outputs), leaf)
        # The gradient overrides are left out: a compiled function computes the forward
        # graph only, which is all that PyTensor's rewriting and linking see.
        return (name, op.is_inline, _portable(op.destroy_map), inner)
    if isinstance(op, HasInnerGraph):
        raise _NotPortableError(f"{name} has an inner graph")
    return _portable(op)


def _portable(value: Any) -> Any:
    """``value`` as nested tuples of str, int, float, bool and None, or raise."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, Variable | Apply | AbstractFunctionGraph):
        # A graph held in an Op's settings (a fused scalar Op's inner graph): not walked.
        raise _NotPortableError(f"a graph in an Op's settings: {value}")
    if isinstance(value, tuple | list):
        return tuple(_portable(v) for v in value)
    if isinstance(value, Mapping):  # a dict, or the frozendict of an Op's settings
        return ("dict", tuple(sorted((repr(k), _portable(v)) for k, v in value.items())))
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, repr(value.item()))
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:  # its bytes are addresses, not values
            raise _NotPortableError(f"an array of objects {value!r}")
        digest = hashlib.sha256(np.ascontiguousarray(value).data).hexdigest()
        return ("array", value.dtype.str, value.shape, digest)
    if isinstance(value, enum.Enum):
        return (_qualified_name(type(value)), value.name)
    if isinstance(value, np.ufunc):
        return ("ufunc", value.__name__)
    if isinstance(value, type) or inspect.isfunction(value) or inspect.isbuiltin(value):
        if "<" in value.__qualname__:  # a lambda or a local function: not the same later
            raise _NotPortableError(repr(value))
        return ("object", _qualified_name(value))
    props = getattr(type(value), "__props__", None)
    if props is not None:
        return (_qualified_name(type(value)), tuple(_portable(getattr(value, p)) for p in props))
    if dataclasses.is_dataclass(value):
        fields = tuple(_portable(getattr(value, f.name)) for f in dataclasses.fields(value))
        return (_qualified_name(type(value)), fields)
    if isinstance(value, slice):
        return ("slice", _portable(value.start), _portable(value.stop), _portable(value.step))
    if hasattr(value, "__dict__"):
        # No __props__ (a scalar Op: its equality compares the class and its output type
        # rule): the class and every attribute, which decide what it computes.
        return (_qualified_name(type(value)), _portable(vars(value)))
    raise _NotPortableError(f"{type(value).__name__} {value!r}")


def _qualified_name(kind: Any) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _environment() -> tuple:
    config = pytensor.config
    return (
        sys.version_info[:2],
        pytensor.__version__,
        numba.__version__,
        np.__version__,
        pymc.__version__,
        _SOURCE_DIGEST,
        config.mode,
        config.linker,
        config.floatX,
        config.optimizer,
        config.optimizer_excluding,
        config.optimizer_including,
        config.optimizer_requiring,
        tuple(sorted(LINK_FLAGS.items())),
    )


_SOURCE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
"""This module's source: the rewrite it adds changes the rewritten graphs."""


@dataclasses.dataclass
class RewrittenGraphStore:
    """One graph's entry in the on-disk store of rewritten graphs.

    PyTensor caches the machine code it compiles on disk, but not the rewriting that comes
    before, which is most of a compile when that cache is warm (measured: the trajectory of
    SGHMC on a 10-feature logistic regression 1.5 s to compile, 0.65 s to link from here;
    SGR-NPHMC's 12.3 s and 2.5 s). The store keeps, under :func:`portable_graph_key`'s
    digest, the rewritten function's pickle with its shared variables (the data, the
    model's values) left out by their order in the graph, so that the function linked
    from it reads the shared variables of the graph at hand, as the freshly compiled one
    would. It sits in PyTensor's ``compiledir`` (delete its ``pymc_sgmcmc-graphs`` folder
    to empty it); entries unused for :data:`STORE_MAX_AGE_DAYS` are deleted. Unpickling
    runs code named in the file, as loading PyTensor's compiled modules from the same
    folder does.
    """

    path: Path
    shared: list[SharedVariable]

    @classmethod
    def find(cls, inputs: list[Variable], outputs: list[Variable]) -> RewrittenGraphStore | None:
        """The entry for this graph (present or not), or None where it cannot have one."""
        if os.environ.get(STORE_DISABLE_VARIABLE):
            return None
        found = portable_graph_key(inputs, outputs)
        if found is None:
            return None
        digest, shared = found
        return cls(store_directory() / f"{digest}.pkl", shared)

    def load(self) -> Any:
        """The linked function, or None where the entry is absent or does not link."""
        refused = self.path.with_suffix(".refused")
        if not self.path.exists() or refused.exists():
            return None
        shared = self.shared

        class Unpickler(pickle.Unpickler):
            def persistent_load(self, pid: tuple) -> Any:
                kind, position = pid
                variable = shared[position]
                return variable if kind == "variable" else variable.container

        try:
            with pytensor.config.change_flags(**LINK_FLAGS), _rewritten_scans_unpickle():
                maker = Unpickler(io.BytesIO(self.path.read_bytes())).load()
                function = maker.create()
        except FileNotFoundError:  # deleted by another process since
            return None
        except Exception:  # noqa: BLE001 -- any failure to link falls back to compiling
            # A file truncated by a full disk, or written by a version whose classes
            # moved (the versions are in the key, but a local edit is not).
            with contextlib.suppress(OSError):  # a read-only store: tried again next time
                _write_atomically(refused, b"")
            return None
        with contextlib.suppress(OSError):  # its age, for the pruning; read-only: kept
            os.utime(self.path)
        return function

    def save(self, function: Any) -> None:
        """Store ``function``'s rewritten graph; nothing where it does not pickle."""
        variables = {id(v): k for k, v in enumerate(self.shared)}
        containers = {id(v.container): k for k, v in enumerate(self.shared)}

        class Pickler(_GraphPickler):
            def persistent_id(self, obj: Any) -> tuple | None:
                if isinstance(obj, SharedVariable) and id(obj) in variables:
                    return ("variable", variables[id(obj)])
                if isinstance(obj, Container):
                    if id(obj) not in containers:
                        raise _NotPortableError("storage that is not the graph's shared variable")
                    return ("container", containers[id(obj)])
                return None

        try:
            maker = _pickled_maker(function, Pickler)
        except (_NotPortableError, pickle.PicklingError, TypeError, AttributeError, RecursionError):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _prune_once(self.path.parent)
            _write_atomically(self.path, maker)
        except OSError:  # a read-only compiledir: compile every time, as without the store
            return


def store_directory() -> Path:
    """The folder of the on-disk store: ``pymc_sgmcmc-graphs`` in PyTensor's compiledir."""
    return Path(pytensor.config.compiledir) / "pymc_sgmcmc-graphs"


_PRUNED: set[Path] = set()


def _prune_once(directory: Path) -> None:
    if directory in _PRUNED:
        return
    _PRUNED.add(directory)
    oldest = time.time() - STORE_MAX_AGE_DAYS * 86_400
    for entry in directory.iterdir():
        try:
            if entry.stat().st_mtime < oldest:
                entry.unlink()
        except OSError:  # removed by another process meanwhile
            pass


def _write_atomically(path: Path, data: bytes) -> None:
    """Another process sees the whole file or none of it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
