"""Pieces shared by every Hamiltonian update rule: velocity and kinetic energy."""

from __future__ import annotations

from pymc_sgmcmc.core.arrays import Array


def velocity(inv_mass: Array, momentum: Array) -> Array:
    """Return ``M⁻¹ p`` for a diagonal (1-D ``inv_mass``) or dense (2-D) inverse mass.

    Parameters
    ----------
    inv_mass : array
        Inverse mass: the diagonal of ``M⁻¹`` (1-D) or the full matrix (2-D).
    momentum : array
        Momentum ``p``, 1-D.
    """
    if inv_mass.ndim == 2:
        return inv_mass @ momentum
    return inv_mass * momentum


def kinetic_energy(inv_mass: Array, momentum: Array) -> Array:
    """Return ``pᵀ M⁻¹ p / 2``, the Gaussian kinetic energy (the seeds' eq. 1 second term)."""
    return 0.5 * (momentum * velocity(inv_mass, momentum)).sum()


def kinetic_temperature(inv_mass: Array, momentum: Array) -> Array:
    """Return ``pᵀ M⁻¹ p / D``; it averages 1 when ``p ~ N(0, M)``."""
    return 2.0 * kinetic_energy(inv_mass, momentum) / momentum.shape[0]


def moving_kinetic_temperature(inv_mass: Array, momentum: Array, moving: Array) -> Array:
    """Return ``Σ_S p_i² (M⁻¹)_ii / |S|`` over the coordinates ``S`` that move.

    ``moving`` is 1 on ``S`` and 0 elsewhere; the inverse mass is diagonal (1-D), as for
    every step that holds coordinates in place. It averages 1 when ``p_S ~ N(0, M_S)``,
    whatever the held coordinates' momenta.
    """
    return (moving * momentum * velocity(inv_mass, momentum)).sum() / moving.sum()
