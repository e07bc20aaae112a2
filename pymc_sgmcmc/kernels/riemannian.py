"""Kernels of the Riemannian samplers: RMHMC and SGR-NPHMC.

Both move on ``H`` with a position-dependent metric ``G(θ)``
(:class:`~pymc_sgmcmc.metrics.riemannian.PositionDependentMetric`) by the generalized
leapfrog of :mod:`pymc_sgmcmc.dynamics.riemannian`. The partial derivatives of ``H``
that it needs are built here with ``pytensor.grad``: the log density's gradient comes
from the target (the sampler's gradient estimator), the metric's terms are
differentiated with the other variables held fixed (``disconnected_grad``).

- RMHMC, Girolami and Calderhead, "Riemann manifold Langevin and Hamiltonian Monte Carlo
  methods": ``H(θ, p) = −L(θ) + ½ log det G(θ) + ½ pᵀG(θ)⁻¹p``, a fresh
  ``p ~ N(0, G(θ))`` each trajectory and a Metropolis–Hastings test on the full data
  (the glue runs it because the kernel has an :func:`rhmc_energy`).
- SGR-NPHMC, Roychowdhury, Kulis and Parthasarathy, "Robust Monte Carlo Sampling using
  Riemannian Nosé-Poincaré Hamiltonian Dynamics" (supplement, eqs. 1–3): the extended
  state ``(θ, p̃, s, q)`` carries over between draws, gradients may be stochastic, the
  noise of eq. 2 is an exact Ornstein–Uhlenbeck step, and there is no test.

Both kernels' steps are symbolic only (the metric may be built from the model's
Hessian); a chain's first momentum is drawn inside the compiled call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from pymc_sgmcmc.core.arrays import Array
from pymc_sgmcmc.core.validation import check_count, check_positive
from pymc_sgmcmc.dynamics.riemannian import (
    FixedPoint,
    NosePoincareDerivatives,
    generalized_leapfrog_step,
    nose_poincare_step,
    riemannian_ornstein_uhlenbeck,
)
from pymc_sgmcmc.kernels.base import Kernel, Target
from pymc_sgmcmc.kernels.sgnphmc import or_dimension, temperature_scale
from pymc_sgmcmc.metrics.riemannian import (
    PositionDependentMetric,
    metric_force,
    metric_log_det,
    metric_solve,
    metric_sqrt_times,
    softabs_diagonal_hessian,
)


def as_metric(metric: Any) -> PositionDependentMetric:
    """The sampler's metric from the user's ``metric=``.

    Parameters
    ----------
    metric : None, PositionDependentMetric or callable
        None: :func:`~pymc_sgmcmc.metrics.riemannian.softabs_diagonal_hessian`; a
        :class:`PositionDependentMetric` as it is; a callable
        ``(position, target) -> G`` (a positive vector for a diagonal ``G``, a symmetric
        positive-definite matrix for a dense one, as PyTensor expressions).
    """
    if metric is None:
        return softabs_diagonal_hessian()
    if isinstance(metric, PositionDependentMetric):
        return metric
    if callable(metric):
        name = getattr(metric, "__name__", "user metric")
        return PositionDependentMetric(metric, name=name)
    raise TypeError(
        f"metric must be None (SoftAbs of the Hessian's diagonal), a "
        f"PositionDependentMetric or a function (position, target) -> G, got {metric!r}."
    )


def solver(fixed_point_steps: int) -> FixedPoint:
    """Validated fixed-point iterations per implicit update."""
    fix = "Pass fixed_point_steps >= 1 (Girolami and Calderhead use about 6)."
    return FixedPoint(check_count("fixed_point_steps", fixed_point_steps, 1, fix))


def at_point(function: Callable[..., Array]) -> Callable[..., Array]:
    """``function(θ, ...)`` built at a placeholder for ``θ``, which is then replaced.

    The model's log density reaches ``θ`` through ``clone_replace``, which copies an
    expression it is given; a derivative with respect to a trial point of the leapfrog
    (an expression) would then be disconnected. Built at a fresh variable, every
    derivative inside ``function`` is taken with respect to that variable.
    """
    from pytensor.graph.basic import Variable
    from pytensor.graph.replace import graph_replace

    def evaluated(position: Array, *args: Array) -> Array:
        if not isinstance(position, Variable):
            return function(position, *args)
        placeholder = position.type()
        value = function(placeholder, *args)
        return graph_replace(value, {placeholder: position}, strict=False)

    return evaluated


class Geometry:
    """``G(θ)`` and ``log det G(θ)``, built once per point of a step.

    Every derivative of ``H`` needs ``G`` at the same few points (the step's start, its
    end, the fixed-point iterates); a metric built from the model (the default) is a
    Hessian, and one graph per use made a step of SGR-NPHMC a graph of 28,000 nodes
    that took minutes to compile. Keyed by the position variable.
    """

    def __init__(self, metric: PositionDependentMetric, target: Target) -> None:
        self.metric = metric
        self.target = target
        self._cache: dict[Any, tuple[Array, Array]] = {}

    def __call__(self, position: Array) -> tuple[Array, Array]:
        """``(G(θ), log det G(θ))``."""
        if position not in self._cache:
            g = at_point(self.metric.matrix)(position, self.target)
            self._cache[position] = (g, metric_log_det(g))
        return self._cache[position]

    def velocity(self, position: Array, momentum: Array) -> Array:
        """``G(θ)⁻¹ p``."""
        return metric_solve(self(position)[0], momentum)


# -- RMHMC -----------------------------------------------------------------------------


class RHMCState(NamedTuple):
    """RMHMC's state: ``θ`` and ``p``."""

    position: Array
    momentum: Array


