r"""Stochastic gradient Riemannian Langevin dynamics on the probability simplex (SGRLD).

Patterson and Teh, "Stochastic Gradient Riemannian Langevin Dynamics on the Probability
Simplex", as Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §3.1
summarises it: Langevin dynamics in the expanded mean ``θ`` (``π = θ/Σθ``) with the metric
``G(θ) = diag(1/θ)``,

.. math::

    dθ = (b(θ) − θ)\,dt + \sqrt{2θ}\,dW, \qquad b = G⁻¹∇\log p + ∇·G⁻¹ + θ,

whose drift :func:`pymc_sgmcmc.manifolds.simplex.expanded_mean_drift` gives (for a
Dirichlet–multinomial posterior ``b`` is the constant ``β = α + n``). Two integrators of
one step ``t = η`` (our ``step_size`` is half the paper's ``ε``, as for SGLD):

- :func:`expanded_mean_step`, the paper's: an Euler step, mirrored at 0;
- :func:`expanded_mean_gamma_step`, ours: with ``b`` held over the step, the equation is a
  Cox–Ingersoll–Ross process, whose exact transition has a known mean and variance; the
  step draws from the Gamma law with those two moments. At ``θ → 0`` this is the exact
  transition, and where ``θ`` is large it is the Gaussian one. Where a category's
  posterior has ``β < 1`` (few or no counts under a sparse prior) its ``θ`` spends most of
  its time far below ``t``, where an Euler step cannot follow it (measured on a Gamma(0.1)
  coordinate at ``t = 0.1``: the paper's step 3.7× too large a mean, this one within 1 %).
"""

from __future__ import annotations

import math

import numpy as np

from pymc_sgmcmc.core.arrays import Array, is_symbolic, namespace

SMALLEST_EXPANDED_MEAN = float(np.finfo(np.float32).tiny)
"""A coordinate mirrored onto (or drawn at) exactly 0 is put here, where its log is finite."""


def expanded_mean_step(expanded: Array, drift: Array, noise: Array, step_size: Array) -> Array:
    """The paper's step: ``θ ← |θ + η (G⁻¹∇log p + ∇·G⁻¹) + N(0, 2η diag θ)|``.

    Parameters
    ----------
    expanded : array
        ``θ > 0``.
    drift : array
        :func:`~pymc_sgmcmc.manifolds.simplex.expanded_mean_drift` at ``θ``.
    noise : array
        Standard normal draw, same shape.
    step_size : scalar
        ``η``.
    """
    xp = namespace(expanded, drift, noise)
    # Patterson & Teh, expanded-mean SGRLD: θ ← |θ + ε/2 (drift) + θ^{1/2} N(0, ε)|, ε = 2η
    moved = expanded + step_size * drift + xp.sqrt(2.0 * step_size * expanded) * noise
    return xp.maximum(xp.abs(moved), SMALLEST_EXPANDED_MEAN)


def cir_transition_moments(expanded: Array, level: Array, step_size: Array) -> tuple[Array, Array]:
    """Mean and variance of ``θ_t`` for ``dθ = (b − θ) dt + √(2θ) dW`` from ``θ_0``, ``t = η``.

    ``m = b(1 − e^{−t}) + θ_0 e^{−t}``, ``v = (1 − e^{−t}) (b(1 − e^{−t}) + 2θ_0 e^{−t})``.
    """
    decay = namespace(expanded, level).exp(-step_size + expanded * 0.0)
    kept = 1.0 - decay
    mean = level * kept + expanded * decay
    variance = kept * (level * kept + 2.0 * expanded * decay)
    return mean, variance


