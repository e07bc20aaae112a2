"""Minibatches read as windows of a shuffled copy of the rows: random rows, contiguous reads.

``pm.Minibatch`` draws ``B`` row indices at random. Gathering them costs a trip to memory
for every row: at 10⁶ × 20 (160 MB) a gather of 1,000 random rows took 85 µs against 32 µs
for 1,000 consecutive ones, and a draw of ``pmsg.SGHMC()`` gathers 11 such minibatches
(measured in ``pm.sample``: 2.85 ms a draw with random rows, 1.45 ms with windows; at
10⁵ × 10, 8 MB, 0.62 of the time with batches of 1,000 and 0.82 with batches of 100;
``benchmarks/row_windows.py``).

Here a step keeps, for each ``pm.Minibatch`` call whose data are in memory, a copy of its
arrays with the rows in one fixed random order, and reads a minibatch as ``B`` consecutive
rows of the copy from a uniformly random start, wrapping around at the end. Each of the
``N`` windows holds ``B`` rows and each row lies in exactly ``B`` of them, so every row is in
a minibatch with probability ``B / N``, as with ``pm.Minibatch``: the ``N / B``-scaled
minibatch sums stay unbiased. Within a window the rows are distinct (drawn without
replacement, whose noise is lower by the factor ``(N − B) / (N − 1)``); windows are drawn
independently from the chain's generator at every gradient, as rows were.

The order is drawn once from a fixed seed, so the draws depend on ``random_seed`` alone; it
is drawn again when ``pm.set_data`` replaces an array. The copy costs the arrays' memory
once more: where that would take more than :data:`MEMORY_SHARE` of the memory available,
rows are drawn and gathered as ``pm.Minibatch`` does.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import numpy as np
import pytensor
from pytensor.graph.basic import Constant, Variable
from pytensor.tensor.sharedvar import TensorSharedVariable

from pymc_sgmcmc.gradients.graphs import MinibatchGroup, data_value

_log = logging.getLogger("pymc_sgmcmc")

ORDER_SEED = 20261208
"""Seed of the rows' order (fixed: the draws of a chain depend on its generator alone)."""

MIN_BYTES = 1 << 20
"""Data smaller than this (a core's L2 cache on the machines measured) keep
``pm.Minibatch``'s random rows: a small data set's ``N`` windows are few distinct
minibatches, and random rows from a cache cost little (not measured below 8 MB, where
windows took 0.82 of a draw's time at batch 100)."""

MEMORY_SHARE = 0.25
"""The share of the memory available when the step is built that the copies may take."""


class RowWindows:
    """A ``pm.Minibatch`` call's arrays with their rows shuffled, read in windows.

    Parameters
    ----------
    group : MinibatchGroup
        The call; its data must be constants or shared variables (``pm.Data``).

    Attributes
    ----------
    arrays : list of TensorSharedVariable
        The shuffled copies, one per array of the call, in its order.
    """

    def __init__(self, group: MinibatchGroup) -> None:
        self.sources = list(group.data)
        values = [data_value(d) for d in self.sources]
        self.arrays = [
            pytensor.shared(np.empty((0,) * v.ndim, dtype=v.dtype), name=f"{d.name}_shuffled")
            for d, v in zip(self.sources, values, strict=True)
        ]
        self._fingerprint: list | None = None
        self.follow_data()

    @property
    def order(self) -> np.ndarray:
        """``order[i]``: the data's row held in row ``i`` of the copies.

        Drawn again when asked, not kept: as many integers as rows.
        """
        return _order(self.arrays[0].get_value(borrow=True).shape[0])

    def _current(self) -> list:
        return [(id(v := data_value(d)), v.shape) for d in self.sources]

    def follow_data(self) -> bool:
        """Shuffle the data again if an array was replaced; return whether it was."""
        fingerprint = self._current()
        if fingerprint == self._fingerprint:
            return False
        values = [data_value(d) for d in self.sources]
        order = _order(values[0].shape[0])
        for shared, value in zip(self.arrays, values, strict=True):
            shared.set_value(np.take(value, order, axis=0), borrow=True)
        self._fingerprint = fingerprint
        return True

    def trust(self) -> None:
        """Take the current arrays as the ones shuffled (unpickled, they are new objects)."""
        self._fingerprint = self._current()

    def gathered(self, indices: Variable) -> list[Variable]:
        """The copies' rows at ``indices``, leading index dimensions kept."""
        return [a[indices] for a in self.arrays]

    @staticmethod
    def draw(rng: np.random.Generator, n_rows: int, size: tuple[int, ...]) -> np.ndarray:
        """Indices of windows of ``size[-1]`` consecutive rows, one per leading index."""
        starts = rng.integers(0, n_rows, size=(*size[:-1], 1))
        rows = starts + np.arange(size[-1])
        return np.remainder(rows, n_rows, out=rows)

    def __getstate__(self) -> dict[str, Any]:
        # The copies travel with the compiled graphs' shared variables; the fingerprint
        # names this process's objects.
        return self.__dict__ | {"_fingerprint": None}


def _order(n_rows: int) -> np.ndarray:
    return np.random.default_rng(ORDER_SEED).permutation(n_rows)


_WINDOWS: weakref.WeakKeyDictionary[Variable, RowWindows] = weakref.WeakKeyDictionary()
"""Each call's windows by its first array: two steps on one model share the copies (held
once) and their graphs are the same graph (compiled once)."""


def windows_of(group: MinibatchGroup) -> RowWindows:
    """The windows of ``group``'s arrays, made at the first call for them."""
    windows = _WINDOWS.get(group.data[0])
    if windows is None or not _same(windows.sources, group.data):
        windows = _WINDOWS[group.data[0]] = RowWindows(group)
    else:
        windows.follow_data()
    return windows


def _same(first: list[Variable], second: list[Variable]) -> bool:
    return len(first) == len(second) and all(a is b for a, b in zip(first, second, strict=True))


def _bytes(group: MinibatchGroup) -> int:
    return sum(data_value(d).nbytes for d in group.data)


def _windowable(group: MinibatchGroup) -> bool:
    return group.buffer is None and all(
        isinstance(d, Constant | TensorSharedVariable) and data_value(d).ndim > 0
        for d in group.data
    )


def row_windows(
    groups: list[MinibatchGroup], *, gradient: str, whole_groups: bool, available: int | None
) -> list[RowWindows | None]:
    """Each ``pm.Minibatch`` call's windows, or None where its rows are drawn one by one.

    None for all calls where the step draws whole groups or keeps SAGA's table (both index
    the data's own rows), and for a call whose data are out of core, computed or smaller
    than :data:`MIN_BYTES`; all None where the copies would take more than
    :data:`MEMORY_SHARE` of ``available`` bytes.
    """
    if whole_groups or gradient == "saga" or not groups:
        return [None] * len(groups)
    eligible = [_windowable(g) and _bytes(g) >= MIN_BYTES for g in groups]
    n_bytes = sum(_bytes(g) for g, ok in zip(groups, eligible, strict=True) if ok)
    if available is not None and n_bytes > MEMORY_SHARE * available:
        _log.info(
            "Minibatch rows are gathered one by one: a shuffled copy of the data (%.0f MB) "
            "would take more than %.0f%% of the %.0f MB of memory available.",
            n_bytes / 1e6, 100 * MEMORY_SHARE, available / 1e6,
        )  # fmt: skip
        return [None] * len(groups)
    return [windows_of(g) if ok else None for g, ok in zip(groups, eligible, strict=True)]
