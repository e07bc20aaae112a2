"""The control-variate gradient estimator, anchored at a point ``θ̂``.

Baker, Fearnhead, Fox and Nemeth, "Control variates for stochastic gradient MCMC"
(Statistics and Computing, 2019): on minibatch ``b``,

    ∇log p̂(θ) = ∇log p̃_b(θ) − ∇log p̃_b(θ̂) + ∇log p(θ̂)

with both minibatch terms on the same rows (so that their noise cancels near ``θ̂``) and
the full-data gradient ``∇log p(θ̂)`` computed once. It is unbiased for any ``θ̂``; its
variance is small where ``θ`` is near ``θ̂``, which is where the posterior is when ``θ̂`` is
the mode. SVRG (Dubey et al., "Variance reduction in stochastic gradient Langevin
dynamics", 2016) is the same estimator with ``θ̂`` moved to the chain's state every ``m``
iterations. The log density is controlled the same way (it feeds the ``minibatch_logp``
statistic).
"""

from __future__ import annotations

from typing import NamedTuple

from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.gradients.minibatch import MinibatchGradient, _once_per_position
from pymc_sgmcmc.kernels.base import Target


class SymbolicAnchor(NamedTuple):
    """The anchor's inputs of the compiled trajectory.

    ``others`` maps each variable the step does not sample (a shared variable of the
    graph, which another sampler of a ``CompoundStep`` moves) to an input holding its
    value when the anchor's full-data pass was made. The minibatch term at the anchor
    must read those values: with the current ones instead, the estimate's mean is
    ``∇log p(θ; now) − ∇log p(θ̂; now) + ∇log p(θ̂; then)``, biased by the change
    (measured with two SGHMC steps, one on the coefficients of a regression and one on
    their prior mean: the draws' correlation between the two blocks 0.02 against the
    exact 0.24, the prior mean 0.59 sd off).
    """

    position: Variable
    logp: Variable
    gradient: Variable
    others: dict[Variable, Variable] | None = None

    def as_taken(self, graph: Variable) -> Variable:
        """``graph`` (a term at the anchor) with the other variables' values at the anchor."""
        return graph_replace(graph, self.others, strict=False) if self.others else graph


class ControlVariateGradient:
    """``∇log p̃_b(θ) − ∇log p̃_b(θ̂) + ∇log p(θ̂)`` on minibatch ``b``.

    Parameters
    ----------
    plain : MinibatchGradient
        The plain minibatch estimator, whose rows both terms share.
    anchor : SymbolicAnchor
        ``θ̂``, ``log p(θ̂)`` and ``∇log p(θ̂)`` as inputs of the compiled function.
    """

    def __init__(self, plain: MinibatchGradient, anchor: SymbolicAnchor) -> None:
        self.plain = plain
        self.anchor = anchor

    def target(self, batch: list[Variable], lengths: list[Variable] | None = None) -> Target:
        """The controlled target on ``batch``: same rows for both minibatch terms."""
        plain = self.plain.target(batch, lengths)
        anchor = self.anchor
        return Target(
            logp=_once_per_position(
                lambda x: plain.logp(x) - anchor.as_taken(plain.logp(anchor.position)) + anchor.logp
            ),
            grad=_once_per_position(
                lambda x: (
                    plain.grad(x) - anchor.as_taken(plain.grad(anchor.position)) + anchor.gradient
                )
            ),
        )
