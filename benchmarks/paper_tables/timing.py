"""Time per iteration: step methods timed in interleaved blocks, and the EM bookkeeping."""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm

from .config import SEED


@dataclass
class TimedCase:
    """A step method timed in blocks of ``step.step`` calls (ms per iteration)."""

    label: str
    step: Any
    start: dict
    samples: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.point = dict(self.start)

    def block(self, n: int) -> float:
        """Run ``n`` iterations on from the last point; CPU ms per iteration."""
        # CPU time of this process: on a shared machine, wall time also counts the time
        # other processes hold the core, which differs from block to block.
        point = self.point
        start = time.process_time()
        for _ in range(n):
            point, _ = self.step.step(point)
        elapsed = time.process_time() - start
        self.point = point
        return elapsed / n * 1e3

    @property
    def median(self) -> float:
        """Median ms per iteration over the timed blocks."""
        return statistics.median(self.samples)


def timed_step(model: pm.Model, cls: type, kwargs: dict, seed: int, learning: bool) -> Any:
    """A compiled step method, set up for a new chain.

    In its tuning phase (``learning``: an EM sampler learns its mass) or past it (an EM
    sampler's mass is frozen, the default after tuning).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = cls(model=model, **kwargs)
        step.trajectory_function  # noqa: B018 - compile now, outside the timing
    step.setup_chain(np.random.default_rng(seed), 10**9 if learning else 0, 1)
    return step


def measure(cases: list[TimedCase], rounds: int, block: int) -> None:
    """One warm-up block each (JIT compilation), then interleaved rounds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            case.block(block)
        for r in range(rounds):
            for case in cases if r % 2 == 0 else cases[::-1]:
                case.samples.append(case.block(block))


def paired_ratio(a: TimedCase, b: TimedCase) -> float:
    """Median over rounds of the ratio of the two cases' blocks in that round."""
    return statistics.median(x / y for x, y in zip(a.samples, b.samples, strict=True))


def best_ratio(a: TimedCase, b: TimedCase) -> float:
    """Ratio of the fastest blocks: the least disturbed by other processes."""
    return min(a.samples) / min(b.samples)


EM_PARTS = ("records", "m_steps")
"""An EM iteration is its twin's iteration plus the mass adapter's ``update``: storing the
sample (and its gradient, which comes out of the trajectory), the test-function records
(``records``) and the M steps (``m_steps``) that it triggers."""


def em_bookkeeping(step: Any, point: dict, n: int) -> dict[str, float]:
    """µs per iteration of EM bookkeeping over ``n`` iterations of a new chain.

    Times every call of the mass adapter's ``update`` (``step.mass_adapter``), wrapped on
    the instance for this measurement only, and sorts the calls by what they did, read
    from the adapter's public state: a call that ended an E step ran an M step (or had
    it refused by the stiffness check), by this process's CPU time, which leaves out the
    time other processes hold the core; a call that stored a test-function record costs
    the median of those calls' wall time; any other call only stored the sample, about a
    microsecond, too short for a CPU-time clock, so its cost is the median over
    iterations of its wall time, robust to the iterations at which another process took
    the core. The records' share is what their calls cost beyond a plain one. Measured
    directly, the overhead does not rest on the difference of two noisy totals. (The
    generic step's few lines that hand the iteration to the adapter are not included.)
    """
    adapter = step.mass_adapter
    method = adapter.update
    m_steps = [0.0]
    plain: list[float] = []
    recording: list[float] = []

    def update(*args):
        samples, records = len(adapter.em_samples), len(adapter.em_records)
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        try:
            return method(*args)
        finally:
            wall = time.perf_counter() - start_wall
            if len(adapter.em_samples) <= samples:  # the E step ended: an M step
                m_steps[0] += time.process_time() - start_cpu
            elif len(adapter.em_records) > records:
                recording.append(wall)
            else:
                plain.append(wall)

    adapter.update = update
    step.setup_chain(np.random.default_rng(SEED), 10**9, 1)  # S and the mass start afresh
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(n):
                point, _ = step.step(point)
    finally:
        del adapter.update  # the class's method again
    own = statistics.median(plain) if plain else 0.0
    extra = max(statistics.median(recording) - own, 0.0) * len(recording) if recording else 0.0
    per_iteration = {"records": extra / n * 1e6, "m_steps": m_steps[0] / n * 1e6}
    return {"total": own * 1e6 + sum(per_iteration.values())} | per_iteration