class RHMCParams(NamedTuple):
    """RMHMC's parameters: ``ε``, the metric ``G(θ)`` and the fixed-point iterations."""

    step_size: Array
    metric: PositionDependentMetric
    solver: FixedPoint


def rhmc_init(position: Array, normal: Array, params: RHMCParams) -> RHMCState:
    """A chain at ``position``; its momentum is drawn by :func:`rhmc_refresh`."""
    return RHMCState(position, np.asarray(normal).copy())


def rhmc_refresh(state: RHMCState, target: Target, normal: Array, params: RHMCParams) -> RHMCState:
    """``p ~ N(0, G(θ))`` at the start of every trajectory."""
    g, _ = Geometry(params.metric, target)(state.position)
    return state._replace(momentum=metric_sqrt_times(g, normal))


def rhmc_grad_position(metric: PositionDependentMetric, target: Target) -> Callable:
    """``(θ, p) ↦ ∂H/∂θ = −∇L(θ) + ∂θ[½ log det G(θ) + ½ pᵀG(θ)⁻¹p]``, ``p`` fixed."""

    def grad_position(position: Array, momentum: Array) -> Array:
        g = metric.matrix(position, target)
        force = metric_force(position, g, metric_solve(g, momentum), 0.5, 0.5)
        return -target.grad(position) + force

    return at_point(grad_position)


def rhmc_step(
    state: RHMCState, target: Target, noise: Array, params: RHMCParams
) -> tuple[RHMCState, dict]:
    """One generalized leapfrog step; its info is the fixed-point ``residual``."""
    position, momentum, residual = generalized_leapfrog_step(
        state.position,
        state.momentum,
        rhmc_grad_position(params.metric, target),
        Geometry(params.metric, target).velocity,
        params.step_size,
        params.solver,
    )
    return RHMCState(position, momentum), {"residual": residual}


def rhmc_energy(state: RHMCState, target: Target, params: RHMCParams) -> Array:
    """``H(θ, p) = −L(θ) + ½ log det G(θ) + ½ pᵀG(θ)⁻¹p``."""
    g, log_det = Geometry(params.metric, target)(state.position)
    quadratic = (state.momentum * metric_solve(g, state.momentum)).sum()
    return -target.logp(state.position) + 0.5 * quadratic + 0.5 * log_det


def rhmc_stats(state: RHMCState, info: dict, params: RHMCParams) -> dict:
    """The trajectory's largest fixed-point residual and the iterations per update."""
    return {
        "fixed_point_residual": info["residual"],
        "fixed_point_steps": params.solver.steps,
    }


LOG_DET_LIMIT = 700.0
"""The largest ``|log |G||`` at which SGR-NPHMC's thermostat mass ``|G|`` is a float."""


