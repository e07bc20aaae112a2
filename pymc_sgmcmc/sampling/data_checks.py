"""Checks of the minibatched part of a model, run before any sampling.

Mistakes here do not fail loudly: a NaN row poisons only the gradients whose minibatch
draws it, a missing ``total_size`` weights the likelihood as if the data had ``B`` rows
(a posterior ``√(N/B)`` times too wide), a ``total_size`` that is not the number of rows
scales it wrongly, and a batch as large as the data resamples it for nothing. Each check
names the observed variable, the problem and the fix.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from pymc.data import MinibatchOp
from pymc.variational.minibatch_rv import MinibatchRandomVariable
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors

from pymc_sgmcmc.gradients.graphs import MinibatchGroup, data_value

ROWS_PER_CHUNK = 65_536
"""Rows checked at a time: the check of a large array allocates one chunk's mask."""

MAX_ROWS_LISTED = 5


@dataclass
class ObservedMinibatch:
    """An observed variable and the ``pm.Minibatch`` calls that feed it."""

    name: str
    groups: list[MinibatchGroup]
    total_size: int | None
    """``total_size`` along the first axis; ``None`` where none was given."""


def non_finite_rows(array: np.ndarray) -> np.ndarray:
    """Indices of the rows of ``array`` that hold a NaN, an infinity or a masked entry.

    ``pm.Data`` and ``pm.set_data`` turn NaNs into a masked array; the compiled graph
    reads its data buffer, mask or not, so masked entries count as missing.
    """
    if array.ndim == 0:
        return np.empty(0, dtype=int)
    mask = np.ma.getmaskarray(array).reshape(array.shape[0], -1)
    flat = np.ma.getdata(array).reshape(array.shape[0], -1)
    if flat.dtype.kind not in "fc" and not mask.any():
        return np.empty(0, dtype=int)
    bad = []
    for start in range(0, flat.shape[0], ROWS_PER_CHUNK):
        chunk = slice(start, start + ROWS_PER_CHUNK)
        good = ~mask[chunk]
        if flat.dtype.kind in "fc":
            good &= np.isfinite(flat[chunk])
        bad.append(start + np.flatnonzero(~good.all(axis=1)))
    return np.concatenate(bad) if bad else np.empty(0, dtype=int)


def _non_finite_rows_of(group: MinibatchGroup) -> list[np.ndarray]:
    """:func:`non_finite_rows` of each array of ``group``; out-of-core ones read by chunks."""
    buffer = group.buffer
    if buffer is None:
        return [non_finite_rows(data_value(array)) for array in group.data]
    bad: list[list[np.ndarray]] = [[] for _ in group.data]
    for start, stop in buffer.ranges(ROWS_PER_CHUNK):
        for j, rows in enumerate(buffer.read(start, stop)):
            bad[j].append(start + non_finite_rows(rows))
    return [np.concatenate(b) for b in bad]


def observed_minibatches(model, groups: list[MinibatchGroup]) -> list[ObservedMinibatch]:
    """The observed variables whose likelihood depends on a ``pm.Minibatch`` call."""
    by_rng = {g.rng: g for g in groups}
    found = []
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        fed = []
        for var in ancestors([rv, value]):
            node = var.owner
            if node is not None and isinstance(node.op, MinibatchOp):
                group = by_rng.get(node.inputs[-1])
                if group is not None and group not in fed:
                    fed.append(group)
        if not fed:
            continue
        total_size = None
        if isinstance(rv.owner.op, MinibatchRandomVariable):
            first = rv.owner.inputs[1]
            if isinstance(first, Constant) and first.data is not None:
                total_size = int(first.data)
            else:
                total_size = -1  # given, but not along the first axis or not a constant
        found.append(ObservedMinibatch(rv.name, fed, total_size))
    return found


