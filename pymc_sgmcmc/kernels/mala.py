"""Kernel of the Metropolis-adjusted Langevin algorithm (MALA).

Bhardwaj, Khatri and Gupta, "Online MCMC based Bayesian inference", §2.1: the proposal
``θ* = θ + η/2 ∇L(θ)``, ``θ' ~ N(θ*, η)``, accepted by a Metropolis–Hastings test; with
a mass ``M``, ``θ' ~ N(θ + η/2 M⁻¹∇L(θ), η M⁻¹)``. That is one leapfrog step of HMC
(:mod:`pymc_sgmcmc.kernels.hmc`) with ``ε = √η`` from a fresh ``p ~ N(0, M)``:
``θ' = θ + ε M⁻¹(p + ε/2 ∇L(θ))``, and HMC's test on ``H(θ, p) = −L(θ) + pᵀM⁻¹p/2``
is the Langevin proposal's own acceptance ratio (``tests/test_mala.py`` checks both
identities). So MALA is HMC's kernel with one step per draw, whose step size is tuned to
the acceptance that is optimal for a Langevin proposal, ~0.574 (Roberts and Rosenthal,
"Optimal scaling of discrete approximations to Langevin diffusions"), instead of 0.8.
"""

from __future__ import annotations

from dataclasses import replace

from pymc_sgmcmc.kernels.hmc import KERNEL as HMC_KERNEL
from pymc_sgmcmc.kernels.hmc import parameters

__all__ = ["KERNEL", "parameters"]

KERNEL = replace(
    HMC_KERNEL,
    name="mala",
    target_accept=0.574,
    # In the Laplace metric's units: the optimal ε falls as D^(-1/6) (Roberts and
    # Rosenthal), ~1 at 20 coordinates; dual averaging takes it from there.
    default_step_size=1.0,
)
