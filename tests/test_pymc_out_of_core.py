"""Models on out-of-core data (``pmsg.Minibatch`` of Zarr arrays) sampled as in RAM."""

import pickle
import time

import arviz as az
import cloudpickle
import dask
import numpy as np
import pymc as pm
import pytest
from helpers import draws_of, sample

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.gradients import full_data
from pymc_sgmcmc.sampling import row_windows
from pymc_sgmcmc.sampling.mode import ModeFinder
from pymc_sgmcmc.sampling.model_graph import flat_logp

zarr = pytest.importorskip("zarr")

ROWS, COLUMNS, CHUNK, BATCH = 100_000, 5, 10_000, 500
ROW_BYTES = (COLUMNS + 1) * 8
SMALL_BUFFER = 4 * CHUNK * ROW_BYTES  # three chunks drawn from, one being read


def _write(path, X: np.ndarray, y: np.ndarray, chunk: int = CHUNK):
    group = zarr.open_group(str(path), mode="w")
    group.create_array("X", shape=X.shape, chunks=(chunk, X.shape[1]), dtype=X.dtype)[:] = X
    group.create_array("y", shape=y.shape, chunks=(chunk,), dtype=y.dtype)[:] = y
    return group["X"], group["y"]


def _data(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, COLUMNS))
    w = np.array([0.5, -1.0, 0.25, 1.5, 0.0])
    y = (rng.random(rows) < 1 / (1 + np.exp(-X @ w))).astype("i1")  # integers on disk
    return X, y


@pytest.fixture(scope="module")
def table():
    return _data(ROWS)


@pytest.fixture(scope="module")
def on_disk(tmp_path_factory, table):
    return _write(tmp_path_factory.mktemp("zarr") / "lr.zarr", *table)


def _model(X, y, rows: int = ROWS, **minibatch) -> pm.Model:
    with pm.Model() as model:
        X_batch, y_batch = pmsg.Minibatch(X, y, batch_size=BATCH, **minibatch)
        w = pm.Normal("w", 0.0, 10.0, shape=COLUMNS)
        pm.Bernoulli("y", logit_p=X_batch @ w, observed=y_batch, total_size=rows)
    return model


def _passes(model: pm.Model) -> ModeFinder:
    vars = model.continuous_value_vars
    flat = flat_logp(model, vars, model.initial_point())
    # Chunks of a pass cut inside the storage chunks as little as they can.
    return ModeFinder(model, vars, flat, [g.n_rows() for g in flat.groups], chunk_rows=25_000)


def _assert_equal_to_ram(in_ram: ModeFinder, logp: float, gradient, point) -> None:
    ram_logp, ram_gradient = in_ram.full_pass(point)
    assert logp == pytest.approx(ram_logp, rel=1e-10)
    np.testing.assert_allclose(gradient, ram_gradient, rtol=1e-10)


def test_full_data_passes_from_zarr_equal_those_in_ram(table, on_disk):
    in_ram = _passes(_model(*table))
    out_of_core = _passes(_model(*on_disk, buffer_bytes=SMALL_BUFFER))
    assert out_of_core.flat.groups[0].buffer is not None
    assert out_of_core.full.n_chunks == 4
    for seed in range(3):
        point = np.random.default_rng(seed).normal(size=COLUMNS)
        _assert_equal_to_ram(in_ram, *out_of_core.full_pass(point), point)


def test_full_passes_from_dask_arrays_on_the_synchronous_scheduler(table, on_disk):
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    in_ram = _passes(_model(*table))
    X, y = (da.from_zarr(array) for array in on_disk)
    with dask.config.set(scheduler="synchronous"):
        from_dask = _passes(_model(X, y, buffer_bytes=SMALL_BUFFER))
        assert from_dask.flat.groups[0].buffer is not None
        point = np.random.default_rng(5).normal(size=COLUMNS)
        logp, gradient = from_dask.full_pass(point)
    _assert_equal_to_ram(in_ram, logp, gradient, point)


