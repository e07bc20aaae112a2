"""Loops whose body holds only what changes, and targets that do not copy their position.

Both keep a trajectory's graph small before PyTensor rewrites it: a body that copies a
closure's computation (or a log density that copies the expression of its position)
made the Riemannian trajectories' graphs several times larger than they are, and their
compiles several times longer.
"""

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.traversal import toposort
from pytensor.scan.op import Scan

from pymc_sgmcmc.core.loops import loop, loop_invariants
from pymc_sgmcmc.gradients.minibatch import exact_target


def scans_in(outputs):
    return [node for node in toposort(outputs) if isinstance(node.op, Scan)]


def test_the_invariants_are_the_outermost_parts_that_do_not_depend_on_the_carried_values():
    x, a, b = pt.vector("x"), pt.vector("a"), pt.scalar("b")
    heavy = pt.exp(a).cumsum() * b  # computed once, whatever x is
    out = x * heavy
    assert loop_invariants([out], [x]) == [heavy]
    assert loop_invariants([heavy], [x]) == [heavy]  # an output that is invariant itself


def test_a_loop_over_a_closure_computes_the_closure_once_outside_its_body():
    a, x0 = pt.vector("a"), pt.vector("x0")
    # The closure is itself a loop: a body that copied it would hold a nested scan.
    (inner,) = loop(lambda v: [0.5 * v + 1.0], [a], 4)
    closure = inner[-1]
    (values,) = loop(lambda v: [0.9 * v + closure], [x0], 3)
    (outer,) = [node for node in scans_in([values]) if node not in scans_in([closure])]
    assert not scans_in(outer.op.inner_outputs), "the closure's loop was copied into the body"
    f = pytensor.function([a, x0], values[-1])
    start, shift = np.array([1.0, -2.0]), np.array([0.3, 0.1])
    expected_closure = start
    for _ in range(4):
        expected_closure = 0.5 * expected_closure + 1.0
    expected = shift
    for _ in range(3):
        expected = 0.9 * expected + expected_closure
    np.testing.assert_allclose(f(start, shift), expected)


def test_a_log_density_at_a_loops_result_reads_that_loop_instead_of_copying_it():
    position = pt.vector("position")
    target = exact_target(-0.5 * (position**2).sum(), position)
    x0 = pt.vector("x0")
    (values,) = loop(lambda v: [v + 0.1 * target.grad(v)], [x0], 5)
    end = values[-1]
    outputs = [end, target.logp(end), target.grad(end)]
    assert len(scans_in(outputs)) == 1
