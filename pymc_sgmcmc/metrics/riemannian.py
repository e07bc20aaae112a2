"""Position-dependent metrics ``G(θ)`` for Riemannian samplers.

Girolami and Calderhead's Riemannian manifold HMC, and the Riemannian Nosé–Poincaré
sampler of Roychowdhury, Kulis and Parthasarathy ("Robust Monte Carlo Sampling using
Riemannian Nosé-Poincaré Hamiltonian Dynamics", eq. 1), use the Hamiltonian

    H(θ, p) = −L(θ) + ½ log det G(θ) + ½ pᵀ G(θ)⁻¹ p

so the momentum law ``p | θ ~ N(0, G(θ))``, the velocity ``G(θ)⁻¹p`` and the kinetic
term all depend on the position. A :class:`PositionDependentMetric` builds them from a
function that returns ``G(θ)``, symbolically (a kernel differentiates them with
``pytensor.grad`` for the generalized leapfrog) or with NumPy. It offers the methods of
:class:`~pymc_sgmcmc.metrics.euclidean.EuclideanMetric` with the same signatures, so a
kernel is written once against either.

``G`` may be diagonal (the function returns a vector) or dense (a matrix). It may use the
target's log density, on the current minibatch (``target.logp``), to build ``G`` from the
model, as :func:`softabs_diagonal_hessian` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymc_sgmcmc.core.arrays import Array, namespace

MetricFunction = Callable[[Array, Any], Array]
"""``(position, target) -> G(θ)``: a positive vector (diagonal) or a SPD matrix."""


@dataclass(frozen=True)
class PositionDependentMetric:
    """A metric ``G(θ)`` computed from the position (and optionally the target).

    Parameters
    ----------
    function : callable
        ``(position, target) -> G``: the diagonal of ``G(θ)`` (1-D, positive) or the
        matrix (2-D, symmetric positive definite). ``target`` is the sampler's
        :class:`~pymc_sgmcmc.kernels.base.Target` (``None`` where none is available,
        e.g. in a user's NumPy check).
    name : str
        A label for messages and docs.
    """

    function: MetricFunction
    name: str = "position-dependent"

    def matrix(self, position: Array, target: Any = None) -> Array:
        """``G(θ)``: its diagonal or the full matrix."""
        return self.function(position, target)

    def momentum(self, position: Array, normal: Array, target: Any = None) -> Array:
        """Map a standard normal draw ``z`` to ``p ~ N(0, G(θ))``."""
        return metric_sqrt_times(self.matrix(position, target), normal)

    def velocity(self, position: Array, momentum: Array, target: Any = None) -> Array:
        """``G(θ)⁻¹ p``."""
        return metric_solve(self.matrix(position, target), momentum)

    def log_det(self, position: Array, target: Any = None) -> Array:
        """``log det G(θ)``."""
        return metric_log_det(self.matrix(position, target))

    def kinetic_energy(self, position: Array, momentum: Array, target: Any = None) -> Array:
        """``½ pᵀ G(θ)⁻¹ p + ½ log det G(θ)``: every term of ``H`` that involves ``p`` or ``G``."""
        g = self.matrix(position, target)
        quadratic = (momentum * metric_solve(g, momentum)).sum()
        return 0.5 * quadratic + 0.5 * metric_log_det(g)

    def kinetic_temperature(self, position: Array, momentum: Array, target: Any = None) -> Array:
        """``pᵀ G(θ)⁻¹ p / D``, which averages 1 when ``p ~ N(0, G(θ))``."""
        quadratic = (momentum * self.velocity(position, momentum, target)).sum()
        return quadratic / momentum.shape[0]


# -- the same terms from a value of G, so that a kernel builds G once per point ----------


def metric_sqrt_times(g: Array, normal: Array) -> Array:
    """``G^½ z`` (Cholesky factor for a dense ``G``): a draw of ``N(0, G)`` from ``z``."""
    xp = namespace(g, normal)
    if g.ndim == 1:
        return xp.sqrt(g) * normal
    return xp.linalg.cholesky(g) @ normal


def metric_solve(g: Array, momentum: Array) -> Array:
    """``G⁻¹ p``."""
    if g.ndim == 1:
        return momentum / g
    return namespace(g, momentum).linalg.solve(g, momentum)


def metric_log_det(g: Array) -> Array:
    """``log det G``."""
    xp = namespace(g)
    if g.ndim == 1:
        return xp.log(g).sum()
    return xp.linalg.slogdet(g)[1]


def metric_force(
    position: Array,
    g: Array,
    velocity: Array,
    quadratic_weight: Array,
    log_det_weight: Array,
) -> Array:
    """``∂θ [a pᵀG(θ)⁻¹p + b log det G(θ)]`` with ``p``, ``a`` and ``b`` held fixed.

    Every position-dependent term of the Riemannian Hamiltonians is of this form (a
    ``|G|⁻¹`` factor contributes ``−|G|⁻¹`` times its weight to ``b``). With ``v = G⁻¹p``,
    ``∂/∂G`` of the bracket is ``C = −a vvᵀ + b G⁻¹`` (``−a v² + b/g`` for a diagonal), so
    the derivative is one vector–Jacobian product ``∂θ Σ C ∘ G(θ)``: a single backward
    pass through ``G``'s graph (for the default metric, a third derivative of the model),
    where differentiating the bracket itself would take one per occurrence of ``G``.

    Parameters
    ----------
    position : TensorVariable
        The variable ``G`` was built from (symbolic only).
    g : TensorVariable
        ``G(θ)``: its diagonal or the matrix.
    velocity : TensorVariable
        ``v = G⁻¹ p``.
    quadratic_weight, log_det_weight : scalar
        ``a`` and ``b``.
    """
    import pytensor
    import pytensor.tensor as pt
    from pytensor.gradient import disconnected_grad

    if g.ndim == 1:
        cotangent = -quadratic_weight * velocity**2 + log_det_weight / g
    else:
        cotangent = -quadratic_weight * pt.outer(velocity, velocity) + log_det_weight * (
            pt.linalg.inv(g)
        )
    # A constant G (a Gaussian target) has no path to θ: its force is zero.
    return pytensor.grad(
        (g * disconnected_grad(cotangent)).sum(), position, disconnected_inputs="ignore"
    )


def softabs_diagonal_hessian(sharpness: float = 1e3) -> PositionDependentMetric:
    """``G(θ)`` from the model: the SoftAbs of the diagonal of the negative Hessian.

    Betancourt, "A General Metric for Riemannian Manifold Hamiltonian Monte Carlo" (2013):
    ``g_i = h_i coth(α h_i)`` with ``h = −diag ∇²log p(θ)``. It equals ``|h_i|`` where the
    curvature is large (``α|h_i| ≫ 1``) and tends to ``1/α`` where it vanishes, so ``G``
    stays positive definite where the log density is flat or convex. The Hessian is of
    ``target.logp`` (on the current minibatch), built symbolically by PyTensor.

    Parameters
    ----------
    sharpness : float
        ``α > 0``; ``1/α`` is the smallest value ``G`` can take.
    """
    alpha = float(sharpness)
    if not alpha > 0:
        raise ValueError(f"sharpness must be positive, got {sharpness!r}.")

    def function(position: Array, target: Any) -> Array:
        import pytensor
        import pytensor.tensor as pt
        from pytensor.gradient import jacobian

        if target is None:
            raise ValueError("softabs_diagonal_hessian needs the target's log density.")
        # Vectorized, not pytensor's scan-based ``hessian``: that one loses the link to a
        # position that is an expression (a leapfrog step's trial point), and its scan
        # is slow to differentiate again (the generalized leapfrog needs ∂G/∂θ).
        gradient = pytensor.grad(target.logp(position), position)
        h = -pt.diagonal(jacobian(gradient, position, vectorize=True))
        # h coth(αh) = h / tanh(αh), continued by its limit 1/α at h = 0.
        small = pt.abs(alpha * h) < 1e-8
        safe = pt.switch(small, 1.0, h)
        return pt.switch(small, 1.0 / alpha, safe / pt.tanh(alpha * safe))

    return PositionDependentMetric(function, name=f"softabs diagonal Hessian (α={alpha:g})")
