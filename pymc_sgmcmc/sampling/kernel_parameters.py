"""A kernel's parameters: the user's fixed ones, the metric, and what the adapters own.

Pure functions the step calls when it is built (:func:`fixed_parameters`,
:func:`preconditioned`) and whenever an adapter changed something
(:func:`assembled_parameters`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pymc_sgmcmc.adaptation.base import Adapter
from pymc_sgmcmc.adaptation.windowed_mass import WindowedMass
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.metrics.euclidean import euclidean_metric, metric_from_inverse


class FixedParameters(NamedTuple):
    """The parameters no adapter owns, and the one the measured noise sets (if any)."""

    values: dict[str, Any]
    estimated_noise: str | None


def fixed_parameters(
    kernel: Kernel,
    kernel_params: dict | None,
    *,
    mass: Any,
    mass_adapter: Adapter | None,
    layout: Any,
    dim: int,
    dtype: Any,
    simplices: Any = None,
) -> FixedParameters:
    """The kernel's fixed parameters: the user's, the metric from ``mass=``, the layouts.

    A noise estimate given as "auto" (SGHMC's ``noise_estimate``) starts at 0 and is set
    from the gradient noise measured with the step size during tuning.
    """
    fixed = dict(kernel_params or {})
    name = kernel.estimated_noise
    auto = name is not None and fixed.get(name) == "auto"
    if auto:
        fixed[name] = 0.0
    if kernel.constant_metric and mass_adapter is None and "metric" not in fixed:
        fixed["metric"] = euclidean_metric(mass, dim, dtype)
    if kernel.supports_spheres:
        fixed["layout"] = layout
    if kernel.supports_simplices:
        fixed["simplices"] = simplices
    values = {
        key: np.asarray(value, dtype=dtype) if isinstance(value, float) else value
        for key, value in fixed.items()
    }
    return FixedParameters(values, name if auto else None)


def preconditioned(
    kernel: Kernel,
    covariance: np.ndarray,
    *,
    mass_adapter: Adapter | None,
    mass_given: bool,
    adapt_mass: bool,
    diagonal: bool,
    dtype: Any,
    decoupled: np.ndarray | None = None,
) -> tuple[Adapter | None, Any]:
    """The mass adapter and fixed metric a Laplace ``covariance`` starts a chain from.

    Returns ``(mass_adapter, metric)``; ``metric`` is None where the fixed parameters keep
    theirs. A given adapter starts from the covariance; without one, a diagonal metric is
    learned in windows (``adapt_mass``) or the Laplace one kept; a mass the user gave, and
    a position-dependent metric (the sampler's own, whose default step size is in its
    units), stay. ``diagonal``: keep only the variances (a grouped step's held coordinates
    must not drift with the others' momenta). ``decoupled``: flat indices whose
    covariances with every other coordinate are dropped (SGRLD's simplices, which move by
    their own metric: the others' move must not read their gradient).
    """
    if not kernel.constant_metric:
        return mass_adapter, None
    if diagonal and np.ndim(covariance) == 2:
        covariance = np.diag(covariance).copy()
    covariance = decoupled_covariance(covariance, decoupled)
    if mass_adapter is not None:
        mass_adapter.precondition(covariance)
        return mass_adapter, None
    if mass_given:
        return None, None
    if adapt_mass:
        return WindowedMass(covariance), None
    return None, metric_from_inverse(covariance, dtype)


def decoupled_covariance(covariance: np.ndarray, decoupled: np.ndarray | None) -> np.ndarray:
    """``covariance`` without the covariances of the ``decoupled`` flat indices (a copy).

    Their variances stay. A metric made from it moves the other coordinates by their own
    gradient alone (its Cholesky factor has no entry between the two sets).
    """
    if decoupled is None or not len(decoupled) or np.ndim(covariance) != 2:
        return covariance
    variances = np.diag(covariance)[decoupled]
    covariance = np.array(covariance, copy=True)
    covariance[decoupled, :] = 0.0
    covariance[:, decoupled] = 0.0
    covariance[decoupled, decoupled] = variances
    return covariance


def assembled_parameters(
    kernel: Kernel,
    fixed: dict[str, Any],
    *,
    mass_adapter: Adapter | None,
    step_size_adapter: Adapter,
    inflation: np.ndarray | None,
    dtype: Any,
) -> tuple[Any, np.ndarray | None]:
    """The kernel's parameters (step size NaN: set per trajectory), and posterior sds.

    The mass adapter's parameters (the metric) and the step-size adapter's (e.g. an
    estimated noise) override the fixed ones. The sds are those the constant metric
    implies before ``inflation`` (the grouped step's slowed noisy coordinates): ``M⁻¹`` is
    the chain's estimate of the posterior covariance (the Laplace one, then the tuning
    windows'); None without a constant metric.
    """
    values = dict(fixed)
    if mass_adapter is not None:
        values.update(mass_adapter.parameters())
    values.update(
        (key, np.asarray(value, dtype=dtype))
        for key, value in step_size_adapter.parameters().items()
    )
    values["step_size"] = np.asarray(np.nan, dtype=dtype)
    posterior_sd = None
    if kernel.constant_metric:
        metric = values["metric"]
        inverse = np.diag(metric.inverse) if metric.is_dense else metric.inverse
        posterior_sd = np.sqrt(np.asarray(inverse, dtype=float))
    if inflation is not None:
        values["metric"] = metric_from_inverse(values["metric"].inverse / inflation, dtype)
    return kernel.params_type(**values), posterior_sd
