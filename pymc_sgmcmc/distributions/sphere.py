r"""Distributions on the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`.

Both distributions take the embedding dimension ``d`` from the last axis; leading axes index
independent spheres. Their default transform is :data:`~pymc_sgmcmc.distributions.transform.
sphere_transform`, so NUTS and HMC sample them through an ambient value variable, and
geometry-aware samplers can recognise them by that transform.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.distribution import Continuous, SymbolicRandomVariable
from pymc.distributions.shape_utils import get_support_shape, rv_size_is_none
from pymc.distributions.transforms import _default_transform
from pymc.pytensorf import floatX, normalize_rng_param
from pytensor.graph.basic import Variable
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.random.utils import normalize_size_param
from pytensor.tensor.variable import TensorVariable

from pymc_sgmcmc.distributions.special import log_sphere_area, log_vmf_normaliser
from pymc_sgmcmc.distributions.transform import SphereTransform, sphere_transform

__all__ = [
    "SphereContinuous",
    "SphereUniform",
    "SphereUniformRV",
    "VonMisesFisher",
    "VonMisesFisherRV",
    "sample_vmf",
    "sphere_uniform",
    "von_mises_fisher",
]


# --------------------------------------------------------------------------------------------
# Wood's sampler
# --------------------------------------------------------------------------------------------


def _sample_vmf_cosine(
    rng: np.random.Generator, d: int, kappa: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``w = mu^T x`` for each concentration in the flat array ``kappa`` (Wood 1994).

    Returns ``w`` together with ``1 - w``, computed directly: for large ``kappa`` the mass of
    ``w`` sits within ``(d - 1) / (2 kappa)`` of 1, and forming ``1 - w`` by subtraction
    would lose the digits that fix the tangential part of the draw.
    """
    dm1 = d - 1.0
    # Wood's b = (-2 kappa + sqrt(4 kappa^2 + (d-1)^2)) / (d-1), rationalised so that it does
    # not cancel for large kappa.
    b = dm1 / (2.0 * kappa + np.sqrt(4.0 * kappa * kappa + dm1 * dm1))
    x0 = (1.0 - b) / (1.0 + b)
    one_minus_x0 = 2.0 * b / (1.0 + b)
    log_one_minus_x0_sq = np.log(4.0 * b) - 2.0 * np.log1p(b)

    w = np.empty_like(kappa)
    one_minus_w = np.empty_like(kappa)
    pending = np.arange(kappa.size)
    # Vectorised rejection: every pass proposes for all pending draws. Wood's envelope accepts
    # with probability above about 0.6 for every d and kappa, so few passes are needed.
    while pending.size:
        bp, kp = b[pending], kappa[pending]
        z = rng.beta(0.5 * dm1, 0.5 * dm1, size=pending.size)
        omw = 2.0 * bp * z / (1.0 - (1.0 - bp) * z)  # 1 - W, W = (1-(1+b)z)/(1-(1-b)z)
        log_u = np.log(rng.random(pending.size))
        # Wood's test  kappa W + (d-1) log(1 - x0 W) - c >= log U,  c = kappa x0 +
        # (d-1) log(1 - x0^2), in terms of 1 - W and 1 - x0 so that it stays exact as
        # kappa -> infinity, where W and x0 both tend to 1.
        log_ratio = kp * (one_minus_x0[pending] - omw) + dm1 * (
            np.log(one_minus_x0[pending] + x0[pending] * omw) - log_one_minus_x0_sq[pending]
        )
        accept = log_ratio >= log_u
        done = pending[accept]
        one_minus_w[done] = omw[accept]
        w[done] = 1.0 - omw[accept]
        pending = pending[~accept]
    return w, one_minus_w


