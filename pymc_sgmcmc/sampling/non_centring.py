"""A centred hierarchy sampled in its non-centred coordinates.

A centred hierarchy, ``a ~ Normal(loc(u), scale(u))`` with ``a`` indexed by a minibatched
group index, has no joint mode when groups have few rows: the density grows without
bound as the scale goes to 0 with every ``a_j`` at its location (the funnel's neck), so a
grouped step has no start, mass or anchor to take from a mode search, and a chain that
moves ``a`` and ``u`` by turns mixes the scale slowly where groups are weak.

Its non-centred twin, ``a = loc(u) + scale(u) z`` with ``z ~ Normal(0, 1)``, is the same
posterior in other coordinates (the prior of ``a`` with the Jacobian ``Π scale(u)`` is the
standard normal of ``z``). Correlated effects, each group's row ``a_j ~ MvNormal(mu(u),
Σ(u))`` (a matrix of varying intercepts and slopes with an LKJ prior on ``Σ``), have the
twin ``a_j = mu + L z_j`` with ``L`` the Cholesky factor of ``Σ`` (Jacobian ``|L|`` per
row). There a grouped step has the interweaving move (the centred
update of ``u`` given ``a``, Yu and Meng, "To Center or Not to Center: That Is Not the
Question") and the exact move of every group's ``z``, and the anchor follows the chain
during tuning (``docs/hierarchical.md``).

:func:`non_centred` builds that twin as a PyMC model (PyMC's own model-to-graph round
trip, :func:`pymc.model.fgraph.fgraph_from_model`); :class:`NonCentring` maps a flat point
between the user's coordinates (``a``, what ``pm.sample`` records) and the sampled ones
(``z``). Every other value variable is the same in both, in the same place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.model.fgraph import (
    fgraph_from_model,
    model_deterministic,
    model_free_rv,
    model_from_fgraph,
)
from pymc.pytensorf import join_nonshared_inputs
from pytensor.graph.basic import Variable
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import MvNormalRV, NormalRV
from scipy.linalg import solve_triangular

from pymc_sgmcmc.core.compilation import LinkedWhereUnpickled, compile_graph
from pymc_sgmcmc.sampling.model_graph import (
    flat_slices,
    initial_values_set_aside,
    keep_the_models_data,
)

SUFFIX = "_z"
"""The sampled standard-normal variable of a centred ``a`` is named ``a`` + this."""

PRIOR_SHARE_LIMIT = 0.5
"""A centred hierarchy whose locals take more than this share of their precision at the
mode from their prior (on average) is sampled non-centred.

