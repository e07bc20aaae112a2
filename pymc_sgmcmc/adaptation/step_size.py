"""The step-size adapters: a schedule (optionally jittered), or one learned during tuning."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import scipy.special
from pymc.exceptions import SamplingError
from pymc.step_methods.state import DataClassState, dataclass_state
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule, as_schedule
from pymc_sgmcmc.core.validation import check_in_range


@dataclass_state
class StepSizeState(DataClassState):
    """A schedule carries no per-chain state (an adapted step size will)."""


class StepSizeAdapter(Adapter):
    """The step size of each iteration: ``schedule(t)``, times a uniform jitter.

    Parameters
    ----------
    step_size : float or schedule
        A positive number, or a schedule such as :class:`pymc_sgmcmc.PolynomialDecay`.
    jitter : float
        Each trajectory's step size is drawn uniformly from
        ``schedule(t) × [1 − jitter, 1 + jitter]``; ``0`` turns the jitter off.
    """

    _state_class: ClassVar[type[DataClassState]] = StepSizeState

    def __init__(self, step_size: float | StepSizeSchedule, jitter: float = 0.0) -> None:
        self.schedule = as_schedule(step_size)
        self.jitter = check_in_range(
            "step_jitter",
            jitter,
            0.0,
            1.0,
            "It is the relative spread of the step size; PyMC's HMC uses 0.15, 0 turns "
            "the jitter off.",
        )

    def init_chain(self, chain: ChainContext) -> None:
        """Nothing to reset: the schedule is a function of the iteration."""

    def restart(self) -> None:
        """The metric changed; a schedule does not depend on it."""

    def nominal(self, iteration: int) -> float:
        """The schedule's step size at ``iteration``, without jitter."""
        return float(self.schedule(iteration))

    def current(self, iteration: int, rng: np.random.Generator) -> float:
        """The step size of the trajectory at ``iteration`` (jittered, if asked)."""
        step_size = self.nominal(iteration)
        if self.jitter:
            step_size *= rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return step_size


# -- automatic step size ------------------------------------------------------------------

NOISE_TOLERANCE = 0.1
"""Largest share of a step's noise that may come from the gradient estimate (``κ``)."""

DIVERGENCE_SHRINK = 0.5
"""Factor applied to a stochastic-gradient step size after a divergence during tuning."""

SMALLEST_SHRINK = DIVERGENCE_SHRINK**30
"""At this share of its start (~1e-9), a step size halved by divergences moves no chain:
tuning stops with an error (measured: on a sparse simplex SGHMC's and SGFS's tuning went on
halving to 1e-228 and 1e-275 and failed only after it, 1,020 iterations in)."""


def gradient_noise_ratio(step_size: float, noise_variance: np.ndarray, damping: float) -> float:
    """Share of a step's noise that comes from the gradient estimate, worst coordinate.

    With the gradient noise of covariance ``V`` (whitened by the metric: per coordinate
    ``diag(L⁻¹VL⁻ᵀ)`` for ``M = LLᵀ``), an SGHMC step adds ``ε²V`` to the momentum where
    the dynamics inject ``2Cε`` (Chen, Fox and Guestrin's ``B̂ = εV/2`` against ``C``);
    SGLD adds ``η²V`` to ``2η`` (``C = 1``), SGNHT ``ε²V`` to ``2Aε`` (``C = A``). The
    ratio ``B̂/C = εV/(2C)`` is the chain's excess temperature in that coordinate.

    Parameters
    ----------
    step_size : float
        ``ε``.
    noise_variance : ndarray
        Whitened per-coordinate variance of the gradient estimate.
    damping : float
        ``C``: the friction (SGHMC), the diffusion (SGNHT) or 1 (SGLD).
    """
    if noise_variance.size == 0:
        return 0.0
    return float(step_size * noise_variance.max() / (2.0 * damping))


