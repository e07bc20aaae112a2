"""Compiled functions are reused for the same graph on the same model, and only then."""

import gc
import pickle
import weakref

import cloudpickle
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from helpers import build_graphs_afresh, draws_of, sample
from numba.core import event
from pytensor import scalar
from pytensor.compile.builders import OpFromGraph
from pytensor.scan.op import Scan
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.shape import SpecifyShape
from scipy import stats

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.core import compilation
from pymc_sgmcmc.core.compilation import compile_graph, graph_key


def test_the_key_tells_graphs_apart_as_their_functions_differ():
    x, y = pt.vector("x"), pt.vector("y")
    data = pytensor.shared(np.arange(3.0))

    def graph(a, b, offset=0.0, shared=data):
        return [pt.exp(a) * pt.constant(np.arange(3.0) + offset) + shared + b]

    same = graph_key([x, y], graph(x, y))
    assert same == graph_key([x, y], graph(x, y))  # rebuilt: new variables, same function
    assert same == graph_key([y, x], graph(y, x))  # inputs named differently, same places
    assert same != graph_key([y, x], graph(x, y))  # inputs swapped
    assert same != graph_key([x, y], graph(x, y, offset=1.0))
    assert same != graph_key([x, y], graph(x, y, shared=pytensor.shared(np.arange(3.0))))
    assert same != graph_key([x, y], [pt.exp(x) * pt.constant(np.arange(3.0)) - data + y])


def test_scans_built_alike_have_one_key():
    # Scan compares inner graphs by identity, so the key recurses into them.
    def scanned(x, n_steps=4, factor=0.5):
        def body(v):
            return v * factor + pt.sin(v)

        out = pytensor.scan(body, outputs_info=[x], n_steps=n_steps, return_updates=False)
        return [out[-1]]

    x = pt.vector("x")
    assert graph_key([x], scanned(x)) == graph_key([x], scanned(x))
    assert graph_key([x], scanned(x)) != graph_key([x], scanned(x, factor=0.25))
    assert graph_key([x], scanned(x)) != graph_key([x], scanned(x, n_steps=5))


def test_ops_with_inner_graphs_built_alike_have_one_key():
    # A mixture's gradient holds an OpFromGraph (the derivative of its log-sum-exp),
    # built anew with every gradient: matched by its inner graph, constants by value.
    x = pt.vector("x")

    def wrapped(values):
        v = pt.vector("v")
        return [OpFromGraph([v], [pt.exp(v) * pt.constant(np.asarray(values))])(x)]

    assert graph_key([x], wrapped([1.0, 2.0])) is not None
    assert graph_key([x], wrapped([1.0, 2.0])) == graph_key([x], wrapped([1.0, 2.0]))
    assert graph_key([x], wrapped([1.0, 2.0])) != graph_key([x], wrapped([1.0, 3.0]))


def test_a_step_built_again_on_a_mixture_reuses_its_compiled_functions():
    rows = np.random.default_rng(1).normal(np.repeat([-2.0, 2.0], 50), 1.0)
    with pm.Model() as model:
        weights = pm.Dirichlet("w", np.ones(2))
        means = pm.Normal("mus", [-1.0, 1.0], 5.0, shape=2)
        batch = pm.Minibatch(rows, batch_size=20)
        pm.NormalMixture("y", w=weights, mu=means, sigma=1.0, observed=batch, total_size=100)
    gradient = pytensor.grad(model.logp(), model.value_vars)
    assert any(
        isinstance(node.op, OpFromGraph)
        for node in pytensor.graph.traversal.applys_between(model.value_vars, gradient)
    )
    steps = []
    for _ in range(2):
        with model:
            steps.append(pmsg.SGHMC(mode_kwargs={"progressbar": False}))
    first, second = (step.trajectory_function.function for step in steps)
    assert first is second
    passes = [step.data_passes._function() for step in steps]
    assert passes[0]._function is passes[1]._function
    # The step travels to pm.sample's worker processes ("forkserver", "spawn") with its
    # trajectory: the log-sum-exp derivative's gradient caches, local functions, made
    # that fail with AttributeError.
    worker_step = cloudpickle.loads(cloudpickle.dumps(steps[0]))  # as pm.sample does
    point = np.array([0.2, -1.0, 1.5])
    inputs = steps[0].trajectory_inputs(point, 1e-3)
    names = steps[0].trajectory_function.input_names
    for ours, theirs in zip(
        steps[0].trajectory_function(*(inputs[name] for name in names)),
        worker_step.trajectory_function(*(inputs[name] for name in names)),
        strict=True,
    ):
        np.testing.assert_array_equal(ours, theirs)


