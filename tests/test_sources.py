"""Out-of-core row sources and the chunk buffer minibatches are drawn from."""

import pickle

import numpy as np
import pytest

from pymc_sgmcmc.sources import (
    ArraySource,
    ChunkBuffer,
    DaskSource,
    ParquetSource,
    XarraySource,
    ZarrSource,
    as_row_source,
    write_shuffled,
)

zarr = pytest.importorskip("zarr")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
xr = pytest.importorskip("xarray")
da = pytest.importorskip("dask.array")

N_ROWS, N_COLUMNS, CHUNK = 1_050, 3, 100  # the last chunk is ragged (50 rows)


@pytest.fixture(scope="module")
def table() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(N_ROWS, N_COLUMNS)), rng.integers(0, 2, size=N_ROWS).astype("i1")


@pytest.fixture(scope="module")
def zarr_store(tmp_path_factory, table) -> str:
    X, y = table
    path = str(tmp_path_factory.mktemp("store") / "data.zarr")
    group = zarr.open_group(path, mode="w")
    group.create_array("X", shape=X.shape, chunks=(CHUNK, N_COLUMNS), dtype=X.dtype)[:] = X
    group.create_array("y", shape=y.shape, chunks=(CHUNK,), dtype=y.dtype)[:] = y
    return path


@pytest.fixture(scope="module")
def xarray_store(tmp_path_factory, table) -> str:
    X, y = table
    path = str(tmp_path_factory.mktemp("xarray") / "data.zarr")
    dataset = xr.Dataset({"X": (("row", "column"), X), "y": ("row", y)})
    dataset.to_zarr(
        path,
        consolidated=False,
        encoding={"X": {"chunks": (CHUNK, N_COLUMNS)}, "y": {"chunks": (CHUNK,)}},
    )
    return path


def _parquet(path, X: np.ndarray, y: np.ndarray, row_group_size: int) -> None:
    columns = {f"x{j}": X[:, j] for j in range(X.shape[1])} | {"y": y}
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)


def _read_by_chunks(source) -> np.ndarray:
    starts = source.chunk_starts
    return np.concatenate([source.read(a, b) for a, b in zip(starts[:-1], starts[1:], strict=True)])


def _sources(table, zarr_store, xarray_store, tmp_path) -> dict:
    X, y = table
    _parquet(tmp_path / "data.parquet", X, y, CHUNK)
    (tmp_path / "parts").mkdir()
    _parquet(tmp_path / "parts" / "a.parquet", X[:600], y[:600], 250)  # 250, 250, 100
    _parquet(tmp_path / "parts" / "b.parquet", X[600:], y[600:], 250)  # 250, 200
    opened = xr.open_zarr(xarray_store, chunks=None, consolidated=False)  # lazy, not Dask
    columns = [f"x{j}" for j in range(N_COLUMNS)]
    return {
        "zarr path": (ZarrSource(zarr_store, name="X"), X),
        "zarr array": (ZarrSource(zarr.open_array(zarr_store, path="X", mode="r")), X),
        "zarr integers": (ZarrSource(zarr.open_array(zarr_store, path="y", mode="r")), y),
        "parquet": (ParquetSource(tmp_path / "data.parquet", columns), X),
        "parquet column": (ParquetSource(tmp_path / "data.parquet", "y"), y),
        "parquet directory": (ParquetSource(tmp_path / "parts", columns), X),
        "xarray on zarr": (XarraySource(opened["X"]), X),
        "xarray on dask": (XarraySource(xr.open_zarr(xarray_store, consolidated=False)["X"]), X),
        "dask": (DaskSource(da.from_zarr(zarr_store, component="X")), X),
        "numpy": (ArraySource(X, CHUNK), X),
    }


