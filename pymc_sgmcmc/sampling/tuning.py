"""A step method's adapters, and what a change of the parameters they own costs a chain.

:class:`Tuning` hands each finished iteration to the adapters that learn (the step size,
the mass), feeds the step-size adapter the gradient noise the chain's estimator measures,
and says what a change means for the chain: the kernel's parameters, which it assembles
from the fixed ones and the adapters', are read again; a new metric
also refreshes the carried momentum, restarts the step size (learned in the old metric's
units) and measures the noise afresh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.adaptation.windowed_mass import WindowedMass
from pymc_sgmcmc.gradients.estimators import NOISE_PROBES_AT_START
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.sampling import kernel_parameters
from pymc_sgmcmc.sampling.noise import measure_gradient_noise

if TYPE_CHECKING:
    from pymc_sgmcmc.sampling.chain import Chain


class Tuning:
    """The adapters of one step method and how the chain follows them.

    Parameters
    ----------
    step_size_adapter : Adapter
        The step size's adapter (a schedule, or one that learns).
    mass_adapter : Adapter, optional
        The adapter that owns the metric, if any.
    kernel : Kernel
        The step's kernel (whether it refreshes, whether its metric is constant).
    damping : float
        ``C`` of the gradient-noise ratio.
    n_steps : int
        Integrator steps per trajectory.
    groups : WholeGroups, optional
        Minibatches of whole groups, whose masses and sizes follow the noise.
    fixed_parameters : dict
        The kernel's parameters no adapter owns, by field.
    dtype : dtype
        The model's floating-point type.
    noise_feeds_parameters : bool
        Whether a kernel parameter is estimated from the measured noise (then read again
        whenever the step-size adapter gets a new estimate).
    """

    def __init__(
        self,
        step_size_adapter: Adapter,
        mass_adapter: Adapter | None,
        *,
        kernel: Kernel,
        damping: float,
        n_steps: int,
        groups: Any,
        fixed_parameters: dict[str, Any],
        dtype: Any,
        noise_feeds_parameters: bool,
    ) -> None:
        self.step_size_adapter, self.mass_adapter = step_size_adapter, mass_adapter
        self.adapters = [a for a in (step_size_adapter, mass_adapter) if a is not None]
        self.learning = tuple(a for a in self.adapters if a.learns)
        self.kernel, self.damping, self.n_steps, self.groups = kernel, damping, n_steps, groups
        self.fixed_parameters, self.dtype = fixed_parameters, dtype
        self.params: Any = None
        """The kernel's current parameters (:meth:`read_parameters`)."""
        self.posterior_sd: np.ndarray | None = None
        """The posterior sds the current constant metric implies (None without one)."""
        self.noise_feeds_parameters = noise_feeds_parameters
        # A fixed mass reports what a learned one would: no updates.
        self._fixed_mass_stats = (
            dict.fromkeys(WindowedMass.stats_dtypes_shapes, 0) if kernel.constant_metric else {}
        )

    def read_parameters(self) -> None:
        """Assemble the kernel's parameters from the fixed ones and the adapters'."""
        groups = self.groups
        self.params, self.posterior_sd = kernel_parameters.assembled_parameters(
            self.kernel, self.fixed_parameters, mass_adapter=self.mass_adapter,
            step_size_adapter=self.step_size_adapter,
            inflation=None if groups is None else groups.noise_inflation, dtype=self.dtype,
        )  # fmt: skip

    @property
    def record_gradient(self) -> bool:
        """Whether an adapter learns from the gradient at each kept position."""
        return self.mass_adapter is not None and self.mass_adapter.needs_gradient

    def init_chain(self, context: ChainContext) -> None:
        """Reset every adapter for a new chain."""
        for adapter in self.adapters:
            adapter.init_chain(context)
        self.follow_tuning(bool(context.tune))

    def finalize(self) -> None:
        """Tuning has ended: the adapters freeze what they learned."""
        for adapter in self.adapters:
            adapter.finalize()
        self.follow_tuning(False)

    def follow_tuning(self, tuning: bool) -> None:
        """Set the kernel's tuning parameter, if it has one.

        :attr:`~pymc_sgmcmc.kernels.base.Kernel.tuning_parameter`: 1 while tuning, 0 after;
        read with the others at the next :meth:`read_parameters`.
        """
        name = self.kernel.tuning_parameter
        if name is not None:
            self.fixed_parameters[name] = 1.0 if tuning else 0.0

    def stats(self) -> dict[str, Any]:
        """The mass's per-draw statistics (zeros for a fixed one)."""
        mass = self.mass_adapter
        # The fixed one is shared, not copied: the chain only reads it (once per draw).
        return mass.stats() if mass is not None else self._fixed_mass_stats

    def probe_noise(
        self, chain: Chain, position: np.ndarray, probes: int, rng: np.random.Generator
    ) -> None:
        """Measure the gradient noise ``probes`` times at ``position`` and pass it on.

        Each measurement is the chain's
        (:meth:`~pymc_sgmcmc.sampling.chain.Chain.noise_variance`, rows from ``rng``);
        see :func:`~pymc_sgmcmc.sampling.noise.measure_gradient_noise`.
        """

        def inflated() -> None:
            self.read_parameters()
            # A carried momentum must follow N(0, M) under the inflated mass.
            chain.refresh_pending = self.kernel.refresh is not None

        fed = measure_gradient_noise(
            chain.estimator.noise, lambda: chain.noise_variance(position, rng), probes,
            tuning=chain.tune, step_size_adapter=self.step_size_adapter,
            damping=self.damping, n_steps=self.n_steps, groups=self.groups, inflated=inflated,
        )  # fmt: skip
        if fed and self.noise_feeds_parameters:
            self.read_parameters()

    def after_iteration(
        self,
        chain: Chain,
        context: ChainContext,
        state: Any,
        gradient: np.ndarray | None,
        *,
        diverging: bool,
        accept: float,
    ) -> None:
        """Hand the finished iteration to the adapters that learn; follow what changed."""
        if not self.learning:
            return
        learning = [a for a in self.learning if a.active(chain.tune)]
        if not learning:
            return
        result = IterationResult(
            iteration=chain.iteration - 1,
            tune=chain.tune,
            position=state.position,
            state=state,
            gradient=gradient,
            step_size=self.step_size_adapter.nominal(chain.iteration),
            diverging=diverging,
            accept=accept,
        )
        changed: frozenset[str] = frozenset()
        for adapter in learning:
            changed |= adapter.update(result, context)
        if not changed:
            return
        self.read_parameters()
        if "metric" in changed:
            # A carried momentum must follow N(0, M) under the new mass.
            chain.refresh_pending = self.kernel.refresh is not None
            # The step size was learned in the old metric's units.
            self.step_size_adapter.restart()
            chain.estimator.noise.reset()
            if chain.estimator.probe_due(chain.iteration, chain.tune):
                self.probe_noise(chain, state.position, NOISE_PROBES_AT_START, context.rng)