def test_full_passes_on_a_dask_cluster_equal_those_in_ram(table, on_disk):
    distributed = pytest.importorskip("distributed")
    in_ram = _passes(_model(*table))
    out_of_core = _passes(_model(*on_disk, buffer_bytes=SMALL_BUFFER))
    points = [np.random.default_rng(seed).normal(size=COLUMNS) for seed in range(3)]
    in_process = [out_of_core.full_pass(point) for point in points]
    # Dask's memory manager drops a broadcast's extra replicas once no task waits on
    # them; run it every 50 ms (2 s by default) so that it does so between the passes.
    with dask.config.set({"distributed.scheduler.active-memory-manager.interval": "50ms"}):
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )

    def scattered(client) -> list:
        return [key for key in client.who_has() if key.startswith("ChunkEvaluator")]

    def linked(client) -> dict:
        return client.run(lambda: full_data.LINKED_EVALUATORS.links)

    with cluster, distributed.Client(cluster) as client:
        on_cluster, holders = [], []
        for point in points:
            on_cluster.append(out_of_core.full_pass(point))
            deadline = time.monotonic() + 10
            while len(client.who_has()[scattered(client)[0]]) > 1:
                assert time.monotonic() < deadline, "the memory manager kept both replicas"
                time.sleep(0.05)
            holders.append(client.who_has()[scattered(client)[0]])
        # The evaluator was scattered once for all the passes; its replicas were dropped
        # and sent again, and each worker linked the function once all the same.
        assert len(scattered(client)) == 1
        assert linked(client) == dict.fromkeys(client.scheduler_info()["workers"], 1)
        # client=False keeps a model's passes in the process, whatever client is active.
        _passes(_model(*on_disk, buffer_bytes=SMALL_BUFFER, client=False)).full_pass(points[0])
        assert len(scattered(client)) == 1
        # A client given to pmsg.Minibatch is used without being the active one.
        with distributed.Client(cluster, set_as_default=False) as other:
            given = _passes(_model(*on_disk, buffer_bytes=SMALL_BUFFER, client=other))
            assert given.full_pass(points[0])[0] == in_process[0][0]
            assert set(given.full._shipped) == {other.id}  # shipped through it, not `client`
    for point, (logp, gradient), cluster_pass in zip(points, in_process, on_cluster, strict=True):
        _assert_equal_to_ram(in_ram, *cluster_pass, point)
        # Chunk by chunk, summed in chunk order as in-process: the same to the bit.
        assert cluster_pass[0] == logp
        np.testing.assert_array_equal(cluster_pass[1], gradient)


def test_an_evaluator_sent_again_is_not_unpickled_again_and_may_hold_a_local_function():
    # What a Dask worker receives each time the memory manager has dropped its copy.
    local_source = [lambda start, stop: np.arange(start, stop)]  # e.g. a map_blocks function
    evaluator = full_data.ChunkEvaluator(None, [(local_source, [np.float64])])
    sent = pickle.dumps(evaluator)
    links = full_data.LINKED_EVALUATORS.links
    first, again = pickle.loads(sent), pickle.loads(sent)
    assert again is first and full_data.LINKED_EVALUATORS.links == links + 1
    assert list(first.groups[0][0][0](2, 5)) == [2, 3, 4]
    # Another evaluator is another entry.
    other = pickle.loads(pickle.dumps(full_data.ChunkEvaluator(None, [([], [])])))
    assert other is not first and full_data.LINKED_EVALUATORS.links == links + 2


def _sgcv(model, **kwargs):
    with model:
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False, "random_seed": 1})
    return step, sample(step, model, draws=1_000, tune=1_000, chains=2, **kwargs)


@pytest.fixture(scope="module")
def in_ram_run(table):
    """SGHMC with control variates on the data in RAM: the reference runs compare with."""
    return _sgcv(_model(*table))[1]


def test_sghmc_on_zarr_agrees_with_sghmc_in_ram(on_disk, in_ram_run):
    model = _model(*on_disk, buffer_bytes=SMALL_BUFFER)
    step, from_zarr = _sgcv(model)
    buffer = step._flat.groups[0].buffer
    assert not buffer.whole and buffer.slots == 3
    assert buffer.counts.chunks_read > 100  # the buffer turned over many times
    summaries = [az.summary(d, var_names=["w"], kind="all") for d in (from_zarr, in_ram_run)]
    (zarr_mean, ram_mean), (zarr_sd, ram_sd) = (
        [s[column].to_numpy() for s in summaries] for column in ("mean", "sd")
    )
    ess = [s["ess_bulk"].to_numpy() for s in summaries]
    # Monte Carlo errors of the two runs' means and sds (the sd's relative error of
    # an estimate from ESS draws is about 1/sqrt(2 ESS)).
    mean_error = np.sqrt(zarr_sd**2 / ess[0] + ram_sd**2 / ess[1])
    assert np.all(np.abs(zarr_mean - ram_mean) < 4 * mean_error), (zarr_mean, ram_mean)
    ratio_error = np.sqrt(1 / (2 * ess[0]) + 1 / (2 * ess[1]))
    assert np.all(np.abs(zarr_sd / ram_sd - 1) < 4 * ratio_error), (zarr_sd, ram_sd)


