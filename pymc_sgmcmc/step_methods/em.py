"""Mass matrices learned by Monte Carlo EM: HMC-EM, SGHMC-EM and SGNHT-EM.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
Algorithms 1 and 2: the E step is the sampler's own dynamics with the mass held fixed,
storing one sample per iteration; every ``S`` iterations the M step updates the inverse
mass by eq. 5 (:mod:`pymc_sgmcmc.adaptation.mass_em`) and ``S`` itself may grow (§3.2,
:mod:`pymc_sgmcmc.adaptation.sample_size`).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, ClassVar

import numpy as np
import scipy.linalg
from pymc.blocking import RaveledVars, StatsType
from pymc.step_methods.state import dataclass_state

from pymc_sgmcmc.adaptation.mass_em import (
    MASS_ESTIMATORS,
    MASS_STRUCTURES,
    MAX_STIFFNESS,
    STIFFNESS_TOLERANCE,
    condition_number,
    curvature_estimate,
    estimate_inverse_mass,
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
from pymc_sgmcmc.dynamics.mass import Mass
from pymc_sgmcmc.step_methods.base import StochasticGradientState
from pymc_sgmcmc.step_methods.hmc import HMC
from pymc_sgmcmc.step_methods.samplers import SGHMC, SGNHT, HamiltonianStep

OFFSET_SCHEMES = ("poisson", "fixed")


@dataclass_state
class MassEMState(StochasticGradientState):
    """Sampling state of an EM sampler: the chain's state plus the learned mass."""

    _mass: Any
    _initial_inverse: Any
    _condition: float
    mass_updates: int
    sample_size: int
    mass_rejections: int
    _em_samples: list
    _em_positions: list
    _em_gradients: list
    _em_records: list
    _em_offsets: Any
    _em_position: int


def mass_from_inverse(inverse: np.ndarray, dtype) -> Mass:
    """A :class:`Mass` from ``M_I`` (the M step works with the inverse, eq. 5)."""
    if inverse.ndim == 1:
        return Mass(inverse=inverse.astype(dtype), factor=np.sqrt(1.0 / inverse).astype(dtype))
    sym = 0.5 * (inverse + inverse.T)
    mass = scipy.linalg.cho_solve(scipy.linalg.cho_factor(sym, lower=True), np.eye(len(sym)))
    factor = scipy.linalg.cholesky(0.5 * (mass + mass.T), lower=True)
    return Mass(inverse=sym.astype(dtype), factor=factor.astype(dtype))