def expanded_mean_gamma_step(
    expanded: Array, drift: Array, noise: Array, step_size: Array
) -> Array:
    """``θ`` drawn from the Gamma law with the moments of the process's transition.

    ``b = drift + θ`` (floored at 0: a stochastic gradient can push it below), then
    :func:`cir_transition_moments` and ``θ' = v/m · Γ⁻¹(m²/v; u)`` with ``u = Φ(ξ)``.
    Same arguments as :func:`expanded_mean_step`.
    """
    xp = namespace(expanded, drift, noise)
    level = xp.maximum(drift + expanded, 0.0)
    mean, variance = cir_transition_moments(expanded, level, step_size)
    mean = xp.maximum(mean, SMALLEST_EXPANDED_MEAN)
    variance = xp.maximum(variance, SMALLEST_EXPANDED_MEAN * mean)
    shape, scale = mean * mean / variance, variance / mean
    return xp.maximum(scale * _gamma_quantile(shape, noise), SMALLEST_EXPANDED_MEAN)


EXACT_QUANTILE_BELOW = 100.0
"""Gamma shapes below this get the exact quantile (an incomplete-Gamma inversion, ~1 µs);
from it on, Wilson and Hilferty's cube-root normal one, whose quantiles there are within
3·10⁻³ of the exact ones out to 6 sds and within 2.5·10⁻⁴ inside 3 (tested)."""


def wilson_hilferty_quantile(shape: Array, normal: Array) -> Array:
    """``k (1 − 1/(9k) + ξ/(3√k))³``: the Gamma(``k``) quantile at ``Φ(ξ)``, for large ``k``."""
    xp = namespace(shape, normal)
    root = 1.0 - 1.0 / (9.0 * shape) + normal / (3.0 * xp.sqrt(shape))
    return shape * xp.maximum(root, 0.0) ** 3


def _gamma_quantile(shape: Array, normal: Array) -> Array:
    """The quantile of a unit-scale Gamma(``shape``) at ``Φ(normal)``.

    Exact (inverted) where the shape is below :data:`EXACT_QUANTILE_BELOW`, only there:
    the coordinates of well-observed categories have large shapes and skip the inversion.
    """
    approximate = wilson_hilferty_quantile(shape, normal)
    if is_symbolic(shape, normal):
        import pytensor.tensor as pt

        flat_shape, flat_normal = shape.flatten(), normal.flatten()
        small = pt.nonzero(flat_shape < EXACT_QUANTILE_BELOW)[0]
        exact = _exact_gamma_quantile(flat_shape[small], flat_normal[small])
        flat = pt.set_subtensor(approximate.flatten()[small], exact)
        return flat.reshape(approximate.shape)
    small = np.asarray(shape) < EXACT_QUANTILE_BELOW
    result = np.array(approximate, dtype=float, copy=True)
    result[small] = _exact_gamma_quantile(np.asarray(shape)[small], np.asarray(normal)[small])
    return result


LARGEST_PROBABILITY = 1.0 - 2.0**-53
"""``Φ(ξ)`` is kept below 1, where the quantile would be infinite (``ξ`` above 8.3, a
chance of 10⁻¹⁶ per draw)."""


def _exact_gamma_quantile(shape: Array, normal: Array) -> Array:
    """The Gamma(``shape``) quantile at ``Φ(normal)`` by inverting the incomplete Gamma.

    The lower incomplete Gamma's inverse alone: its upper-tail twin (``gammainccinv``)
    would keep more digits for ``ξ`` above ~6 but costs ten times as much in compiled
    code (measured: 6.5 µs against 0.6 µs a coordinate), and ``Φ(ξ)``'s rounding there
    moves the quantile far less than the step's own error.
    """
    probability = 0.5 * _erfc(-normal / math.sqrt(2.0))  # Φ(ξ), accurate for ξ < 0
    if is_symbolic(shape, normal):
        import pytensor.tensor as pt

        return pt.gammaincinv(shape, pt.minimum(probability, LARGEST_PROBABILITY))
    from scipy import special

    return special.gammaincinv(shape, np.minimum(probability, LARGEST_PROBABILITY))


def _erfc(x: Array) -> Array:
    if is_symbolic(x):
        import pytensor.tensor as pt

        return pt.erfc(x)
    from scipy import special

    return special.erfc(x)