def sample_vmf(
    rng: np.random.Generator | int | None,
    mu: Any,
    kappa: Any,
    size: int | tuple[int, ...] | None = None,
) -> np.ndarray:
    r"""Draw from the von Mises-Fisher distribution with Wood's algorithm.

    The cosine :math:`w = \mu^\top x` has density proportional to
    :math:`e^{\kappa w}(1-w^2)^{(d-3)/2}` on :math:`[-1, 1]` and is drawn by Wood's
    rejection sampler with a transformed-beta envelope (Wood 1994); the tangential part is
    uniform on the unit sphere orthogonal to :math:`\mu`, drawn by projecting and normalising
    a Gaussian vector, so that no rotation matrix is needed and any :math:`\mu` works.

    Parameters
    ----------
    rng : numpy.random.Generator, int or None
        Random generator, or a seed for :func:`numpy.random.default_rng`.
    mu : array_like, shape (..., d)
        Mean directions, ``d >= 2``; normalised here (they must be non-zero).
    kappa : array_like, shape (...)
        Concentrations, ``kappa >= 0`` (0 gives the uniform distribution).
    size : int or tuple of int, optional
        Batch shape of the draw, as in NumPy: the result has shape ``size + (d,)`` and
        ``mu[..., 0]`` and ``kappa`` must broadcast to ``size``. By default the broadcast
        batch shape of ``mu`` and ``kappa``.

    Returns
    -------
    ndarray, shape (*size, d)
        Unit vectors.

    Raises
    ------
    ValueError
        For ``d < 2``, a zero ``mu``, or a negative or non-finite ``kappa``.

    References
    ----------
    A. T. A. Wood (1994), "Simulation of the von Mises Fisher distribution",
    *Communications in Statistics - Simulation and Computation* 23(1), 157-164.
    """
    rng = np.random.default_rng(rng)
    mu = np.asarray(mu, dtype=np.float64)
    kappa = np.asarray(kappa, dtype=np.float64)
    if mu.ndim < 1 or mu.shape[-1] < 2:
        raise ValueError("mu must have a last axis of length d >= 2")
    if not np.all(np.isfinite(kappa)) or np.any(kappa < 0):
        raise ValueError("kappa must be finite and >= 0")
    norm = np.linalg.norm(mu, axis=-1, keepdims=True)
    if np.any(norm == 0) or not np.all(np.isfinite(norm)):
        raise ValueError("mu must be a finite, non-zero vector")
    d = mu.shape[-1]
    if size is None:
        batch = np.broadcast_shapes(mu.shape[:-1], kappa.shape)
    else:
        batch = (size,) if np.ndim(size) == 0 else tuple(size)
    mu = np.broadcast_to(mu / norm, (*batch, d)).reshape(-1, d)
    kappa = np.broadcast_to(kappa, batch).reshape(-1)

    w, one_minus_w = _sample_vmf_cosine(rng, d, kappa)
    tangent = rng.standard_normal(mu.shape)
    tangent -= np.sum(tangent * mu, axis=-1, keepdims=True) * mu
    tangent /= np.linalg.norm(tangent, axis=-1, keepdims=True)
    # sqrt(1 - w^2) from 1 - w, exact near the poles.
    x = w[:, None] * mu + np.sqrt(one_minus_w * (1.0 + w))[:, None] * tangent
    # Remove the rounding left in |x|, so draws are unit vectors to the last bit.
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x.reshape(*batch, d)


# --------------------------------------------------------------------------------------------
# Distributions
# --------------------------------------------------------------------------------------------


class SphereContinuous(Continuous):
    """Base class for distributions on the unit sphere; default transform ``sphere``."""


@_default_transform.register(SphereContinuous)
def _sphere_default_transform(op: Any, rv: TensorVariable) -> SphereTransform:
    return sphere_transform


class VonMisesFisherRV(RandomVariable):
    """Random-variable ``Op`` of the von Mises-Fisher distribution, drawn by Wood's algorithm.

    Signature ``(n),()->(n)``: a mean direction and a concentration give a unit vector.
    """

    name = "von_mises_fisher"
    signature = "(n),()->(n)"
    dtype = "floatX"
    _print_name = ("VonMisesFisher", "\\operatorname{VonMisesFisher}")

    @classmethod
    def rng_fn(
        cls,
        rng: np.random.Generator,
        mu: np.ndarray,
        kappa: np.ndarray,
        size: tuple[int, ...] | None,
    ) -> np.ndarray:
        """Draw with :func:`sample_vmf` (batch shape ``size``, NumPy semantics)."""
        return sample_vmf(rng, mu, kappa, size)


von_mises_fisher = VonMisesFisherRV()


def _check_static_kappa(kappa: Any) -> None:
    """Refuse a numeric negative concentration when the model is built, not at sampling."""
    if not isinstance(kappa, Variable) and np.any(np.asarray(kappa) < 0):
        raise ValueError("kappa must be >= 0")