def metric_log_det_at(
    params: Any, target: Target, position: Any, point: Any, sampler: str
) -> float:
    """Evaluate ``G`` once at ``point``; refuse a wrong shape or a non-SPD value.

    ``target`` is the full-data target, ``position`` the symbolic flat position it is a
    function of. Returns ``log |G|`` there.
    """
    import pytensor

    dim = int(np.size(point))
    fix = (
        f"metric= must return G(θ) as a positive vector of length {dim} (diagonal) or a "
        f"symmetric positive-definite {dim}x{dim} matrix, finite at the initial point; "
        "e.g. pass metric=None for the SoftAbs of the Hessian's diagonal, or make a "
        "diagonal positive with pt.exp or pt.softplus."
    )
    try:
        g = params.metric.matrix(position, target)
        fn = pytensor.function([position], g, on_unused_input="ignore")
    except Exception as error:
        raise ValueError(f"{sampler}: the metric could not be built ({error}). {fix}") from error
    value = np.asarray(fn(point), dtype=float)
    if value.shape not in ((dim,), (dim, dim)):
        raise ValueError(f"{sampler}: the metric has shape {value.shape}, not ({dim},). {fix}")
    if not np.all(np.isfinite(value)):
        raise ValueError(f"{sampler}: the metric is not finite at the initial point. {fix}")
    if value.ndim == 1:
        positive = bool(np.all(value > 0))
    else:
        symmetric = np.allclose(value, value.T, rtol=1e-8, atol=1e-12 * np.abs(value).max())
        positive = symmetric and bool(np.all(np.linalg.eigvalsh(value) > 0))
    if not positive:
        raise ValueError(
            f"{sampler}: the metric is not positive definite at the initial point. {fix}"
        )
    if value.ndim == 1:
        return float(np.log(value).sum())
    return float(np.linalg.slogdet(value)[1])


def rhmc_validate(params: Any, target: Target, position: Any, point: Any, sampler: str) -> None:
    """RHMC's metric, evaluated once at the initial point (:func:`metric_log_det_at`)."""
    metric_log_det_at(params, target, position, point, sampler)


def np_validate(params: Any, target: Target, position: Any, point: Any, sampler: str) -> None:
    """SGR-NPHMC's metric as RHMC's, and a thermostat mass ``|G|`` that is a float."""
    log_det = metric_log_det_at(params, target, position, point, sampler)
    # The thermostat's mass is |G(θ)| itself (eq. 1): q ~ N(0, kT |G|) overflows, and
    # |G|⁻¹ underflows, once log |G| leaves about ±700.
    if abs(log_det) > LOG_DET_LIMIT:
        raise ValueError(
            f"{sampler}: log |G(θ)| = {log_det:.4g} at the initial point; the thermostat "
            f"mass |G| of eq. 1 is then outside floating point (|log |G|| must stay "
            f"below {LOG_DET_LIMIT:g}). Pass a metric with smaller entries (e.g. scaled "
            "by a constant), fewer variables, or use RHMC or SGNPHMC."
        )


RHMC = Kernel(
    metric="position_dependent",
    validate=rhmc_validate,
    name="rhmc",
    state_type=RHMCState,
    params_type=RHMCParams,
    init=rhmc_init,
    refresh=rhmc_refresh,
    step=rhmc_step,
    energy=rhmc_energy,
    stats=rhmc_stats,
    stats_dtypes={
        "fixed_point_residual": (np.float64, []),
        "fixed_point_steps": (np.int64, []),
    },
    step_info={"residual": "max"},
    step_noise=False,
    default_step_size=0.3,
)


# -- SGR-NPHMC -------------------------------------------------------------------------


class NPState(NamedTuple):
    """SGR-NPHMC's state.

    ``θ``, the real momentum ``p̃ = p/s``, the thermostat's control ``s`` and momentum
    ``q``.
    """

    position: Array
    momentum: Array
    control: Array
    control_momentum: Array


class NPParams(NamedTuple):
    """``ε``, ``G(θ)``, the solver, the frictions ``B`` and ``A``, ``kT`` and ``g``.

    ``degrees_of_freedom`` at 0 stands for the number of sampled scalars ``D``.
    """

    step_size: Array
    metric: PositionDependentMetric
    solver: FixedPoint
    friction: Array
    diffusion: Array
    temperature: Array
    degrees_of_freedom: Array


def np_parameters(
    friction: float = 1.0,
    diffusion: float = 1.0,
    temperature: float = 1.0,
    degrees_of_freedom: float | None = None,
) -> dict:
    """Validated ``B > 0``, ``A > 0``, ``kT > 0`` and ``g > 0`` (None: ``g = D``)."""
    return {
        "friction": check_positive(
            "friction", friction, "Pass the momentum friction B > 0, e.g. friction=1.0."
        ),
        "diffusion": check_positive(
            "diffusion", diffusion, "Pass the thermostat friction A > 0, e.g. diffusion=1.0."
        ),
        "temperature": check_positive(
            "temperature", temperature, "Pass kT > 0; kT = 1 samples the posterior."
        ),
        "degrees_of_freedom": 0.0
        if degrees_of_freedom is None
        else check_positive(
            "degrees_of_freedom", degrees_of_freedom, "Pass g > 0, or None for g = D."
        ),
    }