class MassEM(HamiltonianStep):
    """Monte Carlo EM learning of the mass; mixed in before a Hamiltonian sampler.

    Parameters
    ----------
    mass : {"diag", "dense"}, default "diag"
        Structure of the learned mass.
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
    """

    stats_dtypes_shapes: ClassVar[dict] = {
        "mass_updates": (np.int64, []),
        "e_step_size": (np.int64, []),
        "mass_condition": (np.float64, []),
        "mass_rejections": (np.int64, []),
    }
    _state_class = MassEMState

    def __init__(
        self,
        vars=None,
        *,
        mass: str = "diag",
        mass_estimator: str = "position",
        initial_mass=None,
        sample_size: int = 100,
        adaptive_sample_size: bool = True,
        sample_size_rule: SampleSizeRule | None = None,
        offsets: str = "poisson",
        offset_nu: float = 1.0,
        offset_d: float = 0.5,
        n_subsamples: int = 30,
        kappa_exponent: float = 0.7,
        adapt_during_sampling: bool = False,
        **kwargs: Any,
    ) -> None:
        if mass not in MASS_STRUCTURES:
            raise ValueError(
                f"mass must be one of {MASS_STRUCTURES} for an EM sampler (the structure "
                f"it learns), got {mass!r}. Give a starting mass as initial_mass=."
            )
        if mass_estimator not in MASS_ESTIMATORS:
            raise ValueError(
                f"mass_estimator must be one of {MASS_ESTIMATORS}, got {mass_estimator!r}."
            )
        if offsets not in OFFSET_SCHEMES:
            raise ValueError(f"offsets must be one of {OFFSET_SCHEMES}, got {offsets!r}.")
        if isinstance(sample_size, bool) or not isinstance(sample_size, int | np.integer):
            raise TypeError(f"sample_size must be an integer >= 2, got {sample_size!r}.")
        if sample_size < 2:
            raise ValueError(
                f"sample_size must be at least 2 (an M step needs a covariance), got "
                f"{sample_size}. The paper starts at 100-300."
            )
        if isinstance(kappa_exponent, bool) or not (
            isinstance(kappa_exponent, int | float) and 0.5 < kappa_exponent <= 1.0
        ):
            raise ValueError(
                f"kappa_exponent must lie in (0.5, 1] so that sum(kappa) diverges and "
                f"sum(kappa^2) converges, got {kappa_exponent!r}."
            )
        self.structure = mass
        self.mass_estimator = mass_estimator
        self.initial_sample_size = int(sample_size)
        self.rule = sample_size_rule or SampleSizeRule()
        if not adaptive_sample_size:
            self.rule = dataclasses.replace(self.rule, adaptive=False)
        self.offset_scheme = offsets
        self.offset_nu, self.offset_d, self.n_subsamples = offset_nu, offset_d, n_subsamples
        self.kappa_exponent = float(kappa_exponent)
        self.adapt_during_sampling = bool(adapt_during_sampling)
        # The dimension is known only once the model graph is built: pass a callable.
        super().__init__(vars, mass=lambda dim: _initial_mass(initial_mass, dim, mass), **kwargs)

    # -- chain life cycle ----------------------------------------------------------------

    def _reset_chain(self) -> None:
        self._mass = None  # every chain starts from the initial mass
        super()._reset_chain()
        self._initial_inverse = np.asarray(self.mass.inverse, dtype=float)
        self._condition = condition_number(self.mass.inverse)
        self.mass_updates = 0
        self.mass_rejections = 0
        self.sample_size = self.initial_sample_size
        self._start_e_step()

    @property
    def _no_gradient(self) -> np.ndarray:
        return np.full(self.dim, np.nan)

    def _start_e_step(self) -> None:
        self._em_samples = []
        self._em_positions = []
        self._em_gradients = []
        self._em_records = []
        self._em_position = 0
        if not self.rule.adaptive:
            offsets = np.empty(0, dtype=int)
        elif self.offset_scheme == "fixed":
            offsets = fixed_offsets(self.sample_size, self.n_subsamples)
        else:
            offsets = subsample_offsets(self.sample_size, self.rng, self.offset_nu, self.offset_d)
        self._em_offsets = set(offsets.tolist())

    # -- the E step ----------------------------------------------------------------------

    @property
    def adapting(self) -> bool:
        """Whether the mass is being learned at this iteration."""
        return self.tune or self.adapt_during_sampling

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, StatsType]:
        """One iteration of the sampler, then E-step bookkeeping and, when due, an M step."""
        point, stats = super().astep(q0)
        if self.adapting:
            self._collect(point.data)
        stats[0].update(
            mass_updates=self.mass_updates,
            e_step_size=self.sample_size,
            mass_condition=self._condition,
            mass_rejections=self.mass_rejections,
        )
        return point, stats

    def _collect(self, position: np.ndarray) -> None:
        # One sample per iteration, after the trajectory (and after HMC's MH test). The
        # arrays are the compiled function's fresh outputs, kept without copying: this
        # runs at every iteration and must cost little next to a trajectory.
        gradient = self.position_gradient
        if self.mass_estimator == "position":
            self._em_samples.append(position)
        else:
            self._em_samples.append(self.auxiliary[0])
            self._em_positions.append(position)
        # A divergent restart leaves no gradient; its row is dropped at the M step.
        self._em_gradients.append(gradient if gradient is not None else self._no_gradient)
        if self.rule.adaptive and self._em_position in self._em_offsets and gradient is not None:
            self._em_records.append(self._test_record())
        self._em_position += 1
        if len(self._em_samples) >= self.sample_size:
            self._m_step()
            self._start_e_step()

    def _test_record(self) -> tuple:
        # The gradient at the current position comes out of the trajectory itself (on
        # its last minibatch): a separate gradient call here cost 5-15 % per iteration.
        return (self.auxiliary[0], self.position_gradient)

    def _test_function(self, inv_mass: np.ndarray, records: list) -> np.ndarray:
        momenta = np.array([r[0] for r in records])
        gradients = np.array([r[1] for r in records])
        return hmc_test_function(inv_mass, momenta, gradients)

    # -- the M step ----------------------------------------------------------------------

    def _too_stiff(
        self, samples: np.ndarray, old_inverse: np.ndarray, new_inverse: np.ndarray
    ) -> bool:
        """Refuse (and warn) when the new mass would make the integrator too stiff."""
        if self.mass_estimator == "position":
            positions = samples
        else:
            positions = np.asarray(self._em_positions, dtype=float)
        gradients = np.asarray(self._em_gradients, dtype=float)
        kept = np.isfinite(gradients).all(axis=1)
        if kept.sum() < 2:
            return False
        curvature = curvature_estimate(positions[kept], gradients[kept], self.structure)
        step_size = float(self.schedule(self.iteration))
        # The reference is the mass the chain started from (the user chose the step size
        # for it), with room for the estimate's noise: against the current mass, noise
        # alone refused most M steps of a minibatch chain once the mass had settled.
        initial, new = (
            stiffness(step_size, m, curvature) for m in (self._initial_inverse, new_inverse)
        )
        limit = max(MAX_STIFFNESS, STIFFNESS_TOLERANCE * initial)
        if not new > limit:
            return False
        self.mass_rejections += 1
        if self.mass_rejections == 1:
            warnings.warn(
                f"{type(self).__name__}: M step {self.mass_updates + 1} refused: the "
                f"estimated mass would advance the stiffest direction by ε√λ = {new:.2f} "
                f"per step (at most {limit:.2f} is accepted: the larger of "
                f"{MAX_STIFFNESS} and {STIFFNESS_TOLERANCE} x the initial mass's "
                f"{initial:.2f}), which "
                "can make the chain unstable. The mass stays as it was; the next E step "
                "tries again. Usually the samples came from a burn-in far from the "
                "posterior: tune longer, start nearer (initvals=), or use mass='diag'.",
                RuntimeWarning,
                stacklevel=2,
            )
        return True

    def _m_step(self) -> None:
        samples = np.asarray(self._em_samples, dtype=float)
        estimate = estimate_inverse_mass(samples, self.mass_estimator, self.structure)
        if estimate is None:
            return
        old_inverse = np.asarray(self.mass.inverse, dtype=float)
        kappa = step_sequence(self.mass_updates + 1, self.kappa_exponent)
        new_inverse = online_inverse_mass_update(old_inverse, estimate, kappa)
        if self._too_stiff(samples, old_inverse, new_inverse):
            return
        if len(self._em_records) >= 2:
            self.sample_size = self.rule.next_sample_size(
                self.sample_size,
                self._test_function(old_inverse, self._em_records),
                self._test_function(new_inverse, self._em_records),
            )
        self._mass = mass_from_inverse(new_inverse, self._dtype)
        self._condition = condition_number(new_inverse)
        self.mass_updates += 1
        if self.momentum_persists:
            # Carried momentum must follow N(0, M) under the new mass.
            self.auxiliary[0] = self.mass.draw_momentum(self.rng)


