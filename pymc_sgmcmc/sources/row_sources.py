"""Arrays whose rows are read a chunk at a time: in RAM, Zarr, Parquet, xarray, Dask.

A :class:`RowSource` knows its number of rows, the shape and dtype of one row, where its
storage chunks start, and reads a contiguous range of rows into a NumPy array. Reading
a range is the only access: gathering scattered rows from chunked storage costs one
chunk per row touched (0.4-1.2 ms each from Zarr on local disk, so 370-1,200 ms for a
minibatch of 1,000 rows against 0.1 ms in RAM), which is why minibatches come from a
buffer of whole chunks (:class:`~pymc_sgmcmc.sources.buffer.ChunkBuffer`) and full-data
passes read ranges.

Every source pickles as a reference to its storage (a path and options), never as its
data, so a step method sent to another process does not carry the rows with it.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

import numpy as np


class RowSource(ABC):
    """Rows of one array, read a contiguous range at a time.

    Attributes
    ----------
    n_rows : int
        Rows of the array (its first axis).
    row_shape : tuple of int
        Shape of one row.
    dtype : numpy.dtype
        The array's dtype.
    chunk_starts : ndarray of int
        Where each storage chunk starts, then ``n_rows``: reading from one start to the
        next reads one chunk and nothing else.
    """

    n_rows: int
    row_shape: tuple[int, ...]
    dtype: np.dtype
    chunk_starts: np.ndarray

    @abstractmethod
    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as a NumPy array of :attr:`dtype`."""

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def shape(self) -> tuple[int, ...]:
        """The whole array's shape."""
        return (self.n_rows, *self.row_shape)

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        chunks = len(self.chunk_starts) - 1
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, chunks={chunks})"


def check_numeric(dtype: Any, what: str) -> np.dtype:
    """``dtype`` if it holds numbers (booleans, integers, floats), else a ``TypeError``."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{what} holds {dtype} values; a minibatch needs numbers (booleans, integers or "
            "floats). Encode the values as numbers (e.g. category codes) before storing them."
        )
    return dtype


def regular_chunk_starts(n_rows: int, chunk_rows: int) -> np.ndarray:
    """Starts of chunks of ``chunk_rows`` rows (the last one ragged), then ``n_rows``."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}.")
    return np.append(np.arange(0, n_rows, chunk_rows, dtype=np.int64), np.int64(n_rows))


def _starts_from_lengths(lengths: Any) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))])


class ArraySource(RowSource):
    """A NumPy array in RAM, cut into chunks of ``chunk_rows`` rows.

    The reference against which the other sources are tested, and the way to give
    in-memory data the buffer's behaviour. It pickles with its data.

    Parameters
    ----------
    array : array_like
        The rows.
    chunk_rows : int, optional
        Rows per chunk; the whole array in one chunk by default.
    """

    def __init__(self, array: Any, chunk_rows: int | None = None) -> None:
        self.array = np.asarray(array)
        if self.array.ndim == 0:
            raise ValueError("ArraySource needs an array with at least one dimension.")
        self.n_rows = int(self.array.shape[0])
        self.row_shape = tuple(self.array.shape[1:])
        self.dtype = check_numeric(self.array.dtype, "The array")
        self.chunk_starts = regular_chunk_starts(self.n_rows, chunk_rows or max(self.n_rows, 1))

    def read(self, start: int, stop: int) -> np.ndarray:  # noqa: D102
        return self.array[start:stop]


class ZarrSource(RowSource):
    """A Zarr array, opened from a store path or given open.

    Parameters
    ----------
    array : zarr.Array or str or os.PathLike
        An open array, or the path of a store (a directory ``*.zarr``).
    name : str, optional
        The array's path inside the store's group, where ``array`` is a path to a group.

    Notes
    -----
    An open ``zarr.Array`` pickles as its store and path (Zarr's own pickling), a few
    kilobytes, so this source pickles small whatever the array's size.
    """

    def __init__(self, array: Any, name: str | None = None) -> None:
        import zarr

        if isinstance(array, str | os.PathLike):
            path = os.fspath(array)
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"ZarrSource: no Zarr store at {path!r}. Give the path of a store "
                    "written with zarr (a directory), or an open zarr.Array."
                )
            opened = zarr.open(path, mode="r")
            if name is not None:
                opened = opened[name]
            elif isinstance(opened, zarr.Group):
                names = sorted(opened.array_keys())
                raise ValueError(
                    f"ZarrSource: {path!r} is a group of arrays {names}: name the one to "
                    f"read, e.g. ZarrSource({path!r}, name={names[0]!r})."
                    if names
                    else f"ZarrSource: the group at {path!r} holds no array."
                )
            array = opened
        if not isinstance(array, zarr.Array):
            raise TypeError(f"ZarrSource needs a zarr.Array or a store path, got {type(array)}.")
        if array.ndim == 0:
            raise ValueError("ZarrSource needs an array with at least one dimension.")
        self.array = array
        self.n_rows = int(array.shape[0])
        self.row_shape = tuple(int(s) for s in array.shape[1:])
        self.dtype = check_numeric(array.dtype, f"The Zarr array {array.path!r}")
        self.chunk_starts = regular_chunk_starts(self.n_rows, int(array.chunks[0]))

    def read(self, start: int, stop: int) -> np.ndarray:  # noqa: D102
        return np.asarray(self.array[start:stop])


