"""What an adapter is: an object the generic step calls around every iteration.

An adapter owns some of a sampler's parameters (the step size, the mass) and learns them
from the chain, as PyMC's step-size and mass adapters and NumPyro's ``(init_fn,
update_fn)`` pairs do:

- ``precondition(covariance)``: start from the Laplace covariance at the mode, when the
  sampler found one before sampling (``step_size="auto"``);
- ``init_chain(chain)``: reset for a new chain (``pm.sample`` calls ``setup_chain`` once
  per chain);
- ``update(result, chain)``: learn from the iteration just finished; return the names of
  the parameters that changed (the generic step then re-reads them);
- ``finalize()``: tuning has ended (``stop_tuning``);
- ``stats()``: per-draw statistics, declared in ``stats_dtypes_shapes``.

Adapters keep their per-chain state in attributes named by their ``_state_class`` so that
``pm.sample``'s ``sampling_state`` round trip covers them.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import numpy as np
from pymc.step_methods.state import DataClassState, WithSamplingState


class ChainContext(NamedTuple):
    """What an adapter may know about the chain it serves.

    Attributes
    ----------
    rng : numpy.random.Generator
        The chain's generator (``pm.sample`` seeds it per chain).
    dim : int
        Number of sampled scalars.
    dtype : numpy.dtype
        Floating point type of the model.
    sampler : str
        The sampler's class name, for messages.
    tune : int, optional
        Tuning iterations of the chain, when known (``pm.sample``'s ``tune``).
    """

    rng: np.random.Generator
    dim: int
    dtype: np.dtype
    sampler: str
    tune: int | None = None


class IterationResult(NamedTuple):
    """One finished iteration, as adapters see it.

    Attributes
    ----------
    iteration : int
        0 at the chain's first iteration.
    tune : bool
        Whether the iteration was a tuning one.
    position : ndarray
        The kept position (after a Metropolis test or a restart).
    state : NamedTuple
        The kernel's state at that position (momentum, thermostat...).
    gradient : ndarray or None
        The gradient of the (minibatch) log density at ``position``, where the trajectory
        evaluated it anyway; ``None`` where it did not (or after a divergence).
    step_size : float
        The nominal step size of the iteration (before any jitter).
    diverging : bool
        Whether the trajectory diverged.
    accept : float
        Metropolis acceptance probability (1 for samplers without a test).
    """

    iteration: int
    tune: bool
    position: np.ndarray
    state: Any
    gradient: np.ndarray | None
    step_size: float
    diverging: bool
    accept: float


class Adapter(WithSamplingState):
    """Base of the adapters: a no-op for each call, no statistics."""

    _state_class: ClassVar[type[DataClassState]] = DataClassState
    stats_dtypes_shapes: ClassVar[dict[str, tuple[Any, list]]] = {}

    learns: ClassVar[bool] = False
    """Whether :meth:`update` ever does anything (the step never calls it otherwise)."""

    needs_gradient: ClassVar[bool] = False
    """Whether :meth:`update` uses ``IterationResult.gradient`` (the kernel must then
    evaluate the gradient at the position it returns)."""

    def precondition(self, covariance: np.ndarray) -> None:
        """Start from the Laplace covariance at the mode (diagonal or dense)."""

    def init_chain(self, chain: ChainContext) -> None:
        """Reset for a new chain."""

    def active(self, tune: bool) -> bool:
        """Whether :meth:`update` would learn at an iteration with this ``tune`` flag."""
        return self.learns and tune

    def update(self, result: IterationResult, chain: ChainContext) -> frozenset[str]:
        """Learn from one iteration; return the names of the parameters that changed."""
        return frozenset()

    def parameters(self) -> dict[str, Any]:
        """The current values of the parameters this adapter owns, by kernel field."""
        return {}

    def finalize(self) -> None:
        """Tuning has ended."""

    def stats(self) -> dict[str, Any]:
        """Per-draw statistics."""
        return {}
