"""Step-size schedules.

A schedule maps the iteration number ``t`` (0 at the first tuning draw of a chain) to the
step size used for the whole trajectory of that iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

from pymc_sgmcmc.core.validation import check_positive


@dataclass(frozen=True)
class ConstantStepSize:
    """The same step size ``ε`` at every iteration.

    Parameters
    ----------
    step_size : float
        ``ε > 0``.
    """

    step_size: float

    def __post_init__(self) -> None:
        check_positive("step_size", self.step_size, "Pass a small positive number such as 1e-3.")

    def __call__(self, iteration: int) -> float:
        """Return the step size at ``iteration``."""
        return float(self.step_size)


@dataclass(frozen=True)
class PolynomialDecay:
    """The decreasing schedule ``ε_t = a (b + t)^(−γ)``.

    With ``γ ∈ (0.5, 1]`` the steps satisfy ``Σ ε_t = ∞`` and ``Σ ε_t² < ∞``, the
    condition under which the discretisation bias of stochastic-gradient Langevin and
    Hamiltonian samplers vanishes asymptotically. The schedule runs through tuning and
    sampling alike: ``t`` counts every iteration of the chain.

    Parameters
    ----------
    a : float
        Scale, ``a > 0``.
    b : float
        Offset, ``b > 0``; the first step is ``a b^(−γ)``.
    gamma : float
        Decay exponent, ``0 ≤ γ ≤ 1`` (0 gives a constant step).
    """

    a: float
    b: float = 1.0
    gamma: float = 0.55

    def __post_init__(self) -> None:
        check_positive("a", self.a, "Pass the scale of a(b + t)^(-gamma), e.g. a=1e-2.")
        check_positive("b", self.b, "Pass a positive offset, e.g. b=1.")
        if isinstance(self.gamma, bool | str | bytes) or not isinstance(
            self.gamma, Real | np.ndarray
        ):
            raise TypeError(f"gamma must be a real number in [0, 1], got {self.gamma!r}.")
        gamma = float(self.gamma)
        if not math.isfinite(gamma) or not 0.0 <= gamma <= 1.0:
            raise ValueError(
                f"gamma must lie in [0, 1], got {self.gamma!r}. "
                "Values in (0.5, 1] give a decaying schedule with vanishing bias."
            )

    def __call__(self, iteration: int) -> float:
        """Return the step size at ``iteration``."""
        return float(self.a * (self.b + iteration) ** (-self.gamma))


StepSizeSchedule = ConstantStepSize | PolynomialDecay


def as_schedule(step_size: float | StepSizeSchedule) -> StepSizeSchedule:
    """Turn a number into a :class:`ConstantStepSize`; pass schedules through."""
    if isinstance(step_size, ConstantStepSize | PolynomialDecay):
        return step_size
    if step_size is None:
        raise TypeError(
            "step_size is required: pass a positive float such as step_size=1e-3, or a "
            "schedule such as pmsg.PolynomialDecay(a=1e-2, b=1, gamma=0.55)."
        )
    return ConstantStepSize(step_size)
