r"""Special functions for distributions on the unit sphere.

Every function here accepts either NumPy array-likes, in which case it returns NumPy values,
or PyTensor variables, in which case it returns a PyTensor graph that can be differentiated
(this is how :class:`~pymc_sgmcmc.VonMisesFisher` builds its log density). Both paths
evaluate the same formulas.

The von Mises-Fisher normaliser on :math:`S^{d-1} \subset \mathbb{R}^d` is
(Mardia & Jupp 2000, *Directional Statistics*, eq. 9.3.4)

.. math::

    C_d(\kappa) = \frac{\kappa^{d/2-1}}{(2\pi)^{d/2} I_{d/2-1}(\kappa)}.

Evaluating it literally overflows for large :math:`\kappa`, underflows for large :math:`d`
and is 0/0 at :math:`\kappa = 0`. Writing :math:`\nu = d/2 - 1` and using the series
:math:`I_\nu(\kappa) = (\kappa/2)^\nu\, {}_0F_1(;\nu+1;\kappa^2/4) / \Gamma(\nu+1)`
(DLMF 10.25.2) gives the identity

.. math::

    \log C_d(\kappa) = -\log |S^{d-1}| - \log {}_0F_1(;\nu+1;\kappa^2/4),

in which the powers of :math:`\kappa` have cancelled and the uniform limit
:math:`\kappa \to 0` is explicit. The logarithm of the hypergeometric function is computed
piecewise, each piece where it is accurate to about machine precision:

* its power series when :math:`\kappa^2/4 \le 2(\nu+1)` (small :math:`\kappa`);
* otherwise the exponentially scaled Bessel function, :math:`\log I_\nu(\kappa) =
  \log \operatorname{ive}(\nu, \kappa) + \kappa`, unless that underflows;
* otherwise (large :math:`\nu`, a few hundred or more, or :math:`\kappa` beyond about
  :math:`10^9`, where ``ive`` gives up) Debye's uniform asymptotic expansion (DLMF 10.41.3),
  whose error with four correction terms is far below rounding there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.gradient import disconnected_grad
from pytensor.graph.basic import Variable
from scipy import special

from pymc_sgmcmc.core.arrays import is_symbolic

__all__ = ["log_sphere_area", "log_vmf_normaliser", "vmf_mean_resultant_length"]

_LOG_2 = float(np.log(2.0))
_LOG_PI = float(np.log(np.pi))
_LOG_2PI = float(np.log(2.0 * np.pi))

# The series branch is used while kappa**2 / 4 <= _SERIES_LIMIT * (nu + 1). There every ratio
# of consecutive terms is at most _SERIES_LIMIT / k, so the terms are bounded by 2**k / k! and
# stopping after _SERIES_TERMS terms leaves a relative error below 1e-18.
_SERIES_LIMIT = 2.0
_SERIES_TERMS = 24
# ive values below this are treated as underflowed: they have lost relative precision, so the
# Debye expansion takes over.
_IVE_TINY = 1e-280


class _Backend(NamedTuple):
    """The handful of array functions the formulas need, for NumPy or for PyTensor."""

    asfloat: Callable[[Any], Any]
    log: Callable[[Any], Any]
    log1p: Callable[[Any], Any]
    exp: Callable[[Any], Any]
    sqrt: Callable[[Any], Any]
    where: Callable[[Any, Any, Any], Any]
    ive: Callable[[Any, Any], Any]
    gammaln: Callable[[Any], Any]
    constant: Callable[[Any], Any]


_NUMPY = _Backend(
    asfloat=lambda a: np.asarray(a, dtype=np.float64),
    log=np.log,
    log1p=np.log1p,
    exp=np.exp,
    sqrt=np.sqrt,
    where=np.where,
    ive=special.ive,
    gammaln=special.gammaln,
    constant=lambda a: a,
)


def _pt_asfloat(a: Any) -> Any:
    a = pt.as_tensor_variable(a)
    # Integer inputs (the embedding dimension usually comes from a shape) must not make
    # the arithmetic below integer arithmetic.
    return a if a.dtype.startswith("float") else pt.cast(a, "float64")


_PYTENSOR = _Backend(
    asfloat=_pt_asfloat,
    log=pt.log,
    log1p=pt.log1p,
    exp=pt.exp,
    sqrt=pt.sqrt,
    where=pt.switch,
    ive=pt.ive,
    gammaln=pt.gammaln,
    # The Bessel order is never differentiated (ive has no derivative in its order), but it
    # is selected by masks computed from kappa; cutting it out of the gradient graph keeps
    # PyTensor from asking for that derivative.
    constant=disconnected_grad,
)


def _backend(*args: Any) -> _Backend:
    """Pick PyTensor when any argument is symbolic, NumPy otherwise.

    The package's dispatcher decides; this table adds the special functions (``ive``,
    ``gammaln``) that live in SciPy rather than NumPy.
    """
    return _PYTENSOR if is_symbolic(*args) else _NUMPY


def _finish(xp: _Backend, value: Any) -> Any:
    """Return NumPy scalars rather than 0-d arrays for scalar inputs."""
    return value[()] if xp is _NUMPY else value


def _check_numeric_kappa(kappa: Any) -> None:
    """Refuse negative or NaN numeric concentrations (symbolic ones are checked in logp)."""
    if not isinstance(kappa, Variable):
        k = np.asarray(kappa, dtype=np.float64)
        if np.any(np.isnan(k)) or np.any(k < 0):
            raise ValueError("kappa must be >= 0")


def _check_numeric_dim(d: Any) -> None:
    """Refuse embedding dimensions below 2 on the NumPy path."""
    if not isinstance(d, Variable) and np.any(np.asarray(d) < 2):
        raise ValueError("the embedding dimension d must be >= 2")


def _log1p_series_tail(xp: _Backend, nu: Any, x: Any) -> Any:
    """``log 0F1(; nu+1; x)`` from its power series, for ``0 <= x <= 2 (nu + 1)``.

    The series minus its leading 1 is accumulated by Horner's rule, which needs no powers of
    ``x`` (nothing overflows for large ``nu``), is a polynomial in ``x`` (so its gradient is
    finite at ``x = 0``) and keeps full relative precision for tiny ``x`` through ``log1p``.
    """
    tail = 0.0
    for k in range(_SERIES_TERMS, 0, -1):
        tail = x / (k * (nu + k)) * (1.0 + tail)
    return xp.log1p(tail)


def _debye(xp: _Backend, nu: Any, kappa: Any) -> tuple[Any, Any]:
    r"""``log I_nu(kappa)`` and ``I_{nu+1}(kappa) / I_nu(kappa)`` from Debye's expansion.

    Debye's uniform asymptotic expansion (DLMF 10.41.3, with the polynomials of 10.41.10):

    .. math::

        I_\nu(\nu z) \sim \frac{e^{\nu\eta}}{(2\pi\nu)^{1/2}(1+z^2)^{1/4}}
        \sum_k \frac{u_k(p)}{\nu^k},\qquad p = (1+z^2)^{-1/2}.

    With ``u_1 .. u_4`` its relative error is of order ``(p / nu)**5``, i.e. ``nu**-5`` for
    large orders and ``kappa**-5`` for large arguments, far below rounding wherever it is used.

    It is written in ``r = sqrt(nu**2 + kappa**2)`` rather than ``z = kappa / nu``: since
    ``u_k(p) = p**k q_k(p**2)``, each term is ``q_k(p**2) / r**k``, and every piece then has a
    finite limit at ``nu = 0`` (where the expansion becomes Hankel's large-argument series),
    which ``d = 2`` needs for ``kappa`` too large for ``ive``.

    The ratio is the exact derivative of the expansion,
    :math:`I_{\nu+1}/I_\nu = \partial_\kappa \log I_\nu - \nu/\kappa`, written so that
    nothing cancels: a difference of two logarithms of size ``kappa`` would lose everything
    that ``1 - A`` holds when ``kappa`` is large.
    """
    r = xp.sqrt(nu * nu + kappa * kappa)
    w = 1.0 / r
    P = (nu * w) ** 2  # p**2
    # q_k(P) = u_k(p) / p**k, and s_k(P) = k q_k + 2 P q_k'(P) = p d(u_k)/dp / p**k.
    q1 = (3.0 - 5.0 * P) / 24.0
    q2 = (81.0 + P * (-462.0 + P * 385.0)) / 1152.0
    q3 = (30375.0 + P * (-369603.0 + P * (765765.0 - P * 425425.0))) / 414720.0
    q4 = (
        4465125.0 + P * (-94121676.0 + P * (349922430.0 + P * (-446185740.0 + P * 185910725.0)))
    ) / 39813120.0
    s1 = (3.0 - 15.0 * P) / 24.0
    s2 = (162.0 + P * (-1848.0 + P * 2310.0)) / 1152.0
    s3 = (91125.0 + P * (-1848015.0 + P * (5360355.0 - P * 3828825.0))) / 414720.0
    s4 = (
        17860500.0
        + P * (-564730056.0 + P * (2799379440.0 + P * (-4461857400.0 + P * 2230928700.0)))
    ) / 39813120.0
    series = 1.0 + w * (q1 + w * (q2 + w * (q3 + w * q4)))
    p_dseries = w * (s1 + w * (s2 + w * (s3 + w * s4)))
    # nu eta = r + nu log(kappa / (nu + r)); (2 pi nu)^(1/2) (1+z^2)^(1/4) = (2 pi r)^(1/2).
    log_iv = r + nu * xp.log(kappa / (nu + r)) - 0.5 * (_LOG_2PI + xp.log(r)) + xp.log(series)
    # d(nu eta)/dkappa - nu/kappa = (r - nu)/kappa, rationalised; d(-log(r)/2)/dkappa is
    # -kappa/(2 r^2); dp/dkappa = -kappa p/r^2 turns d(log series)/dkappa into
    # -kappa/r^2 * p_dseries/series.
    ratio = kappa / (nu + r) - 0.5 * kappa * w * w * (1.0 + 2.0 * p_dseries / series)
    return log_iv, ratio


def _branches(xp: _Backend, nu: Any, kappa: Any) -> tuple[Any, Any, Any]:
    """Masks selecting the series, ``ive`` and Debye branch for order ``nu``."""
    x = 0.25 * kappa * kappa
    use_series = x <= _SERIES_LIMIT * (nu + 1.0)
    # A NaN from ive (it gives up for huge arguments) compares False and so falls to Debye.
    use_ive = ~use_series & (xp.ive(nu, kappa) > _IVE_TINY)
    use_debye = ~(use_series | use_ive)
    return use_series, use_ive, use_debye


def _log_0f1(xp: _Backend, nu: Any, kappa: Any) -> Any:
    """``log 0F1(; nu+1; kappa**2/4) = log I_nu(kappa) - nu log(kappa/2) + log Gamma(nu+1)``."""
    use_series, use_ive, use_debye = _branches(xp, nu, kappa)
    # Every branch is evaluated everywhere, so each gets harmless arguments where it is not
    # selected: a NaN or infinity there would otherwise leak into the gradient (0 * NaN).
    x_series = xp.where(use_series, 0.25 * kappa * kappa, 0.0)
    from_series = _log1p_series_tail(xp, nu, x_series)

    nu_i = xp.constant(xp.where(use_ive, nu, 0.0))
    kappa_i = xp.where(use_ive, kappa, 1.0)
    from_ive = (
        xp.log(xp.ive(nu_i, kappa_i))
        + kappa_i
        - nu_i * xp.log(0.5 * kappa_i)
        + xp.gammaln(nu_i + 1.0)
    )

    nu_d = xp.constant(xp.where(use_debye, nu, 1.0))
    kappa_d = xp.where(use_debye, kappa, 1.0)
    from_debye = (
        _debye(xp, nu_d, kappa_d)[0] - nu_d * xp.log(0.5 * kappa_d) + xp.gammaln(nu_d + 1.0)
    )
    return xp.where(use_series, from_series, xp.where(use_ive, from_ive, from_debye))


def _bessel_ratio(xp: _Backend, nu: Any, kappa: Any) -> Any:
    """``I_{nu+1}(kappa) / I_nu(kappa)``, which is also ``d/dkappa log 0F1(; nu+1; kappa**2/4)``."""
    # The series condition for nu implies the one for nu + 1; beyond it, ive must be usable for
    # the larger order nu + 1, whose ive underflows first.
    use_series = 0.25 * kappa * kappa <= _SERIES_LIMIT * (nu + 1.0)
    use_ive = ~use_series & (xp.ive(nu + 1.0, kappa) > _IVE_TINY)
    use_debye = ~(use_series | use_ive)

    x_series = xp.where(use_series, 0.25 * kappa * kappa, 0.0)
    from_series = (
        0.5
        * kappa
        / (nu + 1.0)
        * xp.exp(_log1p_series_tail(xp, nu + 1.0, x_series) - _log1p_series_tail(xp, nu, x_series))
    )
    nu_i = xp.constant(xp.where(use_ive, nu, 0.0))
    kappa_i = xp.where(use_ive, kappa, 1.0)
    from_ive = xp.ive(nu_i + 1.0, kappa_i) / xp.ive(nu_i, kappa_i)

    nu_d = xp.constant(xp.where(use_debye, nu, 1.0))
    kappa_d = xp.where(use_debye, kappa, 1.0)
    from_debye = _debye(xp, nu_d, kappa_d)[1]
    return xp.where(use_series, from_series, xp.where(use_ive, from_ive, from_debye))


class _InlineOnlyOpFromGraph(OpFromGraph):
    """An ``OpFromGraph`` that is never constant-folded as a whole.

    With constant inputs (a fixed kappa), PyMC's pre-gradient rewrites would fold the Op by
    compiling its inner graph with PyTensor's C backend, tens of seconds of C compilation on
    a cold cache. Refusing lets the graph be inlined first, after which its elementwise
    nodes fold in Python in milliseconds.
    """

    def do_constant_folding(self, fgraph: Any, node: Any) -> bool:
        """Never fold the Op itself (see the class docstring)."""
        return False


def _log_0f1_symbolic(nu: Any, kappa: Any) -> Any:
    """:func:`_log_0f1` as a PyTensor graph whose derivative in ``kappa`` is given in closed form.

    Differentiating the piecewise graph automatically (through the series, ``ive`` and the
    Debye expansion at once) yields a graph that takes the Numba backend several times
    longer to compile than the function itself; its derivative is known,
    ``d/dkappa log 0F1(; nu+1; kappa^2/4) = I_{nu+1}(kappa)/I_nu(kappa)``, so it is supplied
    directly. That derivative graph is itself differentiable, so Hessians stay exact.
    """
    nu_in, kappa_in = nu.type(), kappa.type()

    def pullback(inputs: list[Any], outputs: list[Any], cotangents: list[Any]) -> list[Any]:
        nu_, kappa_ = inputs
        (cotangent,) = cotangents
        return [pt.zeros_like(nu_), cotangent * _bessel_ratio(_PYTENSOR, nu_, kappa_)]

    op = _InlineOnlyOpFromGraph(
        [nu_in, kappa_in], [_log_0f1(_PYTENSOR, nu_in, kappa_in)], pullback=pullback, inline=True
    )
    return op(nu, kappa)


def log_sphere_area(d: Any) -> Any:
    r"""Logarithm of the surface area of the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`.

    Parameters
    ----------
    d : int, array_like or TensorVariable
        Embedding dimension (``d = 3`` is the ordinary sphere, area :math:`4\pi`).

    Returns
    -------
    ndarray or TensorVariable
        :math:`\log |S^{d-1}| = \log 2 + \tfrac{d}{2}\log\pi - \log\Gamma(d/2)`.
    """
    xp = _backend(d)
    d = xp.asfloat(d)
    return _finish(xp, _LOG_2 + 0.5 * d * _LOG_PI - xp.gammaln(0.5 * d))


def log_vmf_normaliser(d: Any, kappa: Any) -> Any:
    r"""Logarithm of the von Mises-Fisher normalising constant :math:`C_d(\kappa)`.

    With respect to the surface measure on :math:`S^{d-1}`, the density is
    :math:`C_d(\kappa) \exp(\kappa \mu^\top x)` with (Mardia & Jupp 2000, eq. 9.3.4)

    .. math::

        C_d(\kappa) = \frac{\kappa^{d/2-1}}{(2\pi)^{d/2} I_{d/2-1}(\kappa)}.

    Parameters
    ----------
    d : int, array_like or TensorVariable
        Embedding dimension, ``d >= 2``.
    kappa : array_like or TensorVariable
        Concentration, ``kappa >= 0``; broadcasts against ``d``.

    Returns
    -------
    ndarray or TensorVariable
        :math:`\log C_d(\kappa)`: finite for every ``kappa >= 0`` (at ``kappa = 0`` it is
        the uniform density :math:`-\log|S^{d-1}|`) and accurate to about machine precision
        for large ``kappa`` and large ``d``. See the module notes for the method.

    Raises
    ------
    ValueError
        For numeric ``d < 2`` or ``kappa < 0``.

    References
    ----------
    K. V. Mardia and P. E. Jupp (2000), *Directional Statistics*, Wiley, section 9.3.2.
    """
    _check_numeric_dim(d)
    _check_numeric_kappa(kappa)
    xp = _backend(d, kappa)
    nu = 0.5 * xp.asfloat(d) - 1.0
    kappa = xp.asfloat(kappa)
    # The closed-form derivative needs the output to have the shape of kappa, which holds
    # when the dimension is a scalar, as it is in every distribution.
    if xp is _PYTENSOR and nu.type.ndim == 0:
        return -log_sphere_area(d) - _log_0f1_symbolic(xp.constant(nu), kappa)
    return _finish(xp, -log_sphere_area(d) - _log_0f1(xp, nu, kappa))


def vmf_mean_resultant_length(d: Any, kappa: Any) -> Any:
    r"""Mean resultant length :math:`A_d(\kappa) = \lVert E[x] \rVert` of a von Mises-Fisher law.

    .. math::

        A_d(\kappa) = \frac{I_{d/2}(\kappa)}{I_{d/2-1}(\kappa)}
                   = -\frac{\mathrm{d}}{\mathrm{d}\kappa} \log C_d(\kappa),

    so that :math:`E[x] = A_d(\kappa)\,\mu` (Mardia & Jupp 2000, eq. 9.3.8). It rises
    from :math:`\kappa/d` near 0 to :math:`1 - (d-1)/(2\kappa)` for large :math:`\kappa`.

    Parameters
    ----------
    d : int, array_like or TensorVariable
        Embedding dimension, ``d >= 2``.
    kappa : array_like or TensorVariable
        Concentration, ``kappa >= 0``.

    Returns
    -------
    ndarray or TensorVariable
        :math:`A_d(\kappa) \in [0, 1)`, computed as a ratio of series, of exponentially
        scaled Bessel functions, or of Debye expansions (see the module notes), never as a
        ratio of overflowing Bessel functions.

    Raises
    ------
    ValueError
        For numeric ``d < 2`` or ``kappa < 0``.
    """
    _check_numeric_dim(d)
    _check_numeric_kappa(kappa)
    xp = _backend(d, kappa)
    return _finish(xp, _bessel_ratio(xp, 0.5 * xp.asfloat(d) - 1.0, xp.asfloat(kappa)))