class VonMisesFisher(SphereContinuous):
    r"""Von Mises-Fisher distribution on the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`.

    .. math::

        f(x \mid \mu, \kappa) = C_d(\kappa)\, \exp(\kappa\, \mu^\top x), \qquad
        C_d(\kappa) = \frac{\kappa^{d/2-1}}{(2\pi)^{d/2} I_{d/2-1}(\kappa)},

    a density with respect to the surface measure of the sphere (Mardia & Jupp 2000,
    section 9.3.2). The normaliser is evaluated stably for all :math:`\kappa \ge 0` and large
    ``d`` by :func:`~pymc_sgmcmc.distributions.special.log_vmf_normaliser`; at
    :math:`\kappa = 0` the distribution is uniform.

    ========  ==========================================================
    Support   :math:`x \in \mathbb{R}^d`, :math:`\lVert x \rVert = 1`
    Mean      :math:`A_d(\kappa)\,\mu`, :math:`A_d(\kappa) = I_{d/2}(\kappa)/I_{d/2-1}(\kappa)`
              (see :func:`~pymc_sgmcmc.distributions.special.vmf_mean_resultant_length`)
    ========  ==========================================================

    Parameters
    ----------
    mu : tensor_like of float, shape (..., d)
        Mean direction, ``d >= 2`` (the last axis); normalised internally, so it must be
        non-zero but need not have norm one. Leading axes give independent spheres.
    kappa : tensor_like of float, shape (...)
        Concentration, ``kappa >= 0``; broadcasts against the leading axes of ``mu``.

    Notes
    -----
    The default transform is :data:`~pymc_sgmcmc.distributions.transform.sphere_transform`.
    When the posterior of a sphere-valued parameter is concentrated (a cap of a few degrees,
    as data usually make it), NUTS through that transform can diverge; pass
    ``default_transform=SphereTransform(radial_sd=0.1)`` instead (``transform=`` would be
    applied on top of the default, not instead of it). See
    :class:`~pymc_sgmcmc.distributions.transform.SphereTransform` for the trade-off.

    As for PyMC's simplex distributions, the log density does not check that the value has
    norm one; observed data must be unit vectors.

    Random draws use Wood's (1994) rejection algorithm (:func:`sample_vmf`) in NumPy, so
    ``pm.draw`` and prior and posterior predictive sampling work with every backend;
    PyTensor's Numba backend runs it in object mode and says so in a warning.

    References
    ----------
    K. V. Mardia and P. E. Jupp (2000), *Directional Statistics*, Wiley.

    A. T. A. Wood (1994), "Simulation of the von Mises Fisher distribution",
    *Communications in Statistics - Simulation and Computation* 23(1), 157-164.

    Examples
    --------
    >>> import pymc as pm, pymc_sgmcmc as pmsg
    >>> with pm.Model():
    ...     x = pmsg.VonMisesFisher("x", mu=[0.0, 0.0, 1.0], kappa=5.0)
    """

    rv_op = von_mises_fisher

    @classmethod
    def dist(cls, mu: Any, kappa: Any, **kwargs: Any) -> TensorVariable:
        """Create the random variable outside a model; see the class documentation."""
        _check_static_kappa(kappa)
        mu = pt.as_tensor_variable(floatX(mu))
        kappa = pt.as_tensor_variable(floatX(kappa))
        if mu.type.ndim < 1:
            raise ValueError("mu must have a last axis of length d (the embedding dimension)")
        d = mu.type.shape[-1]
        if d is not None and d < 2:
            raise ValueError(f"the embedding dimension must be >= 2, got mu of length {d}")
        return super().dist([mu, kappa], **kwargs)

    # PyMC registers ``support_point`` and ``logp`` as plain functions of the variable, not
    # as methods, hence their first argument.

    def support_point(rv: TensorVariable, size: Any, mu: Any, kappa: Any) -> TensorVariable:  # noqa: N805
        """Start at the mean direction, a point of the sphere with the highest density."""
        unit_mu = mu / pt.sqrt(pt.sum(pt.square(mu), axis=-1, keepdims=True))
        return pt.broadcast_to(unit_mu, rv.shape)

    def logp(value: TensorVariable, mu: Any, kappa: Any) -> TensorVariable:  # noqa: N805
        """Log density with respect to the surface measure on the sphere."""
        d = value.shape[-1]
        mu_norm = pt.sqrt(pt.sum(pt.square(mu), axis=-1))
        cosine = pt.sum(value * mu, axis=-1) / mu_norm
        res = log_vmf_normaliser(d, kappa) + kappa * cosine
        return check_parameters(res, kappa >= 0, mu_norm > 0, d >= 2, msg="kappa >= 0, mu != 0")


