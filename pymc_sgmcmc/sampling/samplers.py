"""The public samplers: a signature, a docstring, a kernel and adapters each.

Everything they share (compilation, randomness, restarts, statistics, the Metropolis test,
adaptation) is :class:`~pymc_sgmcmc.sampling.step.StochasticGradientStep`; their mathematics
is in :mod:`pymc_sgmcmc.kernels`.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from pymc_sgmcmc.adaptation.em import MassEM
from pymc_sgmcmc.adaptation.fisher_scoring import FisherScoring
from pymc_sgmcmc.adaptation.schedules import StepSizeSchedule
from pymc_sgmcmc.kernels import (
    geodesic,
    hmc,
    mala,
    psgld,
    riemannian,
    sgfs,
    sghmc,
    sgld,
    sgnht,
    sgnphmc,
    sgrld,
)
from pymc_sgmcmc.sampling.fisher import FisherMeasurement
from pymc_sgmcmc.sampling.step import StochasticGradientStep

COMMON_PARAMETERS_DOC = """
    Other Parameters
    ----------------
    step_size : float, schedule or "auto", default "auto"
        ``ε``: a positive number, a schedule such as
        :class:`pymc_sgmcmc.PolynomialDecay` (``ε_t = a (b + t)^(−γ)``), or "auto"
        (not for the geodesic samplers): the mode and the Laplace covariance there are
        found before sampling (:func:`pymc_sgmcmc.find_mode`), the mass is set to the
        Laplace precision (dense up to 200 dimensions, diagonal above; an EM sampler
        starts its M steps from it) unless ``mass=`` is given, and ``ε`` is the kernel's
        default in those units (SGLD 0.1, SGHMC 0.2, SGNHT 0.1, HMC 0.3). A number keeps
        the identity mass unless ``mass=`` is given.
    gradient : {"auto", "minibatch", "control_variates", "svrg", "saga"}, default "auto"
        The gradient estimator with ``pm.Minibatch`` data. "control_variates":
        ``∇log p̃_b(θ) − ∇log p̃_b(θ̂) + ∇log p(θ̂)`` with both minibatch terms on the
        same rows, anchored at the mode ``θ̂`` (Baker, Fearnhead, Fox and Nemeth,
        "Control variates for stochastic gradient MCMC"); "svrg": the same with the
        anchor moved to the chain's state every ``anchor_every`` iterations (Dubey et
        al., "Variance reduction in stochastic gradient Langevin dynamics"); "saga":
        their table of every datum's gradient, refreshed for the rows each draw used
        (``N × D`` numbers per chain, refused where they would not fit in memory);
        "minibatch": the plain estimator. "auto" is "control_variates" when the model has
        ``pm.Minibatch`` data (but for sphere variables) and "minibatch" otherwise.
    anchor : dict or ModeResult, optional
        The control variates' anchor (a point by value-variable name, e.g. from
        :func:`pymc_sgmcmc.find_mode`); the mode by default. A point of the wrong shape
        or with a non-finite density is refused before sampling.
    anchor_every : int, default 100
        SVRG: iterations between anchor moves (each a full-data pass).
    start : {"auto", "laplace", "initial_point"}, default "auto"
        Where chains start: "laplace" at independent draws from the Laplace
        approximation (dispersed around the mode, so R-hat keeps its meaning);
        "initial_point" where ``pm.sample`` starts them; "auto" is "laplace" when a mode
        was found and no ``initvals`` were given. A centred hierarchy without a joint mode,
        without a non-centred twin and not of a location-scale law starts around the
        initial point, jittered at each coordinate's scale there (``step.without_mode``
        names its locals).
    mode_kwargs : dict, optional
        Options of :func:`pymc_sgmcmc.find_mode` (``adam_steps``, ``learning_rate``,
        ``maxiter``, ``gtol``, ``chunk_rows``, ``curvature``, ``progressbar``,
        ``random_seed``, ``start``).
    n_steps : int, default 10
        Integrator steps per draw; one draw costs ``n_steps`` gradients, all run in one
        compiled call.
    minibatch : {"step", "trajectory"}, default "step"
        With ``pm.Minibatch`` data: draw fresh rows for every gradient ("step", the
        seeds' choice, whose gradient noise is independent from step to step as the
        dynamics assume), or one set of rows for the whole trajectory ("trajectory").
        Where a call's arrays are in memory and hold 1 MiB or more, its minibatches are
        windows of consecutive rows of a shuffled copy (every row equally likely, as
        with ``pm.Minibatch``; :mod:`pymc_sgmcmc.sampling.row_windows`). Without
        ``pm.Minibatch`` every gradient uses the full data.
    draws_per_call : int, default 1
        After tuning, the most draws computed in one compiled call (a scan over draws,
        handed to ``pm.sample`` one at a time), e.g. 20. A block also ends at each
        gradient-noise probe (every 20 draws) and SVRG anchor move. The draws do not
        depend on it: each one's randomness comes from the chain's generator in the
        order single draws take it. Without effect where blocks would be wrong (a kernel
        with a Metropolis test, whole groups, out-of-core data, a ``CompoundStep``).
    vars : list, optional
        Variables to sample; by default all continuous free variables.
    model : pymc.Model, optional
    rng : RandomGenerator, optional
        Replaced by the chain's generator when ``pm.sample`` starts each chain.
    initial_point : dict, optional
        A point of the model, for shapes; the model's initial point by default.
    compile_kwargs : dict, optional
        Passed to ``pytensor.function`` (e.g. ``{"mode": "JAX"}``).
    allow_missing_total_size : bool, default False
        Accept an observed variable fed by ``pm.Minibatch`` without ``total_size``; by
        default that is refused before sampling (its likelihood would count one
        minibatch instead of the data).