def _nose_inner(
    logp: Array,
    quadratic: Array,
    q: Array,
    log_det: Array,
    s: Array,
    dimension: Array,
    temperature: Array,
    degrees_of_freedom: Array,
) -> Array:
    """Eq. 1's bracket without ``H₀`` from its pieces; ``quadratic = (p/s)ᵀG⁻¹(p/s)``."""
    import pytensor.tensor as pt

    return (
        -logp
        + 0.5 * quadratic
        + 0.5 * q**2 * pt.exp(-log_det)
        + 0.5 * (1.0 + temperature) * (dimension * math.log(2 * math.pi) + log_det)
        + degrees_of_freedom * temperature * pt.log(s)
    )


def nose_energy(
    position: Array,
    momentum: Array,
    s: Array,
    q: Array,
    metric: PositionDependentMetric,
    target: Target,
    temperature: Array,
    degrees_of_freedom: Array,
) -> Array:
    """Eq. 1's bracket without ``H₀`` (so ``H = s (H_N − H₀)``), ``p`` canonical.

    ``H_N = −L(θ) + ½ (p/s)ᵀG⁻¹(p/s) + ½ |G|⁻¹q² + (1+kT)/2 log{(2π)^D |G|} + g kT log s``.
    """
    g, log_det = Geometry(metric, target)(position)
    quadratic = (momentum * metric_solve(g, momentum)).sum() / s**2
    return _nose_inner(
        target.logp(position),
        quadratic,
        q,
        log_det,
        s,
        momentum.shape[0],
        temperature,
        degrees_of_freedom,
    )


def np_derivatives(
    params: NPParams,
    target: Target,
    h0: Array,
    degrees_of_freedom: Array,
    geometry: Geometry | None = None,
) -> NosePoincareDerivatives:
    """``∂H/∂θ``, ``∂H/∂p``, ``∂H/∂s`` and ``∂H/∂q`` of eq. 1, each with the rest fixed."""
    import pytensor.tensor as pt

    metric, kT, g_dof = params.metric, params.temperature, degrees_of_freedom
    geometry = geometry or Geometry(metric, target)

    def d_position(position, momentum, s, q):
        # s ∂θ[−L̃ + ½ (p/s)ᵀG⁻¹(p/s) + ½|G|⁻¹q² + (1+kT)/2 log|G|]: ∂θ|G|⁻¹ = −|G|⁻¹ ∂θ log|G|.
        g = metric.matrix(position, target)
        log_det = metric_log_det(g)
        log_det_weight = 0.5 * s * (1.0 + kT) - 0.5 * s * q**2 * pt.exp(-log_det)
        force = metric_force(position, g, metric_solve(g, momentum), 0.5 / s, log_det_weight)
        return -s * target.grad(position) + force

    def d_momentum(position, momentum, s, q):
        # G⁻¹p / s
        return geometry.velocity(position, momentum) / s

    def d_s(position, momentum, s, q):
        # H_N − H₀ + g kT − (p/s)ᵀG⁻¹(p/s)  (eq. 3's bracket of the q updates)
        g, log_det = geometry(position)
        quadratic = (momentum * metric_solve(g, momentum)).sum() / s**2
        inner = _nose_inner(
            target.logp(position), quadratic, q, log_det, s, momentum.shape[0], kT, g_dof
        )
        return inner - h0 + g_dof * kT - quadratic

    def d_q(position, momentum, s, q):
        # s q |G|⁻¹
        return s * q * pt.exp(-geometry(position)[1])

    return NosePoincareDerivatives(at_point(d_position), d_momentum, d_s, d_q)


def np_init(position: Array, normal: Array, params: NPParams) -> NPState:
    """A chain at ``position``: ``s = 1``, ``q = 0``; ``p̃`` drawn by :func:`np_refresh`."""
    dtype = position.dtype
    zero, one = np.zeros((), dtype=dtype), np.ones((), dtype=dtype)
    return NPState(position, np.zeros_like(position), one, zero)


