"""Minibatch rows from a buffer of whole chunks, refilled in the background.

Random rows straight from chunked storage cost a chunk read each; whole chunks read
into memory and minibatches drawn from them cost a read per chunk, shared by every row
drawn from it. :class:`ChunkBuffer` keeps ``slots`` chunks in memory (and one more being
read), draws each minibatch row from a slot chosen uniformly and a row uniform within
that slot, and replaces the oldest slot by a new chunk every ``reuse × (mean chunk
length)`` rows drawn.

Why the estimate stays unbiased: every slot holds a chunk ``c`` drawn with probability
``n_c / N`` (its share of the rows), independently of which rows are drawn from it, so a
minibatch row is row ``r`` of chunk ``c`` with probability
``Σ_slots (1/slots)(n_c/N)(1/n_c) = 1/N``, the same for every row, as ``pm.Minibatch``
draws. What the buffer changes is the correlation between successive minibatches
(they share chunks), not their expectation; ``reuse`` sets how much.

Every chunk choice is drawn from the generator passed to :meth:`ChunkBuffer.draw`
(the chain's), at the draw where the refill happens; the background thread only reads
the chunk already chosen. So a seed gives the same rows whatever the thread timing.
"""

from __future__ import annotations

import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from pymc_sgmcmc.sources.row_sources import RowSource

DEFAULT_BUFFER_BYTES = 512 * 2**20
"""Memory the buffer may hold, all arrays of one ``pm.Minibatch`` call together."""

DEFAULT_REUSE = 4.0
"""Times each buffered row is drawn on average before its chunk is replaced."""


