"""The log density and its gradient on any rows: streamed full-data passes and subsamples.

Both are compiled from :class:`~pymc_sgmcmc.gradients.graphs.RowLogp`, the model's log
density with the minibatched arrays as placeholders:

- :class:`FullDataPass` feeds contiguous row chunks, as *slices* of the data (views, never
  copies), and adds up the chunks' log densities and gradients. The chunk's likelihood is
  PyMC's, scaled by ``total_size / rows_in_chunk``; each chunk is weighed by
  ``rows_in_chunk / rows`` so that the sum is the full-data density PyMC defines. The
  row-free part (priors, Jacobians) is counted once. Chunks bound the size of the
  temporaries a pass creates (e.g. ``X @ w`` for one chunk, not for all rows), and give a
  progress bar and a map-reduce shape that a distributed pass can take over.
- :class:`SubsampleGradient` is evaluated on given rows, gathered in NumPy (a minibatch of
  any size, with PyMC's scaling: an unbiased estimate of the full-data density), for
  stochastic optimisation and curvature estimates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace

from pymc_sgmcmc.core.compilation import compile_graph
from pymc_sgmcmc.gradients.graphs import MinibatchGroup, RowLogp, as_shared_data, data_value

DEFAULT_CHUNK_BYTES = 64 * 2**20
"""Bytes of data one chunk of a full-data pass reads (all arrays of a group together)."""


def _shared_arrays(groups: list[MinibatchGroup]) -> list[list[Variable]]:
    # The arrays as borrowed shared variables: neither baked into the compiled code as
    # constants nor copied.
    return [[as_shared_data(a) for a in group.data] for group in groups]


class FullDataPass:
    """``log p(θ)`` and ``∇log p(θ)`` on all rows, streamed over contiguous chunks.

    Parameters
    ----------
    rows : RowLogp
        The model's log density with its minibatched arrays as placeholders.
    groups : list of MinibatchGroup
        The ``pm.Minibatch`` calls, whose full data feed the placeholders.
    n_rows : list of int
        Rows of each group's data.
    chunk_rows : int, optional
        Rows per chunk of the largest group (the others are cut into as many chunks, in
        proportion). By default about 64 MiB of data per chunk.
    compile_kwargs : dict, optional
        Passed to PyMC's ``compile``.
    """

    def __init__(
        self,
        rows: RowLogp,
        groups: list[MinibatchGroup],
        n_rows: list[int],
        chunk_rows: int | None = None,
        compile_kwargs: dict | None = None,
    ) -> None:
        self.n_rows = list(n_rows)
        arrays = _shared_arrays(groups)
        starts = [pt.scalar(f"start_{k}", dtype="int64") for k in range(len(arrays))]
        stops = [pt.scalar(f"stop_{k}", dtype="int64") for k in range(len(arrays))]
        weights = [pt.scalar(f"weight_{k}", dtype=rows.prior.dtype) for k in range(len(arrays))]
        prior_weight = pt.scalar("prior_weight", dtype=rows.prior.dtype)
        replaced = {
            a: s[start:stop]
            for group, shared, start, stop in zip(
                rows.placeholders, arrays, starts, stops, strict=True
            )
            for a, s in zip(group, shared, strict=True)
        }
        scaled = [
            # A term without total_size counts its chunk's rows as they are.
            [w if flag else pt.constant(1.0, dtype=w.dtype) for flag in flags]
            for w, flags in zip(weights, rows.scaled, strict=True)
        ]
        total = rows.prior * prior_weight
        for terms, group_weights in zip(rows.terms, scaled, strict=True):
            for term, weight in zip(terms, group_weights, strict=True):
                total = total + weight * term
        logp = graph_replace(total, replaced, strict=False)
        gradient = pt.grad(logp, rows.position)
        inputs = [rows.position, prior_weight]
        for start, stop, weight in zip(starts, stops, weights, strict=True):
            inputs += [start, stop, weight]
        self._function = compile_graph(inputs, [logp, gradient], compile_kwargs)
        bytes_per_row = max(
            (
                sum(int(np.prod(_shape(s)[1:])) * np.dtype(s.dtype).itemsize for s in group)
                for group in arrays
            ),
            default=8,
        )
        largest = max(self.n_rows, default=0)
        if chunk_rows is None:
            chunk_rows = max(1, DEFAULT_CHUNK_BYTES // max(bytes_per_row, 1))
        if int(chunk_rows) < 1:
            raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}.")
        self.n_chunks = max(1, -(-largest // int(chunk_rows)))
        self.dtype = rows.prior.dtype

    def chunks(self) -> Iterator[list[tuple[int, int]]]:
        """The row ranges ``(start, stop)`` of each group, chunk after chunk."""
        for k in range(self.n_chunks):
            yield [(k * n // self.n_chunks, (k + 1) * n // self.n_chunks) for n in self.n_rows]

    def __call__(
        self, position: np.ndarray, progress: Callable[[int, int], None] | None = None
    ) -> tuple[float, np.ndarray]:
        """The full-data log density and gradient at ``position``.

        ``progress(done, total)`` is called after each chunk, if given.
        """
        position = np.asarray(position, dtype=self.dtype)
        logp, gradient = 0.0, np.zeros_like(position)
        for k, ranges in enumerate(self.chunks()):
            # 0-d arrays, not NumPy scalars: the compiled function trusts its inputs.
            inputs: list = [position, np.asarray(1.0 if k == 0 else 0.0, dtype=self.dtype)]
            for (start, stop), n in zip(ranges, self.n_rows, strict=True):
                inputs += [
                    np.asarray(start, dtype=np.int64),
                    np.asarray(stop, dtype=np.int64),
                    np.asarray((stop - start) / n, dtype=self.dtype),
                ]
            chunk_logp, chunk_gradient = self._function(*inputs)
            logp += float(chunk_logp)
            gradient += chunk_gradient
            if progress is not None:
                progress(k + 1, self.n_chunks)
        return logp, gradient

    @property
    def rows_per_pass(self) -> int:
        """Rows one pass reads."""
        return int(sum(self.n_rows))


class SubsampleGradient:
    """The log density and gradient on given rows, scaled to the full data as PyMC does.

    Compiled on the rows themselves (the placeholders of :class:`RowLogp`), not on indices
    into the data: the rows are gathered in NumPy, so a caller that evaluates many
    gradients on the same rows (a differenced Hessian: 2D of them) gathers them once
    (:meth:`gather`, then :meth:`on_rows`). Gathering inside the compiled function paid
    the gather at every call: a 200,000-row gradient at 10⁶ × 20 took ~50 ms, against
    ~22 ms on rows gathered once. An array the model computes from others is evaluated
    whole at each gather.

    Parameters
    ----------
    rows : RowLogp
        The model's log density with its minibatched arrays as placeholders.
    groups : list of MinibatchGroup
        The ``pm.Minibatch`` calls, whose full data the rows are gathered from.
    compile_kwargs : dict, optional
        Passed to PyMC's ``compile``.
    """

    def __init__(
        self, rows: RowLogp, groups: list[MinibatchGroup], compile_kwargs: dict | None = None
    ) -> None:
        self._data = [list(group.data) for group in groups]
        placeholders = [p for group in rows.placeholders for p in group]
        self._dtypes = [p.dtype for p in placeholders]
        total = rows.prior
        for terms in rows.terms:
            for term in terms:
                total = total + term
        gradient = pt.grad(total, rows.position)
        self._function = compile_graph(
            [rows.position, *placeholders], [total, gradient], compile_kwargs
        )
        self.dtype = rows.prior.dtype

    def gather(self, rows: list[np.ndarray]) -> list[np.ndarray]:
        """The data's ``rows`` (one index array per group), in the compiled inputs' order.

        The data are read afresh (``pm.set_data`` may have replaced them); an array that
        the model computes from others is evaluated here, whole.
        """
        gathered = []
        for arrays, index in zip(self._data, rows, strict=True):
            index = np.asarray(index, dtype=np.int64)
            gathered += [data_value(a)[index] for a in arrays]
        # The function trusts its inputs: each array in the placeholder's own dtype.
        return [np.asarray(g, dtype=d) for g, d in zip(gathered, self._dtypes, strict=True)]

    def on_rows(self, position: np.ndarray, gathered: list[np.ndarray]) -> tuple[float, np.ndarray]:
        """Log density and gradient at ``position`` on rows from :meth:`gather`."""
        logp, gradient = self._function(np.asarray(position, dtype=self.dtype), *gathered)
        return float(logp), gradient

    def __call__(self, position: np.ndarray, rows: list[np.ndarray]) -> tuple[float, np.ndarray]:
        """Log density and gradient at ``position`` on ``rows`` (one index array per group)."""
        return self.on_rows(position, self.gather(rows))


@dataclass
class Anchor:
    """A point and the full-data log density and gradient there (control variates).

    Attributes
    ----------
    position : ndarray
        ``θ̂``, in the flat order of the sampled variables.
    logp : float
        ``log p(θ̂)`` on all rows.
    gradient : ndarray
        ``∇log p(θ̂)`` on all rows.
    """

    position: np.ndarray
    logp: float
    gradient: np.ndarray


def _row_bytes(arrays: list[Variable]) -> int:
    return sum(int(np.prod(_shape(a)[1:])) * np.dtype(a.dtype).itemsize for a in arrays)


def _shape(shared: Variable) -> tuple[int, ...]:
    value = getattr(shared, "get_value", None)
    if value is not None:
        return value(borrow=True).shape
    return shared.data.shape
