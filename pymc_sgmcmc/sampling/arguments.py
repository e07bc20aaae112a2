"""The step method's arguments, checked before anything is built.

Each check raises with the problem and the fix, before sampling starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pymc.vartypes import continuous_types
from pytensor.tensor.variable import TensorVariable

from pymc_sgmcmc.adaptation.schedules import as_schedule
from pymc_sgmcmc.core.validation import check_choice
from pymc_sgmcmc.kernels.base import Kernel
from pymc_sgmcmc.sampling.model_graph import is_sphere_valued
from pymc_sgmcmc.sampling.trajectory import ROWS

START_CHOICES = ("auto", "laplace", "initial_point")


def _positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and value >= 1


def check_sampled_vars(sampler: str, kernel: Kernel, vars: list[TensorVariable], model) -> None:
    """Refuse variables the kernel cannot move: spheres for a Euclidean one, discrete ones."""
    if not kernel.supports_spheres:
        spheres = [v.name for v in vars if is_sphere_valued(model, v)]
        if spheres:
            raise ValueError(
                f"{sampler} moves variables on straight lines, but these live on spheres: "
                f"{spheres}. Sample them with a geodesic sampler, pmsg.SGGMC or "
                "pmsg.GSGNHT (alone, or in a list next to this one for the other variables)."
            )
    discrete = [v.name for v in vars if v.dtype not in continuous_types]
    if discrete:
        raise ValueError(
            f"{sampler} needs gradients, but these variables are discrete: {discrete}. "
            f"Assign them to another sampler, e.g. step=[pmsg.{sampler}(vars=[...continuous"
            "...]), pm.Metropolis(vars=[...discrete...])] on a model without pm.Minibatch data, "
            "or pass only continuous variables."
        )


def discrete_beside_minibatch(sampler: str, model) -> str | None:
    """The warning for discrete variables in a model with ``pm.Minibatch`` data, or None.

    ``pm.sample`` gives them to one of PyMC's samplers (``Metropolis`` and its relatives),
    which evaluate the model's log density through ``pm.Minibatch``'s own random rows: a
    different minibatch for each side of an acceptance test, so the test compares noise.
    """
    discrete = [v.name for v in model.value_vars if v.dtype not in continuous_types]
    if not discrete:
        return None
    return (
        f"{sampler}: the model has pm.Minibatch data and discrete variables {discrete}, "
        "which pm.sample gives to one of PyMC's samplers (e.g. Metropolis). Those evaluate "
        "the model's log density through pm.Minibatch's own random rows, a different "
        "minibatch on each side of their acceptance test (measured on a 2,000-row "
        "regression with batches of 100: log-density differences of -130 to +290 between "
        "a point and itself), so the discrete variables' draws are not exact, nor the "
        "others' given them. Marginalise the discrete variables out of the likelihood "
        "(e.g. a mixture), or sample this model without pm.Minibatch."
    )


def check_model_has_continuous_vars(sampler: str, model) -> None:
    """Refuse a model with nothing for a gradient sampler to sample."""
    if not model.value_vars:
        raise ValueError(
            f"{sampler}: the model has no free random variables, so there is "
            "nothing to sample. Add unobserved random variables (priors) to the "
            "model, or use pm.sample_prior_predictive for a model of data only."
        )
    if not model.continuous_value_vars:
        raise ValueError(
            f"{sampler} samples continuous variables only, and the model has "
            "none. Let pm.sample choose a sampler (e.g. Metropolis) for discrete "
            "variables."
        )


def check_step_arguments(
    sampler: str,
    kernel: Kernel,
    *,
    step_size: Any,
    n_steps: Any,
    minibatch: str,
    start: str,
    anchor_every: Any,
    mass: Any,
    mass_adapter: Any,
    draws_per_call: Any = 1,
) -> None:
    """The generic step's own arguments (the kernel's are checked where they are made)."""
    if not _positive_int(n_steps):
        raise ValueError(
            f"n_steps must be a positive integer (integrator steps per draw), got "
            f"{n_steps!r}. The seeds use n_steps=10."
        )
    check_choice(
        "minibatch",
        minibatch,
        tuple(ROWS),
        "'step' draws fresh rows for every gradient, 'trajectory' one set per draw.",
    )
    if isinstance(step_size, str) and step_size != "auto":
        raise TypeError(
            f"step_size must be a real number, a schedule or 'auto', got {step_size!r}."
        )
    if not isinstance(step_size, str):
        # Refused here, not when the step-size adapter is made after the mode search
        # (a step_size of 0 or None cost a full mode search before its error).
        as_schedule(step_size)
    bound = kernel.maximum_step_size
    if bound is not None and isinstance(step_size, int | float) and step_size >= bound:
        raise ValueError(
            f"{sampler}'s step_size must be below {bound:g}, got {step_size!r}. "
            f"{kernel.default_step_size:g} is its default."
        )
    if isinstance(step_size, str) and kernel.default_step_size is None:
        raise ValueError(
            f"{sampler} has no automatic step size yet: pass step_size= "
            "(a positive number or a schedule)."
        )
    check_choice(
        "start",
        start,
        START_CHOICES,
        "'laplace' draws each chain's start from the Laplace approximation at the mode.",
    )
    if not _positive_int(anchor_every):
        raise ValueError(
            f"anchor_every must be a positive integer (iterations between SVRG's anchor "
            f"moves), got {anchor_every!r}."
        )
    if not _positive_int(draws_per_call):
        raise ValueError(
            f"draws_per_call must be a positive integer (draws computed in one compiled "
            f"call after tuning; 20 is a good choice), got {draws_per_call!r}."
        )
    if mass_adapter is not None and mass_adapter.needs_gradient and not kernel.gradient_at_end:
        raise TypeError(
            f"{type(mass_adapter).__name__} needs the gradient at the kept position, "
            f"which the {kernel.name} kernel does not evaluate."
        )
    if kernel.metric == "position_dependent" and (mass is not None or mass_adapter is not None):
        raise TypeError(
            f"{sampler} moves with a position-dependent metric G(θ), so it "
            "has no constant mass: pass metric= (a function of the position) instead of "
            "mass= or a mass adapter."
        )