def noise_limited_step_size(
    noise_variance: np.ndarray, damping: float, tolerance: float = NOISE_TOLERANCE
) -> float:
    """The largest ``ε`` whose gradient noise stays ``tolerance`` of the injected noise.

    Solves ``εV_max/(2C) = κ`` (:func:`gradient_noise_ratio`): ``ε = 2κC/V_max``; infinite
    for exact gradients.
    """
    worst = float(np.max(noise_variance, initial=0.0))
    return math.inf if worst <= 0.0 else 2.0 * tolerance * damping / worst


def acceptance_limited_step_size(
    noise_variance: np.ndarray, n_steps: int, target_accept: float
) -> float:
    """The largest leapfrog ``ε`` at which gradient noise alone keeps ``target_accept``.

    A trajectory of ``n`` leapfrog steps evaluates ``n + 1`` gradients, each with a fresh
    error ``ξ``; they kick the (whitened) momentum ``p ~ N(0, I)`` by ``εξ``, the two at
    the ends by ``εξ/2``. The energy error this adds has variance
    ``σ² = (n − ½) ε² tr(L⁻¹VL⁻ᵀ)`` and mean ``σ²/2``; with ``ΔH ~ N(σ²/2, σ²)`` (many
    coordinates) the mean Metropolis acceptance is ``2Φ(−σ/2)``, so the acceptance target
    fixes ``σ`` and with it ``ε``. Infinite for exact gradients.

    Parameters
    ----------
    noise_variance : ndarray
        Whitened per-coordinate variance of the gradient estimate.
    n_steps : int
        Leapfrog steps per trajectory.
    target_accept : float
        Mean acceptance the step-size adaptation aims at.
    """
    total = float(np.sum(noise_variance))
    if total <= 0.0:
        return math.inf
    sigma = -2.0 * float(scipy.special.ndtri(target_accept / 2.0))
    return sigma / math.sqrt((n_steps - 0.5) * total)


@dataclass_state
class AdaptiveStepSizeState(DataClassState):
    """A chain's step-size adaptation in progress."""

    step_size: float
    noise_cap: float
    noise_variance: Any
    shrink: float
    frozen: Any
    dual: Any


