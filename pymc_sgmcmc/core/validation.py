"""Checks of user input, written once: each error names the argument and the fix."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np


def check_real(name: str, value: Any, fix: str) -> float:
    """Return ``value`` as a float, or raise a ``TypeError`` that names it and the fix."""
    if isinstance(value, bool | str | bytes) or not isinstance(value, Real | np.ndarray):
        raise TypeError(f"{name} must be a real number, got {value!r}. {fix}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}. {fix}") from None


def check_positive(name: str, value: Any, fix: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, or raise an error that names it and the fix.

    Parameters
    ----------
    name : str
        The argument's name, as the user wrote it.
    value : Any
        What the user passed.
    fix : str
        A sentence saying what to pass instead.
    allow_zero : bool
        Accept ``0`` (non-negative rather than positive).
    """
    number = check_real(name, value, fix)
    bad = number < 0 if allow_zero else number <= 0
    if not math.isfinite(number) or bad:
        sign = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {sign} and finite, got {value!r}. {fix}")
    return number


def check_in_range(
    name: str, value: Any, low: float, high: float, fix: str, *, closed: str = "left"
) -> float:
    """Return ``value`` as a float in ``[low, high)``, or ``(low, high]`` if ``closed="right"``.

    Anything else, a non-number included, is a ``ValueError`` that names the fix.
    """
    interval = f"[{low}, {high})" if closed == "left" else f"({low}, {high}]"
    number = math.nan
    if not isinstance(value, bool | str | bytes) and isinstance(value, Real):
        number = float(value)
    inside = low <= number < high if closed == "left" else low < number <= high
    if not inside:
        raise ValueError(f"{name} must lie in {interval}, got {value!r}. {fix}")
    return number


def check_count(name: str, value: Any, minimum: int, fix: str) -> int:
    """Return ``value`` as an int ``>= minimum``, or raise an error naming the fix."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}. {fix}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}. {fix}")
    return int(value)


def check_choice(name: str, value: Any, choices: tuple[str, ...], fix: str = "") -> str:
    """Return ``value`` if it is one of ``choices``, or raise an error that lists them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}. {fix}".rstrip())
    return value


def friction_and_noise(
    friction_name: str, friction: Any, noise_estimate: Any, fix: str
) -> tuple[float, float]:
    """Validate a friction (or diffusion) ``C > 0`` and a noise estimate ``0 <= B̂ <= C``.

    The samplers inject noise of variance ``2(C − B̂)ε``, which must not be negative.
    """
    friction = check_positive(friction_name, friction, fix)
    noise_estimate = check_positive(
        "noise_estimate",
        noise_estimate,
        "Pass an estimate B̂ >= 0 of the gradient noise (0 if unknown).",
        allow_zero=True,
    )
    if noise_estimate > friction:
        raise ValueError(
            f"noise_estimate ({noise_estimate}) exceeds {friction_name} ({friction}): the "
            f"injected noise 2({friction_name} - B̂)ε would have negative variance. Raise "
            f"{friction_name} or lower noise_estimate."
        )
    return friction, noise_estimate