def test_every_source_reads_back_the_array_it_holds(table, zarr_store, xarray_store, tmp_path):
    for name, (source, expected) in _sources(table, zarr_store, xarray_store, tmp_path).items():
        assert source.n_rows == N_ROWS, name
        assert source.shape == expected.shape, name
        np.testing.assert_array_equal(_read_by_chunks(source), expected, err_msg=name)
        # A range across chunk boundaries, and one inside a chunk.
        np.testing.assert_array_equal(source.read(95, 1_020), expected[95:1_020], err_msg=name)
        np.testing.assert_array_equal(source.read(3, 7), expected[3:7], err_msg=name)
        assert source.chunk_starts[0] == 0 and source.chunk_starts[-1] == N_ROWS, name


def test_an_xarray_source_reads_netcdf(tmp_path, table):
    X, _ = table
    path = tmp_path / "data.nc"
    xr.Dataset({"X": (("row", "column"), X)}).to_netcdf(path, engine="scipy")
    with xr.open_dataset(path, engine="scipy") as opened:
        source = XarraySource(opened["X"])
        assert isinstance(as_row_source(opened["X"]), XarraySource)  # not loaded yet
        np.testing.assert_array_equal(_read_by_chunks(source), X)
        np.testing.assert_array_equal(source.read(95, 1_020), X[95:1_020])
    # NetCDF3 has no chunks: one, unless opened with Dask chunks.
    assert list(source.chunk_starts) == [0, N_ROWS]
    with xr.open_dataset(path, engine="scipy", chunks={"row": CHUNK}) as opened:
        assert list(XarraySource(opened["X"]).chunk_starts) == [*range(0, N_ROWS, CHUNK), N_ROWS]


def test_chunks_are_the_storage_chunks(table, zarr_store, xarray_store, tmp_path):
    sources = _sources(table, zarr_store, xarray_store, tmp_path)
    regular = [*range(0, N_ROWS, CHUNK), N_ROWS]
    for name in ("zarr path", "parquet", "xarray on zarr", "xarray on dask", "dask", "numpy"):
        assert list(sources[name][0].chunk_starts) == regular, name
    assert list(sources["parquet directory"][0].chunk_starts) == [0, 250, 500, 600, 850, N_ROWS]


def test_sources_pickle_as_references_not_data(table, zarr_store, xarray_store, tmp_path):
    sources = _sources(table, zarr_store, xarray_store, tmp_path)
    for name in ("zarr path", "zarr array", "parquet", "parquet directory", "xarray on zarr"):
        source, expected = sources[name]
        dumped = pickle.dumps(source)
        assert len(dumped) < 5_000 < expected.nbytes / 5, name
        np.testing.assert_array_equal(_read_by_chunks(pickle.loads(dumped)), expected)


def test_as_row_source_wraps_out_of_core_arrays_only(zarr_store, xarray_store, table):
    assert isinstance(as_row_source(zarr.open_array(zarr_store, path="X")), ZarrSource)
    assert isinstance(as_row_source(da.zeros((10, 2), chunks=5)), DaskSource)
    assert isinstance(
        as_row_source(xr.open_zarr(xarray_store, chunks=None, consolidated=False)["X"]),
        XarraySource,
    )
    assert as_row_source(table[0]) is None
    assert as_row_source(xr.DataArray(table[0])) is None  # already in memory


def test_bad_sources_are_refused_with_the_fix(tmp_path, zarr_store, xarray_store, table):
    with pytest.raises(FileNotFoundError, match="no Zarr store"):
        ZarrSource(tmp_path / "missing.zarr")
    with pytest.raises(ValueError, match=r"name the one to read.*name='X'"):
        ZarrSource(zarr_store)
    with pytest.raises(FileNotFoundError, match="no Parquet file"):
        ParquetSource(tmp_path / "missing.parquet", "y")
    pq.write_table(pa.table({"label": ["a", "b"], "y": [1.0, 2.0]}), tmp_path / "t.parquet")
    with pytest.raises(TypeError, match=r"columns \['label'\].*not numeric"):
        ParquetSource(tmp_path / "t.parquet", ["label", "y"])
    with pytest.raises(ValueError, match=r"has no column \['z'\]"):
        ParquetSource(tmp_path / "t.parquet", "z")
    with pytest.raises(TypeError, match=r"got a Dataset of .*: pass dataset\["):
        XarraySource(xr.open_zarr(xarray_store, chunks=None, consolidated=False))
    labels = zarr.create_array(str(tmp_path / "s.zarr"), shape=(3,), dtype=str)
    with pytest.raises(TypeError, match=r"holds .*String.* values; a minibatch needs numbers"):
        ZarrSource(labels)
    with pytest.raises(TypeError, match="a minibatch needs numbers"):
        DaskSource(da.from_array(np.array(["a", "b"], dtype=object), chunks=1))
    X, _ = table
    with pytest.raises(ValueError, match="same number of rows"):
        ChunkBuffer([ArraySource(X), ArraySource(X[:-1])])
    with pytest.raises(ValueError, match=r"Raise buffer_bytes to at least \d+, or store"):
        ChunkBuffer([ArraySource(X, 500)], buffer_bytes=2 * 500 * X[0].nbytes)


