"""An interweaving move for location–scale hierarchies: the globals redrawn given ``a``.

Yu and Meng, "To Center or Not to Center: That Is Not the Question — An
Ancillarity–Sufficiency Interweaving Strategy (ASIS) for Boosting MCMC Efficiency".
A non-centred hierarchy samples ``(u, z)`` with ``a = L(u) + S(u) z`` elementwise, where
the likelihood reads ``u`` and ``z`` only through ``a``. Given ``a`` (the *sufficient*
augmentation) the data are constant, so the globals' conditional is cheap and exact:

``log p(u | a) = log p(u, z(u)) − Σ log|S(u)| + const``, with ``z(u) = (a − L(u)) / S(u)``

(the change of variables ``z → a`` has Jacobian ``Π 1/|S|``). For rows of correlated
effects, ``a_j = L_j(u) + F(u) z_j`` with one factor ``F`` (``mu + z @ chol.T``), ``z_j =
F⁻¹(a_j − L_j)`` and the Jacobian is ``|det F|⁻¹`` per row. A Gibbs update of ``u``
from it, mapped back to ``z``, leaves the joint posterior invariant, however ``(u, z)``
was moved before; it moves the globals along the ridge ``a = const`` that a sampler in
``(u, z)`` crosses slowly when groups have much data (Yu and Meng, sec. 2–3).

The update of ``u`` is a few sweeps of random-walk Metropolis, one coordinate at a
time: ``u`` has a handful of coordinates and each evaluation costs ``O(J)``, no data.
"""

from __future__ import annotations

from collections.abc import Callable

import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable


def recentred(a: Variable, location: Variable, scale: Variable) -> tuple[Variable, Variable]:
    """``z = (a − L) / S`` and ``log|∂z/∂a| = −Σ log|S|`` (the change of variables)."""
    return (a - location) / scale, -pt.log(pt.abs(scale)).sum()


def recentred_rows(a: Variable, location: Variable, factor: Variable) -> tuple[Variable, Variable]:
    """``z_j = F⁻¹(a_j − L_j)`` row by row and ``log|∂z/∂a| = −J log|det F|``."""
    z = pt.linalg.solve(factor, (a - location).T).T
    return z, -a.shape[0] * pt.log(pt.abs(pt.linalg.det(factor)))


def metropolis_coordinate_sweeps(
    log_density: Callable[[Variable], Variable],
    start: Variable,
    coordinates: Variable,
    normals: Variable,
    log_uniforms: Variable,
    scales: Variable,
) -> tuple[Variable, Variable]:
    """Random-walk Metropolis, one coordinate per update (Metropolis within Gibbs).

    Update ``t`` proposes ``u' = u + scales[k_t] normals[t] e_{k_t}`` with
    ``k_t = coordinates[t]`` and accepts it when ``log_uniforms[t] < log π(u') − log π(u)``
    (a non-finite ``log π(u')`` is rejected). Each update keeps ``π``.

    Returns
    -------
    end : Variable
        ``u`` after the last update.
    accepted : Variable
        Whether each update was accepted (bool, one per update).
    """

    def update(k, normal, log_uniform, u, log_pi_u, scales):
        proposal = pt.inc_subtensor(u[k], normal * scales[k])
        log_pi_proposal = log_density(proposal)
        difference = log_pi_proposal - log_pi_u
        accept = pt.and_(pt.isfinite(difference), log_uniform < difference)
        return (
            pt.switch(accept, proposal, u),
            pt.switch(accept, log_pi_proposal, log_pi_u),
            accept,
        )

    ends, _, accepted = pytensor.scan(
        update,
        sequences=[coordinates, normals, log_uniforms],
        outputs_info=[start, log_density(start), None],
        non_sequences=[scales],
        return_updates=False,
    )
    return ends[-1], accepted
