"""A shuffled copy of data whose rows are sorted, written to Zarr in bounded memory.

The chunk buffer draws each minibatch from a few whole chunks. Where neighbouring rows
are alike (sorted by time, by group), those chunks are not random samples of the data:
the gradient stays unbiased but noisier. A copy with its rows in random order fixes
that once, before sampling.

The shuffle is the classic two-pass one for data larger than memory: each row goes to
one of ``M`` buckets chosen uniformly at random (written to a temporary store), then each
bucket, small enough for memory, is permuted and appended to the output. Buckets of
uniformly assigned rows, each uniformly permuted and concatenated, give a uniformly
random permutation of all rows.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import numpy as np

from pymc_sgmcmc.sources.row_sources import ArraySource, RowSource, as_row_source

DEFAULT_MEMORY_BYTES = 512 * 2**20
"""Memory the shuffle may hold at once (a bucket, all arrays together)."""


def _as_source(data: Any) -> RowSource:
    source = as_row_source(data)
    return ArraySource(data) if source is None else source


def write_shuffled(
    arrays: dict[str, Any],
    path: str | os.PathLike,
    *,
    chunk_rows: int = 100_000,
    seed: int | np.random.Generator | None = None,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    overwrite: bool = False,
) -> Any:
    """Write ``arrays`` with their rows in one common random order to a Zarr group.

    Parameters
    ----------
    arrays : dict of str to array_like or RowSource
        The arrays by name, all with the same number of rows (row ``i`` of each is one
        observation and stays one). Anything :class:`~pymc_sgmcmc.sources.RowSource`
        reads: NumPy, Zarr, a lazy xarray array, Dask, Parquet columns.
    path : str or os.PathLike
        The Zarr store to write (a directory).
    chunk_rows : int, optional
        Rows per chunk of the output arrays.
    seed : int or numpy.random.Generator, optional
        The random order's seed: the same seed writes the same copy.
    memory_bytes : int, optional
        Memory the shuffle may hold at once; the data are cut into as many buckets as
        that needs, kept in a temporary store beside ``path`` until written.
    overwrite : bool, optional
        Replace an existing store at ``path``.

    Returns
    -------
    zarr.Group
        The output group, opened for reading, with one array per name.

    Examples
    --------
    >>> import numpy as np, pymc_sgmcmc as pmsg, tempfile, os
    >>> X = np.arange(20.0).reshape(10, 2)
    >>> out = os.path.join(tempfile.mkdtemp(), "shuffled.zarr")
    >>> group = pmsg.sources.write_shuffled({"X": X}, out, chunk_rows=4, seed=0)
    >>> sorted(group["X"][:, 0]) == list(X[:, 0])
    True
    """
    import zarr

    if not arrays:
        raise ValueError("write_shuffled needs at least one array.")
    if int(chunk_rows) < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}.")
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(
            f"write_shuffled: {path!r} exists; pass overwrite=True to replace it, or another path."
        )
    sources = {name: _as_source(a) for name, a in arrays.items()}
    lengths = {name: s.n_rows for name, s in sources.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"write_shuffled: the arrays differ in their number of rows: {lengths}.")
    rng = np.random.default_rng(seed)
    n_rows = next(iter(lengths.values()))
    row_bytes = sum(s.row_bytes for s in sources.values())
    # A bucket holds ~1/M of the rows; half the memory for it leaves room for its copy.
    n_buckets = max(1, int(np.ceil(2 * n_rows * row_bytes / max(int(memory_bytes), 1))))
    read_rows = max(1, int(memory_bytes) // max(4 * row_bytes, 1))

    output = zarr.open_group(path, mode="w")
    for name, source in sources.items():
        output.create_array(
            name, shape=source.shape, chunks=(int(chunk_rows), *source.row_shape),
            dtype=source.dtype,
        )  # fmt: skip
    scratch = path.rstrip(os.sep) + ".buckets"
    try:
        buckets = _fill_buckets(sources, scratch, n_buckets, read_rows, rng, zarr)
        offset = 0
        for bucket in range(n_buckets):
            count = buckets[next(iter(sources))][bucket].shape[0]
            order = rng.permutation(count)
            for name in sources:
                output[name][offset : offset + count] = buckets[name][bucket][:][order]
            offset += count
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return zarr.open_group(path, mode="r")


def _fill_buckets(
    sources: dict[str, RowSource], scratch: str, n_buckets: int, read_rows: int, rng, zarr
) -> dict[str, list[Any]]:
    """Every row to a bucket drawn uniformly at random (one temporary array per bucket)."""
    store = zarr.open_group(scratch, mode="w")
    buckets = {
        name: [
            store.create_array(
                f"{name}/{k}",
                shape=(0, *s.row_shape),
                chunks=(max(read_rows, 1), *s.row_shape),
                dtype=s.dtype,
            )  # fmt: skip
            for k in range(n_buckets)
        ]
        for name, s in sources.items()
    }
    n_rows = next(iter(sources.values())).n_rows
    for start in range(0, n_rows, read_rows):
        stop = min(start + read_rows, n_rows)
        chosen = rng.integers(0, n_buckets, size=stop - start)
        order = np.argsort(chosen, kind="stable")
        cuts = np.searchsorted(chosen[order], np.arange(n_buckets + 1))
        for name, source in sources.items():
            rows = np.asarray(source.read(start, stop))[order]
            for k in range(n_buckets):
                if cuts[k + 1] > cuts[k]:
                    buckets[name][k].append(rows[cuts[k] : cuts[k + 1]], axis=0)
    return buckets