def minibatch_model(n_rows=100, batch_size=10):
    y = np.random.default_rng(0).normal(1.0, 1.0, size=n_rows)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        batch = pm.Minibatch(y, batch_size=batch_size)
        pm.Normal("y", mu, 1.0, observed=batch, total_size=n_rows)
    return model


def test_a_step_built_again_on_the_same_model_reuses_the_compiled_trajectory():
    model = minibatch_model()
    settings = {"gradient": "control_variates", "mode_kwargs": {"progressbar": False}}
    steps, runs = [], []
    for _ in range(2):
        with model:
            steps.append(pmsg.SGHMC(**settings))
        runs.append(sample(steps[-1], model, draws=30, tune=20, random_seed=3))
    first, second = (step.trajectory_function.function for step in steps)
    assert first is second
    np.testing.assert_array_equal(draws_of(runs[0], "mu"), draws_of(runs[1], "mu"))
    # Another model with equal data has its own data variables: compiled again.
    other = minibatch_model()
    with other:
        step = pmsg.SGHMC(**settings)
    assert step.trajectory_function.function is not first


class _NumbaCompilations(event.Listener):
    """Counts Numba's compilations (a function loaded from its disk cache is not one)."""

    def __init__(self) -> None:
        self.count = 0

    def on_start(self, event) -> None:
        self.count += 1

    def on_end(self, event) -> None:
        pass


def _compiled_to_sample(model, settings):
    """Numba's compilations while an SGHMC step is built on ``model`` and draws 5 + 5."""
    compilations = _NumbaCompilations()
    event.register("numba:compile", compilations)
    try:
        with model:
            step = pmsg.SGHMC(**settings)
        idata = sample(step, model, draws=5, tune=5)
    finally:
        event.unregister("numba:compile", compilations)
    return compilations.count, step, idata


def test_a_model_of_another_size_is_served_by_the_compile_cache():
    # total_size is an input of the compiled graphs, not a constant: at another number of
    # rows the code compiled for the first is loaded from PyTensor's disk cache. The number
    # is drawn afresh (fresh entropy on purpose): the disk cache outlives a test run, and
    # a size compiled by an earlier run would pass without the property under test.
    n_rows = int(np.random.default_rng().integers(101, 5_000))
    settings = {"mode_kwargs": {"progressbar": False}}
    first = minibatch_model(n_rows=100)
    with first:
        step = pmsg.SGHMC(**settings)  # compiles the set-up's full-data passes
    sample(step, first, draws=5, tune=5)  # and the trajectory
    compilations, step, idata = _compiled_to_sample(minibatch_model(n_rows=n_rows), settings)
    assert compilations == 0, n_rows
    assert np.isfinite(draws_of(idata, "mu")).all()
    # The rows are counted as they are: the mode is the exact posterior mean.
    y = np.random.default_rng(0).normal(1.0, 1.0, size=n_rows)
    precision = 1 / 10.0**2 + len(y)
    np.testing.assert_allclose(step.mode["mu"], y.sum() / precision, rtol=1e-6)
    expected = stats.norm.logpdf(1.0, 0.0, 10.0) + stats.norm.logpdf(y, 1.0, 1.0).sum()
    logp, _ = step.data_passes.full_pass(np.array([1.0]))
    np.testing.assert_allclose(logp, expected, rtol=1e-8)


def test_another_batch_size_is_served_by_the_compile_cache():
    # The trajectory's minibatch placeholders have no fixed length and each term scales
    # by the rows it is fed: a new batch_size compiles nothing, and its scale is right.
    # The batch size is drawn afresh (fresh entropy on purpose): PyTensor's disk cache
    # outlives a test run, and a size compiled by an earlier run would pass without the
    # property under test.
    n_rows, batch_size = 10_000, int(np.random.default_rng().integers(11, 5_000))
    settings = {"mode_kwargs": {"progressbar": False}, "gradient": "minibatch"}
    first = minibatch_model(n_rows=n_rows, batch_size=10)
    with first:
        step = pmsg.SGHMC(**settings)
    sample(step, first, draws=5, tune=5)
    model = minibatch_model(n_rows=n_rows, batch_size=batch_size)
    compilations, step, idata = _compiled_to_sample(model, settings)
    assert compilations == 0, batch_size
    assert np.isfinite(draws_of(idata, "mu")).all()
    # The minibatch density is the prior plus N/B times the batch's.
    y = np.random.default_rng(0).normal(1.0, 1.0, size=n_rows)
    rows = np.arange(batch_size)
    inputs = step.trajectory_inputs(np.array([0.7]), 1e-3)
    inputs["rows_0"] = np.tile(rows, (inputs["rows_0"].shape[0], 1))
    inputs["noise"] = np.zeros_like(inputs["noise"])
    inputs["params.step_size"] = np.asarray(0.0)
    logp = step.trajectory_function.named(**inputs)["minibatch_logp"]
    # PyMC's own densities (SciPy's differ from them by 2e-10 relative here).
    prior = pm.logp(pm.Normal.dist(0.0, 10.0), 0.7).eval()
    likelihood = pm.logp(pm.Normal.dist(0.7, 1.0), y[rows]).sum().eval()
    np.testing.assert_allclose(logp, prior + n_rows / batch_size * likelihood, rtol=1e-12)


