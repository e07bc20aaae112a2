r"""A transform that lets gradient-based samplers move on the unit sphere.

A sphere-valued variable :math:`x \in S^{d-1}` has no unconstrained coordinates in
:math:`\mathbb{R}^{d-1}` that cover the whole sphere smoothly. Instead its value variable
:math:`z` lives in the ambient space :math:`\mathbb{R}^d`, with :math:`x = z / \lVert z
\rVert`, and is given the density

.. math::

    p_z(z) = p(z / \lVert z \rVert)\; \frac{q(\lVert z \rVert)}{\lVert z \rVert^{d-1}},

where :math:`p` is the target density on the sphere (with respect to its surface measure)
and :math:`q` a probability density on :math:`(0, \infty)`. In polar coordinates
:math:`z = r x` (volume element :math:`r^{d-1} \mathrm{d}r\, \mathrm{d}\sigma(x)`) the radial
factor integrates to exactly 1 and leaves :math:`p(x)` as the law of :math:`x`. HMC and NUTS
can therefore sample :math:`z` in :math:`\mathbb{R}^d`, and the recorded
:math:`x = z/\lVert z \rVert` has the target law. By default :math:`q` is the chi law with
:math:`d` degrees of freedom, which makes :math:`p_z` for a uniform :math:`p` the standard
normal density (the usual way of drawing uniform points on the sphere).

Samplers that know the geometry (geodesic integrators) can detect this transform on a value
variable, keep :math:`\lVert z \rVert = 1` and use only the tangential part of the gradient;
the radial factor is then constant and irrelevant.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytensor.tensor as pt
from pymc.logprob.transforms import Transform
from pytensor.tensor.variable import TensorVariable

from pymc_sgmcmc.distributions.special import log_sphere_area

__all__ = ["SphereTransform", "sphere_transform"]

_LOG_2PI = float(np.log(2.0 * np.pi))


class SphereTransform(Transform):
    r"""Map a point :math:`z \in \mathbb{R}^d \setminus \{0\}` to :math:`z / \lVert z \rVert`.

    The last axis is the embedding dimension; leading axes are independent spheres.

    ``forward`` is the identity (a point of the sphere is its own representative),
    ``backward`` normalises, and ``log_jac_det`` is not a Jacobian (the map is many-to-one)
    but :math:`\log q(r) - (d-1)\log r`, :math:`r = \lVert z \rVert`, the log density of the
    radial part (see the module notes), which integrates to one over each ray and so leaves
    the density on the sphere unchanged. It includes its normalising constant, so that the
    joint density of the value variables is normalised on :math:`\mathbb{R}^d` (useful for
    marginal likelihoods); samplers only see its gradient.

    Parameters
    ----------
    radial_sd : float, optional
        ``None`` (default): the radius follows the chi law with ``d`` degrees of freedom,
        :math:`\log q(r) - (d-1)\log r = -r^2/2 - \tfrac{d}{2}\log 2\pi + \log|S^{d-1}|`.
        A positive number: :math:`\log r \sim N(0, \text{radial\_sd}^2)` instead, which keeps
        the radius near 1.

    Notes
    -----
    Which radial law suits NUTS depends on the concentration of the target. In
    :math:`z`-space the width of the target across the rays is proportional to :math:`r`,
    a funnel. The chi law lets :math:`r` range over a factor of ten or more in low
    dimension, and for a posterior concentrated to a small cap (von Mises-Fisher
    concentrations of a hundred or more on :math:`S^2`, as a few dozen observations give)
    NUTS then diverges in a few percent of its transitions. ``radial_sd=0.1`` keeps
    :math:`r` within about 20% of 1: there it removed the divergences and needed 3-4 times
    fewer gradients per effective sample. On diffuse targets (uniform, concentrations of a
    few) the narrow shell instead slows mixing 3-15 times, which is why it is not the
    default. Pass it as ``default_transform=`` (``transform=`` would be chained after the
    default one).

    The value variable is undefined at :math:`z = 0`; both radial laws keep samplers away.
    With ``jacobian=False`` (as in MAP estimation) the radial factor is dropped and the
    log density no longer depends on :math:`r` at all, which is harmless for optimising the
    direction.
    """

    name = "sphere"
    ndim_supp = 1

    def __init__(self, radial_sd: float | None = None):
        if radial_sd is not None and not radial_sd > 0:
            raise ValueError(f"radial_sd must be positive or None, got {radial_sd}")
        self.radial_sd = radial_sd

    def forward(self, value: TensorVariable, *inputs: Any) -> TensorVariable:
        """Return ``value`` unchanged: points of the sphere already have norm one.

        Parameters
        ----------
        value : TensorVariable
            Points on the sphere, embedding dimension last.
        *inputs : Any
            Parameters of the distribution (unused).

        Returns
        -------
        TensorVariable
            The same points, as value-variable coordinates.
        """
        return pt.as_tensor_variable(value)

    def backward(self, value: TensorVariable, *inputs: Any) -> TensorVariable:
        """Project ambient coordinates onto the sphere, ``z / |z|`` along the last axis.

        Parameters
        ----------
        value : TensorVariable
            Value-variable coordinates :math:`z`, embedding dimension last.
        *inputs : Any
            Parameters of the distribution (unused).

        Returns
        -------
        TensorVariable
            Unit vectors of the same shape.
        """
        value = pt.as_tensor_variable(value)
        return value / pt.sqrt(pt.sum(pt.square(value), axis=-1, keepdims=True))

    def log_jac_det(self, value: TensorVariable, *inputs: Any) -> TensorVariable:
        r"""Log density of the radial part, summed over the embedding axis.

        Parameters
        ----------
        value : TensorVariable
            Value-variable coordinates :math:`z`, embedding dimension last.
        *inputs : Any
            Parameters of the distribution (unused).

        Returns
        -------
        TensorVariable
            :math:`\log q(r) - (d-1)\log r` (see the class notes), with the shape of
            ``value`` less its last axis.
        """
        value = pt.as_tensor_variable(value)
        d = value.shape[-1]
        r_squared = pt.sum(pt.square(value), axis=-1)
        if self.radial_sd is None:
            return -0.5 * r_squared - 0.5 * d * _LOG_2PI + log_sphere_area(d)
        # log q(r) = -(log r)^2 / (2 s^2) - log r - log(s sqrt(2 pi)) for log r ~ N(0, s^2).
        log_r = 0.5 * pt.log(r_squared)
        s = self.radial_sd
        return -0.5 * pt.square(log_r / s) - d * log_r - np.log(s) - 0.5 * _LOG_2PI

    def __str__(self) -> str:
        """Name the radial law, since two instances may differ in it."""
        if self.radial_sd is None:
            return "SphereTransform"
        return f"SphereTransform(radial_sd={self.radial_sd})"


sphere_transform = SphereTransform()
"""The instance used as default transform by the sphere-valued distributions."""


def allow_in_mixtures() -> bool:
    """Let ``pm.Mixture`` of sphere-valued components default to the sphere transform.

    PyMC gives a mixture the default transform of its components only when they share
    one and its type is in ``pymc.distributions.mixture.allowed_default_mixture_transforms``,
    the transforms that need no special handling in a mixture; for any other it warns
    (``MixtureTransformWarning``) and leaves the mixture untransformed, i.e. a density
    of the sphere treated as one on all of ``R^d``, which no sampler can use. The sphere
    transform is one that needs none: it does not depend on the components' parameters,
    so the components' common transform is the mixture's. Adding it there (once, when
    this package is imported) makes ``pm.Mixture("x", w, [pmsg.VonMisesFisher.dist(...),
    ...])`` a sphere-valued variable like its components.

    Returns
    -------
    bool
        Whether PyMC now accepts the sphere transform for mixtures; ``False`` where this
        PyMC has no such list, and ``default_transform=sphere_transform`` must be given.
    """
    from pymc.distributions import mixture

    allowed = getattr(mixture, "allowed_default_mixture_transforms", None)
    if not isinstance(allowed, tuple):
        return False
    if not issubclass(SphereTransform, allowed):
        mixture.allowed_default_mixture_transforms = (*allowed, SphereTransform)
    return True


allow_in_mixtures()
