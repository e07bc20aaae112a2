"""The array namespace: one dispatcher between NumPy and PyTensor.

Every update rule of the package is written with arithmetic operators only, so that it
works on NumPy arrays (unit tests, reference implementations) and on PyTensor variables
(the compiled trajectory) alike. Where a function other than an operator is needed,
:func:`namespace` picks NumPy or PyTensor.
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


def with_entries(vector: Array, indices: Any, values: Array) -> Array:
    """A copy of ``vector`` with ``vector[indices] = values`` (the original unchanged)."""
    if is_symbolic(vector, values):
        import pytensor.tensor as pt

        return pt.set_subtensor(pt.as_tensor_variable(vector)[indices], values)
    result = np.array(vector, copy=True)
    result[indices] = values
    return result
