"""Minibatches of whole groups for hierarchical models.

A hierarchical model's likelihood reads group ``j``'s local parameters ``a_j`` only
through group ``j``'s rows. Drawing ``K`` of the ``J`` groups and all of their rows gives

- the locals of a drawn group their exact likelihood gradient (all of its rows, weight 1);
- the globals an unbiased estimate, ``(J/K) Σ_{drawn rows} ∇log p(y_i | θ)``;
- the prior (every term that reads no row) exactly, at every step.

The locals of groups not drawn have no likelihood term in the minibatch: they and their
momenta are held where they are for that step. Each step is then an update of the block
(globals, drawn locals) given the locals held, whose gradient is that block's conditional
gradient (noisy in the globals only), so the scheme keeps the joint posterior as a
systematic-scan Metropolis-within-Gibbs keeps it, up to the sampler's own discretisation
error (see ``docs/hierarchical.md``).

:class:`GroupLayout` is the NumPy side (which rows belong to which group, the groups of
each step); :class:`GroupedGradient` the symbolic one (the weighted gradient).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.gradients.control_variates import SymbolicAnchor
from pymc_sgmcmc.gradients.graphs import RowLogp, as_shared_data
from pymc_sgmcmc.gradients.minibatch import _once_per_position, substituted
from pymc_sgmcmc.kernels.base import Target


@dataclass
class GroupLayout:
    """Which rows and which coordinates of the flat position belong to each group.

    Attributes
    ----------
    codes : ndarray of int
        The group of every row of the data, ``0 ≤ codes < n_groups``.
    n_groups : int
        ``J``, the length of the local parameters' leading axis.
    local_positions : ndarray of int, shape (n_groups, r)
        The flat coordinates of group ``j``'s local parameters.
    dim : int
        Length of the flat position.
    """

    codes: np.ndarray
    n_groups: int
    local_positions: np.ndarray
    dim: int
    _order: np.ndarray = field(init=False, repr=False)
    _starts: np.ndarray = field(init=False, repr=False)
    _counts: np.ndarray = field(init=False, repr=False)
    _global_mask: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._order = np.argsort(self.codes, kind="stable")
        self._counts = np.bincount(self.codes, minlength=self.n_groups)
        self._starts = np.concatenate([[0], np.cumsum(self._counts)[:-1]])
        self._global_mask = np.ones(self.dim)
        self._global_mask[self.local_positions.ravel()] = 0.0

    @property
    def counts(self) -> np.ndarray:
        """Rows of each group."""
        return self._counts

    def first_rows(self) -> np.ndarray:
        """Each group's first row (``n_rows`` for a group without rows)."""
        has_rows = self._counts > 0
        first = self._order[np.minimum(self._starts, max(self.n_rows - 1, 0))]
        return np.where(has_rows, first, self.n_rows)

    @property
    def n_rows(self) -> int:
        """Rows of the data."""
        return int(self.codes.size)

    @property
    def is_local(self) -> np.ndarray:
        """Whether each coordinate of the flat position is a group's local parameter."""
        return self._global_mask == 0.0

    def groups_per_step(self, batch_size: int) -> int:
        """``K``: the groups whose rows add up to ``batch_size`` rows on average."""
        return int(np.clip(round(batch_size * self.n_groups / self.n_rows), 1, self.n_groups))

    def coordinate_weights(self, groups_per_step: int) -> np.ndarray:
        """Likelihood weight of each coordinate: ``J/K`` for globals, 1 for locals."""
        return np.where(self.is_local, 1.0, self.n_groups / groups_per_step)

    def rows_of(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All rows of ``groups``, one group after the other, and each row's group index.

        Row ``r`` of the concatenation is ``_order[_starts[g] + (r − start of g's run)]``;
        the index is the group's place in ``groups``.
        """
        lengths = self._counts[groups]
        ends = np.cumsum(lengths)
        offsets = np.repeat(self._starts[groups] - (ends - lengths), lengths)
        rows = self._order[offsets + np.arange(ends[-1] if ends.size else 0)]
        return rows, np.repeat(np.arange(groups.size), lengths)

    def draw(
        self, rng: np.random.Generator, n_sets: int, groups_per_step: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows, bounds and update masks of ``n_sets`` minibatches of whole groups.

        Each minibatch is ``K`` distinct groups drawn uniformly (consecutive blocks of a
        random permutation, so one permutation serves several minibatches).

        Returns
        -------
        rows : ndarray of int
            The rows of all minibatches, one after the other.
        bounds : ndarray of int, shape (n_sets + 1,)
            Minibatch ``s`` is ``rows[bounds[s]:bounds[s + 1]]``.
        mask : ndarray, shape (n_sets, dim)
            1 where a coordinate moves in minibatch ``s`` (globals, drawn groups' locals).
        """
        k, n_groups = groups_per_step, self.n_groups
        per_permutation = n_groups // k
        n_permutations = -(-n_sets // per_permutation)
        groups = np.concatenate(
            [rng.permutation(n_groups)[: per_permutation * k] for _ in range(n_permutations)]
        )[: n_sets * k].reshape(n_sets, k)
        rows, _ = self.rows_of(groups.ravel())
        lengths = self._counts[groups]
        bounds = np.concatenate([[0], np.cumsum(lengths.sum(axis=1))])
        mask = np.repeat(self._global_mask[None, :], n_sets, axis=0)
        mask[np.arange(n_sets)[:, None], self.local_positions[groups].reshape(n_sets, -1)] = 1.0
        return rows, bounds, mask


class GroupedGradient:
    """The gradient of a minibatch of whole groups, each coordinate with its weight.

    ``∇log p̃(θ) = ∇log p_prior(θ) + w ⊙ (n/N) ∇L_b(θ)``, where ``L_b`` is the likelihood
    as PyMC scales it on the ``n`` rows fed (``N/n`` times their sum), so ``(n/N) L_b``
    is their plain sum, and ``w`` is ``J/K`` on globals and 1 on locals
    (:meth:`GroupLayout.coordinate_weights`).

    With an anchor ``θ̂`` (control variates), ``∇log p(θ̂)`` on all rows replaces the
    likelihood gradient there: ``∇log p_prior(θ) + [∇log p(θ̂) − ∇log p_prior(θ̂)] +
    w ⊙ (n/N)[∇L_b(θ) − ∇L_b(θ̂)]``. A drawn group's locals still get their exact
    gradient: its rows' term at ``θ̂`` cancels the anchor's.

    Parameters
    ----------
    rows : RowLogp
        The log density with the minibatch's arrays as placeholders (one ``pm.Minibatch``).
    data : list of Variable
        The full arrays of the minibatch, in the placeholders' order.
    """

    def __init__(self, rows: RowLogp, data: list[Variable]) -> None:
        self.position = rows.position
        self.placeholders = list(rows.placeholders[0])
        self.prior = rows.prior
        self.likelihood = pt.add(*rows.terms[0])
        self.prior_gradient = pt.grad(self.prior, self.position)
        self.likelihood_gradient = pt.grad(self.likelihood, self.position)
        self.data = [as_shared_data(d) for d in data]

    def gathered(self, indices: Variable) -> list[Variable]:
        """``data[indices]`` for each array of the minibatch."""
        return [d[indices] for d in self.data]

    def _at(self, graph: Variable, x: Variable, batch: list[Variable] | None = None) -> Variable:
        replace = {self.position: x}
        if batch is not None:
            replace.update(zip(self.placeholders, batch, strict=True))
        return substituted(graph, replace)

    def target(
        self,
        batch: list[Variable],
        weights: Variable,
        global_weight: Variable,
        anchor: SymbolicAnchor | None = None,
    ) -> Target:
        """The target on ``batch`` with likelihood weights already multiplied by ``n/N``."""

        def weighted(prior: Variable, likelihood: Variable, weight: Variable, full):
            # prior + weight · likelihood on the batch; with an anchor, its control variate
            # (the full-data value at the anchor, less the same sum there).
            def value(x: Variable) -> Variable:
                here = self._at(prior, x) + weight * self._at(likelihood, x, batch)
                if anchor is None:
                    return here
                at_anchor = full(anchor) - anchor.as_taken(self._at(prior, anchor.position))
                return (
                    here
                    + at_anchor
                    - weight * anchor.as_taken(self._at(likelihood, anchor.position, batch))
                )

            return _once_per_position(value)

        return Target(
            logp=weighted(self.prior, self.likelihood, global_weight, lambda a: a.logp),
            grad=weighted(
                self.prior_gradient, self.likelihood_gradient, weights, lambda a: a.gradient
            ),
        )

    def conditional(self, indices: Variable) -> tuple[Callable, Callable]:
        """Drawn groups' exact conditional log density and its gradient (of the position).

        ``log p(θ) = log p_prior(θ) + Σ_{rows} log p(y_i | θ) + const`` on ``indices``,
        the rows of whole groups: every other row's term is constant in those locals.
        """
        batch = self.gathered(indices)
        plain = pt.cast(indices.shape[0], self.prior.dtype) / pt.cast(
            self.data[0].shape[0], self.prior.dtype
        )  # PyMC scales the rows' sum by N/n

        def logp(x: Variable) -> Variable:
            return self._at(self.prior, x) + plain * self._at(self.likelihood, x, batch)

        def gradient(x: Variable) -> Variable:
            return self._at(self.prior_gradient, x) + plain * self._at(
                self.likelihood_gradient, x, batch
            )

        return logp, gradient

    def gradient_terms(self, indices: Variable) -> tuple[Variable, Variable]:
        """``∇log p_prior`` and ``(n/N)∇L_b`` on the rows ``indices`` (for noise probes)."""
        batch = self.gathered(indices)
        n = pt.cast(indices.shape[0], self.prior.dtype)
        total = pt.cast(self.data[0].shape[0], self.prior.dtype)
        # Not strict: an array of the minibatch that the likelihood does not read (a
        # spare column passed to pm.Minibatch) has nothing to replace.
        likelihood = graph_replace(
            self.likelihood_gradient,
            dict(zip(self.placeholders, batch, strict=True)),
            strict=False,
        )
        return self.prior_gradient, (n / total) * likelihood