def test_the_store_is_dropped_with_its_model():
    model = minibatch_model()
    x = pt.vector("x")
    with model:
        function = compile_graph([x], [2 * x])
        assert compile_graph([x], [2 * x]) is function
    assert model in compilation._COMPILED
    reference = weakref.ref(model)
    del model
    gc.collect()
    assert reference() is None


def test_a_pickled_function_is_linked_again_and_still_reads_its_shared_variables():
    # What pm.sample(cores > 1) does with a step method under "spawn" or "forkserver".
    x = pt.vector("x")
    other = pytensor.shared(np.array(2.0), name="other")  # set by PyMC in a CompoundStep
    function = compile_graph([x], [pt.log1p(pt.exp(x)).sum() * other])
    point = np.linspace(-3.0, 3.0, 7)
    expected = function(point)
    payload = pickle.dumps((compilation.LinkedWhereUnpickled(function), other))
    unpickled, unpickled_other = pickle.loads(payload)
    assert unpickled.trust_input
    np.testing.assert_array_equal(unpickled(point), expected)
    # The container travelled, not a copy of its data (a copy missed PyMC's updates).
    unpickled_other.set_value(np.array(3.0))
    other.set_value(np.array(3.0))
    np.testing.assert_array_equal(unpickled(point), function(point))
    assert not np.array_equal(unpickled(point), expected)


def _dots(function):
    """The products of a compiled function, its scans' inner graphs included."""
    found = []
    for node in function.maker.fgraph.toposort():
        if isinstance(node.op, Scan):
            found += [n for n in node.op.fgraph.toposort() if "Dot" in type(n.op).__name__]
        elif "Dot" in type(node.op).__name__ or "Gemv" in type(node.op).__name__:
            found.append(node)
    return found


def test_float32_data_meet_float64_parameters_in_float64_products():
    # PyTensor's BLAS rewrites skip a product of mixed types, and Numba's fallback loops
    # (measured six times slower); the compile mode casts the data once, in the scans too.
    rng = np.random.default_rng(0)
    data = pytensor.shared(rng.normal(size=(50, 3)).astype(np.float32))
    w = pt.vector("w", dtype="float64")
    logp = -pt.sum(pt.softplus(data @ w))
    gradient = pt.grad(logp, w)
    steps = pytensor.scan(
        lambda v: v + 0.1 * pt.grad(-pt.sum(pt.softplus(data @ v)), v),
        outputs_info=[w],
        n_steps=3,
        return_updates=False,
    )[-1]
    function = compile_graph([w], [logp, gradient, steps])
    dots = _dots(function)
    assert len(dots) >= 3  # the log density's, the gradient's, and the scan's products
    for node in dots:
        assert {x.type.dtype for x in node.inputs} == {"float64"}, node
    casts = [
        n for n in function.maker.fgraph.toposort() if "Cast" in str(n.op) and n.inputs[0] is data
    ]
    assert len(casts) == 1  # one cast serves X @ w and X.T @ r

    at = np.array([0.3, -0.2, 0.5])
    x64 = data.get_value().astype(np.float64)
    exact = -np.logaddexp(0.0, x64 @ at).sum()
    expected_gradient = -x64.T @ (1.0 / (1.0 + np.exp(-(x64 @ at))))
    value, grad_value, _ = function(at)
    np.testing.assert_allclose(value, exact, rtol=1e-13)
    np.testing.assert_allclose(grad_value, expected_gradient, rtol=1e-12)


def _ops_everywhere(fgraph):
    """The ops of ``fgraph`` and of every scan's inner graph in it."""
    for node in fgraph.toposort():
        yield node.op
        if isinstance(node.op, Scan):
            yield from _ops_everywhere(node.op.fgraph)