Papaspiliopoulos, Roberts and Sköld ("A general framework for the parametrization of
hierarchical models") show the centred form mixing well where the data inform each
local much more than the prior does, the non-centred one where they do not. The share
also flags a mode search that ended in a funnel's neck: measured on a radon-like model
(386 counties, 232 of them with 1-3 rows), the search stopped at a group scale of 1.5e-8
with a finite curvature, every local's precision 99.96 % prior, and the centred chains
did not move (mean errors up to 25 sds)."""


@dataclass
class NonCentring:
    """A model's centred locals, sampled as ``z = (a − loc) / scale``.

    Attributes
    ----------
    model : pm.Model
        The model in the sampled coordinates: each centred ``a`` a deterministic
        ``loc + scale * a_z`` (``mu + a_z @ L.T`` for a multivariate normal's rows) of a
        new free ``a_z ~ Normal(0, 1)``.
    vars : list of Variable
        Its value variables in the step's order: the user's, with ``a_z`` where ``a`` is.
    names : tuple of str
        The user's centred variables.
    model_point : dict
        The user's model's initial point.
    """

    model: pm.Model
    vars: list[Variable]
    names: tuple[str, ...]
    model_point: dict[str, np.ndarray]
    _slices: list[slice]
    _row_sizes: list[int]  # 0: elementwise scale; k: rows of k under a k x k factor
    _position: Variable
    _outputs: list[Variable]
    _function: Any = field(default=None, repr=False)
    _last: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def __getstate__(self) -> dict:
        # Unpickled, the function is linked again, not compiled.
        function = None if self._function is None else LinkedWhereUnpickled(self._function)
        return self.__dict__ | {"_function": function}

    def _locations_and_scales(self, position: np.ndarray) -> list[np.ndarray]:
        if self._function is None:
            self._function = compile_graph([self._position], self._outputs)
        return self._function(position)

    def to_sampled(self, position: np.ndarray) -> np.ndarray:
        """The flat point with each centred ``a`` replaced by ``z = (a − loc) / scale``.

        The point :meth:`to_model` returned last maps back to the point it came from
        exactly: ``(loc + scale z − loc) / scale`` is ``z`` only up to rounding, and a
        chain that carried those roundings from draw to draw drifted from the same
        chain on the hand-written non-centred model (1e-7 after 120 draws).
        """
        if self._last is not None and np.array_equal(position, self._last[0]):
            return self._last[1].copy()
        values = self._locations_and_scales(position)
        sampled = position.copy()
        for k, where in enumerate(self._slices):
            loc, scale = values[2 * k], values[2 * k + 1]
            sampled[where] = _standardised(position[where], loc, scale, self._row_sizes[k])
        return sampled

    def point_to_sampled(self, point: dict[str, Any], vars: list[Variable]) -> dict[str, Any]:
        """A point by the user's value-variable names (``vars`` among them) in ours."""
        mapped = DictToArrayBijection.map({v.name: point[v.name] for v in vars})
        sampled = self.to_sampled(mapped.data.astype(float))
        values = DictToArrayBijection.rmap(RaveledVars(sampled, mapped.point_map_info))
        converted = {k: v for k, v in point.items() if k not in self.names}
        for user, ours in zip(vars, self.vars, strict=True):
            converted[ours.name] = values[user.name]
        return converted

    def options_to_sampled(self, options: dict[str, Any], vars: list[Variable]) -> dict:
        """The step's options with the points they hold (``anchor=``, a start) in ours."""
        point = self.model_point
        converted = dict(options)
        if isinstance(options.get("anchor"), dict):
            converted["anchor"] = self.point_to_sampled(point | options["anchor"], vars)
        start = (options.get("mode_kwargs") or {}).get("start")
        if isinstance(start, dict):
            converted["mode_kwargs"] = options["mode_kwargs"] | {
                "start": self.point_to_sampled(point | start, vars)
            }
        return converted

    def to_model(self, position: np.ndarray) -> np.ndarray:
        """The flat point with each ``z`` replaced by ``a = loc + scale z``."""
        values = self._locations_and_scales(position)
        user = position.copy()
        for k, where in enumerate(self._slices):
            loc, scale = values[2 * k], values[2 * k + 1]
            user[where] = _located(position[where], loc, scale, self._row_sizes[k])
        self._last = (user.copy(), position.copy())
        return user

    @property
    def has_rows(self) -> bool:
        """Whether a centred variable is rows of correlated effects (a ``MvNormal``'s)."""
        return any(self._row_sizes)

    def prior_variances(self, position: np.ndarray) -> list[np.ndarray]:
        """Each centred variable's prior variances, flat, at ``position`` (the user's).

        For correlated rows, each coordinate's variance given the rest of its row (one
        over the diagonal of ``Σ⁻¹``): the prior's share of a local's precision.
        """
        values = self._locations_and_scales(position)
        variances = []
        for k, where in enumerate(self._slices):
            scale, row_size = values[2 * k + 1], self._row_sizes[k]
            if row_size == 0:
                variances.append(np.asarray(scale) ** 2)
            else:  # 1 / diag(L⁻ᵀ L⁻¹) on every row
                inverse = solve_triangular(scale, np.eye(row_size), lower=True)
                conditional = 1.0 / np.sum(inverse**2, axis=0)
                variances.append(np.tile(conditional, (where.stop - where.start) // row_size))
        return variances


def _located(z: np.ndarray, loc: np.ndarray, scale: np.ndarray, row_size: int) -> np.ndarray:
    """``loc + scale z`` (elementwise), or ``loc + z Lᵀ`` row by row (``scale`` is ``L``)."""
    if row_size == 0:
        return loc + scale * z
    return loc + (z.reshape(-1, row_size) @ scale.T).ravel()


def _standardised(a: np.ndarray, loc: np.ndarray, scale: np.ndarray, row_size: int) -> np.ndarray:
    """The inverse of :func:`_located`."""
    if row_size == 0:
        return (a - loc) / scale
    deviations = (a - loc).reshape(-1, row_size)
    return solve_triangular(scale, deviations.T, lower=True).T.ravel()


def centred_normal(model: pm.Model, value: Variable, vars: list[Variable]) -> tuple | None:
    """``(rv, loc, scale)`` where ``value`` is a centred hierarchy's, else ``None``.

    A free ``Normal(loc, scale)`` without a transform whose scale reads another of
    ``vars`` (a hierarchical scale, not a fixed prior), and whose location and scale
    read nothing but ``vars`` other than its own. For a ``MvNormal(mu, cov)`` (rows of
    correlated effects) ``scale`` is the Cholesky factor of ``cov``, which must be one
    matrix for every row.
    """
    rv = model.values_to_rvs.get(value)
    if rv is None or model.rvs_to_transforms[rv]:
        return None
    if isinstance(rv.owner.op, NormalRV):
        loc, scale = rv.owner.inputs[-2:]
    elif isinstance(rv.owner.op, MvNormalRV):
        loc, cov = rv.owner.inputs[-2:]
        if not all(cov.type.broadcastable[:-2]):
            return None  # a covariance per row: not a shared hierarchy
        scale = _row_factor(cov)
    else:
        return None
    sampled_rvs = {model.values_to_rvs[v] for v in vars} - {rv}
    other_rvs = set(model.free_RVs) - sampled_rvs
    read = set(ancestors([loc, scale]))
    if rv in read or read & other_rvs or not read & sampled_rvs:
        return None
    if not set(ancestors([scale])) & sampled_rvs:
        return None
    return rv, loc, scale


def _row_size(rv: Variable, shape: tuple[int, ...]) -> int:
    """0 for a normal's elementwise scale; a multivariate normal's row length."""
    return int(shape[-1]) if isinstance(rv.owner.op, MvNormalRV) else 0


def _row_factor(cov: Variable) -> Variable:
    """The Cholesky factor of a multivariate normal's covariance, one for every row."""
    return pt.linalg.cholesky(cov[(0,) * (cov.type.ndim - 2)])


def _twin_value(rv: Variable, standard: Variable) -> Variable:
    """``loc + scale z``, or ``mu + z Lᵀ`` for a multivariate normal's rows."""
    if isinstance(rv.owner.op, MvNormalRV):
        mean, cov = rv.owner.inputs[-2:]
        return mean + standard @ _row_factor(cov).T
    loc, scale = rv.owner.inputs[-2:]
    return loc + scale * standard


LOCATION_SCALE_FAMILIES = (
    "NormalRV",
    "LaplaceRV",
    "StudentTRV",
    "CauchyRV",
    "LogisticRV",
    "GumbelRV",
    "SkewNormalRV",
    "AsymmetricLaplaceRV",
    "MoyalRV",
    "ExGaussianRV",
)
"""PyMC's location-scale laws (by the class name of their random variable's op).

A centred hierarchy of one of them, ``a ~ D(loc, scale)``, can be written
``a = loc + scale * z`` with ``z ~ D(0, 1)``; without a mode, its funnel (the scale
shrinking to 0 with every local at its location) is where a chain started without one
falls in: a centred Laplace hierarchy of 300 groups (half with 1-3 rows) gave its
location 6.9 posterior sds off and an ESS of 3."""


def location_scale_locals(model: pm.Model, vars: list[Variable], names: set[str]) -> list[str]:
    """The model's names of the value variables of ``names`` with a location-scale law.

    :data:`LOCATION_SCALE_FAMILIES`: such a centred hierarchy can be written non-centred.
    """
    found = []
    for value in vars:
        rv = model.values_to_rvs.get(value)
        if value.name in names and rv is not None:
            if type(rv.owner.op).__name__ in LOCATION_SCALE_FAMILIES:
                found.append(rv.name)
    return found


def non_centred(model: pm.Model, vars: list[Variable], names: set[str]) -> NonCentring | None:
    """The model with the centred locals among ``names`` non-centred (``None``: none is).

    ``vars`` are the step's value variables; each variable of ``names`` that is a
    centred hierarchy (:func:`centred_normal`) becomes ``loc + scale * name_z`` (``mu +
    name_z @ L.T`` for a multivariate normal).
    """
    centred = {}
    for value in vars:
        if value.name in names:
            found = centred_normal(model, value, vars)
            if found is not None:
                centred[value.name] = found
    if not centred:
        return None
    with initial_values_set_aside(model):  # the user's initial point is converted
        fgraph, memo = fgraph_from_model(model)
    keep_the_models_data(fgraph, model)
    for name, (rv, _, _) in centred.items():
        model_var = memo[rv]
        new_rv = model_var.owner.inputs[0]
        dims = model_var.owner.op.dims
        standard = pm.Normal.dist(0.0, 1.0, size=new_rv.shape)
        standard_value = standard.type(name=name + SUFFIX)
        standard_var = model_free_rv(standard, standard_value, None, name + SUFFIX, *dims)
        located = _twin_value(new_rv, standard_var)
        fgraph.replace(model_var, model_deterministic(located, name, *dims), import_missing=True)
    sampled = model_from_fgraph(fgraph, mutate_fgraph=True)
    by_name = {v.name: v for v in sampled.value_vars}
    sampled_vars = [by_name[v.name + SUFFIX if v.name in centred else v.name] for v in vars]
    # Each centred variable's place in the flat position, and its location and scale
    # as functions of the user's flat position (the globals are the same in both).
    point = model.initial_point()
    places = flat_slices(point, vars)
    outputs, slices, row_sizes = [], [], []
    for value in vars:
        if value.name in centred:
            rv, loc, scale = centred[value.name]
            shape = point[value.name].shape
            row_size = _row_size(rv, shape)
            if row_size == 0:
                scale = pt.broadcast_to(scale, shape).ravel()
            loc, scale = model.replace_rvs_by_values([pt.broadcast_to(loc, shape).ravel(), scale])
            outputs.extend([loc, scale])
            slices.append(places[value.name])
            row_sizes.append(row_size)
    outputs, position = join_nonshared_inputs(point, outputs, vars, {})
    return NonCentring(
        sampled, sampled_vars, tuple(centred), point, slices, row_sizes, position, outputs
    )


def prior_share(twin: NonCentring, position: np.ndarray, covariance: np.ndarray) -> float:
    """The mean share of the centred locals' precision at ``position`` from their prior.

    ``covariance``: the Laplace covariance there (a diagonal as a vector, or dense); a
    local's precision is taken as one over its variance, its prior's as one over its
    prior variance (``scale²``; given the rest of its row for correlated rows).
    """
    variances = np.diag(covariance) if np.ndim(covariance) == 2 else np.asarray(covariance)
    priors = twin.prior_variances(position)
    shares = [variances[where] / prior for where, prior in zip(twin._slices, priors, strict=True)]
    return float(np.mean(np.concatenate(shares)))
