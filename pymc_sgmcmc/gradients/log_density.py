"""The model's log density, simplified before it is differentiated.

PyMC writes a Bernoulli log density with a logit link as
``switch(y, log(σ(η)), log(1 − σ(η)))`` and checks ``0 ≤ σ(η) ≤ 1``. PyTensor's rewrites
make each logarithm a stable softplus, but an elementwise ``switch`` computes both of its
branches, and the check computes ``σ(η)`` again, row by row: two softplus (an ``exp`` and
a ``log1p`` each), a sigmoid and, in the gradient PyTensor derives from the switch, two
divisions. Numba compiles these to scalar calls of the C library's ``exp`` and ``log1p``
(no vectorised mathematics), which are most of the time of a full-data pass or of a
hierarchical model's exact sweep over its groups' rows.

The same density is ``switch(y, η, 0) − softplus(η)``, since ``log σ(η) = η − softplus(η)``
and ``log(1 − σ(η)) = −softplus(η)``, whose gradient is ``switch(y, 1, 0) − σ(η)``: one
softplus and one sigmoid a row, as NumPyro writes it. The check holds for every ``η``
that is not NaN. Rewriting the graph *before* PyTensor differentiates it gives the
gradient that short form too; PyTensor's own rewrites run after the gradient is taken
and cannot recover it from the switch's derivative.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytensor.scalar as ps
import pytensor.scalar.math as psm
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.rewriting.basic import copy_stack_trace, dfs_rewriter, node_rewriter
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError


def _scalar_op(variable: Variable, op_type: type) -> Variable | None:
    """``variable``'s owner's inputs where it is an elementwise ``op_type``, else None."""
    owner = variable.owner
    if owner is None or not isinstance(owner.op, Elemwise):
        return None
    if not isinstance(owner.op.scalar_op, op_type):
        return None
    return owner.inputs


def _sigmoid_argument(variable: Variable) -> Variable | None:
    inputs = _scalar_op(variable, psm.Sigmoid)
    return None if inputs is None else inputs[0]


def _is_constant(variable: Variable, value: float) -> bool:
    try:
        return float(get_underlying_scalar_constant_value(variable)) == value
    except NotScalarConstantError:
        return False


def _log_sigmoid_argument(variable: Variable) -> Variable | None:
    """``η`` where ``variable`` is ``log(σ(η))``."""
    inputs = _scalar_op(variable, ps.Log)
    return None if inputs is None else _sigmoid_argument(inputs[0])


def _log_one_minus_sigmoid_argument(variable: Variable) -> Variable | None:
    """``η`` where ``variable`` is ``log(1 − σ(η))`` or ``log1p(−σ(η))``."""
    inputs = _scalar_op(variable, ps.Log)
    if inputs is not None:
        difference = _scalar_op(inputs[0], ps.Sub)
        if difference is not None and _is_constant(difference[0], 1.0):
            return _sigmoid_argument(difference[1])
        return None
    inputs = _scalar_op(variable, ps.Log1p)
    if inputs is not None:
        negated = _scalar_op(inputs[0], ps.Neg)
        if negated is not None:
            return _sigmoid_argument(negated[0])
    return None


@node_rewriter([Elemwise])
def bernoulli_logit_as_one_softplus(fgraph, node) -> list[Variable] | None:
    """``switch(y, log σ(η), log(1 − σ(η)))`` → ``switch(y, η, 0) − softplus(η)``."""
    if not isinstance(node.op.scalar_op, ps.Switch):
        return None
    condition, if_true, if_false = node.inputs
    argument = _log_sigmoid_argument(if_true)
    if argument is None or _log_one_minus_sigmoid_argument(if_false) is not argument:
        return None
    zero = pt.constant(0, dtype=argument.dtype)
    simplified = pt.switch(condition, argument, zero) - pt.softplus(argument)
    simplified = pt.cast(simplified, node.outputs[0].dtype)
    copy_stack_trace(node.outputs[0], simplified)
    return [simplified]


@node_rewriter([Elemwise])
def sigmoid_bounds_as_not_nan(fgraph, node) -> list[Variable] | None:
    """``σ(η) ≥ 0`` and ``σ(η) ≤ 1`` → ``¬isnan(η)``: true for every other ``η``."""
    scalar_op = node.op.scalar_op
    if isinstance(scalar_op, ps.GE):
        bound = 0.0
    elif isinstance(scalar_op, ps.LE):
        bound = 1.0
    else:
        return None
    argument = _sigmoid_argument(node.inputs[0])
    if argument is None or not _is_constant(node.inputs[1], bound):
        return None
    not_nan = pt.invert(pt.isnan(argument))
    if not_nan.type.broadcastable != node.outputs[0].type.broadcastable:
        not_nan = pt.broadcast_to(not_nan, node.outputs[0].shape)
    copy_stack_trace(node.outputs[0], not_nan)
    return [not_nan]


_SIMPLIFY = dfs_rewriter(
    bernoulli_logit_as_one_softplus, sigmoid_bounds_as_not_nan, name="simplify_log_density"
)


def simplify_log_density(terms: Sequence[Variable]) -> list[Variable]:
    """The same log density terms, in fewer operations a row.

    Two rewrites, each of an exact identity, applied where they match:

    - a Bernoulli term with a logit link, ``switch(y, log σ(η), log(1 − σ(η)))`` (PyMC's
      ``logit_p=`` or ``p=invlogit(η)``), becomes ``switch(y, η, 0) − softplus(η)``;
    - PyMC's parameter check ``0 ≤ σ(η) ≤ 1`` becomes ``η`` is not NaN.

    The rest of the graph is left as it is (PyTensor rewrites it when it is compiled).
    Applied before the gradient is taken, so the gradient is ``switch(y, 1, 0) − σ(η)``.

    Parameters
    ----------
    terms : sequence of TensorVariable
        Log density terms of a model (``model.logp()``, or one variable's term).

    Returns
    -------
    list of TensorVariable
        The terms rewritten, on a copy of their graphs; the root inputs (value
        variables, shared data) are the same objects.
    """
    return list(rewrite_graph(list(terms), include=(), custom_rewrite=_SIMPLIFY, clone=True))
