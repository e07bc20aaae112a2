"""Pieces shared by every Hamiltonian update rule.

Every function here is written with arithmetic operators only, so that it works on
NumPy arrays (unit tests, reference implementations) and on PyTensor variables (the
compiled trajectory) alike. Where a function other than an operator is needed,
:func:`namespace` picks NumPy or PyTensor: the package's one dispatcher.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeAlias

import numpy as np
from pytensor.graph.basic import Variable

Array: TypeAlias = Any
"""A NumPy array or a PyTensor tensor variable."""

GradLogp: TypeAlias = Callable[[Array], Array]
"""Maps a position to the gradient of the log density there.

In the compiled trajectory each call evaluates the model on that step's minibatch,
already scaled to the full data by PyMC's ``total_size``.
"""


def is_symbolic(*arrays: Any) -> bool:
    """Whether any argument is a PyTensor variable (then the result must be one too)."""
    return any(isinstance(a, Variable) for a in arrays)


def namespace(*arrays: Any) -> ModuleType:
    """``pytensor.tensor`` when any argument is symbolic, ``numpy`` otherwise.

    Both offer the functions used here under the same names (``sqrt``, ``exp``, ``cos``,
    ``sin``, ``where``, ``concatenate``, ``linalg.cholesky``...).
    """
    if is_symbolic(*arrays):
        import pytensor.tensor as pt

        return pt
    return np


def velocity(inv_mass: Array, momentum: Array) -> Array:
    """Return ``M⁻¹ p`` for a diagonal (1-D ``inv_mass``) or dense (2-D) inverse mass.

    Parameters
    ----------
    inv_mass : array
        Inverse mass: the diagonal of ``M⁻¹`` (1-D) or the full matrix (2-D).
    momentum : array
        Momentum ``p``, 1-D.
    """
    if inv_mass.ndim == 2:
        return inv_mass @ momentum
    return inv_mass * momentum


def kinetic_energy(inv_mass: Array, momentum: Array) -> Array:
    """Return ``pᵀ M⁻¹ p / 2``, the Gaussian kinetic energy (the seeds' eq. 1 second term)."""
    return 0.5 * (momentum * velocity(inv_mass, momentum)).sum()


def kinetic_temperature(inv_mass: Array, momentum: Array) -> Array:
    """Return ``pᵀ M⁻¹ p / D``; it averages 1 when ``p ~ N(0, M)``."""
    return 2.0 * kinetic_energy(inv_mass, momentum) / momentum.shape[0]
