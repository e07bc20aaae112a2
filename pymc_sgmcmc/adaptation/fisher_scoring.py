"""SGFS's preconditioner: the curvature and the gradient's noise, learned during tuning.

Ahn, Korattikara and Welling, "Bayesian Posterior Sampling via Stochastic Gradient Fisher
Scoring", Algorithm 1, lines 5-7: a running mean (``κ_t = 1/t``) of the empirical Fisher
information from the rows' gradients. :class:`FisherScoring` keeps two running means, one
measurement per tuning draw at the draw's position:

- the curvature ``F``: the data's empirical Fisher information ``N Î`` plus the negative
  Hessian of the terms that read no rows (the paper's prior is flat next to ``N Î``; a
  PyMC model's priors, transforms and unminibatched observations are often not);
- the covariance ``Q`` of the sampler's gradient estimate (the paper's ``(N²/n) Î`` for
  plain minibatches; the spread of ``∇c_i(θ) − ∇c_i(θ̂)`` for control variates).

The measurement comes from the glue (:attr:`FisherScoring.measure`), which reads the data.
Both are held after tuning, so the kept draws come from one time-homogeneous chain. The
adapter owns the kernel's ``metric`` (``M = F``), ``basis`` and ``noise_eigenvalues``
(:func:`pymc_sgmcmc.dynamics.sgfs.fisher_scoring_basis`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_sgmcmc.adaptation.base import Adapter, ChainContext, IterationResult
from pymc_sgmcmc.core.validation import check_choice
from pymc_sgmcmc.dynamics.sgfs import fisher_scoring_basis, positive_definite, running_mean
from pymc_sgmcmc.metrics.euclidean import EuclideanMetric

DENSE_UP_TO = 200
"""``structure="auto"`` is dense up to this many coordinates, diagonal above (as the
Laplace metric of ``step_size="auto"``)."""

Measurement = Callable[[np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray]]
"""``(position, rng) -> (F, Q)``: one measurement of the curvature and the gradient's
noise at ``position``, on rows drawn from ``rng`` (dense matrices or their diagonals)."""


@dataclass_state
class FisherScoringState(DataClassState):
    """A chain's running means, their count and whether tuning has ended."""

    curvature: Any
    noise: Any
    count: int
    frozen: bool


class FisherScoring(Adapter):
    """The curvature ``F`` and noise ``Q`` of SGFS, learned at each tuning draw.

    Parameters
    ----------
    structure : {"auto", "dense", "diagonal"}
        Full matrices or their diagonals; "auto": dense up to :data:`DENSE_UP_TO`
        coordinates.

    Attributes
    ----------
    measure : Measurement
        Set by the glue before any chain.
    initial : tuple of ndarray
        ``(F, Q)`` a chain starts from (one measurement made when the step was built),
        counted as the first of the running means' terms. Set by the glue.
    """

    _state_class: ClassVar[type[DataClassState]] = FisherScoringState
    learns: ClassVar[bool] = True

    def __init__(self, structure: str = "auto") -> None:
        self.structure = check_choice(
            "fisher_structure", structure, ("auto", "dense", "diagonal"),
            "'dense' keeps the full Fisher information (O(D²) memory), 'diagonal' its diagonal.",
        )  # fmt: skip
        self.measure: Measurement | None = None
        self.initial: tuple[np.ndarray, np.ndarray] | None = None
        self.curvature: np.ndarray | None = None
        self.noise: np.ndarray | None = None
        self.count = 0
        self.frozen = False
        self._parameters: tuple[Any, Any, dict[str, Any]] | None = None

    def diagonal(self, dim: int) -> bool:
        """Whether the matrices are kept as their diagonals for ``dim`` coordinates."""
        if self.structure == "auto":
            return dim > DENSE_UP_TO
        return self.structure == "diagonal"

    def init_chain(self, chain: ChainContext) -> None:
        """Start from :attr:`initial`, as one measurement."""
        if self.initial is None:
            # Only while the step is being built: the glue sets `initial` before a chain.
            eye = np.ones(chain.dim) if self.diagonal(chain.dim) else np.eye(chain.dim)
            self.initial = (eye, np.zeros_like(eye))
        self.curvature, self.noise = (np.array(a, dtype=float) for a in self.initial)
        self.count, self.frozen = 1, False

    def update(self, result: IterationResult, chain: ChainContext) -> frozenset[str]:
        """Measure at the tuning draw and fold it into the running means (line 7)."""
        if self.frozen or not result.tune or result.diverging or self.measure is None:
            return frozenset()
        curvature, noise = self.measure(result.position, chain.rng)
        if not (np.all(np.isfinite(curvature)) and np.all(np.isfinite(noise))):
            return frozenset()
        self.count += 1
        self.curvature = running_mean(self.curvature, curvature, self.count)
        self.noise = running_mean(self.noise, noise, self.count)
        return frozenset({"metric", "basis", "noise_eigenvalues"})

    def parameters(self) -> dict[str, Any]:
        """``metric`` (``M = F``), ``basis`` ``W`` and ``noise_eigenvalues`` ``q``."""
        cached = self._parameters
        # Keyed by the arrays themselves: a running mean, or a chain's state restored
        # (PyMC's sampling_state), replaces them.
        if cached is None or cached[0] is not self.curvature or cached[1] is not self.noise:
            curvature = positive_definite(self.curvature)
            basis, noise_eigenvalues = fisher_scoring_basis(curvature, self.noise)
            values = {
                "metric": _metric_of_precision(curvature),
                "basis": basis,
                "noise_eigenvalues": noise_eigenvalues,
            }
            self._parameters = cached = (self.curvature, self.noise, values)
        return cached[2]

    def finalize(self) -> None:
        """Tuning has ended: ``F`` and ``Q`` are held."""
        self.frozen = True


def _metric_of_precision(precision: np.ndarray) -> EuclideanMetric:
    """The metric ``M = F`` from a positive-definite ``F`` (a matrix or a diagonal)."""
    if precision.ndim == 1:
        return EuclideanMetric(inverse=1.0 / precision, factor=np.sqrt(precision))
    factor = np.linalg.cholesky(precision)
    inverse = np.linalg.inv(precision)
    return EuclideanMetric(inverse=0.5 * (inverse + inverse.T), factor=factor)