"""

EM_PARAMETERS_DOC = (
    "Monte Carlo EM parameters: those of :class:`MassEM`, listed under Other Parameters.\n\n"
    "Other Parameters\n----------------"
    + inspect.cleandoc(MassEM.__doc__ or "").split("----------", 1)[-1]
)
"""The EM samplers' extra parameters and statistics: those of :class:`MassEM`."""


def _with_sections(doc: str | None, sections: str) -> str:
    """A class docstring with numpydoc ``sections`` appended, both dedented.

    Python 3.13 dedents docstrings when it compiles them and earlier versions do not;
    cleaning both parts gives the same docstring on every version.
    """
    return inspect.cleandoc(doc or "") + "\n\n" + inspect.cleandoc(sections) + "\n"


def _without_parameter(sections: str, name: str) -> str:
    """Numpydoc ``sections`` without parameter ``name``'s entry (up to the next one)."""
    lines = inspect.cleandoc(sections).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name} : "))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()),
        len(lines),
    )
    return "\n".join(lines[:start] + lines[end:])


EM_OPTIONS = (
    "mass_estimator",
    "initial_mass",
    "sample_size",
    "adaptive_sample_size",
    "sample_size_rule",
    "offsets",
    "offset_nu",
    "offset_d",
    "n_subsamples",
    "kappa_exponent",
    "adapt_during_sampling",
)


_REGISTRY: list[type[StochasticGradientStep]] = []


def register(cls: type[StochasticGradientStep]) -> type[StochasticGradientStep]:
    """Add a public sampler to :data:`SAMPLERS` (the one list of samplers)."""
    _REGISTRY.append(cls)
    return cls


@register
class SGLD(StochasticGradientStep):
    """Stochastic gradient Langevin dynamics.

    ``θ ← θ + ε ∇log p̃(θ) + N(0, 2ε)`` (Bhardwaj, Khatri and Gupta, "Online MCMC based
    Bayesian inference", §2.2, with the noise variance that makes Langevin dynamics
    exact as ``ε → 0``). Each draw is the position after ``n_steps`` such steps.

    Statistics
    ----------
    ``step_size``, ``n_steps``, ``minibatch_logp`` (log density at the draw on the last
    step's rows), ``diverging``, ``divergences``.
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "sgld"
    kernel = sgld.KERNEL

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars, step_size=step_size, n_steps=n_steps, kernel_params=sgld.parameters(), **kwargs
        )


@register
class PSGLD(StochasticGradientStep):
    """Preconditioned SGLD: Langevin steps preconditioned by RMSprop's running mean square.

    Li, Chen, Carlson and Carin, "Preconditioned Stochastic Gradient Langevin Dynamics
    for Deep Neural Networks" (Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian
    inference", §3.2): at every step ``V ← α V + (1 − α) ḡ²`` from the step's minibatch
    gradient, ``G = 1/(λ + √V)``, and ``θ ← θ + η G ∇log p̃(θ) + N(0, 2η G)``
    (:mod:`pymc_sgmcmc.kernels.psgld`). Two choices of ours, both to keep the posterior:

    - ``V`` learns during tuning and is held for the kept draws, where ``G`` is then
      constant and the paper's correction term ``Γ(θ)`` (the divergence of ``G``, which
      the paper drops) is exactly zero;
    - the steps act in the coordinates ``u = Lᵀθ`` that whiten the metric ``M = L Lᵀ``
      (the Laplace covariance at the mode with ``step_size="auto"``, rescaled in windows
      during tuning), where ``V`` starts at 1 and ``G`` stays near 1 except in
      coordinates whose gradient is noisy, which it slows. With ``mass=1`` and a
      ``step_size`` of your own (no mode search) the steps are the paper's, in the
      model's own coordinates.

    Parameters
    ----------
    decay : float, default 0.99
        ``α``, RMSprop's decay: ``V`` averages the last ~``1/(1 − α)`` steps.
    offset : float, default 1e-5
        ``λ``, which keeps ``G`` finite where ``V`` is near 0.
    mass : float, array, optional
        ``M``, as :class:`SGLD`'s; by default the Laplace covariance's inverse at the
        mode.

    Statistics
    ----------
    SGLD's, and ``preconditioner_min``, ``preconditioner_max`` (the range of ``G`` at the
    draw).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "psgld"
    kernel = psgld.KERNEL

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        decay: float = 0.99,
        offset: float = 1e-5,
        mass=None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=psgld.parameters(decay=decay, offset=offset),
            mass=mass,
            **kwargs,
        )