_BUFFER_OF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""The buffer behind each shared variable a buffer is bound to."""


def buffer_of(variable: Any) -> ChunkBuffer | None:
    """The :class:`ChunkBuffer` whose rows ``variable`` holds, or ``None``."""
    try:
        return _BUFFER_OF.get(variable)
    except TypeError:  # not weakly referable: no buffer's
        return None


@dataclass
class BufferCounts:
    """What a buffer has read and drawn, for the read amplification and the waits.

    Attributes
    ----------
    rows_drawn : int
        Minibatch rows drawn.
    rows_read : int
        Rows read from the sources (each array's rows counted once).
    chunks_read : int
        Chunk reads.
    seconds_waiting : float
        Time a draw spent waiting for a chunk still being read.
    """

    rows_drawn: int = 0
    rows_read: int = 0
    chunks_read: int = 0
    seconds_waiting: float = 0.0

    @property
    def read_amplification(self) -> float:
        """Rows read per row drawn."""
        return self.rows_read / max(self.rows_drawn, 1)


def common_chunk_starts(sources: list[RowSource]) -> np.ndarray:
    """The chunk starts of all ``sources`` together: a chunk is whole in every source."""
    return np.unique(np.concatenate([s.chunk_starts for s in sources]))


class ChunkBuffer:
    """Minibatch rows of several arrays with common rows, drawn from whole chunks in memory.

    Parameters
    ----------
    sources : list of RowSource
        The arrays, all with the same number of rows (e.g. the features and the
        response). Their chunks are cut at every array's chunk starts, so give them the
        same chunk layout along the rows to read each row once.
    buffer_bytes : int, optional
        Memory the buffer may hold. Data that fit are read whole, once, and drawn from
        as ``pm.Minibatch`` draws from an array in RAM (the same rows for the same
        seed); otherwise as many chunk slots as fit, one of them being read.
    reuse : float, optional
        Times each buffered row is drawn on average before its chunk is replaced: the
        rows read per row drawn are ``1 / reuse``; a larger value reads less and
        correlates successive minibatches more.
    prefetch : bool, optional
        Read the next chunk in a background thread while the sampler runs.
    resting_rows : int, optional
        Rows kept while the buffer is released (:meth:`release`): the first rows of
        the data, so that what PyMC evaluates outside our samplers has rows to read.
    dtypes : list of dtype, optional
        The dtype each array is held in (its source's by default), e.g. floating point
        for integer labels that PyMC takes as observed data only as floats.
    client : distributed.Client or bool, optional
        Where full-data passes over these arrays run: ``None`` (default) on the active
        Dask client if there is one, else in the process; a client: on its workers;
        ``False``: always in the process. Not pickled.
    """

    def __init__(
        self,
        sources: list[RowSource],
        *,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        reuse: float = DEFAULT_REUSE,
        prefetch: bool = True,
        resting_rows: int = 1,
        dtypes: list[Any] | None = None,
        client: Any = None,
    ) -> None:
        if not sources:
            raise ValueError("ChunkBuffer needs at least one source.")
        lengths = {s.n_rows for s in sources}
        if len(lengths) > 1:
            shown = ", ".join(f"{s!r}: {s.n_rows} rows" for s in sources)
            raise ValueError(
                "The arrays of one minibatch must have the same number of rows (row i of "
                f"each is one observation); got {shown}. Check that they come from the same "
                "table, in the same order."
            )
        if not float(reuse) > 0:
            raise ValueError(f"reuse must be positive, got {reuse!r}.")
        self.sources = list(sources)
        self.dtypes = [np.dtype(d) for d in (dtypes or [s.dtype for s in sources])]
        self.n_rows = int(sources[0].n_rows)
        if self.n_rows == 0:
            raise ValueError("The minibatch's data have no rows.")
        self.reuse = float(reuse)
        self.prefetch = bool(prefetch)
        self.buffer_bytes = int(buffer_bytes)
        self.row_bytes = sum(
            int(np.prod(s.row_shape, dtype=np.int64)) * d.itemsize
            for s, d in zip(sources, self.dtypes, strict=True)
        )
        self.chunk_starts = common_chunk_starts(sources)
        self.chunk_lengths = np.diff(self.chunk_starts)
        self.whole = self.n_rows * self.row_bytes <= self.buffer_bytes
        if self.whole:
            self.slot_rows, self.slots = self.n_rows, 1
        else:
            self.slot_rows = int(self.chunk_lengths.max())
            physical = self.buffer_bytes // max(self.slot_rows * self.row_bytes, 1)
            if physical < 3:
                need = 3 * self.slot_rows * self.row_bytes
                fits = self.buffer_bytes // (3 * self.row_bytes)
                raise ValueError(
                    f"A chunk of these arrays has up to {self.slot_rows} rows "
                    f"({self.slot_rows * self.row_bytes / 2**20:.1f} MiB with all arrays), "
                    f"and the buffer needs room for three (two drawn from, one being read) "
                    f"within buffer_bytes={self.buffer_bytes} ({need / 2**20:.1f} MiB would "
                    f"be needed). Raise buffer_bytes to at least {need}, or store the data "
                    f"in chunks of at most {max(fits, 1)} rows."
                )
            self.slots = int(min(physical - 1, len(self.chunk_lengths)))
        self.rows_per_refill = max(1, round(self.reuse * float(self.chunk_lengths.mean())))
        self.resting_rows = int(min(max(resting_rows, 1), self.n_rows))
        self.counts = BufferCounts()
        self.client = client
        self.shared: list[Any] = []
        self._resting: list[np.ndarray] | None = None
        self._arrays: list[np.ndarray] | None = None
        self._clear_slots()

    # -- life cycle ------------------------------------------------------------------

    def _clear_slots(self) -> None:
        self._live: np.ndarray | None = None  # physical slot of each live slot
        self._live_offsets: np.ndarray | None = None
        self._live_lengths: np.ndarray | None = None
        self._spare = 0
        self._spare_chunk = 0
        self._spare_future: Future | None = None
        self._next_replaced = 0
        self._rows_since_refill = 0
        self._executor: ThreadPoolExecutor | None = None

    def bind(self, shared: list[Any]) -> None:
        """The shared variables, one per source, that the model's graph reads rows from.

        Each one's value is the buffer while it is filled, and the resting rows while it
        is released. Set to the resting rows here.
        """
        if len(shared) != len(self.sources):
            raise ValueError(f"expected {len(self.sources)} shared variables, got {len(shared)}")
        self.shared = list(shared)
        for var in self.shared:
            _BUFFER_OF[var] = self
        self.release()

    def resting_arrays(self) -> list[np.ndarray]:
        """The first :attr:`resting_rows` rows of each array (read once)."""
        if self._resting is None:
            self._resting = [
                np.array(s.read(0, self.resting_rows), dtype=d)
                for s, d in zip(self.sources, self.dtypes, strict=True)
            ]
        return self._resting

    @property
    def filled(self) -> bool:
        """Whether the buffer holds chunks (else it rests)."""
        return self._arrays is not None

    def release(self) -> None:
        """Give the memory back; the shared variables hold the resting rows.

        A step method releases its buffers at the end of its set-up, so that pickling
        it (``pm.sample(cores>1)`` sends it to each chain's process) does not copy them.
        """
        if self._spare_future is not None:
            self._spare_future.result()  # not a draw's wait: not counted
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._arrays = None
        self._clear_slots()
        for var, rows in zip(self.shared, self.resting_arrays(), strict=True):
            var.set_value(rows, borrow=True)

    def reset(self, rng: np.random.Generator) -> None:
        """Fill the buffer afresh, every chunk chosen from ``rng`` (a chain's start)."""
        self.release()
        self._fill(rng)

    def _fill(self, rng: np.random.Generator) -> None:
        physical = 1 if self.whole else self.slots + 1
        self._arrays = [
            np.empty((physical * self.slot_rows, *s.row_shape), dtype=d)
            for s, d in zip(self.sources, self.dtypes, strict=True)
        ]
        if self.whole:
            self._read_into(0, 0, self.n_rows)
            self._live = np.zeros(1, dtype=np.int64)
            self._live_offsets = np.zeros(1, dtype=np.int64)
            self._live_lengths = np.array([self.n_rows], dtype=np.int64)
        else:
            chunks = self._choose_chunks(rng, self.slots)
            for slot, chunk in enumerate(chunks):
                self._read_chunk_into(slot, chunk)
            self._live = np.arange(self.slots, dtype=np.int64)
            self._live_offsets = self._live * self.slot_rows
            self._live_lengths = self.chunk_lengths[chunks].astype(np.int64)
            self._spare = self.slots
            self._schedule_spare(rng)
        for var, array in zip(self.shared, self._arrays, strict=True):
            var.set_value(array, borrow=True)

    def __getstate__(self) -> dict:
        # Sources travel as references; the buffer's memory and its thread do not.
        state = self.__dict__.copy()
        state.update(
            _arrays=None, _live=None, _live_offsets=None, _live_lengths=None,
            _spare_future=None, _executor=None, _rows_since_refill=0, _next_replaced=0,
            client=None if self.client is not False else False,
        )  # fmt: skip
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for var in self.shared:
            _BUFFER_OF[var] = self

    # -- reading ---------------------------------------------------------------------

    def _choose_chunks(self, rng: np.random.Generator, size: int) -> np.ndarray:
        # In proportion to their rows: every row is then equally likely to be buffered.
        return rng.choice(len(self.chunk_lengths), size=size, p=self.chunk_lengths / self.n_rows)

    def _read_into(self, physical: int, start: int, stop: int) -> None:
        offset = physical * self.slot_rows
        for source, array in zip(self.sources, self._arrays, strict=True):
            array[offset : offset + stop - start] = source.read(start, stop)
        self.counts.rows_read += stop - start
        self.counts.chunks_read += 1

    def _read_chunk_into(self, physical: int, chunk: int) -> None:
        self._read_into(physical, int(self.chunk_starts[chunk]), int(self.chunk_starts[chunk + 1]))

    def _schedule_spare(self, rng: np.random.Generator) -> None:
        chunk = int(self._choose_chunks(rng, 1)[0])
        self._spare_chunk = chunk
        if self.prefetch:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="pmsg-chunks")
            self._spare_future = self._executor.submit(self._read_chunk_into, self._spare, chunk)
        else:
            self._spare_future = None

    def _wait_spare(self) -> None:
        future = self._spare_future
        if future is not None:
            started = time.perf_counter()
            future.result()
            self.counts.seconds_waiting += time.perf_counter() - started
        self._spare_future = None

    def _refill(self, rng: np.random.Generator) -> None:
        """The oldest live slot gives way to the spare, whose chunk is read by now."""
        if self.prefetch:
            self._wait_spare()
        else:
            self._read_chunk_into(self._spare, self._spare_chunk)
        j = self._next_replaced
        old = int(self._live[j])
        self._live[j] = self._spare
        self._live_offsets[j] = self._spare * self.slot_rows
        self._live_lengths[j] = self.chunk_lengths[self._spare_chunk]
        self._spare = old
        self._next_replaced = (j + 1) % self.slots
        self._schedule_spare(rng)

    # -- drawing ---------------------------------------------------------------------

    def draw(self, rng: np.random.Generator, size: Any) -> np.ndarray:
        """Indices into the buffer of ``size`` minibatch rows, each row ``1/N`` likely.

        Fills the buffer first (from ``rng``) where it rests. Refills that are due come
        before the draw, so the indices returned stay valid until the next draw.
        """
        if self._arrays is None:
            self._fill(rng)
        count = int(np.prod(size, dtype=np.int64))
        self.counts.rows_drawn += count
        if self.whole:
            # As pm.Minibatch draws from an array in RAM: the same rows for a seed.
            return rng.integers(0, self.n_rows, size=size)
        self._rows_since_refill += count
        while self._rows_since_refill >= self.rows_per_refill:
            self._rows_since_refill -= self.rows_per_refill
            self._refill(rng)
        slot = rng.integers(0, self.slots, size=size)
        return self._live_offsets[slot] + rng.integers(0, self._live_lengths[slot])

    def ranges(self, target_rows: int) -> list[tuple[int, int]]:
        """Row ranges of whole chunks, each about ``target_rows`` long (a full pass's reads)."""
        ranges, start, rows = [], 0, 0
        last = len(self.chunk_lengths) - 1
        for k, length in enumerate(self.chunk_lengths):
            rows += int(length)
            if rows >= target_rows or k == last:
                stop = int(self.chunk_starts[k + 1])
                ranges.append((start, stop))
                start, rows = stop, 0
        return ranges

    def read(self, start: int, stop: int) -> list[np.ndarray]:
        """Rows ``start:stop`` of every array from the sources (not the buffer), in its dtype."""
        return [
            np.asarray(s.read(start, stop), dtype=d)
            for s, d in zip(self.sources, self.dtypes, strict=True)
        ]
