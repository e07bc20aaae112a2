"""The log-density graphs a gradient estimator reads, built by the PyMC glue.

:class:`FlatLogp` is the model's log density as a function of one flat position, with
each ``pm.Minibatch`` call's rows a placeholder (:class:`MinibatchGroup`);
:class:`RowLogp` is the same density split into the terms that read those rows, with
placeholders of any length. :mod:`pymc_sgmcmc.sampling.model_graph` builds both from a
PyMC model; estimators and full-data passes here only read them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.tensor.sharedvar import TensorSharedVariable


@dataclass
class MinibatchGroup:
    """The arrays that one ``pm.Minibatch(...)`` call slices with a common index.

    Attributes
    ----------
    rng : Variable
        The shared random generator ``pm.Minibatch`` created; it identifies the call.
    nodes : list of Apply
        The ``MinibatchOp`` nodes of that call found in the log-density graph.
    data : list of Variable
        The full arrays, in the call's order.
    batch_size : int
        Rows per minibatch.
    batches : list of TensorVariable
        Placeholders, one per array, that stand for the minibatch in the log density.
    batch_rows : TensorVariable, optional
        The placeholders' number of rows, a scalar of the log density (which then serves
        any batch size); ``None`` where their length is fixed.
    buffer : ChunkBuffer, optional
        Where the data are out-of-core (:func:`pymc_sgmcmc.Minibatch` of a Zarr, Parquet,
        xarray or Dask source): the buffer of whole chunks that ``data`` hold, from which
        :meth:`draw` draws rows and full-data passes read the sources.
    """

    rng: Variable
    nodes: list[Apply]
    data: list[Variable]
    batch_size: int
    batches: list[pt.TensorVariable]
    batch_rows: pt.TensorVariable | None = None
    buffer: Any = None

    def fed(self, batch: list[Variable], rows: Variable | None = None) -> dict:
        """Replacements that feed the log density ``batch``, one array per placeholder.

        ``rows``: the batch's number of rows where the caller computes it once, outside
        a loop (read from the first array by default).
        """
        feed: dict = dict(zip(self.batches, batch, strict=True))
        if self.batch_rows is not None:
            feed[self.batch_rows] = batch[0].shape[0] if rows is None else rows
        return feed

    def gathered(self, indices: Variable) -> list[Variable]:
        """``data[indices]`` for each array, with leading index dimensions kept."""
        return [as_shared_data(d)[indices] for d in self.data]

    def draw(self, rng: np.random.Generator, n_rows: int, size: Any) -> np.ndarray:
        """Indices of ``size`` minibatch rows into :attr:`data`, as ``pm.Minibatch`` draws.

        With replacement and uniform over the ``n_rows`` rows; where the data are
        buffered, indices into the buffer (every row of the source equally likely).
        """
        if self.buffer is not None:
            return self.buffer.draw(rng, size)
        return rng.integers(0, n_rows, size=size)

    def n_rows(self) -> int:
        """Number of rows of the full data (re-read, since ``pm.Data`` can change)."""
        if self.buffer is not None:
            return int(self.buffer.n_rows)
        first = self.data[0]
        if isinstance(first, Constant):
            return int(first.data.shape[0])
        if isinstance(first, TensorSharedVariable):
            return int(first.get_value(borrow=True).shape[0])
        return int(first.shape[0].eval())


def data_value(var: Variable) -> np.ndarray:
    """The current value of a data array in the graph (constant, shared or computed)."""
    if isinstance(var, Constant):
        return np.asarray(var.data)
    if isinstance(var, TensorSharedVariable):
        return var.get_value(borrow=True)
    return np.asarray(var.eval())


_SHARED_DATA: weakref.WeakKeyDictionary[Constant, Variable] = weakref.WeakKeyDictionary()


def as_shared_data(var: Variable) -> Variable:
    """``var`` as a borrowed shared variable where it is a constant array.

    The same shared variable for the same constant every time, so that the graphs of
    two steps on one model are the same graph (the compiled functions are reused).
    """
    # A constant array would be baked into the compiled code as a global (Numba then
    # refuses to cache it, and a large one is copied); a borrowed shared variable is not.
    if isinstance(var, Constant) and var.data.ndim > 0:
        if var not in _SHARED_DATA:
            _SHARED_DATA[var] = pytensor.shared(var.data, borrow=True, name=var.name)
        return _SHARED_DATA[var]
    return var


@dataclass
class FlatLogp:
    """The model log density as a function of one flat position vector.

    Attributes
    ----------
    logp : TensorVariable
        Scalar log density; each minibatch is an input, ``groups[k].batches``.
    position : TensorVariable
        Flat vector of the sampled value variables, in the order of ``vars``.
    shared : dict
        Value variables *not* sampled by this step, mapped to the shared variables that
        hold their current values (set by ``ArrayStepShared`` before every step).
    groups : list of MinibatchGroup
        One per ``pm.Minibatch`` call.
    """

    logp: pt.TensorVariable
    position: pt.TensorVariable
    shared: dict[Variable, TensorSharedVariable]
    groups: list[MinibatchGroup]


@dataclass
class RowLogp:
    """The model's log density with each minibatch a placeholder of any number of rows.

    ``logp(x) = prior(x) + Σ_g Σ_t term_{g,t}(x; rows of group g)``: the terms that read
    the rows of a ``pm.Minibatch`` call, each scaled as PyMC scales it (``total_size /
    rows fed``), and everything else (priors, Jacobians, observations without
    minibatches). The graph is rebuilt by PyMC with the placeholders in the minibatches'
    place, so no shape of the data or of a minibatch is fixed in it: feed a slice of the
    data, a gather or all of it.

    Attributes
    ----------
    prior : TensorVariable
        The sum of the terms that read no minibatched rows.
    terms : list of list of TensorVariable
        Per group, its likelihood terms.
    scaled : list of list of bool
        Whether each term carries PyMC's ``total_size`` scaling.
    placeholders : list of list of TensorVariable
        Per group, one placeholder per array of its ``pm.Minibatch`` call.
    position : TensorVariable
        The flat position (the same variable as :attr:`FlatLogp.position`).
    prior_terms : list of TensorVariable
        The terms of :attr:`prior` one by one; elementwise (not summed) when the graph
        was built with ``elementwise=True``, and then so are :attr:`terms` (the rows on
        their leading axis).
    """

    prior: Variable
    terms: list[list[Variable]]
    scaled: list[list[bool]]
    placeholders: list[list[Variable]]
    position: Variable
    prior_terms: list[Variable] = field(default_factory=list)
