"""The mass adapter of the EM samplers: Monte Carlo EM over the inverse mass.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
Algorithms 1 and 2: the E step is the sampler's own dynamics with the mass held fixed,
storing one sample per iteration; every ``S`` iterations the M step updates the inverse
mass by eq. 5 (:mod:`pymc_sgmcmc.adaptation.mass_em`) and ``S`` itself may grow (§3.2,
:mod:`pymc_sgmcmc.adaptation.sample_size`). Any kernel whose state has a ``momentum``
and whose last gradient is at the returned position can be paired with it.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, ClassVar

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.adaptation.mass_em import (
    MASS_ESTIMATORS,
    MASS_STRUCTURES,
    MAX_STIFFNESS,
    STIFFNESS_TOLERANCE,
    condition_number,
    curvature_estimate,
    estimate_inverse_mass,
    geometric_mean_eigenvalue,
    online_inverse_mass_update,
    step_sequence,
    stiffness,
)
from pymc_sgmcmc.adaptation.sample_size import (
    SampleSizeRule,
    fixed_offsets,
    hmc_test_function,
    sgnht_test_function,
    subsample_offsets,
)
from pymc_sgmcmc.core.validation import check_choice, check_count, check_in_range
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric, euclidean_metric, metric_from_inverse

OFFSET_SCHEMES = ("poisson", "fixed")


@dataclass_state
class MassEMState(DataClassState):
    """A chain's EM state: the learned mass and the E step in progress."""

    metric: Any
    initial_inverse: Any
    mass_condition: float
    mass_updates: int
    sample_size: int
    mass_rejections: int
    em_samples: list
    em_positions: list
    em_gradients: list
    em_records: list
    em_offsets: Any
    em_position: int