def test_the_same_seed_gives_the_same_draws_from_zarr(on_disk):
    # One model: two compilations of one graph may round 1e-14 apart (one compiled
    # afresh, one loaded from the on-disk cache), and chains then drift apart.
    model = _model(*on_disk, buffer_bytes=SMALL_BUFFER)
    runs = []
    for _ in range(2):
        with model:
            step = pmsg.SGHMC(mode_kwargs={"progressbar": False, "random_seed": 1})
        runs.append(draws_of(sample(step, model, draws=100, tune=100, chains=2), "w"))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_data_that_fit_the_buffer_give_the_draws_of_data_in_ram(table, on_disk, monkeypatch):
    # Data in RAM drawn as pm.Minibatch draws: without the shuffled copy that data of
    # 1 MiB or more are read from in windows (tests/test_row_windows.py).
    monkeypatch.setattr(row_windows, "MEMORY_SHARE", 0.0)
    runs = []
    for data in (on_disk, table):
        model = _model(*data)  # 4.8 MB: read whole, drawn as pm.Minibatch draws
        with model:
            step = pmsg.SGHMC(mode_kwargs={"progressbar": False, "random_seed": 1})
        runs.append(draws_of(sample(step, model, draws=50, tune=50), "w"))
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-12, atol=1e-12)


def test_a_step_on_zarr_pickles_small_whatever_the_data_size(tmp_path):
    sizes = []
    for rows in (20_000, 200_000):
        X, y = _write(tmp_path / f"{rows}.zarr", *_data(rows), chunk=5_000)
        model = _model(X, y, rows=rows, buffer_bytes=6 * 5_000 * ROW_BYTES)
        with model:
            step = pmsg.SGHMC(mode_kwargs={"progressbar": False, "random_seed": 1})
        sizes.append(len(cloudpickle.dumps(step)))  # as pm.sample(cores>1) sends it
    # The data are 0.96 and 9.6 MB; a step in RAM pickles with them (and from 1 MiB with
    # their shuffled copy): 2.5 and 19.8 MB measured before the copy.
    assert max(sizes) < 1_000_000
    assert abs(sizes[1] - sizes[0]) < 50_000, sizes


def test_chains_in_worker_processes_read_the_zarr_store(on_disk, in_ram_run):
    model = _model(*on_disk, buffer_bytes=SMALL_BUFFER)
    with model:
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False, "random_seed": 1})
    idata = sample(step, model, draws=200, tune=200, chains=2, cores=2)
    w = draws_of(idata, "w")
    assert np.all(np.isfinite(w))
    expected = draws_of(in_ram_run, "w").reshape(-1, COLUMNS)
    # Each chain near the posterior (its sds are ~0.01; 200 draws).
    for chain in w:
        assert np.all(np.abs(chain.mean(axis=0) - expected.mean(axis=0)) < 6 * expected.std(0))


def test_samplers_that_read_all_rows_in_a_trajectory_are_refused(on_disk):
    model = _model(*on_disk, buffer_bytes=SMALL_BUFFER)
    with model, pytest.raises(ValueError, match=r"HMC evaluates the exact log density.*SGHMC"):
        pmsg.HMC()


def test_non_finite_rows_on_disk_are_refused_before_sampling(tmp_path):
    X, y = _data(2_000)
    X[[17, 1_500], 2] = np.nan
    on_disk = _write(tmp_path / "nan.zarr", X, y, chunk=300)
    model = _model(*on_disk, rows=2_000, buffer_bytes=3 * 300 * ROW_BYTES)
    with model, pytest.raises(ValueError, match=r"2 of 2000 rows .*\(rows 17, 1500\)"):
        pmsg.SGHMC()


def test_arrays_of_one_minibatch_must_have_the_same_rows(tmp_path):
    X, y = _data(2_000)
    X_zarr, _ = _write(tmp_path / "a.zarr", X, y)
    with pm.Model(), pytest.raises(ValueError, match="same number of rows"):
        pmsg.Minibatch(X_zarr, y[:-1], batch_size=10)
