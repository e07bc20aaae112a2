"""Out-of-core data sources against NumPy in RAM: minibatches, sampler draws, full-data passes.

One synthetic table (``--rows`` × ``--columns`` float32 features ``X ~ N(0, 1)`` and a 0/1
label ``y ~ Bernoulli(σ(X w))``, stored as int8; independent rows, so already in random
order) is written to every kind of source ``pmsg.Minibatch`` reads: a Zarr group in two
chunk layouts along the rows (10⁴ and 10⁵ rows per chunk), a Parquet file (row groups of
10⁵ rows, columns ``x0``, ``x1``, ... and ``y``), the Zarr store ``xarray`` writes
(``Dataset.to_zarr``, opened lazily with ``open_zarr(chunks=None)``) and a Dask array over
the 10⁵-row Zarr store (``dask.array.from_zarr``). The writing time is printed, not
tabled. Each table sets the sources beside NumPy in RAM, measured in the same run:

1. *Minibatch cost*: what one minibatch of B rows costs the sampler from the
   :class:`~pymc_sgmcmc.sources.ChunkBuffer` that ``pmsg.Minibatch`` puts behind the arrays,
   with the default ``buffer_bytes`` and ``reuse`` and the dtypes it holds the rows in (the
   draw of the indices and the gather ``array[indices]`` of both arrays from its shared
   variables), amortised over enough draws that the buffer replaces many chunks (the
   initial fill is reported apart), against ``rng.integers`` and fancy indexing of the
   arrays in RAM as ``pm.Minibatch`` holds them. The read amplification (rows read per row
   drawn, ``1 / reuse`` by design) and the seconds a draw waited for the background read
   come from the buffer's counts. One more row per source gathers B = 1,000 random rows
   straight from the storage, without a buffer: each row costs a chunk read, which is why
   the buffer exists.
2. *Sampler iterations per second*: ``pmsg.SGHMC()`` (default arguments; only its progress
   bar silenced) on a logistic regression, ``w ~ N(0, 10²)``, ``pmsg.Minibatch(X, y,
   batch_size=1000)``, one chain of ``pm.sample``: the draws after tuning are timed from
   ``pm.sample``'s callback; the set-up (building the step: data checks, mode search,
   curvature) is timed apart with the rows it read in full-data passes. The set-up reads
   the data some twenty times, at the speed of the full-data pass below, so this table
   uses ``--sampler-rows`` rows (10⁶ by default). Data that fit ``buffer_bytes`` are read
   whole and drawn from as in RAM, so its buffer holds the share of the data that the
   default holds at 10⁷ rows, and one more row shows Zarr with the default.
3. *Full-data pass*: one ``step.data_passes.full_pass(x)`` (log density and gradient on all
   rows, read a range of whole chunks at a time, the next read in a thread while the last
   is computed) per source at a random point, built as the step builds it (without the
   set-up), against the same in RAM and against NumPy's ``X.sum(axis=0)`` on the array in
   RAM (the memory-bandwidth yardstick); the results must equal RAM's to 1e-10 relative.
   A row in RAM with float64 features shows what the float32 features cost the compiled
   pass itself.
4. *Full-data pass on Dask workers*: the same pass from the Zarr store on ``LocalCluster``s
   of 1, 2 (and as many as the machine has cores) worker processes, its first pass (which
   ships the compiled function to the workers) timed apart (``--no-cluster`` skips it).

The files are read from a warm page cache (just written, far less than the RAM), so the
tables measure decoding and copying, not a disk. The load average is printed beside the
tables: another busy process on the machine slows every row, the ratios less.

    bash run.sh python benchmarks/data_sources.py            # about 6 minutes on 2 cores
    bash run.sh python benchmarks/data_sources.py --quick    # about 1.5 minutes
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pymc as pm
import pytensor
import xarray as xr
import zarr
from paper_tables.output import cpu_name
from pytensor.graph.traversal import graph_inputs

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling.mode import ModeFinder
from pymc_sgmcmc.sampling.model_graph import flat_logp
from pymc_sgmcmc.sources import ArraySource, ChunkBuffer, ParquetSource, as_row_source
from pymc_sgmcmc.sources.buffer import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_REUSE,
    BufferCounts,
    buffer_of,
)

SMALL_CHUNK, LARGE_CHUNK = 10_000, 100_000
BATCH_SIZES = (100, 1_000, 10_000)
SAMPLER_BATCH = 1_000
DIRECT_BATCH = 1_000
REFERENCE_ROWS = 10_000_000
"""Rows at which the default ``buffer_bytes`` is measured; smaller tables scale it."""
LABEL_DTYPE = np.dtype(pytensor.config.floatX)
"""What ``pm.Minibatch`` in RAM holds the int8 labels in (PyMC takes observed data as floats)."""

STARTED = time.perf_counter()


def log(message: str) -> None:
    """A progress line on stderr, with the seconds since the start."""
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


# -- data -------------------------------------------------------------------------------------


def synthetic_table(rows: int, columns: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``X ~ N(0, 1)`` in float32, ``y ~ Bernoulli(σ(X w))`` in int8, ``w ~ N(0, 0.5²)``."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(0.0, 0.5, size=columns)
    X = np.empty((rows, columns), dtype=np.float32)
    y = np.empty(rows, dtype=np.int8)
    block = 1_000_000  # bounds the float64 temporaries
    for start in range(0, rows, block):
        stop = min(start + block, rows)
        X[start:stop] = rng.standard_normal((stop - start, columns), dtype=np.float32)
        p = 1.0 / (1.0 + np.exp(-(X[start:stop] @ weights)))
        y[start:stop] = rng.random(stop - start) < p
    return X, y


def write_zarr(path: str, X: np.ndarray, y: np.ndarray, chunk_rows: int) -> None:
    """A Zarr group with arrays ``X`` and ``y`` chunked along the rows only (default codecs)."""
    group = zarr.open_group(path, mode="w")
    group.create_array("X", shape=X.shape, chunks=(chunk_rows, X.shape[1]), dtype=X.dtype)[:] = X
    group.create_array("y", shape=y.shape, chunks=(chunk_rows,), dtype=y.dtype)[:] = y


def write_parquet(path: str, X: np.ndarray, y: np.ndarray, row_group_rows: int) -> None:
    """One Parquet file, columns ``x0``, ``x1``, ... and ``y`` (pyarrow's default codec)."""
    columns = {f"x{j}": X[:, j] for j in range(X.shape[1])} | {"y": y}
    pq.write_table(pa.table(columns), path, row_group_size=row_group_rows)


def write_xarray(path: str, X: np.ndarray, y: np.ndarray, chunk_rows: int) -> None:
    """The Zarr store of an ``xarray.Dataset`` with variables ``X(row, feature)``, ``y(row)``."""
    dataset = xr.Dataset({"X": (("row", "feature"), X), "y": ("row", y)})
    encoding = {"X": {"chunks": (chunk_rows, X.shape[1])}, "y": {"chunks": (chunk_rows,)}}
    dataset.to_zarr(path, mode="w", consolidated=False, encoding=encoding)


def directory_mb(path: str) -> float:
    """Bytes on disk under ``path`` (a file or a directory), in MB."""
    if os.path.isfile(path):
        return os.path.getsize(path) / 1e6
    return (
        sum(
            os.path.getsize(os.path.join(root, f))
            for root, _, files in os.walk(path)
            for f in files
        )
        / 1e6
    )


@dataclass
class Stores:
    """The paths of one table written to every kind of source."""

    zarr_small: str
    zarr_large: str
    parquet: str
    xarray: str


def write_stores(directory: str, X: np.ndarray, y: np.ndarray, label: str) -> Stores:
    """Every store of ``(X, y)`` under ``directory``; prints the writing time of each."""
    os.makedirs(directory, exist_ok=True)
    stores = Stores(
        zarr_small=os.path.join(directory, "chunks_1e4.zarr"),
        zarr_large=os.path.join(directory, "chunks_1e5.zarr"),
        parquet=os.path.join(directory, "table.parquet"),
        xarray=os.path.join(directory, "xarray.zarr"),
    )
    writers = [
        (f"Zarr, {SMALL_CHUNK:,}-row chunks", stores.zarr_small, write_zarr, SMALL_CHUNK),
        (f"Zarr, {LARGE_CHUNK:,}-row chunks", stores.zarr_large, write_zarr, LARGE_CHUNK),
        (f"Parquet, {LARGE_CHUNK:,}-row groups", stores.parquet, write_parquet, LARGE_CHUNK),
        (f"xarray to_zarr, {LARGE_CHUNK:,}-row chunks", stores.xarray, write_xarray, LARGE_CHUNK),
    ]
    for name, path, write, rows in writers:
        log(f"writing {label}: {name}")
        started = time.perf_counter()
        write(path, X, y, rows)
        seconds = time.perf_counter() - started
        print(f"- {label}, {name}: {seconds:.1f} s, {directory_mb(path):,.0f} MB on disk")
    return stores


# -- sources ----------------------------------------------------------------------------------


@dataclass
class Source:
    """One kind of source: what ``pmsg.Minibatch`` is given, and a gather without a buffer.

    ``gather(rows)`` reads the sorted rows ``rows`` of ``X`` and ``y`` straight from the
    storage with the library's own random access.
    """

    name: str
    inputs: tuple[Any, Any]
    gather: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

    def chunk_starts(self) -> np.ndarray:
        """Where the storage chunks of ``X`` start, then its rows."""
        return as_row_source(self.inputs[0]).chunk_starts


def zarr_source(name: str, path: str) -> Source:
    group = zarr.open_group(path, mode="r")
    X, y = group["X"], group["y"]
    return Source(name, (X, y), lambda rows: (X.oindex[rows], y.oindex[rows]))


def parquet_source(path: str, columns: int) -> Source:
    names = [f"x{j}" for j in range(columns)]
    dataset = pads.dataset(path, format="parquet")

    def gather(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        table = dataset.take(pa.array(rows), columns=[*names, "y"])
        X = np.stack([table.column(c).to_numpy() for c in names], axis=1)
        return X, table.column("y").to_numpy()

    inputs = (ParquetSource(path, names), ParquetSource(path, "y"))
    return Source(f"Parquet, {LARGE_CHUNK:,}-row groups", inputs, gather)


def xarray_source(path: str) -> Source:
    dataset = xr.open_zarr(path, chunks=None, consolidated=False)  # lazy, not Dask
    X, y = dataset["X"], dataset["y"]

    def gather(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return X.isel(row=rows).values, y.isel(row=rows).values

    return Source(f"xarray on Zarr, {LARGE_CHUNK:,}-row chunks", (X, y), gather)


def dask_source(path: str) -> Source:
    X, y = da.from_zarr(path, component="X"), da.from_zarr(path, component="y")

    def gather(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return dask.compute(X[rows], y[rows])

    return Source(f"Dask on Zarr, {LARGE_CHUNK:,}-row chunks", (X, y), gather)


def open_sources(stores: Stores, columns: int, small_chunks: bool = True) -> list[Source]:
    """The sources of ``stores``, the 10⁴-row Zarr layout only where ``small_chunks``."""
    small = [zarr_source(f"Zarr, {SMALL_CHUNK:,}-row chunks", stores.zarr_small)]
    return [
        *(small if small_chunks else []),
        zarr_source(f"Zarr, {LARGE_CHUNK:,}-row chunks", stores.zarr_large),
        parquet_source(stores.parquet, columns),
        xarray_source(stores.xarray),
        dask_source(stores.zarr_large),
    ]


def buffer_bytes_for(rows: int, row_bytes: int) -> int:
    """The default ``buffer_bytes`` from ``REFERENCE_ROWS`` rows on; below, scaled to ``rows``.

    Data that fit the buffer are read whole and drawn from as in RAM: the scaled buffer
    holds the share of the data that the default holds at ``REFERENCE_ROWS`` rows, and at
    least four chunks of 10⁵ rows (a buffer needs three).
    """
    if rows >= REFERENCE_ROWS:
        return DEFAULT_BUFFER_BYTES
    scaled = DEFAULT_BUFFER_BYTES * rows // REFERENCE_ROWS
    return int(max(scaled, 4 * LARGE_CHUNK * row_bytes))


# -- table 1: minibatch cost -----------------------------------------------------------------


def minibatch_buffer(inputs: tuple[Any, ...], **options: Any) -> ChunkBuffer:
    """The chunk buffer ``pmsg.Minibatch`` puts behind ``inputs``: the sampler's, dtypes included.

    Its :attr:`~pymc_sgmcmc.sources.ChunkBuffer.shared` variables hold the rows drawn from.
    """
    with pm.Model():
        batches = pmsg.Minibatch(*inputs, batch_size=1, **options)
    found = {id(b): b for v in graph_inputs(batches) if (b := buffer_of(v)) is not None}
    if len(found) != 1:
        raise RuntimeError(f"expected one chunk buffer behind pmsg.Minibatch, found {len(found)}")
    return next(iter(found.values()))


def held_dtypes(X: np.ndarray, y: np.ndarray) -> list[np.dtype]:
    """The dtypes ``pmsg.Minibatch``'s buffer holds out-of-core ``X`` and ``y`` in."""
    return minibatch_buffer((ArraySource(X[:1]), ArraySource(y[:1]))).dtypes


@dataclass
class MinibatchTiming:
    """Minibatches of one size from one source: time, reads and waits."""

    seconds_per_batch: float
    read_amplification: float | None = None
    seconds_waiting: float | None = None


def counts_since(before: BufferCounts, after: BufferCounts) -> BufferCounts:
    """What a buffer counted between two copies of its counts."""
    return BufferCounts(
        rows_drawn=after.rows_drawn - before.rows_drawn,
        rows_read=after.rows_read - before.rows_read,
        chunks_read=after.chunks_read - before.chunks_read,
        seconds_waiting=after.seconds_waiting - before.seconds_waiting,
    )


def ram_minibatches(
    X: np.ndarray, y: np.ndarray, batch: int, draws: int, rng: np.random.Generator
) -> MinibatchTiming:
    """``rng.integers`` and fancy indexing of both arrays in RAM, ``draws`` times."""
    started = time.perf_counter()
    for _ in range(draws):
        rows = rng.integers(0, len(X), size=batch)
        X[rows], y[rows]  # noqa: B018 - the gather is what is timed
    return MinibatchTiming((time.perf_counter() - started) / draws)


def buffered_minibatches(
    buffer: ChunkBuffer, batch: int, draws: int, rng: np.random.Generator
) -> MinibatchTiming:
    """Indices drawn from ``buffer`` and both arrays gathered, ``draws`` times."""
    before = copy.copy(buffer.counts)
    X, y = (shared.get_value(borrow=True) for shared in buffer.shared)
    started = time.perf_counter()
    for _ in range(draws):
        rows = buffer.draw(rng, batch)
        X[rows], y[rows]  # noqa: B018 - the gather is what is timed
    seconds = time.perf_counter() - started
    counts = counts_since(before, buffer.counts)
    return MinibatchTiming(seconds / draws, counts.read_amplification, counts.seconds_waiting)


def direct_gathers(
    source: Source, n_rows: int, repeats: int, rng: np.random.Generator
) -> MinibatchTiming:
    """``DIRECT_BATCH`` random rows (sorted) gathered from the storage, ``repeats`` times.

    The read amplification counts the rows of the storage chunks the rows fall in: a
    chunk is read whole to get one of its rows.
    """
    starts = source.chunk_starts()
    seconds, rows_read = [], 0
    for _ in range(repeats):
        rows = np.sort(rng.integers(0, n_rows, size=DIRECT_BATCH))
        started = time.perf_counter()
        source.gather(rows)
        seconds.append(time.perf_counter() - started)
        touched = np.unique(np.searchsorted(starts, rows, side="right") - 1)
        rows_read += int((starts[touched + 1] - starts[touched]).sum())
    return MinibatchTiming(float(np.median(seconds)), rows_read / (repeats * DIRECT_BATCH))


def check_gather(source: Source, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> None:
    """The direct gather returns the rows in RAM (a check of the benchmark itself)."""
    rows = np.sort(rng.integers(0, len(X), size=50))
    X_rows, y_rows = source.gather(rows)
    if not (np.array_equal(X_rows, X[rows]) and np.array_equal(y_rows, y[rows])):
        raise AssertionError(f"{source.name}: the direct gather differs from the rows in RAM")


@dataclass
class Fill:
    """A buffer's initial fill (excluded from the minibatch costs)."""

    name: str
    slots: int
    chunk_rows: int
    seconds: float
    megabytes: float


def minibatch_table(
    sources: list[Source], X: np.ndarray, y: np.ndarray, args: argparse.Namespace
) -> tuple[dict, list[Fill]]:
    """Timings by (batch size, source name), and the fills; RAM under the name ``RAM``."""
    y_ram = y.astype(LABEL_DTYPE)  # as pm.Minibatch holds it
    rng = np.random.default_rng(args.seed)
    # Enough rows drawn for args.refills refills of the largest chunks, many of the others.
    rows_drawn = args.refills * DEFAULT_REUSE * LARGE_CHUNK
    draws = {batch: max(int(rows_drawn // batch), 20) for batch in BATCH_SIZES}
    timings: dict = {}
    for batch in BATCH_SIZES:
        blocks = [ram_minibatches(X, y_ram, batch, draws[batch], rng) for _ in range(3)]
        timings[batch, "RAM"] = min(blocks, key=lambda t: t.seconds_per_batch)
    fills = []
    for source in sources:
        check_gather(source, X, y, rng)
        buffer = minibatch_buffer(source.inputs, buffer_bytes=args.buffer_bytes)
        log(f"table 1: {source.name}: filling {buffer.slots} slots")
        started = time.perf_counter()
        buffer.reset(rng)
        seconds = time.perf_counter() - started
        megabytes = buffer.counts.rows_read * buffer.row_bytes / 1e6
        fills.append(Fill(source.name, buffer.slots, buffer.slot_rows, seconds, megabytes))
        if buffer.whole:
            log(f"table 1: {source.name}: the data fit buffer_bytes, read whole")
        for batch in BATCH_SIZES:
            log(f"table 1: {source.name}: {draws[batch]:,} minibatches of {batch:,}")
            timings[batch, source.name] = buffered_minibatches(buffer, batch, draws[batch], rng)
        buffer.release()
        log(f"table 1: {source.name}: {args.direct_repeats} direct gathers")
        timings["direct", source.name] = direct_gathers(source, len(X), args.direct_repeats, rng)
    return timings, fills


def print_minibatch_table(sources: list[Source], timings: dict, fills: list[Fill]) -> None:
    rows = []
    for batch in BATCH_SIZES:
        ram = timings[batch, "RAM"].seconds_per_batch
        for name in ["RAM", *(s.name for s in sources)]:
            rows.append(minibatch_row(f"{batch:,}", name, timings[batch, name], ram))
    ram = timings[DIRECT_BATCH, "RAM"].seconds_per_batch
    for source in sources:
        name = f"{source.name}: direct gather, no buffer"
        rows.append(minibatch_row(f"{DIRECT_BATCH:,}", name, timings["direct", source.name], ram))
    header = [
        "B", "source", "ms / minibatch", "rows / s", "× RAM", "read amplification",
        "s waiting",
    ]  # fmt: skip
    print_markdown(header, rows)
    print("\nInitial fills (not in the costs above):\n")
    fill_rows = [
        [
            f.name, f"{f.slots} × {f.chunk_rows:,}", f"{f.seconds:.2f}", f"{f.megabytes:,.0f}",
            f"{f.megabytes / f.seconds:,.0f}",
        ]
        for f in fills
    ]  # fmt: skip
    print_markdown(["source", "slots × rows", "fill s", "MB", "MB/s"], fill_rows)


def minibatch_row(batch: str, name: str, timing: MinibatchTiming, ram: float) -> list[str]:
    seconds = timing.seconds_per_batch
    rows = int(batch.replace(",", ""))
    amplification = format_ratio(timing.read_amplification)
    waiting = "—" if timing.seconds_waiting is None else f"{timing.seconds_waiting:.3f}"
    return [
        batch, name, format_ms(seconds * 1e3), f"{rows / seconds:,.0f}", f"{seconds / ram:,.1f}",
        amplification, waiting,
    ]  # fmt: skip


def format_ratio(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}" if ratio < 100 else f"{ratio:,.0f}"


def format_ms(ms: float) -> str:
    return f"{ms:.3f}" if ms < 1 else f"{ms:,.1f}" if ms < 100 else f"{ms:,.0f}"


# -- table 2: sampler iterations per second --------------------------------------------------


def logistic_model(inputs: tuple[Any, Any], n_rows: int, columns: int, **minibatch) -> pm.Model:
    """``w ~ N(0, 10²)``, ``y ~ Bernoulli(σ(X w))``, minibatches of 1,000 rows."""
    with pm.Model() as model:
        X_batch, y_batch = pmsg.Minibatch(*inputs, batch_size=SAMPLER_BATCH, **minibatch)
        w = pm.Normal("w", 0.0, 10.0, shape=columns)
        pm.Bernoulli("y", logit_p=X_batch @ w, observed=y_batch, total_size=n_rows)
    return model


@dataclass
class SamplerTiming:
    """One step's set-up and one chain's draws."""

    name: str
    setup_seconds: float
    setup_passes: float
    sample_seconds: float
    draws_per_second: float
    counts: BufferCounts | None
    whole: bool = False


def sampler_row(name: str, model: pm.Model, n_rows: int, args: argparse.Namespace) -> SamplerTiming:
    """Build ``pmsg.SGHMC()`` on ``model`` and sample one chain, timing the draws after tuning."""
    log(f"table 2: {name}: set-up")
    started = time.perf_counter()
    with model:
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False})
    setup = time.perf_counter() - started
    buffer = step.data_passes.flat.groups[0].buffer
    before = None if buffer is None else copy.copy(buffer.counts)
    marks: dict[str, float] = {}

    def callback(trace: Any, draw: Any) -> None:
        if draw.draw_idx == args.tune - 1:
            marks["tuned"] = time.perf_counter()
        marks["last"] = time.perf_counter()

    log(f"table 2: {name}: sampling {args.tune} + {args.draws} draws")
    started = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains: diagnostics' warnings
        pm.sample(
            draws=args.draws, tune=args.tune, chains=1, cores=1, step=step, progressbar=False,
            compute_convergence_checks=False, random_seed=args.seed, callback=callback,
            quiet=True,
        )  # fmt: skip
    sample = time.perf_counter() - started
    counts = None if buffer is None else counts_since(before, buffer.counts)
    if buffer is not None:
        buffer.release()
    return SamplerTiming(
        name, setup, step.rows_touched_by_setup / n_rows, sample,
        args.draws / (marks["last"] - marks["tuned"]), counts, buffer is not None and buffer.whole,
    )  # fmt: skip


def sampler_table(
    stores: Stores, X: np.ndarray, y: np.ndarray, args: argparse.Namespace
) -> list[SamplerTiming]:
    n_rows, columns = X.shape
    buffer_bytes = buffer_bytes_for(n_rows, args.row_bytes)
    cases: list[tuple[str, tuple, dict]] = [("RAM (NumPy)", (X, y), {})]
    for source in open_sources(stores, columns, small_chunks=False):
        cases.append((source.name, source.inputs, {"buffer_bytes": buffer_bytes}))
    if buffer_bytes != DEFAULT_BUFFER_BYTES:
        zarr_default = open_sources(stores, columns, small_chunks=False)[0]
        cases.append((f"{zarr_default.name}, default buffer_bytes", zarr_default.inputs, {}))
    timings = []
    for name, inputs, minibatch in cases:
        model = logistic_model(inputs, n_rows, columns, **minibatch)
        timings.append(sampler_row(name, model, n_rows, args))
    return timings


def print_sampler_table(timings: list[SamplerTiming]) -> None:
    ram = timings[0].draws_per_second
    rows = []
    for t in timings:
        amplification = "—" if t.counts is None else f"{t.counts.read_amplification:.3f}"
        waiting = "—" if t.counts is None else f"{t.counts.seconds_waiting:.2f}"
        rows.append([
            t.name + (" (read whole)" if t.whole else ""), f"{t.setup_seconds:.1f}",
            f"{t.setup_passes:.1f}", f"{t.sample_seconds:.1f}", f"{t.draws_per_second:,.0f}",
            f"{t.draws_per_second / ram:.2f}", amplification, waiting,
        ])  # fmt: skip
    header = [
        "data", "set-up s", "set-up reads (× N)", "pm.sample s", "draws / s after tuning",
        "÷ RAM", "read amplification", "s waiting",
    ]  # fmt: skip
    print_markdown(header, rows)


# -- table 3: full-data pass -----------------------------------------------------------------


def data_passes(model: pm.Model) -> ModeFinder:
    """The full-data passes of a step on ``model``, built as the step builds them."""
    vars = model.continuous_value_vars
    flat = flat_logp(model, vars, model.initial_point())
    return ModeFinder(model, vars, flat, [g.n_rows() for g in flat.groups])


def seconds_per_call(function: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The best of ``repeats`` timed calls after one untimed (compiles, warms the cache)."""
    result = function()
    best = np.inf
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


@dataclass
class PassTiming:
    name: str
    seconds: float
    data_bytes: int
    logp: float
    gradient: np.ndarray


def time_pass(name: str, inputs: tuple, point: np.ndarray, repeats: int) -> PassTiming:
    """A full-data pass of the logistic model on ``inputs`` at ``point``, timed.

    The bytes read are those of the arrays as the pass holds them: ``pm.Minibatch``'s
    arrays in RAM, the buffer's dtypes out of core.
    """
    log(f"table 3: {name}")
    n_rows, columns = inputs[0].shape
    finder = data_passes(logistic_model(inputs, n_rows, columns))
    buffer = finder.flat.groups[0].buffer
    if buffer is None:
        data_bytes = inputs[0].nbytes + n_rows * LABEL_DTYPE.itemsize
    else:
        data_bytes = n_rows * buffer.row_bytes
    seconds, (logp, gradient) = seconds_per_call(lambda: finder.full_pass(point), repeats)
    return PassTiming(name, seconds, data_bytes, logp, gradient)


def full_pass_table(
    sources: list[Source], X: np.ndarray, y: np.ndarray, args: argparse.Namespace
) -> tuple[list[PassTiming], float]:
    """Passes in RAM (float32 and float64 features), then per source; ``X.sum`` seconds."""
    point = np.random.default_rng(args.seed).normal(size=X.shape[1])
    timings = [time_pass("RAM (NumPy)", (X, y), point, args.pass_repeats)]
    X64 = X.astype(np.float64)
    timings.append(time_pass("RAM, float64 features", (X64, y), point, args.pass_repeats))
    del X64
    for source in sources:
        timings.append(time_pass(source.name, source.inputs, point, args.pass_repeats))
    reduction, _ = seconds_per_call(lambda: X.sum(axis=0), 3)
    return timings, reduction


def relative_difference(timing: PassTiming, reference: PassTiming) -> float:
    """The largest relative difference of the log density and the gradient's elements."""
    logp = abs(timing.logp - reference.logp) / abs(reference.logp)
    gradient = np.abs(timing.gradient - reference.gradient) / np.abs(reference.gradient)
    return float(max(logp, gradient.max()))


def print_full_pass_table(timings: list[PassTiming], reduction: float, X: np.ndarray) -> None:
    ram = timings[0]
    rows = []
    for t in timings:
        difference = relative_difference(t, ram)
        rows.append([
            t.name, f"{t.seconds:.2f}", f"{t.data_bytes / t.seconds / 1e9:.2f}",
            f"{t.seconds / ram.seconds:.2f}", f"{difference:.1e}",
            "yes" if difference <= 1e-10 else "**no**",
        ])  # fmt: skip
    rows.append([
        "NumPy `X.sum(axis=0)` in RAM (yardstick)", f"{reduction:.3f}",
        f"{X.nbytes / reduction / 1e9:.2f}", f"{reduction / ram.seconds:.2f}", "—", "—",
    ])  # fmt: skip
    header = ["data", "pass s", "GB/s", "× RAM", "max rel. diff vs RAM", "≤ 1e-10"]
    print_markdown(header, rows)
    worst = max(relative_difference(t, ram) for t in timings)
    print(f"\nLargest relative difference from RAM (log density, gradient): {worst:.2e}.")


# -- report -----------------------------------------------------------------------------------


def print_markdown(header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table: the first column left-aligned, the others right-aligned."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join([":---", *["---:"] * (len(header) - 1)]) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def load_average() -> str:
    try:
        return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "load average unknown"


def environment() -> list[str]:
    cpu = cpu_name()
    return [
        f"CPU: {cpu}, {os.cpu_count()} logical cores; Python {platform.python_version()}; "
        f"{load_average()} at the start",
        f"NumPy {np.__version__}, Zarr {zarr.__version__}, pyarrow {pa.__version__}, "
        f"Dask {dask.__version__}, xarray {xr.__version__}, PyMC {pm.__version__}, "
        f"PyTensor {pytensor.__version__} (linker {pytensor.config.linker}), "
        f"pymc_sgmcmc {pmsg.__version__}",
    ]


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run")
    parser.add_argument("--rows", type=int, help="rows of tables 1 and 3 (10⁷; quick 10⁶)")
    parser.add_argument("--columns", type=int, default=16, help="float32 features")
    parser.add_argument("--sampler-rows", type=int, help="rows of table 2 (10⁶; quick 5·10⁵)")
    parser.add_argument("--dir", help="scratch directory, kept (default: a temp dir, removed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-cluster", action="store_true", help="skip table 4 (passes on Dask workers)"
    )
    args = parser.parse_args()
    quick = args.quick
    args.rows = args.rows or (1_000_000 if quick else REFERENCE_ROWS)
    args.sampler_rows = min(args.sampler_rows or (500_000 if quick else 1_000_000), args.rows)
    probe = np.zeros((1, args.columns), dtype=np.float32), np.zeros(1, dtype=np.int8)
    args.held = held_dtypes(*probe)  # what the buffer holds X and y in
    args.row_bytes = args.columns * args.held[0].itemsize + args.held[1].itemsize
    args.buffer_bytes = buffer_bytes_for(args.rows, args.row_bytes)
    args.refills = 3 if quick else 8  # of the 10⁵-row chunks, per batch size
    args.direct_repeats = 2 if quick else 3
    args.tune, args.draws = (50, 300) if quick else (200, 2_000)
    args.pass_repeats = 1 if quick else 2
    return args


def buffer_note(rows: int, row_bytes: int) -> str:
    """Which ``buffer_bytes`` a table of ``rows`` rows uses, and why."""
    buffer_bytes = buffer_bytes_for(rows, row_bytes)
    if buffer_bytes == DEFAULT_BUFFER_BYTES:
        return f"buffer_bytes {buffer_bytes / 2**20:.0f} MiB, the default"
    return (
        f"buffer_bytes {buffer_bytes / 2**20:.1f} MiB: the data ({rows * row_bytes / 1e6:,.0f} "
        f"MB) would fit the default {DEFAULT_BUFFER_BYTES / 2**20:.0f} MiB and be read whole "
        f"and drawn from as in RAM, so the buffer holds the share of the data that the default "
        f"holds at {REFERENCE_ROWS:,} rows, or four chunks of {LARGE_CHUNK:,} rows where that "
        "is more"
    )


def main() -> None:
    args = parse_arguments()
    directory = args.dir or tempfile.mkdtemp(prefix="pmsg-data-sources-")
    try:
        run(args, directory)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


def print_header(args: argparse.Namespace, directory: str) -> None:
    print("# Out-of-core data sources against NumPy in RAM\n")
    print(f"`{' '.join(['python', *sys.argv])}`\n")
    for line in environment():
        print(f"- {line}")
    print(
        f"- Data: {args.rows:,} rows × {args.columns} float32 features + an int8 label; "
        f"`pmsg.Minibatch`'s buffer holds them as {args.held[0]} and {args.held[1]}, "
        f"{args.row_bytes} B a row (`pm.Minibatch` in RAM: float32 and {LABEL_DTYPE}, "
        f"{args.columns * 4 + LABEL_DTYPE.itemsize} B); scratch directory {directory}\n"
    )


def report_minibatches(
    sources: list[Source], X: np.ndarray, y: np.ndarray, args: argparse.Namespace
) -> None:
    timings, fills = minibatch_table(sources, X, y, args)
    print(f"\n## 1. Minibatch cost ({args.rows:,} rows; {load_average()})\n")
    print(
        f"Per minibatch of B rows from a ChunkBuffer ({buffer_note(args.rows, args.row_bytes)}; "
        f"reuse {DEFAULT_REUSE:g}, the default): the draw of indices and the gather of X and y "
        "(RAM: `rng.integers` and fancy indexing), amortised over "
        f"{args.refills * DEFAULT_REUSE * LARGE_CHUNK:,.0f} rows drawn per B and source; "
        "× RAM is the ratio of the ms; s waiting: the draws' total wait for the background "
        f"read. The direct gathers are the median of {args.direct_repeats} gathers of sorted "
        "random rows; their read amplification counts the rows of the chunks touched.\n"
    )
    print_minibatch_table(sources, timings, fills)


def report_sampler(stores: Stores, X: np.ndarray, y: np.ndarray, args: argparse.Namespace) -> float:
    """Table 2; returns the set-up's reads in RAM, in passes over the data."""
    n = args.sampler_rows
    sampler = sampler_table(stores, X[:n], y[:n], args)
    print(f"\n## 2. Sampler iterations per second ({n:,} rows; {load_average()})\n")
    scaled = buffer_bytes_for(n, args.row_bytes) != DEFAULT_BUFFER_BYTES
    fewer = (
        f"{n:,} rows, not {args.rows:,}: the set-up reads the data "
        f"{sampler[0].setup_passes:.0f} times, at the speed of the full-data pass of table 3 "
        "(the estimate at its size follows it). "
        if n < args.rows
        else ""
    )
    print(
        f"{fewer}`pmsg.SGHMC()` (default arguments, progress bar off), one chain of "
        f"{args.tune} tuning + {args.draws:,} draws, batch {SAMPLER_BATCH:,}; sources with "
        f"{buffer_note(n, args.row_bytes)}"
        + (" (the last row: the default, read whole)" if scaled else "")
        + ". Set-up reads: `step.rows_touched_by_setup / N`; read amplification and waits "
        "are counted over `pm.sample` (the chain's initial fill included).\n"
    )
    print_sampler_table(sampler)
    return sampler[0].setup_passes


def report_full_passes(
    sources: list[Source],
    X: np.ndarray,
    y: np.ndarray,
    args: argparse.Namespace,
    setup_passes: float,
) -> None:
    passes, reduction = full_pass_table(sources, X, y, args)
    print(f"\n## 3. Full-data pass ({args.rows:,} rows; {load_average()})\n")
    print(
        "One `full_pass(x)` at a random x: log density and gradient on all rows (the best of "
        f"{args.pass_repeats} after one untimed pass). GB/s: the bytes of the arrays the pass "
        "reads, as it holds them (see the header), over the seconds.\n"
    )
    print_full_pass_table(passes, reduction, X)
    if args.sampler_rows < args.rows:
        fastest = min(p.seconds for p in passes[2:])
        print(
            f"\nA set-up reading the data {setup_passes:.1f} times (table 2, in RAM) would "
            f"spend about {setup_passes * passes[0].seconds:.0f} s in full-data passes at "
            f"{args.rows:,} rows in RAM and {setup_passes * fastest:.0f} s or more out of core."
        )


def cluster_pass_table(source: Source, point: np.ndarray, args: argparse.Namespace) -> list:
    """One source's full pass in the process and on Dask ``LocalCluster``s of 1, 2, ... workers.

    Each cluster's first pass ships the compiled function and the sources to its workers
    (linked there: a compile), so it is timed apart from the best of the later ones.
    """
    import distributed

    n_rows, columns = source.inputs[0].shape
    finder = data_passes(logistic_model(source.inputs, n_rows, columns))
    in_process, reference = seconds_per_call(lambda: finder.full_pass(point), args.pass_repeats)
    rows = [["in the process", "—", f"{in_process:.2f}", "1.00", "0"]]
    counts = sorted({1, 2, os.cpu_count() or 1})
    for workers in counts:
        log(f"table 4: {workers} Dask worker(s)")
        cluster = distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        with cluster, distributed.Client(cluster):
            started = time.perf_counter()
            finder.full_pass(point)
            first = time.perf_counter() - started
            best, result = seconds_per_call(lambda: finder.full_pass(point), args.pass_repeats)
        same = result[0] == reference[0] and np.array_equal(result[1], reference[1])
        rows.append([
            f"Dask LocalCluster, {workers} worker process(es)", f"{first:.2f}", f"{best:.2f}",
            f"{best / in_process:.2f}", "0" if same else "**differs**",
        ])  # fmt: skip
    return rows


def report_cluster_passes(sources: list[Source], args: argparse.Namespace) -> None:
    source = next(s for s in sources if s.name.startswith("Zarr, 100,000"))
    point = np.random.default_rng(args.seed).normal(size=source.inputs[0].shape[1])
    rows = cluster_pass_table(source, point, args)
    print(f"\n## 4. Full-data pass on Dask workers ({args.rows:,} rows; {load_average()})\n")
    print(
        f"{source.name}: one `full_pass(x)` in the sampling process, and on a Dask "
        "`LocalCluster` of worker processes (one thread each) with a `distributed.Client` "
        "active: one task per range of chunks, read and computed on the workers, summed in "
        "the process. The first pass on a cluster ships the compiled function and the sources "
        "(and links the function on each worker); the later ones are the best of "
        f"{args.pass_repeats}. Difference: from the in-process pass's log density and "
        "gradient (0: the same to the bit).\n"
    )
    header = ["where", "first pass s", "pass s", "× in process", "difference"]
    print_markdown(header, rows)


def run(args: argparse.Namespace, directory: str) -> None:
    print_header(args, directory)
    log(f"generating {args.rows:,} × {args.columns}")
    X, y = synthetic_table(args.rows, args.columns, args.seed)
    print("Writing (not in the tables):\n")
    stores = write_stores(os.path.join(directory, "full"), X, y, f"{args.rows:,} rows")
    sampler_stores = stores
    if args.sampler_rows < args.rows:
        n = args.sampler_rows
        sampler_stores = write_stores(
            os.path.join(directory, "sampler"), X[:n], y[:n], f"{n:,} rows"
        )
    sources = open_sources(stores, args.columns)
    report_minibatches(sources, X, y, args)
    setup_passes = report_sampler(sampler_stores, X, y, args)
    report_full_passes(sources, X, y, args, setup_passes)
    if not args.no_cluster:
        report_cluster_passes(sources, args)
    print(f"\nTotal {time.perf_counter() - STARTED:.0f} s; {load_average()} at the end.")


if __name__ == "__main__":
    main()
