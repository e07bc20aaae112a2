"""Settings shared by every table: seeds, step counts, chain lengths, sampler names."""

from __future__ import annotations

from dataclasses import dataclass

import pymc_sgmcmc as pmsg

N_STEPS = 10
BATCH = 100
PAPER_SGHMC = {"friction": 10.0, "noise_estimate": 0.0, "gradient": "minibatch"}
"""The paper's SGHMC, given explicitly: plain minibatch gradients and ``B̂ = 0`` (the
package's defaults are control variates and a measured ``B̂``)."""
PAPER_SGNHT = {"diffusion": 1.0, "gradient": "minibatch"}
"""The paper's SGNHT: plain minibatch gradients, ``A = 1``."""
PAPER_ESTIMATORS_NOTE = (
    "Every stochastic-gradient row is given the paper's estimator explicitly: "
    "gradient='minibatch' (plain minibatches of 100; the package's default is control "
    "variates), and SGHMC noise_estimate=0 (B̂ = 0; the default is measured); with a step "
    "size of its own every sampler starts from the identity mass, which the EM rows learn."
)
SEED = 20240611
EM_TOLERANCE = 1.10
"""An EM sampler's time per iteration may exceed its fixed-mass twin's by 10 % at most."""

TWINS = {pmsg.HMCEM: pmsg.HMC, pmsg.SGHMCEM: pmsg.SGHMC, pmsg.SGNHTEM: pmsg.SGNHT}
NAMES = {
    pmsg.HMC: "HMC",
    pmsg.HMCEM: "HMC-EM",
    pmsg.SGHMC: "SGHMC",
    pmsg.SGHMCEM: "SGHMC-EM",
    pmsg.SGNHT: "SGNHT",
    pmsg.SGNHTEM: "SGNHT-EM",
}


@dataclass
class Sizes:
    """Chain lengths and timing rounds."""

    chains: int
    tune1: int
    draws1: int
    tune2: int
    draws2: int
    nuts_draws: int
    tune4: int
    draws4: int
    rounds: int
    bookkeeping: int
    block: int = 300

    @classmethod
    def from_args(cls, quick: bool) -> Sizes:
        """The full sizes, or shorter ones with ``--quick``."""
        if quick:
            return cls(1, 2000, 2000, 3000, 3000, 1000, 2000, 2000, 4, 1000)
        return cls(2, 5000, 5000, 10000, 10000, 5000, 5000, 5000, 15, 3000)
