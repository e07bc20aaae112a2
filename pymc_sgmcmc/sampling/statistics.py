"""What every draw reports: the statistics a sampler declares, and one draw's values.

The kernel's own statistics are outputs of the compiled trajectory (``stats.<name>``,
computed from its end state and step info, :attr:`~pymc_sgmcmc.kernels.base.Kernel.stats`);
the correction, the mass adapter and the gradient-noise measurement add theirs. A
sampler's list is fixed by its class (PyMC reads ``stats_dtypes_shapes`` before any
chain starts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pymc_sgmcmc.adaptation.base import Adapter
from pymc_sgmcmc.adaptation.windowed_mass import WindowedMass
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.sampling.corrections import Outcome, Trajectory, correction_for

GENERIC_STATS: dict[str, tuple[Any, list]] = {
    "step_size": (np.float64, []),
    "n_steps": (np.int64, []),
    "minibatch_logp": (np.float64, []),
    "diverging": (bool, []),
    "divergences": (np.int64, []),
}
"""Statistics of every sampler."""

NOISE_STATS: dict[str, tuple[Any, list]] = {
    "gradient_noise": (np.float64, []),
    "anchor_distance": (np.float64, []),
}
"""Statistics of a kernel that measures its gradient noise
(:attr:`~pymc_sgmcmc.kernels.base.Kernel.measures_noise`)."""


def declared_stats(
    kernel: Kernel, mass_adapter_class: type[Adapter] | None
) -> dict[str, tuple[Any, list]]:
    """``name -> (dtype, shape)`` of a sampler's per-draw statistics.

    A kernel with a constant metric reports the mass adapter's statistics, or
    :class:`~pymc_sgmcmc.adaptation.windowed_mass.WindowedMass`'s when the sampler has no
    adapter of its own (a fixed mass reports no updates).
    """
    stats = {**GENERIC_STATS, **kernel.stats_dtypes, **correction_for(kernel).stats_dtypes}
    if mass_adapter_class is not None:
        stats.update(mass_adapter_class.stats_dtypes_shapes)
    elif kernel.constant_metric:
        stats.update(WindowedMass.stats_dtypes_shapes)
    if kernel.measures_noise:
        stats.update(NOISE_STATS)
    return stats


def checked_stats(kernel: Kernel) -> tuple[str, ...]:
    """The statistics the end-of-chain checks read (:mod:`pymc_sgmcmc.sampling.chain_checks`)."""
    return (*kernel.checked_stats, *(NOISE_STATS if kernel.measures_noise else ()))


def trajectory_stats(trajectory: Trajectory, kept: Outcome, divergences: int) -> dict[str, Any]:
    """One draw's generic, correction and kernel statistics.

    The kernel's are read from the compiled call's outputs, those of the state kept (the
    end, or the start of a rejected proposal); a restarted chain reports NaN for each
    floating-point one, as a number computed on a blown-up state means nothing.
    """
    outputs, index = trajectory.outputs, trajectory.index
    valid = kept.finite and not kept.diverging
    stats: dict[str, Any] = {
        "step_size": trajectory.step_size,
        "n_steps": trajectory.n_steps,
        **kept.stats,
        "minibatch_logp": float(outputs[index["minibatch_logp"]]) if valid else np.nan,
        "diverging": kept.diverging,
        "divergences": divergences,
    }
    # A rejected proposal keeps the start; a restart keeps nothing the trajectory computed.
    prefix = "stats." if kept.at_end or kept.restarted else "start_stats."
    for name, (dtype, _) in trajectory.kernel.stats_dtypes.items():
        value = outputs[index[prefix + name]]
        if np.issubdtype(dtype, np.floating):
            stats[name] = np.nan if kept.restarted else float(value)
        else:
            stats[name] = np.asarray(value, dtype=dtype).item()
    return stats