@register
class SGFS(StochasticGradientStep):
    """Stochastic gradient Fisher scoring: Langevin steps preconditioned by the empirical Fisher.

    Ahn, Korattikara and Welling, "Bayesian Posterior Sampling via Stochastic Gradient
    Fisher Scoring" (Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference",
    §3.3), Algorithm 1: ``θ ← θ + 2C⁻¹(g̃ + ζ)`` with ``C = 2F/h + Q`` and
    ``ζ ~ N(0, (2/h − 1)F)`` (:mod:`pymc_sgmcmc.dynamics.sgfs`), where

    - ``F`` is the curvature: the data's empirical Fisher information (``N`` times the
      covariance of the rows' gradients) plus the negative Hessian of the priors and the
      other terms that read no rows;
    - ``Q`` is the covariance of the gradient estimate's error, measured from the same
      rows' gradients (with plain minibatches ``(N/n) F``, the paper's ``γ = (N + n)/n``;
      far smaller with control variates).

    With ``Q`` in ``C`` the injected noise makes room for the gradient's own: on a Gaussian
    posterior the chain is exact at any step size ``h < 2``, and ``h = 1`` draws it afresh
    at every step; elsewhere the error grows with ``h`` as for any Langevin step. ``h`` is
    the paper's ``ε`` with its ``B ∝ Î`` (``4B/ε = (2/h − 1) F``). Both running means (the
    paper's ``κ_t = 1/t``) are measured at each tuning draw on a fresh minibatch at the
    draw (one Jacobian of the rows' log densities) and held for the kept draws
    (:class:`~pymc_sgmcmc.adaptation.fisher_scoring.FisherScoring`), so that the kept
    chain is time-homogeneous; a step then costs two products with a ``D × D`` matrix and
    no solve. They start from one measurement at the mode (at the initial point without a
    mode search), made with 10 minibatches' worth of rows.

    Parameters
    ----------
    fisher_structure : {"auto", "dense", "diagonal"}, default "auto"
        Keep ``F`` and ``Q`` whole (``D × D`` memory) or their diagonals; "auto": whole up
        to 200 coordinates.

    Statistics
    ----------
    SGLD's, and ``fisher_noise_max`` (the largest variance of the gradient's noise in
    units of the curvature; near 0 with control variates, about ``N/n`` with plain
    minibatches).
    """

    __doc__ = _with_sections(
        __doc__,
        COMMON_PARAMETERS_DOC.replace(
            "(SGLD 0.1, SGHMC 0.2, SGNHT 0.1, HMC 0.3)", "(SGFS 0.2, in ``F``'s units)"
        ),
    )
    name = "sgfs"
    kernel = sgfs.KERNEL
    mass_adapter_class = FisherScoring
    START_ROWS_FACTOR = 10
    """Minibatches' worth of rows of the measurement a chain starts from."""

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        fisher_structure: str = "auto",
        **kwargs: Any,
    ) -> None:
        if "mass" in kwargs:
            raise TypeError(
                "SGFS learns its preconditioner from the rows' gradients: it takes no "
                "mass=. Choose its form with fisher_structure='dense' or 'diagonal'."
            )
        adapter = FisherScoring(fisher_structure)
        super().__init__(
            vars, step_size=step_size, n_steps=n_steps, kernel_params=sgfs.parameters(),
            mass_adapter=adapter, **kwargs,
        )  # fmt: skip
        diagonal = adapter.diagonal(self.dim)
        adapter.measure = FisherMeasurement(self, diagonal=diagonal)
        start = (
            self.mode.position if self.mode is not None
            else np.concatenate([np.ravel(self._initial_point[v.name]) for v in self._sampled_vars])
        )  # fmt: skip
        # One larger measurement, on rows from a fixed seed: a step built afresh starts
        # its chains from the same F and Q.
        curvature, noise = adapter.measure(
            start.astype(self._dtype), np.random.default_rng(0), self.START_ROWS_FACTOR
        )
        if self.gradient == "saga":
            # No chain, no table yet: this noise would be the plain minibatch's. A
            # chain's table starts exact at its start, so its noise starts near 0.
            noise = np.zeros_like(noise)
        adapter.initial = (curvature, noise)
        self._reset_chain()


