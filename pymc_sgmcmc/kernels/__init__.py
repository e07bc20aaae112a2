"""Kernels: one file per sampler family, the one place a new sampler's mathematics goes.

See :mod:`pymc_sgmcmc.kernels.base` for what a kernel provides and
``docs/architecture.md`` for how to add one.
"""

from pymc_sgmcmc.kernels import geodesic, hmc, riemannian, sghmc, sgld, sgnht, sgnphmc
from pymc_sgmcmc.kernels.base import Kernel, Target

KERNELS: dict[str, Kernel] = {
    kernel.name: kernel
    for kernel in (
        sgld.KERNEL,
        sghmc.KERNEL,
        sgnht.KERNEL,
        sgnphmc.KERNEL,
        hmc.KERNEL,
        riemannian.RHMC,
        riemannian.SGRNPHMC,
        geodesic.SGGMC,
        geodesic.GSGNHT,
    )
}
"""Every kernel by name."""

__all__ = ["KERNELS", "Kernel", "Target"]