class ParquetSource(RowSource):
    """Columns of a Parquet file (or of a directory of them), one row group a chunk.

    Parameters
    ----------
    path : str or os.PathLike
        A Parquet file, or a directory of Parquet files read in sorted name order.
    columns : str or list of str
        One column name (a 1-d source) or several, stacked side by side in this order
        (a 2-d source with one column per name). Columns must be numeric.
    dtype : dtype, optional
        The dtype of the rows read; the columns' common type by default.

    Notes
    -----
    The file's row groups are its chunks: write it with row groups of the size a read
    should have (``pyarrow.parquet.write_table(..., row_group_size=...)``).
    """

    def __init__(self, path: Any, columns: str | list[str], dtype: Any = None) -> None:
        self.path = os.fspath(path)
        self.single = isinstance(columns, str)
        self.columns = [columns] if self.single else list(columns)
        if not self.columns:
            raise ValueError("ParquetSource needs at least one column.")
        self._requested_dtype = dtype
        self._open()

    def _files(self) -> list[str]:
        if os.path.isdir(self.path):
            files = sorted(
                os.path.join(self.path, f)
                for f in os.listdir(self.path)
                if f.endswith((".parquet", ".parq", ".pq"))
            )
            if not files:
                raise FileNotFoundError(f"ParquetSource: no *.parquet file in {self.path!r}.")
            return files
        if not os.path.exists(self.path):
            raise FileNotFoundError(
                f"ParquetSource: no Parquet file at {self.path!r}. Give a file written by "
                "pyarrow.parquet.write_table (or pandas' to_parquet), or a directory of them."
            )
        return [self.path]

    def _open(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._handles = [pq.ParquetFile(f) for f in self._files()]
        schema = self._handles[0].schema_arrow
        missing = [c for c in self.columns if c not in schema.names]
        if missing:
            raise ValueError(
                f"ParquetSource: {self.path!r} has no column {missing}; its columns are "
                f"{schema.names}."
            )
        types = [schema.field(c).type for c in self.columns]
        bad = [c for c, t in zip(self.columns, types, strict=True) if not _is_numeric(pa, t)]
        if bad:
            raise TypeError(
                f"ParquetSource: the columns {bad} of {self.path!r} are not numeric "
                f"({[str(schema.field(c).type) for c in bad]}); a minibatch needs numbers. "
                "Encode them as numbers before writing the file."
            )
        numpy_types = [np.dtype(t.to_pandas_dtype()) for t in types]
        self.dtype = np.dtype(self._requested_dtype or np.result_type(*numpy_types))
        # (file, row group) of each chunk, in order.
        self._groups = [
            (k, g) for k, handle in enumerate(self._handles) for g in range(handle.num_row_groups)
        ]
        lengths = [self._handles[k].metadata.row_group(g).num_rows for k, g in self._groups]
        self.chunk_starts = _starts_from_lengths(lengths)
        self.n_rows = int(self.chunk_starts[-1])
        self.row_shape = () if self.single else (len(self.columns),)

    def read(self, start: int, stop: int) -> np.ndarray:  # noqa: D102
        first = int(np.searchsorted(self.chunk_starts, start, side="right")) - 1
        last = int(np.searchsorted(self.chunk_starts, stop, side="left"))
        pieces = []
        for chunk in range(max(first, 0), min(last, len(self._groups))):
            k, g = self._groups[chunk]
            table = self._handles[k].read_row_group(g, columns=self.columns)
            lo, hi = self.chunk_starts[chunk], self.chunk_starts[chunk + 1]
            a, b = max(start, lo) - lo, min(stop, hi) - lo
            columns = [
                table.column(c).slice(a, b - a).to_numpy().astype(self.dtype, copy=False)
                for c in self.columns
            ]
            pieces.append(columns[0] if self.single else np.stack(columns, axis=1))
        if not pieces:
            return np.empty((0, *self.row_shape), dtype=self.dtype)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def __getstate__(self) -> dict:
        # The open files do not travel: the path does, and they are opened again.
        return {k: v for k, v in self.__dict__.items() if k not in ("_handles", "_groups")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()


def _is_numeric(pa: Any, arrow_type: Any) -> bool:
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
    )


class XarraySource(RowSource):
    """An ``xarray.DataArray`` backed by Zarr, NetCDF or Dask, its rows along one dimension.

    Parameters
    ----------
    array : xarray.DataArray
        The data, opened lazily (``xarray.open_zarr(...)["X"]``,
        ``xarray.open_dataset(...)["X"]``), so that only the rows read are loaded.
    dim : str, optional
        The dimension of the rows; the first one by default. It is moved first.

    Notes
    -----
    The chunks are Dask's where the array is a Dask array, else the ones its file was
    written with (``encoding["chunks"]`` or ``encoding["chunksizes"]``), else one.
    A lazily opened array pickles as its file's reference (xarray's own pickling).
    """

    def __init__(self, array: Any, dim: str | None = None) -> None:
        import xarray as xr

        if isinstance(array, xr.Dataset):
            names = list(array.data_vars)
            raise TypeError(
                f"XarraySource needs one DataArray, got a Dataset of {names}: pass "
                f"dataset[{names[0]!r}]" + ("." if names else " (it has no variable).")
            )
        if not isinstance(array, xr.DataArray):
            raise TypeError(f"XarraySource needs an xarray.DataArray, got {type(array)}.")
        if array.ndim == 0:
            raise ValueError("XarraySource needs an array with at least one dimension.")
        dim = array.dims[0] if dim is None else dim
        if dim not in array.dims:
            raise ValueError(f"XarraySource: {dim!r} is not a dimension of {array.dims}.")
        self.array = array.transpose(dim, ...)
        self.dim = dim
        self.n_rows = int(self.array.sizes[dim])
        self.row_shape = tuple(int(s) for s in self.array.shape[1:])
        self.dtype = check_numeric(self.array.dtype, f"The DataArray {array.name!r}")
        self.chunk_starts = self._chunk_starts(array.dims.index(dim))

    def _chunk_starts(self, axis: int) -> np.ndarray:
        if self.array.chunks is not None:  # Dask-backed
            return _starts_from_lengths(self.array.chunks[0])
        encoding = self.array.encoding
        chunks = encoding.get("chunks") or encoding.get("chunksizes")
        rows = int(chunks[axis]) if chunks else max(self.n_rows, 1)
        return regular_chunk_starts(self.n_rows, rows)

    def read(self, start: int, stop: int) -> np.ndarray:  # noqa: D102
        return np.asarray(self.array.isel({self.dim: slice(start, stop)}).values)


class DaskSource(RowSource):
    """A ``dask.array.Array``, its chunks along the first axis.

    Parameters
    ----------
    array : dask.array.Array
        The data, e.g. ``dask.array.from_zarr(...)``.

    Notes
    -----
    A range is computed with Dask's current scheduler; a range within one chunk
    computes that chunk alone.
    """

    def __init__(self, array: Any) -> None:
        import dask.array as da

        if not isinstance(array, da.Array):
            raise TypeError(f"DaskSource needs a dask.array.Array, got {type(array)}.")
        if array.ndim == 0:
            raise ValueError("DaskSource needs an array with at least one dimension.")
        if any(np.isnan(c) for c in array.chunks[0]):
            raise ValueError(
                "DaskSource: the array's chunk lengths are unknown (NaN); call "
                "array.compute_chunk_sizes() first."
            )
        self.array = array
        self.n_rows = int(array.shape[0])
        self.row_shape = tuple(int(s) for s in array.shape[1:])
        self.dtype = check_numeric(array.dtype, "The Dask array")
        self.chunk_starts = _starts_from_lengths(array.chunks[0])

    def read(self, start: int, stop: int) -> np.ndarray:  # noqa: D102
        return np.asarray(self.array[start:stop].compute())


def as_row_source(data: Any) -> RowSource | None:
    """``data`` as a :class:`RowSource` where it is out-of-core; ``None`` for in-RAM data.

    A ``RowSource`` is returned as it is; a ``zarr.Array``, an ``xarray.DataArray`` and a
    ``dask.array.Array`` are wrapped (a ``DataArray`` only where it is not loaded yet);
    anything else (a NumPy array, a list, a PyTensor
    variable) is not a source. Only modules already imported are asked, so this imports
    none of Zarr, xarray or Dask.
    """
    import sys

    if isinstance(data, RowSource):
        return data
    zarr = sys.modules.get("zarr")
    if zarr is not None and isinstance(data, zarr.Array):
        return ZarrSource(data)
    xarray = sys.modules.get("xarray")
    if xarray is not None and isinstance(data, xarray.Dataset):
        return XarraySource(data)  # refused there, with the variable to pick
    if xarray is not None and isinstance(data, xarray.DataArray):
        # An array already loaded is in-RAM data like any other.
        return None if data.variable._in_memory else XarraySource(data)
    dask_array = sys.modules.get("dask.array")
    if dask_array is not None and isinstance(data, dask_array.Array):
        return DaskSource(data)
    return None
