"""The check of plain minibatches before sampling.

The estimator measures its own noise (its ``noise_variance``) and a chain keeps its
measurements (:class:`~pymc_sgmcmc.gradients.estimators.ChainEstimator`); here is what a
plain minibatch's noise at the mode says about the step a sampler can take
(:func:`plain_minibatch_warning`), and how a chain's measurements during tuning reach
the step size and the groups (:func:`measure_gradient_noise`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from pymc_sgmcmc.adaptation.step_size import (
    NOISE_TOLERANCE,
    acceptance_limited_step_size,
    noise_limited_step_size,
)
from pymc_sgmcmc.gradients.estimators import NOISE_PROBES_AT_START, NoiseMonitor
from pymc_sgmcmc.metrics.euclidean import metric_from_inverse
from pymc_sgmcmc.sampling.kernel_parameters import decoupled_covariance

NOISE_LIMITED_SLOWDOWN = 10.0
"""A noise-capped step this many times below the kernel's default warns before sampling."""

TUNED_STEP_SLOWDOWN = 100.0
"""A step size tuned this many times below where it started warns when tuning ends.

Before sampling only plain minibatch noise is measured (:data:`NOISE_LIMITED_SLOWDOWN`);
during tuning the noise of any estimator away from its anchor, and divergences, can
shrink the step too. At 76-152x below the default, plain minibatch chains had a min ESS
of 2-7 in 2 x 2,000 draws; a topic model started without a mode ended tuning at ~1e-5 of
its start, its test perplexity the same from draw 200 to 2,000. Fewer than 100x are
left to R-hat and the ESS: a few halvings by early divergences are common and cheap."""


def tuned_step_warning(
    sampler: str, *, start: float, tuned: float, shrink: float, noise_cap: float
) -> str | None:
    """The warning when tuning ended with a step size far below where it started.

    ``start``: the automatic step size tuning started from; ``tuned``: where it ended;
    ``shrink``: the factor of the divergences' halvings; ``noise_cap``: the measured
    gradient noise's cap (:func:`~pymc_sgmcmc.adaptation.step_size.noise_limited_step_size`).
    None where the step stayed within :data:`TUNED_STEP_SLOWDOWN` of its start.
    """
    if not (tuned > 0.0 and start / tuned > TUNED_STEP_SLOWDOWN):
        return None
    slowdown = start / tuned
    if noise_cap < start * shrink:
        cause = (
            "the measured gradient noise capped it (its noisiest coordinate's whitened "
            "variance sets the cap for all)"
        )
        fix = (
            "larger minibatches, gradient='control_variates' with an anchor= inside the "
            "bulk, or a longer tune="
        )
    else:
        halvings = round(-math.log2(shrink)) if shrink > 0 else 0
        cause = f"{halvings} divergences during tuning halved it"
        fix = "initvals= nearer the posterior, a longer tune=, or a reparameterised model"
    return (
        f"{sampler}: tuning ended with the step size at {tuned:.3g}, {slowdown:,.0f}x below "
        f"the {start:.3g} it started from: {cause}. The kept draws keep the right law "
        f"but each moves about {slowdown:,.0f}x less, and a run of ordinary length may "
        f"barely leave its start. Try {fix}; or pass step_size= and mass= yourself."
    )


def noise_limited_slowdown(
    noise: np.ndarray,
    *,
    default_step_size: float,
    damping: float,
    metropolis: bool,
    n_steps: int,
    target_accept: float,
) -> tuple[float, float, str]:
    """How many times below its default the measured noise caps the step.

    For a kernel that injects noise, the cap keeps the gradient noise within
    ``NOISE_TOLERANCE`` of the chain's temperature (:func:`noise_limited_step_size`); for
    one with a Metropolis test, it lets the energy error the noise adds alone still reach
    the acceptance target (:func:`acceptance_limited_step_size`). Returns the slowdown,
    the cap and what bounds it, in words.
    """
    if not metropolis:
        cap = noise_limited_step_size(noise, damping)
        bound = f"so that it adds at most {NOISE_TOLERANCE:.0%} to the chain's temperature"
    else:
        cap = acceptance_limited_step_size(noise, n_steps, target_accept)
        bound = (
            f"so that the energy error it adds over {n_steps} leapfrog steps "
            f"still lets {target_accept:.0%} of the trajectories be accepted"
        )
    return default_step_size / cap, cap, bound


