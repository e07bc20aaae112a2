"""Minibatch helper for data that ``pm.Minibatch`` cannot take as it is."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor


def Minibatch(*arrays, batch_size: int):  # noqa: N802 - mirrors pm.Minibatch
    """``pm.Minibatch`` that also accepts integer arrays (counts, class labels).

    PyMC casts an integer minibatch before it reaches a discrete likelihood, and then
    refuses it as observed data ("Variables that depend on other nodes cannot be used
    for observed data"). Passing the data as floating point avoids the cast; this
    function does that conversion (exact for integers below 2**53) and otherwise
    behaves as ``pm.Minibatch``: one random set of rows, shared by all arrays.

    Parameters
    ----------
    *arrays : array_like
        Arrays with the same number of rows.
    batch_size : int
        Rows per minibatch.

    Returns
    -------
    TensorVariable or list of TensorVariable
        One minibatch per array, as ``pm.Minibatch`` returns them.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_sgmcmc as pmsg
    >>> counts = np.random.default_rng(0).poisson(3.0, size=10_000)
    >>> with pm.Model():
    ...     batch = pmsg.Minibatch(counts, batch_size=100)
    ...     rate = pm.Gamma("rate", 1.0, 1.0)
    ...     _ = pm.Poisson("counts", rate, observed=batch, total_size=len(counts))
    """
    if not arrays:
        raise TypeError("Minibatch needs at least one array.")
    converted = []
    for array in arrays:
        if isinstance(array, np.ndarray | list | tuple) or np.isscalar(array):
            array = np.asarray(array)
            if array.dtype.kind in "iub":
                array = array.astype(pytensor.config.floatX)
        converted.append(array)
    return pm.Minibatch(*converted, batch_size=batch_size)
