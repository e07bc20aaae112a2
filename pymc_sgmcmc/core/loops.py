"""Symbolic loops whose body holds only what changes from one iteration to the next.

``pytensor.scan`` takes a body written as a Python function. A body that reads a
variable computed outside the loop (a closure: the momentum of a half step, a velocity
at the start) does not get that variable as an input: ``scan`` collects the *roots* of
the body's graph, so the whole computation of the variable is copied into the body, and
into the body of every loop nested around it. PyTensor's rewrites hoist it out again,
but only after rewriting every copy: measured on a 2-D funnel, the RHMC trajectory's
fixed-point loops held three nested copies of one another before rewriting, and
compiling it took most of a minute. :func:`loop` hands such variables to the body as
explicit non-sequences, so each is computed once, outside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytensor
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import toposort
from pytensor.tensor.variable import TensorVariable


def loop_invariants(outputs: Sequence[Variable], carried: Sequence[Variable]) -> list[Variable]:
    """The outermost variables of ``outputs``' graph that do not depend on ``carried``.

    Those that are not constants or shared variables and are read by a node that does
    depend on ``carried`` (or are outputs themselves): replacing them cuts every part of
    the graph that a loop over ``carried`` would compute the same at each iteration. A
    variable that is not a tensor (a scalar of ``pytensor.scalar``) stays in the body
    and its own inputs are taken instead.
    """
    dependent = set(carried)
    invariants: dict[Variable, None] = {}

    def keep(variable: Variable) -> None:
        if variable in dependent or isinstance(variable, Constant | SharedVariable):
            return
        if isinstance(variable, TensorVariable) or variable.owner is None:
            invariants[variable] = None
        else:  # a loop takes tensors only: go up to the tensors it is made of
            for value in variable.owner.inputs:
                keep(value)

    for node in toposort(outputs, blockers=list(carried)):
        if any(value in dependent for value in node.inputs):
            dependent.update(node.outputs)
            for value in node.inputs:
                keep(value)
    for output in outputs:
        keep(output)
    return list(invariants)


def loop(
    step: Callable[..., Sequence[Variable]],
    start: Sequence[Variable],
    n_steps: int,
) -> list[Variable]:
    """``pytensor.scan`` of ``carried ↦ step(*carried)`` from ``start``, ``n_steps`` times.

    The body is built once on placeholders, its loop invariants
    (:func:`loop_invariants`) become non-sequences, and the returned values are the
    whole sequences, as ``pytensor.scan`` returns them (``[-1]`` is the last). Each
    output of ``step`` is carried into the next iteration, in order.
    """
    placeholders = [value.type() for value in start]
    body_outputs = list(step(*placeholders))
    invariants = loop_invariants(body_outputs, placeholders)

    def body(*args: Variable) -> list[Variable]:
        # Not strict: a carried value the step ignores (a residual) is not in its graph.
        replacements = dict(zip([*placeholders, *invariants], args, strict=True))
        return list(graph_replace(body_outputs, replacements, strict=False))

    outputs = pytensor.scan(
        body,
        outputs_info=list(start),
        non_sequences=invariants,
        n_steps=n_steps,
        return_updates=False,
    )
    return list(outputs) if isinstance(outputs, list | tuple) else [outputs]
