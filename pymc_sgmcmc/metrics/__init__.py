"""Metrics: the mass of the kinetic energy, constant or position-dependent.

A metric provides the momentum law ``p ~ N(0, M)`` (from a standard normal draw), the
velocity ``M⁻¹p``, the kinetic energy and the kinetic temperature, each as a function of
the position so that Euclidean and Riemannian metrics share one interface.
"""

from pymc_sgmcmc.metrics.euclidean import EuclideanMetric, euclidean_metric, metric_from_inverse
from pymc_sgmcmc.metrics.riemannian import PositionDependentMetric, softabs_diagonal_hessian

__all__ = [
    "EuclideanMetric",
    "PositionDependentMetric",
    "euclidean_metric",
    "metric_from_inverse",
    "softabs_diagonal_hessian",
]
