"""The model's data reach PyMC's "forkserver"/"spawn" workers through shared memory."""

import gc
import pickle
from multiprocessing import shared_memory

import cloudpickle
import numpy as np
import pymc as pm
import pymc.sampling.parallel
import pytest
from helpers import draws_of, sample

import pymc_sgmcmc as pmsg
from pymc_sgmcmc.sampling import worker_data
from pymc_sgmcmc.sampling.worker_data import SharedArray, share_data_with_workers, to_shared

ROWS = 300_000  # 2.4 MB of float64: above worker_data.MIN_SHARED_BYTES


def test_a_shared_array_pickles_its_data_outside_pymc_workers():
    values = np.random.default_rng(0).normal(size=ROWS)
    shared = to_shared(values)
    pickled = pickle.dumps(shared)
    assert len(pickled) > values.nbytes
    copy = pickle.loads(pickled)
    assert type(copy) is np.ndarray
    np.testing.assert_array_equal(copy, values)


def test_for_pymc_workers_a_shared_array_travels_as_its_segments_name(monkeypatch):
    values = np.random.default_rng(1).normal(size=ROWS)
    shared = to_shared(values)
    monkeypatch.setattr(worker_data, "pickled_for_pymc_workers", lambda: True)
    pickled = pickle.dumps(shared)
    assert len(pickled) < 1_000
    attached = pickle.loads(pickled)
    assert isinstance(attached, SharedArray)
    np.testing.assert_array_equal(attached, values)
    shared[7] = 123.0  # one memory: a write through either array shows in the other
    assert attached[7] == 123.0
    # A view of part of it is pickled with its data: only whole segments go by name.
    assert len(pickle.dumps(shared[10:])) > shared[10:].nbytes


def test_the_segment_is_removed_when_the_array_that_made_it_is_collected():
    shared = to_shared(np.ones(ROWS))
    name = shared._segment.name
    del shared
    gc.collect()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)


def _model(rows):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        batch = pm.Minibatch(rows, batch_size=100)
        pm.Normal("obs", mu, 1.0, observed=batch, total_size=rows.size)
    return model


def test_without_room_in_shared_memory_the_data_stay_where_they_are(monkeypatch):
    rows = np.random.default_rng(2).normal(size=ROWS)
    with _model(rows):
        step = pmsg.SGHMC(step_size=0.01, n_steps=5)
    monkeypatch.setattr(worker_data, "room_for", lambda n_bytes: False)
    assert share_data_with_workers(step.__dict__) == 0
    assert not any(isinstance(a, SharedArray) for _, a in worker_data.data_holders(step.__dict__))


def test_pymc_sends_its_workers_the_data_by_name_and_they_draw_what_one_process_draws(
    monkeypatch,
):
    rows = np.random.default_rng(3).normal(loc=1.5, size=ROWS)
    model = _model(rows)
    with model:
        step = pmsg.SGHMC()
    sequential = sample(step, model, draws=20, tune=5, chains=2, random_seed=9)
    sent = []
    dumps = cloudpickle.dumps

    def recording_dumps(obj, *args, **kwargs):
        pickled = dumps(obj, *args, **kwargs)
        sent.append(len(pickled))
        return pickled

    monkeypatch.setattr(pymc.sampling.parallel.cloudpickle, "dumps", recording_dumps)
    parallel = sample(
        step, model, draws=20, tune=5, chains=2, cores=2, random_seed=9, mp_ctx="forkserver"
    )
    assert sent and sent[0] < rows.nbytes / 4  # without the data: PyMC's call was found
    np.testing.assert_array_equal(draws_of(parallel, "mu"), draws_of(sequential, "mu"))
    # The parent now reads the same values from shared memory, and still samples.
    holders = worker_data.data_holders(step.__dict__)
    assert holders and all(isinstance(a, SharedArray) for _, a in holders)
    again = sample(step, model, draws=20, tune=5, chains=2, random_seed=9)
    np.testing.assert_array_equal(draws_of(again, "mu"), draws_of(sequential, "mu"))
