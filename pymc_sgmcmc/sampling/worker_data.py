"""The model's data in shared memory for the worker processes of ``pm.sample(cores > 1)``.

With the "forkserver" or "spawn" start method (PyMC's default on Intel macOS, Python's
on Linux from 3.14), PyMC pickles the step method once and sends the bytes to each worker
process, which unpickles them: every worker held its own copy of the data, and every
copy went through a pipe (about a second per 170 MB, one worker after the other). Here
the step, when PyMC pickles it for its workers, first moves each large array that its
graphs read (a constant's data, a shared variable's value) into a shared-memory segment,
and the array is pickled as the segment's name: each worker maps the same memory.

A pickle made anywhere else (a user's ``pickle.dump``, a Dask worker on another machine)
still carries the data: a segment's name means nothing outside this machine and after
this process. PyMC offers no hook that tells a pickle for its workers from any other, so
:func:`pickled_for_pymc_workers` looks for PyMC's call on the stack; if PyMC moves that
call, the data are copied to each worker as before (a test watches the pickle's size).
With "fork" nothing is pickled and the workers share the parent's pages already.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import shutil
import sys
import weakref
from multiprocessing import shared_memory
from typing import Any

import cloudpickle
import numpy as np
from pytensor.graph.basic import Constant
from pytensor.link.basic import Container

_log = logging.getLogger("pymc_sgmcmc")

MIN_SHARED_BYTES = 1 << 20
"""Arrays smaller than this are pickled with the step: a segment each is not worth it."""

SHARED_MEMORY_DIRECTORY = "/dev/shm"
"""Where Linux keeps shared-memory segments: a filesystem of limited size (64 MB in a
default Docker container), checked before a segment is made, since writing past its end
kills the process (SIGBUS) instead of raising."""

ROOM_MARGIN = 1.1
"""Free space asked of :data:`SHARED_MEMORY_DIRECTORY`, as a multiple of the data."""


class _Segment(shared_memory.SharedMemory):
    """A shared-memory segment whose arrays may outlive the object's close.

    ``SharedMemory.close`` raises ``BufferError`` while an array still views its buffer,
    which happens when an array and its segment are collected together (a segment is
    kept as an attribute of the array it backs); the mapping is then released with the
    last view. The creating process unlinks the segment when its array is collected.
    """

    _creator: int | None = None  # the process that made the segment and unlinks it

    def release(self) -> None:
        """Unlink the segment if this process made it (a forked child did not)."""
        if self._creator == os.getpid():
            self._creator = None
            try:
                self.unlink()
            except FileNotFoundError:
                pass

    def __del__(self) -> None:
        self.release()
        try:
            self.close()
        except BufferError:
            pass


_MADE: weakref.WeakSet[_Segment] = weakref.WeakSet()
"""The segments this process made and has not released."""


@atexit.register
def _release_made_segments() -> None:
    # Arrays still alive at exit are not collected; unlinked here, their segments are
    # not reported as leaked by multiprocessing's resource tracker.
    for segment in list(_MADE):
        segment.release()


class SharedArray(np.ndarray):
    """An array held in a shared-memory segment.

    Pickled by the segment's name for PyMC's worker processes, by its data for any other
    pickle.
    """

    _segment: _Segment | None = None
    """Set on the segment's whole array only: a view (a slice, a reshape) is a new object
    without it, and is pickled with its data."""

    def __reduce_ex__(self, protocol: int) -> Any:
        segment = self._segment
        if segment is not None and pickled_for_pymc_workers():
            return (_attach, (segment.name, self.shape, self.dtype.str))
        return np.asarray(self).__reduce_ex__(protocol)


def _attach(name: str, shape: tuple[int, ...], dtype: str) -> SharedArray:
    """In a worker: the array of the segment called ``name``, without copying it."""
    segment = _Segment(name=name)
    array = np.ndarray(shape, dtype=dtype, buffer=segment.buf).view(SharedArray)
    array._segment = segment
    return array


def to_shared(array: np.ndarray) -> SharedArray:
    """A copy of ``array`` in a new segment, unlinked when the copy is collected."""
    segment = _Segment(create=True, size=max(array.nbytes, 1))
    segment._creator = os.getpid()
    _MADE.add(segment)
    shared = np.ndarray(array.shape, dtype=array.dtype, buffer=segment.buf).view(SharedArray)
    shared[...] = array
    shared._segment = segment
    return shared


def pickled_for_pymc_workers() -> bool:
    """Whether the pickling under way is PyMC's, of a step method for its worker processes.

    ``pymc.sampling.parallel.ParallelSampler.__init__`` pickles the step once for all
    workers when the start method is not "fork".
    """
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if (
            code.co_qualname == "ParallelSampler.__init__"
            and frame.f_globals.get("__name__") == "pymc.sampling.parallel"
        ):
            return True
        frame = frame.f_back
    return False


def _large(value: Any) -> bool:
    return (
        isinstance(value, np.ndarray)
        and value.nbytes >= MIN_SHARED_BYTES
        and value.dtype.kind in "biufc"
        and value.flags.c_contiguous
    )


def data_holders(state: Any) -> list[tuple[Constant | Container, np.ndarray]]:
    """The holders of large arrays that pickling ``state`` reaches, each with its array.

    A holder is a constant or a shared variable's container whose value is an array of
    :data:`MIN_SHARED_BYTES` or more. Found by pickling ``state`` into nothing, the
    large arrays left out, so that what is moved is what the real pickle would carry
    (the graphs of the compiled functions, the model, the mode search's passes),
    wherever it hangs.
    """
    found: list[tuple[Constant | Container, np.ndarray]] = []

    class Finder(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            # A shared variable's value is found through its container, pickled with it.
            if isinstance(obj, Constant) and _large(obj.data):
                found.append((obj, obj.data))
            elif isinstance(obj, Container) and _large(obj.storage[0]):
                found.append((obj, obj.storage[0]))
            elif _large(obj):
                return (np.empty, (0,))  # its bytes are not needed to find its holders
            return super().reducer_override(obj)

    Finder(_Discard(), protocol=cloudpickle.DEFAULT_PROTOCOL).dump(state)
    return found


class _Discard(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(memoryview(data))


def room_for(n_bytes: int) -> bool:
    """Whether the shared-memory filesystem has room for ``n_bytes`` (and a margin).

    True where there is no such directory to check (macOS and Windows map segments from
    the system's memory).
    """
    if not os.path.isdir(SHARED_MEMORY_DIRECTORY):
        return True
    return shutil.disk_usage(SHARED_MEMORY_DIRECTORY).free >= ROOM_MARGIN * n_bytes


_sharing = False


def share_data_with_workers(state: Any) -> int:
    """Move the large arrays that pickling ``state`` would carry into shared memory.

    Each constant or container holding one is given the shared copy (the same values, so
    nothing computed changes); an array already shared stays where it is. Nothing moves
    where the shared-memory filesystem lacks room: the data are then pickled, as before.
    Returns the number of bytes moved.
    """
    global _sharing
    if _sharing:  # the state refers back to the step being pickled
        return 0
    _sharing = True
    try:
        holders = data_holders(state)
    finally:
        _sharing = False
    holders = [(h, array) for h, array in holders if not isinstance(array, SharedArray)]
    arrays = {id(array): array for _, array in holders}
    n_bytes = sum(array.nbytes for array in arrays.values())
    if not arrays:
        return 0
    if not room_for(n_bytes):
        _log.info(
            "The data (%.0f MB) are pickled into each worker process: %s has %.0f MB free. "
            "Give it more room (docker run --shm-size=...) for the workers to share one copy.",
            n_bytes / 1e6, SHARED_MEMORY_DIRECTORY,
            shutil.disk_usage(SHARED_MEMORY_DIRECTORY).free / 1e6,
        )  # fmt: skip
        return 0
    shared = {key: to_shared(array) for key, array in arrays.items()}
    for holder, array in holders:
        if isinstance(holder, Constant):
            holder.data = shared[id(array)]
        else:
            holder.storage[0] = shared[id(array)]
    return n_bytes
