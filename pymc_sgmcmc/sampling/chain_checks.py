"""The end-of-chain checks of a stochastic-gradient chain, from its own statistics.

A stochastic-gradient chain without a Metropolis test can mix well and still sample the
wrong distribution; its kinetic temperature, gradient-noise ratio, thermostat and (with
control variates) its distance from the anchor say so.
The step method runs these checks at the end of each chain and warns, as PyMC warns
about divergences; :func:`pymc_sgmcmc.diagnostics` reports them per chain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from pymc_sgmcmc.core.effective_sample_size import mean_ess

KINETIC_TEMPERATURE_TOLERANCE = 0.1
"""Relative departure of the mean kinetic temperature from 1 that fails the check."""

GRADIENT_NOISE_LIMIT = 0.25
"""Gradient-noise ratio ``B̂/C`` above which the chain is too hot by more than ~12 % in sd."""

THERMOSTAT_DRIFT_TOLERANCE = 0.1
"""Relative change of the thermostat's mean from the first to the second half that fails."""

ANCHOR_DISTANCE_LIMIT = 3.0
"""Root-mean-square distance of the draws from the control variates' anchor, in posterior
sds per coordinate, above which the chain fails: the draws of a posterior centred at the
anchor are at 1."""

MONTE_CARLO_Z = 4.0
"""Departures within this many Monte Carlo standard errors never fail a check."""


def _mean_and_standard_error(values: np.ndarray) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size < 4:
        return (float(np.mean(values)) if values.size else np.nan), np.inf
    # The effective sample size of the fluctuations around a linear trend: a drift is
    # what the checks look for, and left in it would pass for autocorrelation.
    index = np.arange(values.size)
    residuals = values - np.polyval(np.polyfit(index, values, 1), index)
    ess = float(mean_ess(residuals[:, None])[0])
    ess = min(max(ess, 1.0), values.size) if np.isfinite(ess) else 1.0
    return float(values.mean()), float(residuals.std(ddof=1) / np.sqrt(ess))


def anchor_distance(
    position: np.ndarray, anchor: np.ndarray | None, posterior_sd: np.ndarray | None
) -> float:
    """Root-mean-square distance of ``position`` from ``anchor``, in posterior sds.

    NaN without an anchor (plain minibatches) or posterior sds to scale it by.
    """
    if anchor is None or posterior_sd is None:
        return np.nan
    scaled = (position - anchor) / posterior_sd
    if scaled.size == 0:
        return np.nan
    return math.sqrt(float(scaled @ scaled) / scaled.size)


def kinetic_temperature_departure(values: Sequence[float]) -> tuple[float, bool]:
    """Mean kinetic temperature of a chain, and whether it departs from 1.

    A departure fails when it exceeds both :data:`KINETIC_TEMPERATURE_TOLERANCE` and
    :data:`MONTE_CARLO_Z` Monte Carlo standard errors (ESS-based).
    """
    mean, error = _mean_and_standard_error(np.asarray(values))
    departure = abs(mean - 1.0)
    return mean, bool(departure > max(KINETIC_TEMPERATURE_TOLERANCE, MONTE_CARLO_Z * error))


def thermostat_drift(values: Sequence[float]) -> tuple[float, bool]:
    """Change of the thermostat's mean from the first half of the draws to the second.

    Returns the change relative to the overall mean's magnitude (or the thermostat's sd
    if that is larger), and whether it fails: larger than
    :data:`THERMOSTAT_DRIFT_TOLERANCE` and than :data:`MONTE_CARLO_Z` standard errors.
    """
    values = np.asarray(values, dtype=float)
    if values.size < 8:
        return np.nan, False
    half = values.size // 2
    first, first_error = _mean_and_standard_error(values[:half])
    second, second_error = _mean_and_standard_error(values[half:])
    scale = max(abs(float(values.mean())), float(values.std()), 1e-12)
    change = second - first
    error = float(np.hypot(first_error, second_error))
    fails = abs(change) > max(THERMOSTAT_DRIFT_TOLERANCE * scale, MONTE_CARLO_Z * error)
    return float(change / scale), bool(fails)