def _initial_mass(initial_mass, dim: int, structure: str):
    """The user's starting mass in the learned structure (identity by default)."""
    if initial_mass is None:
        return np.eye(dim) if structure == "dense" else None
    m = np.asarray(initial_mass, dtype=float)
    if structure == "dense" and m.ndim < 2:
        return np.diag(np.broadcast_to(m, (dim,)))
    if structure == "diag" and m.ndim == 2:
        raise ValueError(
            "initial_mass is a matrix but mass='diag' learns a diagonal: pass its diagonal, "
            "or use mass='dense'."
        )
    return m


def _merge_stats(*classes) -> dict:
    merged: dict = {}
    for cls in classes:
        merged.update(cls.stats_dtypes_shapes)
    return merged


class HMCEM(MassEM, HMC):
    """HMC-EM: HMC whose mass is learned by Monte Carlo EM (Algorithm 1).

    The E step is :class:`HMC` (full-data Metropolis–Hastings test) with the mass held
    fixed; one sample is stored per iteration, after the test. See :class:`MassEM` for
    the EM parameters; ``step_size``, ``n_steps`` and the rest are :class:`HMC`'s.
    """

    __doc__ = (__doc__ or "") + (MassEM.__doc__ or "").split("Parameters", 1)[-1]
    name = "hmc_em"
    stats_dtypes_shapes: ClassVar[dict] = _merge_stats(HMC, MassEM)


class SGHMCEM(MassEM, SGHMC):
    """SGHMC-EM: SGHMC whose mass is learned by Monte Carlo EM.

    SGHMC's dynamics in the E step of Algorithm 2's loop; the momentum at the end of each
    trajectory (before the next draw resamples it) is the stored sample. See
    :class:`MassEM` for the EM parameters and :class:`SGHMC` for the others.
    """

    name = "sghmc_em"
    _record_gradient = True
    stats_dtypes_shapes: ClassVar[dict] = _merge_stats(SGHMC, MassEM)


class SGNHTEM(MassEM, SGNHT):
    """SGNHT-EM: SGNHT whose mass is learned by Monte Carlo EM (Algorithm 2).

    The test function of the E-step size rule is ``[M⁻¹p, ∇L(θ) + ξM⁻¹p, pᵀM⁻¹p]``.
    See :class:`MassEM` for the EM parameters and :class:`SGNHT` for the others.
    """

    name = "sgnht_em"
    _record_gradient = True
    stats_dtypes_shapes: ClassVar[dict] = _merge_stats(SGNHT, MassEM)

    def _test_record(self) -> tuple:
        momentum, gradient = super()._test_record()
        return (momentum, gradient, float(self.auxiliary[1]))

    def _test_function(self, inv_mass: np.ndarray, records: list) -> np.ndarray:
        momenta = np.array([r[0] for r in records])
        gradients = np.array([r[1] for r in records])
        thermostats = np.array([r[2] for r in records])
        return sgnht_test_function(inv_mass, momenta, gradients, thermostats)