def np_refresh(state: NPState, target: Target, normal: Array, params: NPParams) -> NPState:
    """``p̃ ~ N(0, kT G(θ))``: a new chain's first trajectory, or after a restart."""
    g, _ = Geometry(params.metric, target)(state.position)
    return state._replace(momentum=params.temperature**0.5 * metric_sqrt_times(g, normal))


def np_prepare(state: NPState, target: Target, params: NPParams) -> NPState:
    """Each trajectory starts at ``s = 1``.

    ``s`` does not enter the real-time dynamics (``p̃`` is kept and ``H₀`` follows the
    state), so resetting it keeps the step size's meaning from drifting.
    """
    return state._replace(control=state.control * 0.0 + 1.0)


def np_step(state: NPState, target: Target, noise: Array, params: NPParams) -> tuple[NPState, dict]:
    """One step: Ornstein–Uhlenbeck noise, ``H₀`` on the level set, eq. 3's leapfrog.

    The splitting of :mod:`pymc_sgmcmc.dynamics.nose_poincare` for SG-NPHMC, with the
    metric ``G(θ)``: an exact Ornstein–Uhlenbeck step of ``p̃`` (toward ``N(0, kT G(θ))``)
    and ``q`` (toward ``N(0, kT |G(θ)|)``), ``H₀`` set so that ``H = 0`` at the state on
    this step's rows, then the deterministic generalized leapfrog of eq. 3. Its info: the
    step's ``energy_error`` (eq. 1 after it), the kinetic ``temperature`` after it and the
    fixed-point ``residual`` (the statistics cannot evaluate ``G`` themselves).
    """
    eps, kT = params.step_size, params.temperature
    position, s = state.position, state.control
    dim = position.shape[0]
    g_dof = or_dimension(params.degrees_of_freedom, position)
    geometry = Geometry(params.metric, target)
    g, log_det = geometry(position)
    real_momentum, q = riemannian_ornstein_uhlenbeck(
        state.momentum,
        state.control_momentum,
        metric_sqrt_times(g, noise[:dim]),
        noise[dim],
        log_det,
        eps,
        params.friction,
        params.diffusion,
        kT,
    )
    momentum = s * real_momentum

    def energy(position, momentum, s, q):
        g, log_det = geometry(position)
        quadratic = (momentum * metric_solve(g, momentum)).sum() / s**2
        return _nose_inner(target.logp(position), quadratic, q, log_det, s, dim, kT, g_dof)

    h0 = energy(position, momentum, s, q)
    new_position, new_momentum, new_s, new_q, residual = nose_poincare_step(
        position,
        momentum,
        s,
        q,
        np_derivatives(params, target, h0, g_dof, geometry),
        eps,
        params.solver,
    )
    # Eq. 1 after the step: 0 for the exact flow, the step's energy error otherwise.
    error = new_s * (energy(new_position, new_momentum, new_s, new_q) - h0)
    new_real = new_momentum / new_s
    new_g, _ = geometry(new_position)
    temperature = (new_real * metric_solve(new_g, new_real)).sum() / dim
    info = {"energy_error": error, "temperature": temperature, "residual": residual}
    return NPState(new_position, new_real, new_s, new_q), info


def np_stats(state: NPState, info: dict, params: NPParams) -> dict:
    """``s``, ``q``, the energy drift, the kinetic temperature and the fixed-point residual."""
    return {
        "kinetic_temperature": info["temperature"] * temperature_scale(params.step_size, params),
        "control": state.control,
        "control_momentum": state.control_momentum,
        "energy_drift": info["energy_error"],
        "fixed_point_residual": info["residual"],
        "fixed_point_steps": params.solver.steps,
    }


SGRNPHMC = Kernel(
    name="sgrnphmc",
    state_type=NPState,
    params_type=NPParams,
    init=np_init,
    refresh=np_refresh,
    refresh_first=True,
    prepare=np_prepare,
    step=np_step,
    stats=np_stats,
    stats_dtypes={
        "kinetic_temperature": (np.float64, []),
        "control": (np.float64, []),
        "control_momentum": (np.float64, []),
        "energy_drift": (np.float64, []),
        "fixed_point_residual": (np.float64, []),
        "fixed_point_steps": (np.int64, []),
    },
    step_info={"energy_error": "sum", "temperature": "last", "residual": "max"},
    step_noise_extra=1,
    default_step_size=0.2,
    checked_stats=("kinetic_temperature",),
    metric="position_dependent",
    validate=np_validate,
)