class _Shared:
    """Stands for a shared variable: the buffer sets the array its graph reads."""

    def set_value(self, value, borrow):
        self.value = value


def _bound(sources, **options) -> tuple[ChunkBuffer, list[_Shared]]:
    buffer = ChunkBuffer(sources, **options)
    shared = [_Shared() for _ in sources]
    buffer.bind(shared)
    return buffer, shared


# Chunks of very unequal length, each with its own rows: a buffer that chose chunks
# without regard to their length would over-weight the short ones.
LENGTHS = [7, 300, 40, 400, 13, 500, 240, 350, 90, 60]


def _unequal_chunks() -> tuple[np.ndarray, ArraySource]:
    rng = np.random.default_rng(1)
    parts = [rng.normal(loc=k * (-1) ** k, size=(n, 2)) for k, n in enumerate(LENGTHS)]
    X = np.concatenate(parts)

    class UnequalChunks(ArraySource):
        def __init__(self, array):
            super().__init__(array)
            self.chunk_starts = np.concatenate([[0], np.cumsum(LENGTHS)])

    return X, UnequalChunks(X)


def _logistic_gradient(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    # The likelihood's gradient of a logistic regression with y = 1, row by row.
    return X / (1.0 + np.exp(X @ w))[:, None]


def _mean_minibatch_gradient(buffer, shared, X, rng, n_batches, batch) -> np.ndarray:
    w = np.array([0.3, -0.2])
    total = np.zeros(2)
    for _ in range(n_batches):
        rows = shared[0].value[buffer.draw(rng, batch)]
        total += len(X) * _logistic_gradient(rows, w).mean(axis=0)
    return total / n_batches


def _z_scores(make_buffer, replicates: int = 60) -> np.ndarray:
    """Each coordinate's (mean estimate - full gradient) / its Monte Carlo standard error.

    Replicates are independent chains of minibatches (a buffer filled afresh from its
    own seed); within one, successive minibatches share chunks, so only the
    replicates' spread measures the error honestly.
    """
    X, source = _unequal_chunks()
    exact = len(X) * _logistic_gradient(X, np.array([0.3, -0.2])).mean(axis=0)
    estimates = []
    for seed in range(replicates):
        buffer, shared = make_buffer(source)
        rng = np.random.default_rng(seed)
        buffer.reset(rng)
        estimates.append(_mean_minibatch_gradient(buffer, shared, X, rng, 400, 50))
    estimates = np.array(estimates)
    error = estimates.std(axis=0, ddof=1) / np.sqrt(replicates)
    return (estimates.mean(axis=0) - exact) / error


def _small_buffer(source, **options):
    # Three slots of 500 rows (one being read), less than the 2,000 rows: two chunks
    # drawn from at a time.
    return _bound([source], buffer_bytes=3 * 500 * 16, reuse=1.0, **options)


def test_buffered_minibatch_gradients_average_to_the_full_data_gradient():
    z = _z_scores(_small_buffer)
    assert np.all(np.abs(z) < 4.0), z


def test_the_gradient_test_fails_a_buffer_that_ignores_chunk_lengths(monkeypatch):
    # The test above has the power to see the bias of choosing chunks uniformly.
    def uniform(self, rng, size):
        return rng.integers(0, len(self.chunk_lengths), size=size)

    monkeypatch.setattr(ChunkBuffer, "_choose_chunks", uniform)
    z = _z_scores(_small_buffer)
    assert np.max(np.abs(z)) > 8.0, z


def test_a_buffer_reads_what_reuse_says_and_refills_from_the_seed_alone():
    X, source = _unequal_chunks()
    runs = []
    for prefetch in (True, False):
        buffer, shared = _small_buffer(source, prefetch=prefetch)
        assert not buffer.whole and buffer.slots == 2
        rng = np.random.default_rng(3)
        buffer.reset(rng)
        rows = [shared[0].value[buffer.draw(rng, 50)].copy() for _ in range(400)]
        runs.append(np.concatenate(rows))
        # One chunk read per reuse x (mean chunk length) rows drawn, the first fill aside.
        refills = buffer.counts.chunks_read - buffer.slots - 1
        assert refills == pytest.approx(20_000 / buffer.rows_per_refill, abs=1)
    np.testing.assert_array_equal(runs[0], runs[1])  # thread or not, the same rows


def test_data_that_fit_are_read_once_and_drawn_as_pm_minibatch_draws():
    X, source = _unequal_chunks()
    buffer, shared = _bound([source])
    assert buffer.whole
    buffer.reset(np.random.default_rng(5))
    np.testing.assert_array_equal(shared[0].value, X)
    drawn = buffer.draw(np.random.default_rng(7), (3, 10))
    np.testing.assert_array_equal(drawn, np.random.default_rng(7).integers(0, len(X), (3, 10)))


def test_a_released_buffer_rests_on_its_first_rows_and_pickles_small(zarr_store, table):
    X, _ = table
    source = ZarrSource(zarr_store, name="X")
    buffer, shared = _bound([source], buffer_bytes=5 * CHUNK * X[0].nbytes, resting_rows=5)
    buffer.reset(np.random.default_rng(0))
    assert shared[0].value.shape[0] == 5 * CHUNK
    buffer.release()
    np.testing.assert_array_equal(shared[0].value, X[:5])
    dumped = pickle.dumps(buffer)
    assert len(dumped) < 5_000 < X.nbytes / 5  # the source travels as a path
    copy = pickle.loads(dumped)
    rows = []
    for b in (buffer, copy):
        rng = np.random.default_rng(1)
        b.reset(rng)
        rows.append([b.shared[0].value[b.draw(rng, 30)].copy() for _ in range(100)])
    np.testing.assert_array_equal(rows[0], rows[1])


def test_a_shuffled_copy_keeps_rows_together_in_a_random_order_from_its_seed(tmp_path):
    X = np.arange(30_000.0).reshape(10_000, 3)
    labels = np.arange(10_000)
    copies = [
        write_shuffled(
            {"X": X, "label": labels},
            tmp_path / f"{k}.zarr",
            chunk_rows=1_000,
            seed=seed,
            memory_bytes=100_000,  # ~10 buckets through the temporary store
        )  # fmt: skip
        for k, seed in enumerate((1, 1, 2))
    ]
    X_copy, order = copies[0]["X"][:], copies[0]["label"][:]
    assert copies[0]["X"].chunks == (1_000, 3)
    np.testing.assert_array_equal(X_copy, X[order])  # each row whole
    np.testing.assert_array_equal(np.sort(order), labels)  # every row once
    np.testing.assert_array_equal(copies[1]["label"][:], order)  # the seed's order
    assert not np.array_equal(copies[2]["label"][:], order)
    # Where a row lands does not depend on where it was: rank correlation ~ N(0, 1/N).
    assert abs(np.corrcoef(order, labels)[0, 1]) < 4 / np.sqrt(len(labels))
    # Each output chunk is a random sample: its mean label is near the overall mean.
    chunk_means = order.reshape(10, 1_000).mean(axis=1)
    assert np.all(np.abs(chunk_means - labels.mean()) < 5 * labels.std() / np.sqrt(1_000))
    assert not (tmp_path / "0.zarr.buckets").exists()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_shuffled({"X": X}, tmp_path / "0.zarr")