def test_shape_checks_are_trusted_in_numba_and_kept_elsewhere():
    # Numba compiles each SpecifyShape with its error message's formatting (seconds at a
    # first compile); the package's functions take inputs it builds, so it keeps the
    # stated types and drops the checks, in scans too, computing the same values.
    x, y = pt.vector("x"), pt.vector("y")
    stated = pt.specify_shape(x, (3,))
    steps = pytensor.scan(
        lambda v, u: pt.exp(v) * 0.5 + pt.specify_shape(u, (3,)),
        outputs_info=[stated],
        non_sequences=[y],
        n_steps=4,
        return_updates=False,
    )[-1]
    outputs = [pt.sum(stated**2), steps]
    function = compile_graph([x, y], outputs)
    ops = list(_ops_everywhere(function.maker.fgraph))
    assert not [op for op in ops if type(op) is SpecifyShape]
    assert sum(isinstance(op, compilation.TrustedShape) for op in ops) >= 2  # outside, inside
    at = [np.array([0.1, -0.4, 0.7]), np.array([1.0, 2.0, -3.0])]
    reference = pytensor.function([x, y], outputs, mode="FAST_COMPILE")
    for value, expected in zip(function(*at), reference(*at), strict=True):
        np.testing.assert_allclose(value, expected, rtol=1e-15)
    # Another linker keeps the checks: a wrong shape is still refused there.
    python_vm = compile_graph([x, y], outputs, {"mode": "FAST_COMPILE"})
    assert any(type(op) is SpecifyShape for op in _ops_everywhere(python_vm.maker.fgraph))
    python_vm.trust_input = False
    with pytest.raises(AssertionError, match="SpecifyShape"):
        python_vm(np.zeros(4), np.zeros(3))


