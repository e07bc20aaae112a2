"""Out-of-core data: row sources, the chunk buffer minibatches are drawn from.

:mod:`~pymc_sgmcmc.sources.row_sources` reads contiguous rows from NumPy, Zarr,
Parquet, xarray and Dask arrays; :mod:`~pymc_sgmcmc.sources.buffer` draws minibatch rows
from whole chunks kept in memory. Nothing here knows PyMC: the glue
(:func:`pymc_sgmcmc.Minibatch`) puts a buffer behind a ``pm.Minibatch`` call.
"""

from pymc_sgmcmc.sources.buffer import ChunkBuffer
from pymc_sgmcmc.sources.row_sources import (
    ArraySource,
    DaskSource,
    ParquetSource,
    RowSource,
    XarraySource,
    ZarrSource,
    as_row_source,
)
from pymc_sgmcmc.sources.shuffle import write_shuffled

__all__ = [
    "ArraySource",
    "ChunkBuffer",
    "DaskSource",
    "ParquetSource",
    "RowSource",
    "XarraySource",
    "ZarrSource",
    "as_row_source",
    "write_shuffled",
]