class MassEM(Adapter):
    """Monte Carlo EM learning of the mass, an adapter of the generic step.

    Parameters
    ----------
    mass_structure : {"diag", "dense"}, optional
        Structure of the learned mass. By default "diag", or "dense" when
        ``initial_mass`` is a matrix or the sampler starts from a dense Laplace
        covariance (:meth:`~pymc_sgmcmc.adaptation.em.MassEM.precondition`).
    mass_estimator : {"position", "momentum"}, default "position"
        ``M_I^est`` of the M step: the covariance of the stored positions, or (the
        paper's) the inverse covariance of the stored momenta. See ``docs/em.md`` for
        the measurement behind the default.
    initial_mass : float or array, optional
        Mass of the first E step (identity by default), as ``mass`` of the fixed-mass
        sampler.
    sample_size : int, default 100
        ``S_count`` of the first E step (iterations, i.e. draws, per M step).
    adaptive_sample_size : bool, default True
        Grow ``S`` by §3.2's rule; False keeps it fixed.
    sample_size_rule : SampleSizeRule, optional
        Constants of that rule (``α``, ``S_I``, ceiling).
    offsets : {"poisson", "fixed"}, default "poisson"
        Iterations at which the test function is evaluated: ``x_i − 1 ~ Poisson(ν i^d)``
        gaps, or ``n_subsamples`` evenly spread ones.
    offset_nu, offset_d : float, default 1.0, 0.5
        ``ν`` and ``d`` of the Poisson offsets.
    n_subsamples : int, default 30
        Number of fixed offsets.
    kappa_exponent : float, default 0.7
        ``κ_k = k^(−exponent)`` in eq. 5; must lie in (0.5, 1].
    adapt_during_sampling : bool, default False
        Keep learning after tuning (the paper's setting). By default the mass is frozen
        when tuning ends, so the draws come from a fixed Markov kernel.

    Statistics
    ----------
    ``mass_updates`` (M steps taken), ``e_step_size`` (the current ``S``),
    ``mass_condition`` (condition number of ``M⁻¹``) and ``mass_rejections`` (M steps
    refused by the stiffness check).
    """

    _state_class: ClassVar[type[DataClassState]] = MassEMState
    stats_dtypes_shapes: ClassVar[dict] = {
        "mass_updates": (np.int64, []),
        "e_step_size": (np.int64, []),
        "mass_condition": (np.float64, []),
        "mass_rejections": (np.int64, []),
    }
    learns: ClassVar[bool] = True
    needs_gradient: ClassVar[bool] = True

    def __init__(
        self,
        mass_structure: str | None = None,
        mass_estimator: str = "position",
        initial_mass: Any = None,
        sample_size: int = 100,
        adaptive_sample_size: bool = True,
        sample_size_rule: SampleSizeRule | None = None,
        offsets: str = "poisson",
        offset_nu: float = 1.0,
        offset_d: float = 0.5,
        n_subsamples: int = 30,
        kappa_exponent: float = 0.7,
        adapt_during_sampling: bool = False,
    ) -> None:
        self.structure_chosen = mass_structure is not None
        if mass_structure is None:
            # A matrix given as the starting mass says which structure is wanted.
            mass_structure = "dense" if np.ndim(initial_mass) == 2 else "diag"
        self.structure = check_choice(
            "mass_structure",
            mass_structure,
            MASS_STRUCTURES,
            "(the structure the EM sampler learns; "
            "pass it as mass_structure= and a starting mass as initial_mass=).",
        )
        self.estimator = check_choice("mass_estimator", mass_estimator, MASS_ESTIMATORS)
        self.offset_scheme = check_choice("offsets", offsets, OFFSET_SCHEMES)
        self.initial_sample_size = check_count(
            "sample_size", sample_size, 2, "An M step needs a covariance; the paper uses 100-300."
        )
        self.kappa_exponent = check_in_range(
            "kappa_exponent",
            kappa_exponent,
            0.5,
            1.0,
            "Then sum(kappa) diverges and sum(kappa^2) converges.",
            closed="right",
        )
        self.rule = sample_size_rule or SampleSizeRule()
        if not adaptive_sample_size:
            self.rule = dataclasses.replace(self.rule, adaptive=False)
        self.offset_nu, self.offset_d, self.n_subsamples = offset_nu, offset_d, n_subsamples
        self.adapt_during_sampling = bool(adapt_during_sampling)
        self.initial_mass = _initial_mass_in_structure(initial_mass, self.structure)

    def precondition(self, covariance: np.ndarray) -> None:
        """Start the EM from the Laplace covariance at the mode (``step_size="auto"``).

        Its inverse is the first E step's mass, unless ``initial_mass`` was given; a dense
        covariance makes the learned mass dense unless ``mass_structure`` was given (a
        diagonal mass from a strongly correlated Laplace fit made the EM samplers diverge
        at condition number 1e4, ``benchmarks/defaults.py``).
        """
        if covariance.ndim == 2 and not self.structure_chosen:
            self.structure = "dense"
        if self.initial_mass is not None:
            return
        if covariance.ndim == 2 and self.structure == "dense":
            precision = np.linalg.inv(covariance)
            self.initial_mass = 0.5 * (precision + precision.T)
            return
        variances = covariance if covariance.ndim == 1 else np.diag(covariance)
        precision = 1.0 / variances
        self.initial_mass = np.diag(precision) if self.structure == "dense" else precision

    # -- the chain's life cycle ------------------------------------------------------

    def init_chain(self, chain: ChainContext) -> None:
        """Start from the initial mass with ``S = sample_size``."""
        initial = self.initial_mass
        if self.structure == "dense" and initial is not None and np.ndim(initial) < 2:
            initial = np.diag(np.broadcast_to(np.asarray(initial, dtype=float), (chain.dim,)))
        if self.structure == "dense" and initial is None:
            initial = np.eye(chain.dim)
        self.metric: EuclideanMetric = euclidean_metric(initial, chain.dim, chain.dtype)
        self.initial_inverse = np.asarray(self.metric.inverse, dtype=float)
        self.mass_condition = condition_number(self.metric.inverse)
        self.mass_updates = 0
        self.mass_rejections = 0
        self.sample_size = self.initial_sample_size
        self._start_e_step(chain.rng)

    def parameters(self) -> dict[str, Any]:
        """The parameter this adapter owns: the metric."""
        return {"metric": self.metric}

    def stats(self) -> dict[str, Any]:
        """M steps taken and refused, the E-step size, the condition number of ``M⁻¹``."""
        return {
            "mass_updates": self.mass_updates,
            "e_step_size": self.sample_size,
            "mass_condition": self.mass_condition,
            "mass_rejections": self.mass_rejections,
        }

    def _start_e_step(self, rng: np.random.Generator) -> None:
        self.em_samples: list = []
        self.em_positions: list = []
        self.em_gradients: list = []
        self.em_records: list = []
        self.em_position = 0
        if not self.rule.adaptive:
            offsets = np.empty(0, dtype=int)
        elif self.offset_scheme == "fixed":
            offsets = fixed_offsets(self.sample_size, self.n_subsamples)
        else:
            offsets = subsample_offsets(self.sample_size, rng, self.offset_nu, self.offset_d)
        self.em_offsets = set(offsets.tolist())

    # -- the E step ------------------------------------------------------------------

    def active(self, tune: bool) -> bool:
        """Learning during tuning, and after it with ``adapt_during_sampling``."""
        return tune or self.adapt_during_sampling

    def update(self, result: IterationResult, chain: ChainContext) -> frozenset[str]:
        """Store the iteration's sample; at the end of an E step, take an M step."""
        if not self.active(result.tune):
            return frozenset()
        # No copies: the arrays come fresh from the compiled call. This runs at every
        # iteration and must cost little next to a trajectory.
        gradient = result.gradient
        momentum = result.state.momentum
        if self.estimator == "position":
            self.em_samples.append(result.position)
        else:
            self.em_samples.append(momentum)
            self.em_positions.append(result.position)
        # A divergent restart leaves no gradient; its row is dropped at the M step.
        self.em_gradients.append(gradient if gradient is not None else np.full(chain.dim, np.nan))
        if self.rule.adaptive and self.em_position in self.em_offsets and gradient is not None:
            # The gradient at the current position comes out of the trajectory itself (on
            # its last minibatch): a separate gradient call here cost 5-15 % per iteration.
            thermostat = getattr(result.state, "thermostat", None)
            self.em_records.append((momentum, gradient, thermostat))
        self.em_position += 1
        if len(self.em_samples) < self.sample_size:
            return frozenset()
        changed = self._m_step(result.step_size, chain)
        self._start_e_step(chain.rng)
        return frozenset({"metric"}) if changed else frozenset()

    # -- the M step ------------------------------------------------------------------

    def _m_step(self, step_size: float, chain: ChainContext) -> bool:
        samples = np.asarray(self.em_samples, dtype=float)
        estimate = estimate_inverse_mass(
            samples, self.estimator, self.structure, geometric_mean_eigenvalue(self.initial_inverse)
        )
        if estimate is None:
            return False
        old_inverse = np.asarray(self.metric.inverse, dtype=float)
        kappa = step_sequence(self.mass_updates + 1, self.kappa_exponent)
        new_inverse = online_inverse_mass_update(old_inverse, estimate, kappa)
        if self._too_stiff(samples, new_inverse, step_size, chain.sampler):
            return False
        if len(self.em_records) >= 2:
            self.sample_size = self.rule.next_sample_size(
                self.sample_size,
                test_function(old_inverse, self.em_records),
                test_function(new_inverse, self.em_records),
            )
        self.metric = metric_from_inverse(new_inverse, chain.dtype)
        self.mass_condition = condition_number(new_inverse)
        self.mass_updates += 1
        return True

    def _too_stiff(
        self, samples: np.ndarray, new_inverse: np.ndarray, step_size: float, sampler: str
    ) -> bool:
        """Refuse (and warn) when the new mass would make the integrator too stiff."""
        positions = samples if self.estimator == "position" else np.asarray(self.em_positions)
        gradients = np.asarray(self.em_gradients, dtype=float)
        kept = np.isfinite(gradients).all(axis=1)
        if kept.sum() < 2:
            return False
        curvature = curvature_estimate(positions[kept], gradients[kept], self.structure)
        # The reference is the mass the chain started from (the user chose the step size
        # for it), with room for the estimate's noise: against the current mass, noise
        # alone refused most M steps of a minibatch chain once the mass had settled.
        initial, new = (
            stiffness(step_size, m, curvature) for m in (self.initial_inverse, new_inverse)
        )
        limit = max(MAX_STIFFNESS, STIFFNESS_TOLERANCE * initial)
        if not new > limit:
            return False
        self.mass_rejections += 1
        if self.mass_rejections == 1:
            warnings.warn(
                f"{sampler}: M step {self.mass_updates + 1} refused: the "
                f"estimated mass would advance the stiffest direction by ε√λ = {new:.2f} "
                f"per step (at most {limit:.2f} is accepted: the larger of "
                f"{MAX_STIFFNESS} and {STIFFNESS_TOLERANCE} x the initial mass's "
                f"{initial:.2f}), which "
                "can make the chain unstable. The mass stays as it was; the next E step "
                "tries again. Usually the samples came from a burn-in far from the "
                "posterior: tune longer, start nearer (initvals=), or use "
                "mass_structure='diag'.",
                RuntimeWarning,
                stacklevel=2,
            )
        return True


def test_function(inv_mass: np.ndarray, records: list) -> np.ndarray:
    """§3.2's test function over the stored ``(momentum, gradient, thermostat)`` records.

    A sampler with a thermostat (SGNHT-EM) uses ``[M⁻¹p, ∇L(θ) + ξM⁻¹p, pᵀM⁻¹p]``; the
    others ``[M⁻¹p, ∇L(θ)]``.
    """
    momenta = np.array([r[0] for r in records])
    gradients = np.array([r[1] for r in records])
    if records[0][2] is None:
        return hmc_test_function(inv_mass, momenta, gradients)
    thermostats = np.array([r[2] for r in records])
    return sgnht_test_function(inv_mass, momenta, gradients, thermostats)


test_function.__test__ = False  # not a pytest test, whatever its name


def _initial_mass_in_structure(initial_mass: Any, structure: str) -> Any:
    """The user's starting mass, refused when it cannot have the learned structure."""
    if initial_mass is None:
        return None
    m = np.asarray(initial_mass, dtype=float)
    if structure == "diag" and m.ndim == 2:
        raise ValueError(
            "initial_mass is a matrix but mass_structure='diag' learns a diagonal: pass "
            "its diagonal, or use mass_structure='dense'."
        )
    return m
