"""``pmsg.Minibatch``: ``pm.Minibatch`` for integer arrays and for data beyond RAM."""

from __future__ import annotations

from typing import Any

import numpy as np
import pymc as pm
import pytensor

from pymc_sgmcmc.sources import ChunkBuffer, as_row_source
from pymc_sgmcmc.sources.buffer import DEFAULT_BUFFER_BYTES, DEFAULT_REUSE
from pymc_sgmcmc.sources.row_sources import ArraySource


def Minibatch(  # noqa: N802 - mirrors pm.Minibatch
    *arrays: Any,
    batch_size: int,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    reuse: float = DEFAULT_REUSE,
    prefetch: bool = True,
    client: Any = None,
):
    """``pm.Minibatch`` that also takes integer arrays and out-of-core data.

    In-RAM arrays go to ``pm.Minibatch`` as they are, except that integer arrays (counts,
    class labels) are passed as floating point: PyMC casts an integer minibatch before
    it reaches a discrete likelihood and then refuses it as observed data ("Variables
    that depend on other nodes cannot be used for observed data"). The conversion is
    exact for integers below 2**53.

    Where any array is out-of-core (a ``zarr.Array``, a lazily opened
    ``xarray.DataArray``, a ``dask.array.Array``, or any
    :class:`~pymc_sgmcmc.sources.RowSource` such as
    :class:`~pymc_sgmcmc.sources.ParquetSource`), the minibatch rows come from a
    :class:`~pymc_sgmcmc.sources.ChunkBuffer`: whole chunks read into memory (in the
    background, in proportion to their rows, chosen from the chain's generator) and
    rows drawn from them, so that the data need not fit in RAM. Our samplers draw the
    rows and read full-data passes chunk by chunk from the sources; give the observed
    variable ``total_size=`` the number of rows, as with ``pm.Minibatch``.

    Parameters
    ----------
    *arrays : array_like or RowSource
        Arrays with the same number of rows; one random set of rows is shared by all.
    batch_size : int
        Rows per minibatch.
    buffer_bytes : int, optional
        Out-of-core data only: the memory the buffer may hold, all arrays together
        (512 MiB by default). Data that fit are read once, whole.
    reuse : float, optional
        Out-of-core data only: times each buffered row is drawn on average before its
        chunk is replaced (rows read per row drawn: ``1/reuse``).
    prefetch : bool, optional
        Out-of-core data only: read the next chunk in a background thread.
    client : distributed.Client or bool, optional
        Out-of-core data only: where the full-data passes run. ``None`` (default): on
        the active Dask client's workers if there is one, else in the process; a client:
        on its workers; ``False``: in the process.

    Returns
    -------
    TensorVariable or list of TensorVariable
        One minibatch per array, as ``pm.Minibatch`` returns them.

    Notes
    -----
    Out-of-core rows are read by this package's samplers. Anything else that evaluates
    the model (PyMC's NUTS, ``pm.fit``, predictive sampling) sees only the first
    ``batch_size`` rows, which the minibatch variables hold between chains.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_sgmcmc as pmsg
    >>> counts = np.random.default_rng(0).poisson(3.0, size=10_000)
    >>> with pm.Model():
    ...     batch = pmsg.Minibatch(counts, batch_size=100)
    ...     rate = pm.Gamma("rate", 1.0, 1.0)
    ...     _ = pm.Poisson("counts", rate, observed=batch, total_size=len(counts))
    """
    if not arrays:
        raise TypeError("Minibatch needs at least one array.")
    sources = [as_row_source(a) for a in arrays]
    if any(s is not None for s in sources):
        return _buffered_minibatch(
            arrays, sources, batch_size, buffer_bytes=buffer_bytes, reuse=reuse,
            prefetch=prefetch, client=client,
        )  # fmt: skip
    return pm.Minibatch(*(_as_float_if_integer(a) for a in arrays), batch_size=batch_size)


def _as_float_if_integer(array: Any) -> Any:
    if isinstance(array, np.ndarray | list | tuple) or np.isscalar(array):
        array = np.asarray(array)
        if array.dtype.kind in "iub":
            return array.astype(pytensor.config.floatX)
    return array


def _float_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a buffer holds a source's rows in: ``floatX`` for integers and narrower floats.

    Narrower floats because PyMC refuses a float32 minibatch as the observed data of a
    float64 likelihood (it would be a cast of the data, "Variables that depend on other
    nodes cannot be used for observed data"), and which array is observed is not known
    here; and features held as float64 are cast once, as a chunk is read, not at every
    product of every pass. The rows on disk stay as they are.
    """
    floatx = np.dtype(pytensor.config.floatX)
    if dtype.kind in "iub" or (dtype.kind == "f" and dtype.itemsize < floatx.itemsize):
        return floatx
    return dtype


def _buffered_minibatch(arrays: tuple, sources: list, batch_size: int, **options: Any) -> Any:
    sources = [
        ArraySource(_as_float_if_integer(a)) if s is None else s
        for a, s in zip(arrays, sources, strict=True)
    ]
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    dtypes = [_float_dtype(s.dtype) for s in sources]
    buffer = ChunkBuffer(sources, dtypes=dtypes, resting_rows=int(batch_size), **options)
    shared = [
        pytensor.shared(rows, name=f"minibatch_rows_{k}", borrow=True)
        for k, rows in enumerate(buffer.resting_arrays())
    ]
    buffer.bind(shared)
    return pm.Minibatch(*shared, batch_size=int(batch_size))