def check_minibatched_data(
    model,
    groups: list[MinibatchGroup],
    n_rows: list[int],
    sampler: str,
    *,
    allow_missing_total_size: bool = False,
) -> None:
    """Refuse (or warn about) minibatched data that would give a wrong answer silently.

    Parameters
    ----------
    model : pymc.Model
        The model.
    groups : list of MinibatchGroup
        Its ``pm.Minibatch`` calls, as the step method found them.
    n_rows : list of int
        The number of rows of each call's data.
    sampler : str
        The sampler's name, for the messages.
    allow_missing_total_size : bool
        Accept an observed variable fed by ``pm.Minibatch`` without ``total_size``.

    Raises
    ------
    ValueError
        For non-finite values in minibatched data, and for a missing ``total_size``
        (unless allowed).
    """
    rows_of = {id(g): n for g, n in zip(groups, n_rows, strict=True)}
    observed = observed_minibatches(model, groups)
    feeds = {id(g): [o.name for o in observed if g in o.groups] for g in groups}
    for group in groups:
        names = feeds[id(group)] or ["(no observed variable)"]
        for j, bad in enumerate(_non_finite_rows_of(group)):
            if bad.size:
                shown = ", ".join(map(str, bad[:MAX_ROWS_LISTED])) + (
                    ", ..." if bad.size > MAX_ROWS_LISTED else ""
                )
                raise ValueError(
                    f"{sampler}: array {j} of the pm.Minibatch call feeding {names} has "
                    f"{bad.size} of {rows_of[id(group)]} rows with NaN or infinite values "
                    f"(rows {shown}). Every minibatch that draws one gives a non-finite "
                    "gradient, so the chain would stall or diverge. Drop those rows before "
                    "pm.Minibatch (e.g. keep = np.isfinite(X).all(axis=1); X, y = X[keep], "
                    "y[keep]) or impute them."
                )
        if group.batch_size >= rows_of[id(group)]:
            warnings.warn(
                f"{sampler}: pm.Minibatch(batch_size={group.batch_size}) feeding {names} "
                f"draws at least as many rows as the data has ({rows_of[id(group)]}): every "
                "gradient resamples the whole data with replacement, which adds noise and "
                "saves nothing. Pass the data without pm.Minibatch (and without total_size) "
                "to use exact full-data gradients.",
                UserWarning,
                stacklevel=3,
            )
    for obs in observed:
        rows = {rows_of[id(g)] for g in obs.groups}
        n = max(rows)
        batch = max(g.batch_size for g in obs.groups)
        if obs.total_size is None:
            if allow_missing_total_size:
                continue
            raise ValueError(
                f"{sampler}: the observed variable {obs.name!r} is fed by pm.Minibatch "
                f"(batch_size={batch} of {n} rows) but has no total_size, so its likelihood "
                f"counts {batch} rows instead of {n} and the posterior comes out about "
                f"√({n}/{batch}) ≈ {np.sqrt(n / batch):.1f} times too wide. Pass "
                f"total_size={n} where {obs.name!r} is defined (e.g. pm.Normal({obs.name!r}, "
                f"..., observed=batch, total_size={n})); if the down-weighting is what you "
                "want, pass allow_missing_total_size=True to the sampler."
            )
        if obs.total_size > 0 and obs.total_size not in rows:
            warnings.warn(
                f"{sampler}: the observed variable {obs.name!r} has total_size="
                f"{obs.total_size}, but the pm.Minibatch data it is fed by has {n} rows: "
                f"its likelihood is scaled as if there were {obs.total_size}, which "
                f"{'narrows' if obs.total_size > n else 'widens'} the posterior. Pass "
                f"total_size={n} unless that is what you mean.",
                UserWarning,
                stacklevel=3,
            )


class CheckedData:
    """A step's minibatched data as last checked: :meth:`check` again only once replaced.

    ``pm.set_data`` replaces a shared variable's array with a new object, maybe of a new
    shape; the identity and shape of every array tell whether the data changed.
    """

    def __init__(
        self, model, groups: list[MinibatchGroup], sampler: str, *, allow_missing_total_size: bool
    ) -> None:
        self.model, self.groups, self.sampler = model, groups, sampler
        self.allow_missing_total_size = allow_missing_total_size
        self.checked: list[tuple[int, tuple[int, ...]]] | None = None

    def _fingerprint(self) -> list[tuple[int, tuple[int, ...]]]:
        # A buffer's arrays change at every chain; its sources do not.
        return [
            (id(g.buffer), (g.buffer.n_rows,))
            if g.buffer is not None
            else (id(a := data_value(d)), a.shape)
            for g in self.groups
            for d in g.data
        ]

    def check(self, n_rows: list[int]) -> bool:
        """Check the data (:func:`check_minibatched_data`) if new; return whether it was."""
        fingerprint = self._fingerprint()
        if fingerprint == self.checked:
            return False
        check_minibatched_data(
            self.model, self.groups, n_rows, self.sampler,
            allow_missing_total_size=self.allow_missing_total_size,
        )  # fmt: skip
        self.checked = fingerprint
        return True

    def trust(self) -> None:
        """Take the current arrays as checked (e.g. arrived checked, as new objects)."""
        self.checked = self._fingerprint()