def gradient_noise_level(values: Sequence[float]) -> tuple[float, bool]:
    """The chain's last measured gradient-noise ratio ``B̂/C``, and whether it is too high."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return np.nan, False
    level = float(values[-1])
    return level, bool(level > GRADIENT_NOISE_LIMIT)


def anchor_distance_level(values: Sequence[float]) -> tuple[float, bool]:
    """The draws' root-mean-square distance from the anchor, and whether it is too far.

    ``values`` are the per-draw distances ``√(mean((θ − θ̂)²/s²))`` with ``s`` the
    posterior sd the chain's metric implies. A control-variate estimate's variance grows
    with the squared distance from its anchor ``θ̂`` (Baker, Fearnhead, Fox and Nemeth,
    "Control variates for stochastic gradient MCMC", 2019); the gradient-noise
    ratio is measured at one draw in twenty, and a chain that spends its time far from
    the anchor samples where the estimate was never meant to be used. Fails above
    :data:`ANCHOR_DISTANCE_LIMIT`.
    """
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return np.nan, False
    level = float(np.sqrt(np.mean(values**2)))
    return level, bool(level > ANCHOR_DISTANCE_LIMIT)


CHAIN_CHECKS = {
    "kinetic_temperature": kinetic_temperature_departure,
    "gradient_noise": gradient_noise_level,
    "thermostat": thermostat_drift,
    "anchor_distance": anchor_distance_level,
}
"""Each per-draw statistic a chain is checked on, and its check ``(value, fails)``."""


def chain_checks(draw_stats: Mapping[str, Sequence[float]]) -> dict[str, tuple[float, bool]]:
    """The checks of one chain, by statistic, for the statistics it records."""
    return {
        name: check(values)
        for name, check in CHAIN_CHECKS.items()
        if len(values := draw_stats.get(name, ()))
    }


def chain_check_messages(
    sampler: str,
    draw_stats: Mapping[str, Sequence[float]],
    checks: Mapping[str, tuple[float, bool]] | None = None,
) -> list[str]:
    """Messages for the checks one chain fails (``checks``: already computed ones)."""
    checks = chain_checks(draw_stats) if checks is None else checks
    messages = []
    mean, fails = checks.get("kinetic_temperature", (np.nan, False))
    if fails:
        messages.append(
            f"{sampler}: the chain's mean kinetic temperature is {mean:.3g}, not 1: its "
            f"draws come from a {'too wide' if mean > 1 else 'too narrow'} posterior. "
            "Too hot: the step size is too large or the friction too small for the "
            "gradient noise; use step_size='auto', a smaller step_size, or larger "
            "minibatches. Too cold: the dynamics inject too little noise (a sampler "
            "of your own?) or the chain has not reached equilibrium (tune longer)."
        )
    level, fails = checks.get("gradient_noise", (np.nan, False))
    if fails:
        messages.append(
            f"{sampler}: the minibatch gradient noise is {level:.3g} of the injected "
            f"noise (B̂/C; above {GRADIENT_NOISE_LIMIT} the posterior sds come out too "
            "wide). Use step_size='auto', raise the friction, lower the step size, use "
            "larger minibatches or gradient='control_variates'."
        )
    distance, fails = checks.get("anchor_distance", (np.nan, False))
    if fails:
        messages.append(
            f"{sampler}: the draws are {distance:.3g} posterior sds (root mean square per "
            "coordinate) from the control variates' anchor, above "
            f"{ANCHOR_DISTANCE_LIMIT:g}: the anchor is not in the bulk of the posterior, "
            "and the gradient estimate's noise grows with that distance. Tune longer "
            "(the anchor follows the tuning draws unless anchor= is given), pass an "
            "anchor= inside the bulk (e.g. a posterior mean), or use "
            "gradient='svrg' (the anchor follows the chain)."
        )
    change, fails = checks.get("thermostat", (np.nan, False))
    if fails:
        messages.append(
            f"{sampler}: the thermostat drifted by {change:+.3g} (relative) between the "
            "first and the second half of the draws: the chain had not reached "
            "equilibrium. Tune longer (tune=) or use step_size='auto'."
        )
    return messages
