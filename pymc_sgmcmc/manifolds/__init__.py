"""Sphere geometry in embedded coordinates: tangent projection and geodesic flow."""

from pymc_sgmcmc.manifolds.sphere import geodesic_flow, project_tangent, retract_to_sphere

__all__ = ["geodesic_flow", "project_tangent", "retract_to_sphere"]