@register
class SGRLD(StochasticGradientStep):
    """Stochastic gradient Riemannian Langevin dynamics on the probability simplex.

    Patterson and Teh, "Stochastic Gradient Riemannian Langevin Dynamics on the Probability
    Simplex" (Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §3.1), in
    the expanded-mean parameterisation the paper recommends: each simplex-valued variable
    (``pm.Dirichlet``, or any variable with PyMC's ``simplex`` transform), ``π = θ/Σθ``,
    moves by ``θ ← |θ + η (G⁻¹∇log p + ∇·G⁻¹) + N(0, 2η diag θ)|`` in the metric
    ``G(θ) = diag(1/θ)``, which slows coordinates near the simplex's boundary where the
    posterior is narrow (:mod:`pymc_sgmcmc.kernels.sgrld`). The other variables take
    :class:`SGLD`'s step. The gradient comes from the model as written, in PyMC's
    coordinates of the simplex, so every gradient estimator (control variates by default)
    serves it; the trace holds ``π`` as PyMC records it.

    The expanded mean's total ``S = Σθ`` is independent of ``π`` with the law
    ``Gamma(a, 1)``; the paper's prior ``θ_k ~ Gamma(α_k, 1)`` is ``a = Σα``. Any ``a``
    leaves the law of ``π`` exact; it sets how far a step moves ``π`` (about
    ``η κ / a`` of its posterior scale, ``κ`` the posterior's concentration). With
    ``simplex_shape="auto"`` and ``step_size="auto"``, ``a`` is the concentration that the
    Laplace precision at the mode implies, so that ``η`` means on the simplices what it
    means off them; with a step size of your own, the paper's ``Σα``.

    Parameters
    ----------
    simplex_shape : float or "auto", default "auto"
        ``a``, for every simplex.
    mass : float, array, optional
        ``M`` of the coordinates off the simplices, as :class:`SGLD`'s; by default the
        Laplace covariance's inverse at the mode, without its covariances with the
        simplices' coordinates.

    Statistics
    ----------
    SGLD's, and ``simplex_total_min``, ``simplex_total_max`` (the range of ``S / a`` over
    the simplices at the draw; near 1 ± a few ``1/√a``).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "sgrld"
    kernel = sgrld.KERNEL

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        simplex_shape: float | str = "auto",
        integrator: str = "gamma",
        mass=None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=sgrld.parameters(simplex_shape, integrator),
            mass=mass,
            **kwargs,
        )


@register
class SGHMC(StochasticGradientStep):
    """Stochastic gradient Hamiltonian Monte Carlo with friction.

    Jiang and Huang, "sghmcmc: a Python package for stochastic gradient MCMC",
    Algorithm 2 (Chen, Fox and Guestrin's SGHMC)::

        θ ← θ + ε M⁻¹ r
        r ← r + ε ∇log p̃(θ) − ε C M⁻¹ r + N(0, 2(C − B̂) ε)

    without a Metropolis correction (it would need the full data). With a mass other
    than the identity, friction and noise estimate act in its metric (``C = c M``,
    ``B̂ = b M``: ``r ← r + ε∇log p̃ − εc r + N(0, 2(c − b)εM)``), see
    :mod:`pymc_sgmcmc.dynamics.sghmc`.

    Parameters
    ----------
    friction : float, default 1.0
        ``C > 0``, the friction that absorbs the minibatch gradient noise.
    noise_estimate : float or "auto", default "auto"
        ``B̂``, an estimate of the gradient-noise covariance ``ε V/2``;
        ``0 ≤ B̂ ≤ C``. The injected noise has variance ``2(C − B̂)ε``. "auto": measured
        during tuning with ``step_size="auto"`` (the mean whitened gradient-noise
        variance, see :class:`~pymc_sgmcmc.adaptation.step_size.AdaptiveStepSize`), 0
        with a step size given by hand.
    mass : float, array, optional
        ``M``: identity by default; a positive number, a positive vector (diagonal) or
        a positive-definite matrix, in the order of the raveled sampled variables.
    resample_momentum : bool, default True
        Draw ``r ~ N(0, M)`` at the start of every trajectory (Algorithm 2's optional
        step); with False the momentum carries over between draws.

    Statistics
    ----------
    SGLD's, and ``kinetic_temperature`` (``rᵀM⁻¹r / D`` at the end of the trajectory).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "sghmc"
    kernel = sghmc.KERNEL

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        friction: float = 1.0,
        noise_estimate: float | str = "auto",
        mass=None,
        resample_momentum: bool = True,
        **kwargs: Any,
    ) -> None:
        self.resample_momentum = bool(resample_momentum)
        estimated = isinstance(noise_estimate, str) and noise_estimate == "auto"
        params = sghmc.parameters(
            friction=friction, noise_estimate=0.0 if estimated else noise_estimate
        )
        if estimated:
            params["noise_estimate"] = "auto"
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=params,
            mass=mass,
            refresh_every_trajectory=self.resample_momentum,
            **kwargs,
        )


