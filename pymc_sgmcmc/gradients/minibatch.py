"""The plain minibatch gradient estimator and the exact (full-data) target."""

from __future__ import annotations

from collections.abc import Callable

import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.gradients.graphs import FlatLogp
from pymc_sgmcmc.kernels.base import Target


class MinibatchGradient:
    """``∇log p̃_b(θ)``: the model's log density on minibatch ``b``, as PyMC scales it.

    The log density comes from ``model.logp()`` with every ``pm.Minibatch`` replaced by a
    placeholder (:class:`~pymc_sgmcmc.gradients.graphs.FlatLogp`); :meth:`target` puts a
    given set of rows in the placeholders' place.

    Parameters
    ----------
    graph : FlatLogp
        The model's log density in the flat position.
    """

    def __init__(self, graph: FlatLogp) -> None:
        self.graph = graph
        self.gradient = pt.grad(graph.logp, graph.position)

    def target(self, batch: list[Variable], lengths: list[Variable] | None = None) -> Target:
        """The target on ``batch`` (one array per placeholder, in the groups' order).

        ``lengths``: each group's number of rows in ``batch``, computed where the caller
        knows it best (outside its loop); read from ``batch`` by default.
        """
        rows, first = {}, 0
        for k, group in enumerate(self.graph.groups):
            last = first + len(group.batches)
            rows |= group.fed(batch[first:last], None if lengths is None else lengths[k])
            first = last
        position = self.graph.position
        return Target(
            logp=_once_per_position(lambda x: substituted(self.graph.logp, {position: x, **rows})),
            grad=_once_per_position(lambda x: substituted(self.gradient, {position: x, **rows})),
        )


def exact_target(logp: Variable, position: Variable) -> Target:
    """The target of a log density graph with no minibatch in it (e.g. the full data)."""
    gradient = pt.grad(logp, position)
    return Target(
        logp=_once_per_position(lambda x: substituted(logp, {position: x})),
        grad=_once_per_position(lambda x: substituted(gradient, {position: x})),
    )


def substituted(graph: Variable, replace: dict[Variable, Variable]) -> Variable:
    """``graph`` with each key of ``replace`` replaced by its value, the values kept as they are.

    ``clone_replace`` would copy each value's own graph: a log density at a trajectory's
    end then held a second copy of the trajectory's loop, and the Riemannian trajectories'
    graphs several copies of their fixed-point loops (with the copies that
    :func:`pymc_sgmcmc.core.loops.loop` avoids, their compiles took 3-5x longer).
    """
    return graph_replace(graph, replace, strict=False)


def _once_per_position(build: Callable[[Variable], Variable]) -> Callable[[Variable], Variable]:
    """``build`` that returns the same graph when asked twice at the same position.

    PyTensor does not always merge two copies of a graph fed by a ``scan`` output: an
    energy and a log density at the trajectory's end were computed twice, a full pass
    over the data each (measured: HMC 1.4x slower per draw).
    """
    built: dict[Variable, Variable] = {}

    def at(x: Variable) -> Variable:
        if x not in built:
            built[x] = build(x)
        return built[x]

    return at