class SphereUniformRV(SymbolicRandomVariable):
    """Random-variable ``Op`` of the uniform distribution on the sphere.

    Built symbolically from a standard normal draw, normalised, so it compiles natively in
    every backend. Its only parameter is the support shape ``(d,)``.
    """

    name = "sphere_uniform"
    extended_signature = "[rng],[size],(s)->[rng],(d)"
    _print_name = ("SphereUniform", "\\operatorname{SphereUniform}")

    @classmethod
    def rv_op(cls, support_shape: Any, *, size: Any = None, rng: Any = None) -> TensorVariable:
        """Build the draw: a standard normal of shape ``size + (d,)``, normalised."""
        support_shape = pt.as_tensor(support_shape, dtype="int64", ndim=1)
        rng = normalize_rng_param(rng)
        size = normalize_size_param(size)
        shape = support_shape if rv_size_is_none(size) else pt.concatenate([size, support_shape])
        next_rng, gaussian = pt.random.normal(0.0, 1.0, size=shape, rng=rng, return_next_rng=True)
        draw = gaussian / pt.sqrt(pt.sum(pt.square(gaussian), axis=-1, keepdims=True))
        return cls(inputs=[rng, size, support_shape], outputs=[next_rng, draw])(
            rng, size, support_shape
        )


sphere_uniform = SphereUniformRV.rv_op


class SphereUniform(SphereContinuous):
    r"""Uniform distribution on the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`.

    .. math::

        f(x) = \frac{1}{|S^{d-1}|} = \frac{\Gamma(d/2)}{2\pi^{d/2}},

    a density with respect to the surface measure. Draws normalise standard normal vectors.

    Parameters
    ----------
    d : int, optional
        Embedding dimension, ``d >= 2``. May be left out when ``shape``, ``dims`` or
        ``observed`` give it as their last entry.

    Notes
    -----
    The default transform is :data:`~pymc_sgmcmc.distributions.transform.sphere_transform`;
    under it the value variable is a standard normal vector in :math:`\mathbb{R}^d`. As a
    prior for a direction that data will pin down, see the note on transforms in
    :class:`VonMisesFisher`.

    Examples
    --------
    >>> import pymc as pm, pymc_sgmcmc as pmsg
    >>> with pm.Model():
    ...     axes = pmsg.SphereUniform("axes", shape=(4, 3))  # four independent points on S^2
    """

    rv_type = SphereUniformRV
    rv_op = SphereUniformRV.rv_op

    def __new__(
        cls, name: str, *args: Any, d: Any = None, dims: Any = None, **kwargs: Any
    ) -> TensorVariable:
        """Create the random variable in the current model; see the class documentation."""
        # dims and observed can only be resolved inside a model, so d is inferred here, as
        # PyMC does for ZeroSumNormal.
        if dims is not None or kwargs.get("observed") is not None:
            support_shape = get_support_shape(
                support_shape=None if d is None else (d,),
                dims=dims,
                observed=kwargs.get("observed"),
                ndim_supp=1,
            )
            d = None if support_shape is None else support_shape[0]
        return super().__new__(cls, name, *args, d=d, dims=dims, **kwargs)

    @classmethod
    def dist(cls, d: Any = None, **kwargs: Any) -> TensorVariable:
        """Create the random variable outside a model; see the class documentation."""
        support_shape = get_support_shape(
            support_shape=None if d is None else (d,), shape=kwargs.get("shape"), ndim_supp=1
        )
        if support_shape is None:
            raise ValueError("SphereUniform needs its dimension: pass d, or shape=(..., d)")
        if not isinstance(d, Variable) and d is not None and int(d) < 2:
            raise ValueError(f"the embedding dimension must be >= 2, got d={d}")
        return super().dist([support_shape], **kwargs)

    def support_point(rv: TensorVariable, size: Any, support_shape: Any) -> TensorVariable:  # noqa: N805
        """Start at the first basis vector (every point has the same density)."""
        return pt.set_subtensor(pt.zeros_like(rv)[..., 0], 1.0)

    def logp(value: TensorVariable, support_shape: Any) -> TensorVariable:  # noqa: N805
        """Constant log density, minus the log area of the sphere."""
        d = value.shape[-1]
        res = pt.zeros_like(value[..., 0]) - log_sphere_area(d)
        return check_parameters(res, d >= 2, msg="d >= 2")