@register
class SGNHT(StochasticGradientStep):
    """Stochastic gradient Nosé–Hoover thermostat.

    Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
    Algorithm 2 without the M step (Ding et al.'s SGNHT with a mass matrix)::

        θ ← θ + ε M⁻¹ p
        p ← p − ε ξ M⁻¹ p + ε ∇log p̃(θ) + √(2A) N(0, ε)
        ξ ← ξ + ε (pᵀ M⁻¹ p / D − 1)

    With a mass other than the identity, friction and noise act in its metric
    (``−εξp`` and ``N(0, 2AεM)``), see :mod:`pymc_sgmcmc.dynamics.sgnht`.

    The thermostat ``ξ`` absorbs the unknown gradient noise; momentum and thermostat
    carry over from one draw to the next. A chain starts from ``p ~ N(0, M)`` and
    ``ξ = A``.

    Parameters
    ----------
    diffusion : float, default 1.0
        ``A > 0``, the injected noise intensity.
    mass : float, array, optional
        ``M``, as for :class:`SGHMC`.

    Statistics
    ----------
    SGLD's, ``kinetic_temperature`` (``pᵀM⁻¹p / D``) and ``thermostat`` (``ξ``).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "sgnht"
    kernel = sgnht.KERNEL

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        diffusion: float = 1.0,
        mass=None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=sgnht.parameters(diffusion=diffusion),
            mass=mass,
            **kwargs,
        )


@register
class SGNPHMC(StochasticGradientStep):
    """Stochastic gradient Nosé–Poincaré HMC (SG-NPHMC).

    Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
    §3.4. The Nosé–Poincaré Hamiltonian (eq. 6)::

        H = s [−L(θ) + ½ (p/s)ᵀ M⁻¹ (p/s) + q²/(2Q) + g kT log s − H₀]

    adds a thermostat control ``s`` and its momentum ``q`` to ``(θ, p)``; its flow on
    ``H = 0`` keeps the canonical law of ``(θ, p/s)``. Each step is eq. 7's generalized
    leapfrog (closed form but for a quadratic in ``q``), preceded by the noise terms as an
    exact Ornstein–Uhlenbeck step of the real momenta: ``p/s`` with friction ``B`` and
    ``q`` with friction ``A`` (why not inside the half steps, as eq. 7 writes them: see
    :mod:`pymc_sgmcmc.dynamics.nose_poincare`). ``H₀`` puts the state on ``H = 0`` and
    every trajectory starts at ``s = 1``; momenta carry over from draw to draw.

    Parameters
    ----------
    friction : float, default 1.0
        ``B > 0``, the friction (and noise) on the momentum. The gradient noise must stay
        below it, as SGHMC's below its friction (the ``gradient_noise`` check).
    diffusion : float, default 0.01
        ``A > 0``, eq. 7's friction (and noise) on the thermostat momentum ``q``: the
        rate ``A s/Q`` (the paper's ``−A ∂H/∂q``); 0.01 is the paper's experiments' value.
        Measured on a 5-D standard normal with gradient noise of sd 3 (step 0.1, friction
        1): variance 1.04 at the default, 1.21 with a rate of 1 (the default before).
    thermostat_mass : float, optional
        ``Q > 0``; the number of sampled scalars ``D`` by default, which gives the
        thermostat a time scale of order 1 whatever the dimension.
    temperature : float, default 1.0
        ``kT``; 1 samples the posterior.
    degrees_of_freedom : float, optional
        ``g``; ``D`` by default, the value for which the flow is canonical.
    mass : float, array, optional
        ``M``, as for :class:`SGHMC`.

    Statistics
    ----------
    SGLD's, ``kinetic_temperature`` (``p̃ᵀM⁻¹p̃ / (D kT)`` of the real momentum), ``control``
    (``s``), ``control_momentum`` (``q``) and ``energy_drift`` (the change of eq. 6's ``H``
    summed over the trajectory's steps; 0 for the exact flow, ``O(ε²)`` per step).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "sgnphmc"
    kernel = sgnphmc.KERNEL

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        friction: float = 1.0,
        diffusion: float = 0.01,
        thermostat_mass: float | None = None,
        temperature: float = 1.0,
        degrees_of_freedom: float | None = None,
        mass=None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=sgnphmc.parameters(
                friction=friction,
                diffusion=diffusion,
                thermostat_mass=thermostat_mass,
                temperature=temperature,
                degrees_of_freedom=degrees_of_freedom,
            ),
            mass=mass,
            **kwargs,
        )


@register
class HMC(StochasticGradientStep):
    """Hamiltonian Monte Carlo with a fixed mass.

    Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
    Algorithm 1 without its M step: ``p ~ N(0, M)``, ``n_steps`` leapfrog steps, then a
    Metropolis–Hastings test on ``H(θ, p) = −L(θ) + pᵀM⁻¹p/2`` with the **full-data** log
    density, also when the model's gradient is minibatched (then the leapfrog steps use
    minibatch gradients and the test corrects for them, at the cost of a pass over the
    data per draw).

    Parameters
    ----------
    mass : float, array, optional
        ``M``: identity by default; a positive number, a positive vector (diagonal) or a
        positive-definite matrix, in the order of the raveled sampled variables.
    step_jitter : float, default 0.15
        Each trajectory's step size is drawn uniformly from
        ``step_size × [1 − step_jitter, 1 + step_jitter]``, as PyMC's own HMC does. A
        fixed trajectory length can resonate with the target (on a Gaussian whitened by
        a learned mass every direction has one period, and a trajectory of exactly one
        period returns to its start); the jitter breaks that. ``0`` turns it off.

    Statistics
    ----------
    SGLD's, ``kinetic_temperature``, ``accept`` (``min(1, exp(−ΔH))``), ``accepted``,
    ``energy_error`` (``ΔH``) and ``model_logp`` (full-data log density at the draw,
    PyMC's ``lp``).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "hmc"
    kernel = hmc.KERNEL

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        mass=None,
        step_jitter: float = 0.15,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=hmc.parameters(),
            mass=mass,
            refresh_every_trajectory=True,
            step_jitter=step_jitter,
            **kwargs,
        )


@register
class MALA(StochasticGradientStep):
    """Metropolis-adjusted Langevin algorithm: one Langevin step, then a full-data test.

    Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §2.1: the
    proposal ``θ' ~ N(θ + η/2 M⁻¹∇L(θ), η M⁻¹)`` and a Metropolis–Hastings test with the
    **full-data** log density. It is :class:`HMC` with one leapfrog step per draw
    (``ε = √η``, the same proposal and the same test: :mod:`pymc_sgmcmc.kernels.mala`),
    whose ``step_size="auto"`` tunes ``ε`` during tuning to a mean acceptance of 0.574,
    the optimum for a Langevin proposal, and preconditions it with the Laplace
    covariance at the mode. With ``pm.Minibatch`` data the proposal uses minibatch
    gradients (the rows of its two gradients drawn apart) and the test corrects for
    them, at the cost of a pass over the data per draw: the survey's baseline for the
    stochastic-gradient samplers, exact at any step size.

    Parameters
    ----------
    mass : float, array, optional
        ``M``, as :class:`HMC`'s; by default the Laplace covariance's inverse at the mode.
    step_jitter : float, default 0
        As :class:`HMC`'s. One step per draw cannot resonate with the target, so the
        step is fixed by default.

    Statistics
    ----------
    :class:`HMC`'s: ``kinetic_temperature``, ``accept``, ``accepted``, ``energy_error``
    and ``model_logp``.
    """

    __doc__ = _with_sections(__doc__, _without_parameter(COMMON_PARAMETERS_DOC, "n_steps"))
    name = "mala"
    kernel = mala.KERNEL
    fixed_n_steps = 1

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        mass=None,
        step_jitter: float = 0.0,
        **kwargs: Any,
    ) -> None:
        if "n_steps" in kwargs:
            raise TypeError(
                "MALA takes one Langevin step per draw: it has no n_steps. For several "
                "leapfrog steps per Metropolis test, use pmsg.HMC(n_steps=...)."
            )
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=self.fixed_n_steps,
            kernel_params=mala.parameters(),
            mass=mass,
            refresh_every_trajectory=True,
            step_jitter=step_jitter,
            **kwargs,
        )


def mass_em_from_kwargs(kwargs: dict[str, Any], sampler: str) -> tuple[MassEM, dict[str, Any]]:
    """Split an EM sampler's keyword arguments into its :class:`MassEM` and the rest."""
    kwargs = dict(kwargs)
    if "mass" in kwargs:
        raise TypeError(
            f"{sampler} learns its mass: pass the starting mass as initial_mass= and its "
            "structure as mass_structure='diag' or 'dense'."
        )
    options = {key: kwargs.pop(key) for key in EM_OPTIONS if key in kwargs}
    return MassEM(mass_structure=kwargs.pop("mass_structure", None), **options), kwargs


@register
class HMCEM(HMC):
    """HMC-EM: HMC whose mass is learned by Monte Carlo EM (Algorithm 1).

    Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM". The
    E step is :class:`HMC` (full-data Metropolis–Hastings test) with the mass held fixed;
    one sample is stored per iteration, after the test; every ``S`` iterations the M step
    updates ``M⁻¹`` by eq. 5 (:class:`~pymc_sgmcmc.adaptation.em.MassEM`). ``step_size``,
    ``n_steps``, ``step_jitter`` and the rest are :class:`HMC`'s.
    """

    __doc__ = _with_sections(__doc__, EM_PARAMETERS_DOC)
    name = "hmc_em"
    mass_adapter_class = MassEM

    def __init__(self, vars=None, **kwargs: Any) -> None:
        adapter, kwargs = mass_em_from_kwargs(kwargs, type(self).__name__)
        super().__init__(vars, mass_adapter=adapter, **kwargs)


@register
class SGHMCEM(SGHMC):
    """SGHMC-EM: SGHMC whose mass is learned by Monte Carlo EM.

    SGHMC's dynamics in the E step of Algorithm 2's loop; the momentum at the end of each
    trajectory (before the next draw resamples it) is the stored sample. See
    :class:`SGHMC` for the sampler's parameters.
    """

    __doc__ = _with_sections(__doc__, EM_PARAMETERS_DOC)
    name = "sghmc_em"
    mass_adapter_class = MassEM

    def __init__(self, vars=None, **kwargs: Any) -> None:
        adapter, kwargs = mass_em_from_kwargs(kwargs, type(self).__name__)
        super().__init__(vars, mass_adapter=adapter, **kwargs)


@register
class SGNHTEM(SGNHT):
    """SGNHT-EM: SGNHT whose mass is learned by Monte Carlo EM (Algorithm 2).

    The test function of the E-step size rule is ``[M⁻¹p, ∇L(θ) + ξM⁻¹p, pᵀM⁻¹p]``.
    See :class:`SGNHT` for the sampler's parameters.
    """

    __doc__ = _with_sections(__doc__, EM_PARAMETERS_DOC)
    name = "sgnht_em"
    mass_adapter_class = MassEM

    def __init__(self, vars=None, **kwargs: Any) -> None:
        adapter, kwargs = mass_em_from_kwargs(kwargs, type(self).__name__)
        super().__init__(vars, mass_adapter=adapter, **kwargs)


@register
class SGNPHMCEM(SGNPHMC):
    """SG-NPHMC-EM: SG-NPHMC whose mass is learned by Monte Carlo EM.

    Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM",
    §3.4 (their Alg. 5): :class:`SGNPHMC`'s dynamics in the E step with the mass held
    fixed, the M step of eq. 5 every ``S`` iterations, the E-step size rule of §3.2 with
    the test function ``[M⁻¹p̃, ∇L(θ)]``. The stored momentum is the real one, ``p̃ = p/s``,
    whose law is ``N(0, M)``.

    The paper's Alg. 5 also learns ``Q``. We do not: ``q``'s stationary law is
    ``N(0, kT Q)`` whatever ``Q`` is, so the maximum-likelihood ``Q`` from the stored
    ``q`` returns the current ``Q`` up to Monte Carlo noise, an update with no signal.
    See :class:`SGNPHMC` for the sampler's parameters.
    """

    __doc__ = _with_sections(__doc__, EM_PARAMETERS_DOC)
    name = "sgnphmc_em"
    mass_adapter_class = MassEM

    def __init__(self, vars=None, **kwargs: Any) -> None:
        adapter, kwargs = mass_em_from_kwargs(kwargs, type(self).__name__)
        super().__init__(vars, mass_adapter=adapter, **kwargs)


@register
class SGGMC(StochasticGradientStep):
    """Stochastic gradient geodesic Monte Carlo.

    Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods", Algorithm 1 (scalar
    ``C``): each of ``n_steps`` steps is A(ε/2) B(ε/2) O(ε) B(ε/2) A(ε/2) with the exact
    geodesic flow on the spheres (A), friction ``v ← e^(−Cε/2) v`` (B) and the projected
    stochastic-gradient kick ``v ← v + Λ(x)[ε∇log π̃ + N(0, 2(C − B̂)ε)]`` (O). Sphere-valued
    variables (``pmsg.VonMisesFisher``, ``pmsg.SphereUniform``) move on their spheres in
    embedded coordinates; other continuous variables follow the same splitting on
    straight lines. The velocity carries over between draws.

    Parameters
    ----------
    friction : float, default 1.0
        ``C > 0``.
    noise_estimate : float, default 0.0
        ``B̂ = εV/2`` (the slides' ``V`` term), ``0 ≤ B̂ ≤ C``.

    Statistics
    ----------
    SGLD's, and ``kinetic_temperature`` (``vᵀv / m`` with ``m`` the manifold's
    dimension).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "sggmc"
    kernel = geodesic.SGGMC

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        friction: float = 1.0,
        noise_estimate: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=geodesic.sggmc_parameters(friction, noise_estimate),
            **kwargs,
        )


@register
class GSGNHT(StochasticGradientStep):
    """Geodesic stochastic gradient Nosé–Hoover thermostat.

    Liu, Zhu and Song, "Stochastic Gradient Geodesic MCMC Methods", Algorithm 2 (scalar
    ``C``): SGGMC's ABOBO splitting with the friction replaced by a thermostat ``ξ`` that
    follows ``ξ ← ξ + (vᵀv/m − 1) ε/2`` at each half flow. ``C`` (``diffusion``, as
    ``A`` of :class:`SGNHT`: the injected noise) sets the injected noise and the
    thermostat's start, ``ξ = C``.

    Parameters
    ----------
    diffusion : float, default 1.0
        ``C > 0``.
    noise_estimate : float, default 0.0
        ``B̂ = εV/2``, ``0 ≤ B̂ ≤ C``.

    Statistics
    ----------
    SGGMC's, and ``thermostat`` (``ξ``).
    """

    __doc__ = _with_sections(__doc__, COMMON_PARAMETERS_DOC)
    name = "gsgnht"
    kernel = geodesic.GSGNHT

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule,
        n_steps: int = 10,
        diffusion: float = 1.0,
        noise_estimate: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=geodesic.gsgnht_parameters(diffusion, noise_estimate),
            **kwargs,
        )


# -- Riemannian samplers ------------------------------------------------------------------

RIEMANNIAN_METRIC_DOC = """
    The metric. By default ``G(θ)`` is
    :func:`~pymc_sgmcmc.metrics.riemannian.softabs_diagonal_hessian`: the SoftAbs
    ``h coth(αh)`` of the negative Hessian's diagonal ``h`` of the log density. It is
    the local curvature, so the dynamics move in units of the posterior's local scale,
    which is what lets one step size serve a target whose scale changes from place to
    place (a funnel); unlike the Fisher information it needs nothing of the model but
    its log density; unlike the raw Hessian it stays positive definite where the log
    density is flat or convex (it tends to ``1/α``); and a diagonal keeps ``G⁻¹``,
    ``log det G`` and their derivatives cheap. It costs a Hessian diagonal (and its
    derivative) per evaluation: Riemannian samplers pay off on small, strongly curved
    models, not on large regressions.
"""


@register
class RHMC(StochasticGradientStep):
    """Riemannian manifold Hamiltonian Monte Carlo.

    Girolami and Calderhead, "Riemann manifold Langevin and Hamiltonian Monte Carlo
    methods". ``H(θ, p) = −L(θ) + ½ log det G(θ) + ½ pᵀG(θ)⁻¹p`` with ``p ~ N(0, G(θ))``
    drawn afresh each trajectory, ``n_steps`` generalized leapfrog steps::

        p½ = p − ε/2 ∂θH(θ, p½)                 (implicit: fixed-point iterations)
        θ' = θ + ε/2 [G(θ)⁻¹ + G(θ')⁻¹] p½       (implicit: fixed-point iterations)
        p' = p½ − ε/2 ∂θH(θ', p½)

    then a Metropolis–Hastings test on ``H`` with the **full-data** log density (and
    ``G`` built from it). ``∂θH`` is ``pytensor.grad`` of ``H`` with ``p`` held fixed.
    The integrator is reversible and volume preserving only up to the fixed-point
    residual (reported), so a residual far above rounding biases the test: raise
    ``fixed_point_steps`` or lower ``step_size``. With ``pm.Minibatch`` data the
    leapfrog uses minibatch gradients and metrics and the test corrects for them only
    approximately (the momentum is drawn from a minibatch ``G``): use full data.

    ``step_size="auto"`` starts from 0.3 and adapts it by dual averaging on the
    acceptance, as :class:`HMC`; the metric is not replaced by the Laplace covariance.

    Parameters
    ----------
    metric : None, PositionDependentMetric or callable, optional
        ``G(θ)``: a :class:`~pymc_sgmcmc.metrics.PositionDependentMetric`, or a function
        ``(position, target) -> G`` of the flat position (a PyTensor vector) returning
        a positive vector (diagonal ``G``) or a symmetric positive-definite matrix;
        ``target.logp`` is the model's log density. Checked once at the initial point.
    fixed_point_steps : int, default 6
        Fixed-point iterations for each of the two implicit updates.
    step_jitter : float, default 0.15
        As for :class:`HMC`.

    Statistics
    ----------
    SGLD's, ``accept``, ``accepted``, ``energy_error`` and ``model_logp`` as for
    :class:`HMC`, ``fixed_point_residual`` (the largest change made by the last
    fixed-point iteration of the trajectory's last step) and ``fixed_point_steps``.
    """

    __doc__ = _with_sections(
        __doc__, "Notes\n-----\n" + inspect.cleandoc(RIEMANNIAN_METRIC_DOC) + COMMON_PARAMETERS_DOC
    )
    name = "rhmc"
    kernel = riemannian.RHMC

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        metric: Any = None,
        fixed_point_steps: int = 6,
        step_jitter: float = 0.15,
        **kwargs: Any,
    ) -> None:
        metric = riemannian.as_metric(metric)
        params = {"metric": metric, "solver": riemannian.solver(fixed_point_steps)}
        super().__init__(
            vars,
            step_size=step_size,
            n_steps=n_steps,
            kernel_params=params,
            refresh_every_trajectory=True,
            step_jitter=step_jitter,
            **kwargs,
        )


@register
class SGRNPHMC(StochasticGradientStep):
    """Stochastic gradient Riemannian Nosé–Poincaré HMC (SGR-NPHMC).

    Roychowdhury, Kulis and Parthasarathy, "Robust Monte Carlo Sampling using Riemannian
    Nosé-Poincaré Hamiltonian Dynamics" (supplement, eqs. 1–3). The extended Hamiltonian
    (eq. 1)::

        H = s [−L(θ) + ½ (p/s)ᵀG⁻¹(p/s) + ½ |G|⁻¹q² + (1+kT)/2 log{(2π)^D |G|}
               + g kT log s − H₀]

    with a position-dependent metric ``G(θ)``, integrated by the generalized leapfrog
    (eq. 3) on positions ``(θ, s)`` and momenta ``(p, q)`` with minibatch gradients and
    log densities; its implicit updates are solved by fixed-point iterations. As for
    :class:`SGNPHMC`, the friction and noise of eq. 2 are an exact Ornstein–Uhlenbeck step
    of the real momenta before each leapfrog step (``p/s`` toward ``N(0, kT G(θ))`` with
    friction ``B``, ``q`` toward ``N(0, kT |G(θ)|)`` with friction ``A``), ``H₀`` puts the
    state on ``H = 0``, and every trajectory starts at ``s = 1``; the momenta carry over
    between draws and there is no Metropolis test. A chain starts with
    ``p ~ N(0, kT G(θ))`` and ``q = 0``.

    On the slice ``H = 0`` the ``(1+kT)/2 log |G|`` term cancels the volumes of ``p/s``
    and ``q`` for ``kT = 1``, so ``θ`` has the posterior as its law.

    Parameters
    ----------
    metric : None, PositionDependentMetric or callable, optional
        ``G(θ)``, as for :class:`RHMC`.
    friction : float, default 1.0
        ``B > 0``, the friction (and noise) on the momentum.
    diffusion : float, default 1.0
        The rate of the friction (and noise) on the thermostat momentum ``q``: eq. 2's
        ``−A ∂H/∂q`` is the rate ``A s/|G(θ)|``, so the supplement's ``A`` is
        ``diffusion · |G(θ)|/s``. Not the supplement's 0.01: ``|G|`` grows with the data
        (8 × 10⁴ on a 2,000-row logistic regression), which leaves ``q`` without friction,
        and there the draws' means came out 0.46 sds off against 0.01 at a rate of 1.
    temperature : float, default 1.0
        ``kT > 0``; 1 samples the posterior.
    degrees_of_freedom : float, optional
        ``g``; ``D`` by default, the value for which the flow is canonical.
    fixed_point_steps : int, default 6
        Fixed-point iterations for each of the two implicit updates.

    Statistics
    ----------
    SGLD's, ``kinetic_temperature`` (``p̃ᵀG(θ)⁻¹p̃ / (D kT)`` of the real momentum),
    ``control`` (``s``), ``control_momentum`` (``q``), ``energy_drift`` (the change of
    eq. 1's ``H`` summed over the trajectory's steps; 0 for the exact flow),
    ``fixed_point_residual`` (the largest change made by a last fixed-point iteration in
    the trajectory) and ``fixed_point_steps``.
    """

    __doc__ = _with_sections(
        __doc__, "Notes\n-----\n" + inspect.cleandoc(RIEMANNIAN_METRIC_DOC) + COMMON_PARAMETERS_DOC
    )
    name = "sgrnphmc"
    kernel = riemannian.SGRNPHMC

    def __init__(
        self,
        vars=None,
        *,
        step_size: float | StepSizeSchedule | str = "auto",
        n_steps: int = 10,
        metric: Any = None,
        friction: float = 1.0,
        diffusion: float = 1.0,
        temperature: float = 1.0,
        degrees_of_freedom: float | None = None,
        fixed_point_steps: int = 6,
        **kwargs: Any,
    ) -> None:
        metric = riemannian.as_metric(metric)
        params = {
            "metric": metric,
            "solver": riemannian.solver(fixed_point_steps),
            **riemannian.np_parameters(friction, diffusion, temperature, degrees_of_freedom),
        }
        super().__init__(vars, step_size=step_size, n_steps=n_steps, kernel_params=params, **kwargs)


SAMPLERS: tuple[type[StochasticGradientStep], ...] = tuple(_REGISTRY)
"""Every public sampler, in the order of definition: the package exports each and the
conformance tests run on each."""

# Spelled out for the documentation's static reader (a computed list is opaque to it);
# tests/test_conformance.py checks that it names exactly the registered samplers.
__all__ = [
    "GSGNHT",
    "HMC",
    "HMCEM",
    "MALA",
    "PSGLD",
    "RHMC",
    "SGFS",
    "SGGMC",
    "SGHMC",
    "SGHMCEM",
    "SGLD",
    "SGNHT",
    "SGNHTEM",
    "SGNPHMC",
    "SGNPHMCEM",
    "SGRLD",
    "SGRNPHMC",
]