def plain_minibatch_warning(
    sampler: str,
    *,
    slowdown: float,
    cap: float,
    bound: str,
    default_step_size: float,
    metropolis: bool,
    n_steps: int,
    batch_sizes: list[int],
) -> str:
    """The warning when plain minibatch noise caps the step far below the default.

    The draws stay accurate in law but a chain moves that much less per gradient, and a
    run of ordinary length is strongly autocorrelated (measured: at 10⁵ rows, SGHMC's cap
    was 152× below its default and the means were 1.8 sds off after 2 × 2,000 draws; HMC's
    min ESS was 2.6 after 2 × 3,000 draws). The fix costs about the slowdown in gradients,
    its square with a Metropolis test (``ε ∝ 1/√(nV)`` there, ``1/V`` otherwise).
    """
    if metropolis:
        fix = (
            "gradient='control_variates' (the default: its noise at the mode is nil, "
            "and the Metropolis test keeps the draws exact)"
        )
        factor = slowdown**2
    else:
        fix = "gradient='control_variates' (the default, exact at the mode)"
        factor = slowdown
    batches = ", ".join(str(b) for b in batch_sizes)
    return (
        f"{sampler}(gradient='minibatch'): at the mode, the minibatch gradient noise "
        f"limits the step size to {cap:.3g} ({bound}), {slowdown:.0f}x below the "
        f"default {default_step_size} of control-variate gradients. The "
        f"draws keep the right law, but each moves about {slowdown:.0f}x less: a run "
        "of ordinary length stays autocorrelated and its means and sds can be far off. "
        f"Use {fix}, or pay for the plain estimator with about {factor:.0f}x the "
        f"gradients: n_steps={math.ceil(n_steps * factor)} or a batch_size "
        f"about {factor:.0f}x the present {batches}."
    )


def check_plain_minibatch_noise(
    sampler: str,
    estimator: Any,
    mode: Any,
    n_rows: list[int],
    *,
    kernel: Any,
    damping: float,
    n_steps: int,
    target_accept: float,
    batch_sizes: list[int],
    dtype: Any,
    decoupled: np.ndarray | None = None,
    whitening: Any = None,
) -> float:
    """Before sampling, warn when plain minibatch noise forces a far smaller step.

    Measured at the mode, in the Laplace metric (without the covariances of the
    ``decoupled`` coordinates, as the step's), on rows drawn from a fixed seed
    (deterministic for the model and its data, as the mode search). ``whitening``:
    ``(mode, metric) -> whitening`` where the kernel's noise is not whitened by the metric
    alone (:attr:`~pymc_sgmcmc.kernels.base.Kernel.noise_whitening`). Returns the slowdown
    (at least 1, :func:`noise_limited_slowdown`).
    """
    rng = np.random.default_rng(0)
    metric = metric_from_inverse(decoupled_covariance(mode.covariance, decoupled), dtype)
    if whitening is not None:
        metric = whitening(mode, metric)
    probes = [
        estimator.noise_variance(mode.position, None, rng, n_rows, metric)
        for _ in range(NOISE_PROBES_AT_START)
    ]
    metropolis = kernel.energy is not None
    slowdown, cap, bound = noise_limited_slowdown(
        np.mean(probes, axis=0),
        default_step_size=kernel.default_step_size,
        damping=damping,
        metropolis=metropolis,
        n_steps=n_steps,
        target_accept=target_accept,
    )
    if slowdown > NOISE_LIMITED_SLOWDOWN:
        message = plain_minibatch_warning(
            sampler, slowdown=slowdown, cap=cap, bound=bound,
            default_step_size=kernel.default_step_size, metropolis=metropolis,
            n_steps=n_steps, batch_sizes=batch_sizes,
        )  # fmt: skip
        warnings.warn(message, RuntimeWarning, stacklevel=6)
    return float(max(slowdown, 1.0))


def measure_gradient_noise(
    monitor: NoiseMonitor,
    measure: Callable[[], np.ndarray],
    probes: int,
    *,
    tuning: bool,
    step_size_adapter: Any,
    damping: float,
    n_steps: int,
    groups: Any = None,
    inflated: Callable[[], None] = lambda: None,
) -> bool:
    """Add ``probes`` measurements to ``monitor`` and hand their mean to the step size.

    ``measure()`` gives one whitened noise variance in the step's current metric. With
    whole groups (:class:`~pymc_sgmcmc.sampling.whole_groups.WholeGroups`), at the start
    of tuning (``probes`` is ``NOISE_PROBES_AT_START``), the noisiest coordinates get a
    larger mass (``groups.inflate``; ``inflated()`` lets the step re-read its parameters,
    whose metric the next measurement uses), and where the noise still caps the step more
    groups are drawn per step (``groups.widen``) and the noise is measured afresh.
    Returns whether the step-size adapter received a new noise estimate (a parameter
    estimated from it, such as SGHMC's ``noise_estimate``, is then read again).
    """
    for _ in range(probes):
        monitor.add(measure())
    # No finite measurement (every probe far out in a tail): nothing to answer yet.
    measured = monitor.mean() is not None
    if groups is not None and tuning and probes == NOISE_PROBES_AT_START and measured:
        if groups.inflate(monitor):
            inflated()
        if groups.widen(monitor.mean(), damping, step_size_adapter, n_steps):
            monitor.reset()  # measured afresh on the larger minibatches
            for _ in range(probes):
                monitor.add(measure())
            if groups.inflate(monitor):
                inflated()
    mean = monitor.mean()
    if not (tuning and step_size_adapter.learns and mean is not None):
        return False
    step_size_adapter.set_noise_variance(mean)
    return True