# The on-disk store of rewritten graphs.


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty store of rewritten graphs, and a count of the compiles that rewrite."""
    monkeypatch.setattr(compilation, "store_directory", lambda: tmp_path)
    monkeypatch.delenv(compilation.STORE_DISABLE_VARIABLE, raising=False)
    compiles = []
    original = compilation.pm_compile

    def counted(*args, **kwargs):
        compiles.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(compilation, "pm_compile", counted)
    return tmp_path, compiles


def _weighted_sum(values, offset):
    """``exp(x) @ values + 2 offset`` on a model of its own, its data in shared variables."""
    build_graphs_afresh()
    x = pt.vector("x")
    values = pytensor.shared(np.asarray(values), name="values")
    offset = pytensor.shared(np.asarray(offset), name="offset")
    with pm.Model():
        function = compile_graph([x], [pt.exp(x) @ values + 2.0 * offset])
    return function, values, offset


def test_a_graph_rewritten_before_is_linked_from_disk_and_reads_the_new_graphs_data(store):
    directory, compiles = store
    rng = np.random.default_rng(0)
    point, data, new_data = rng.normal(size=(3, 100_000))
    first, _, _ = _weighted_sum(data, 0.5)
    assert len(compiles) == 1 and len(list(directory.glob("*.pkl"))) == 1
    # Rebuilt from scratch on another model, as in another process: no rewriting, and
    # the function reads the new shared variables, not the data stored with the first.
    second, values, offset = _weighted_sum(new_data, 3.0)
    assert len(compiles) == 1 and second is not first
    assert second.trust_input
    np.testing.assert_allclose(second(point), np.exp(point) @ new_data + 6.0, rtol=1e-12)
    values.set_value(data)
    offset.set_value(np.array(-1.0))
    np.testing.assert_allclose(second(point), np.exp(point) @ data - 2.0, rtol=1e-12)
    # The entry holds the rewritten graph, not the 800 kB of data it was compiled with.
    assert next(directory.glob("*.pkl")).stat().st_size < data.nbytes / 4


def test_the_shared_variables_are_linked_in_the_order_the_graph_reads_them(store):
    directory, compiles = store
    point = np.array([0.3, 0.7])

    def difference(swapped):
        build_graphs_afresh()
        x = pt.vector("x")
        a, b = pytensor.shared(np.array([1.0, 2.0])), pytensor.shared(np.array([10.0, 20.0]))
        first, second = (b, a) if swapped else (a, b)
        with pm.Model():
            return compile_graph([x], [(x * first - second).sum()])

    straight = difference(swapped=False)
    swapped = difference(swapped=True)
    assert len(compiles) == 1  # one structure: the second graph was linked from disk
    assert straight(point) == pytest.approx((point * [1.0, 2.0] - [10.0, 20.0]).sum())
    assert swapped(point) == pytest.approx((point * [10.0, 20.0] - [1.0, 2.0]).sum())


def test_the_portable_key_tells_graphs_apart_as_graph_key_does():
    x = pt.vector("x")

    def graph(offset=0.0, shape=None, function=pt.exp, x=x):
        shared = pytensor.shared(np.arange(3.0), shape=shape)
        return [function(x) * pt.constant(np.arange(3.0) + offset) + shared]

    digest, shared = compilation.portable_graph_key([x], graph())
    assert len(shared) == 1
    assert compilation.portable_graph_key([x], graph())[0] == digest
    assert compilation.portable_graph_key([x], graph(offset=1.0))[0] != digest
    assert compilation.portable_graph_key([x], graph(shape=(3,)))[0] != digest
    assert compilation.portable_graph_key([x], graph(function=pt.log))[0] != digest
    matrix = pt.matrix("x")
    assert compilation.portable_graph_key([matrix], graph(x=matrix))[0] != digest
    # A variable that is neither an input, a constant nor shared has no portable form,
    # nor has a graph held in an Op's settings (a fused scalar Op's inner graph).
    assert compilation.portable_graph_key([x], [x + pt.vector("free")]) is None
    a, b = scalar.float64("a"), scalar.float64("b")
    fused = Elemwise(scalar.Composite([a, b], [scalar.add(scalar.exp(a), b)]))
    assert compilation.portable_graph_key([x], [fused(x, x)]) is None


def test_a_stored_graph_that_does_not_link_is_compiled_and_not_read_again(store):
    directory, compiles = store
    _weighted_sum([1.0, 2.0, 3.0], 0.5)
    (entry,) = directory.glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    function, _, _ = _weighted_sum([1.0, 2.0, 3.0], 0.5)
    assert len(compiles) == 2
    assert entry.with_suffix(".refused").exists()
    np.testing.assert_allclose(function(np.zeros(3)), 7.0)


def test_the_store_can_be_switched_off(store, monkeypatch):
    directory, compiles = store
    monkeypatch.setenv(compilation.STORE_DISABLE_VARIABLE, "1")
    _weighted_sum([1.0, 2.0, 3.0], 0.5)
    _weighted_sum([1.0, 2.0, 3.0], 0.5)
    assert len(compiles) == 2 and not list(directory.iterdir())


def test_a_sampler_linked_from_disk_draws_what_the_compiled_one_drew(store):
    # Everything a step compiles (mode search, trajectory, mass) comes back from disk for
    # a second model of the same structure, and the same seed gives the same draws.
    directory, compiles = store
    runs = []
    for _ in range(2):
        build_graphs_afresh()
        model = minibatch_model()
        with model:
            step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
            runs.append(draws_of(sample(step, model, draws=30, tune=30), "mu"))
        if not runs[1:]:
            rewritten = len(compiles)
    assert rewritten >= 2 and len(compiles) == rewritten
    np.testing.assert_array_equal(runs[0], runs[1])


def test_a_one_parameter_trajectory_unpickles_linked_in_a_worker():
    # PyTensor's rewrites left this trajectory's recurrent state read as shape (1,) and
    # written as shape (None,), and its unpickling check refused the graph, so every
    # worker of pm.sample(cores > 1) compiled it again.
    model = minibatch_model()
    with model:
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
    function = step.trajectory_function.function
    linked = pickle.loads(pickle.dumps(compilation.LinkedWhereUnpickled(function)))
    assert linked is not None
    inputs = step.trajectory_inputs(np.array([0.7]), 1e-3)
    expected = step.trajectory_function.named(**inputs)
    names = step.trajectory_function.input_names
    got = dict(zip(expected, linked(*(inputs[name] for name in names)), strict=True))
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value)


def test_a_store_that_cannot_be_written_is_read_and_compiled_around(store, monkeypatch):
    directory, compiles = store
    _weighted_sum([1.0, 2.0, 3.0], 0.5)  # stored while it could be written

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(compilation, "_write_atomically", read_only)
    monkeypatch.setattr(compilation.os, "utime", read_only)
    linked, _, _ = _weighted_sum([1.0, 2.0, 3.0], 0.5)  # a hit, its age not updated
    np.testing.assert_allclose(linked(np.zeros(3)), 7.0)
    assert len(compiles) == 1
    (entry,) = directory.glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    compiled_again, _, _ = _weighted_sum([1.0, 2.0, 3.0], 0.5)  # no marker can be written
    np.testing.assert_allclose(compiled_again(np.zeros(3)), 7.0)
    assert len(compiles) == 2 and not list(directory.glob("*.refused"))
    fresh, _, _ = _weighted_sum([4.0, 5.0, 6.0], 0.5)  # nothing can be stored
    np.testing.assert_allclose(fresh(np.zeros(3)), 16.0)