class AdaptiveStepSize(StepSizeAdapter):
    """``step_size="auto"``: a step size learned during tuning, fixed after it.

    Two signals, by kernel:

    - with a Metropolis–Hastings test: dual averaging of the acceptance statistic to
      ``target_accept``, as PyMC's NUTS does (Hoffman and Gelman, "The No-U-Turn
      Sampler", Algorithm 5, with PyMC's
      ``pymc.step_methods.step_sizes.DualAverageAdaptation``); a divergence counts
      as acceptance 0;
    - without one (stochastic gradients): the kernel's default step in the metric's
      units, capped so that the measured gradient noise brings at most
      ``noise_tolerance`` of the step's noise (:func:`noise_limited_step_size`); a
      divergence halves the step. The step method measures the noise
      (:meth:`~pymc_sgmcmc.sampling.step.StochasticGradientStep.gradient_noise_variance`).

    Parameters
    ----------
    initial_step_size : float
        The first step size (the kernel's default, in units of the metric).
    metropolis : bool
        Whether the kernel has a Metropolis–Hastings test.
    damping : float
        ``C`` of :func:`gradient_noise_ratio`.
    target_accept : float
        Dual averaging's target acceptance statistic.
    noise_tolerance : float
        ``κ`` of :func:`noise_limited_step_size`.
    jitter : float
        As :class:`StepSizeAdapter`.
    estimates_noise : str, optional
        The kernel parameter this adapter owns as the noise estimate (SGHMC's
        ``noise_estimate``): ``B̂ = ε V̄/2`` with ``V̄`` the mean measured whitened noise
        variance, so that the injected noise makes up the rest.
    """

    _state_class: ClassVar[type[DataClassState]] = AdaptiveStepSizeState
    learns: ClassVar[bool] = True

    def __init__(
        self,
        initial_step_size: float,
        *,
        metropolis: bool,
        damping: float = 1.0,
        target_accept: float = 0.8,
        noise_tolerance: float = NOISE_TOLERANCE,
        jitter: float = 0.0,
        estimates_noise: str | None = None,
    ) -> None:
        super().__init__(initial_step_size, jitter=jitter)
        self.initial_step_size = float(initial_step_size)
        self.metropolis = bool(metropolis)
        self.damping = float(damping)
        self.estimates_noise = estimates_noise
        self.target_accept = check_in_range(
            "target_accept", target_accept, 0.0, 1.0, "PyMC's NUTS uses 0.8."
        )
        self.noise_tolerance = check_in_range(
            "noise_tolerance",
            noise_tolerance,
            0.0,
            1.0,
            "It is the share of the step's noise the gradient estimate may bring; 0.1 by default.",
        )

    def init_chain(self, chain: ChainContext) -> None:
        """Start from the initial step size with no noise measured."""
        self.step_size = self.initial_step_size
        self.noise_cap = math.inf
        self.noise_variance = None
        self.shrink = 1.0
        self.frozen = None
        self.dual = self._dual_averaging(self.initial_step_size)

    def _dual_averaging(self, step_size: float) -> DualAverageAdaptation:
        # PyMC's NUTS constants: γ = 0.05, κ = 0.75, t₀ = 10.
        return DualAverageAdaptation(step_size, self.target_accept, 0.05, 0.75, 10)

    def nominal(self, iteration: int) -> float:
        """The step size of the current iteration, before jitter."""
        if self.frozen is not None:
            return self.frozen
        if self.metropolis:
            return float(self.dual.current(True))
        return min(self.step_size * self.shrink, self.noise_cap)

    def set_noise_variance(self, variance: np.ndarray) -> None:
        """The mean whitened gradient-noise variance measured so far (tuning only)."""
        if self.frozen is not None:
            return
        self.noise_variance = np.asarray(variance, dtype=float)
        self.noise_cap = noise_limited_step_size(
            self.noise_variance, self.damping, self.noise_tolerance
        )

    def parameters(self) -> dict[str, Any]:
        """The noise estimate ``B̂ = ε V̄/2``, when this adapter owns it."""
        if self.estimates_noise is None:
            return {}
        mean = 0.0 if self.noise_variance is None else float(np.mean(self.noise_variance))
        # The cap keeps εV_max/2 ≤ κC; the minimum guards a step size set by a divergence.
        estimate = min(self.nominal(0) * mean / 2.0, self.noise_tolerance * self.damping)
        return {self.estimates_noise: np.asarray(estimate)}

    def restart(self) -> None:
        """The metric changed: forget the noise measured in its old units."""
        if self.frozen is not None:
            return
        # Dual averaging carries on, as in PyMC's NUTS: restarted at each window it
        # explored large steps again and ended the final buffer unsettled. The shrink of
        # past divergences stays; the cap waits for the next measurement.
        self.noise_variance = None
        self.noise_cap = math.inf

    def update(self, result: IterationResult, chain: ChainContext) -> frozenset[str]:
        """Learn from a tuning iteration: its acceptance, or a divergence."""
        if self.metropolis:
            self.dual.update(0.0 if result.diverging else result.accept, True)
        elif result.diverging:
            self.shrink *= DIVERGENCE_SHRINK
            if self.shrink <= SMALLEST_SHRINK:
                raise SamplingError(
                    f"{chain.sampler}: divergences during tuning halved the step size 30 "
                    f"times, to {self.nominal(result.iteration):.2g} ({self.shrink:.1e} of its "
                    "start), where no chain moves: the posterior has regions its steps cannot "
                    "cross at a usable size (a start far from the bulk, heavy tails, a "
                    "simplex-valued variable with sparse counts: use pmsg.SGRLD for those). "
                    "Standardise the data or reparameterise the model, or pass step_size= "
                    "and mass= of your own."
                )
            if self.estimates_noise is not None:
                return frozenset({self.estimates_noise})
        return frozenset()

    def finalize(self) -> None:
        """Tuning has ended: keep the averaged (Metropolis) or the current step size."""
        if self.frozen is None:
            self.frozen = float(self.dual.current(False)) if self.metropolis else self.nominal(0)
