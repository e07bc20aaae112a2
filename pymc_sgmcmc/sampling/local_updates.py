"""Groups' local parameters moved by an exact, Metropolis-corrected step.

In a grouped step a group's locals see their rows in about one step of a trajectory
(``K`` of ``J`` groups per step), so the stochastic-gradient kernel moves them a fraction
of an sd per draw: measured on a normal hierarchy of 300 groups, their ESS was 3-15 in
4,000 draws, and the group scale, which moves only as fast as the locals, had an ESS
of 6.

After each trajectory this move updates locals given everything else, on their
conditional density: the prior plus the plain sum of their groups' rows, which is exact
because no other row reads them.

- With each group's own log density (:class:`~pymc_sgmcmc.sampling.groups.GroupLogDensities`,
  a prior row by row), every group gets a Newton proposal
  (:mod:`pymc_sgmcmc.dynamics.newton`) and its own Metropolis–Hastings test: an exact
  Gibbs update of each group, near-independent where its conditional is near-Gaussian.
  All groups move at every draw, in chunks of about :data:`ROWS_PER_CALL` rows. After
  tuning the proposal is anchored: the Newton step from the locals' mean over tuning,
  with Student's t spread (:meth:`ExactLocalMove.anchored_move`).
- Otherwise (a prior that ties groups), ``4K`` groups drawn afresh run a short
  Hamiltonian trajectory together, held coordinates fixed, with one test (Hastings,
  "Monte Carlo Sampling Methods Using Markov Chains and Their Applications"; Neal, "MCMC
  Using Hamiltonian Dynamics", sec. 4.4 on updating subsets of variables). Its mass is
  the kernel's diagonal one, its step size tuned by dual averaging to
  :data:`TARGET_ACCEPT` during tuning, then frozen.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_sgmcmc.core.compilation import compile_graph
from pymc_sgmcmc.dynamics.common import kinetic_energy
from pymc_sgmcmc.dynamics.hmc import leapfrog_step, metropolis_log_acceptance
from pymc_sgmcmc.dynamics.newton import (
    anchored_block_log_density,
    block_newton_log_density,
    block_newton_proposal,
    curvature_factors,
    newton_log_density,
    newton_proposal,
)
from pymc_sgmcmc.gradients.grouped import GroupedGradient, GroupLayout
from pymc_sgmcmc.sampling.groups import GroupLogDensities

ROWS_PER_CALL = 100_000
"""Rows of one compiled call of the per-group move (bounds its memory)."""

LOCAL_GROUPS_PER_STEP = 4
"""Without a test per group: groups per local move, in groups of one kernel step
(``K``); all ``J`` at most.

Measured on the normal hierarchy of ``benchmarks/normal_hierarchy.py`` (300 groups,
2 x (2,000 + 2,000)), with this move for every model: 1, 2, 3, 5 and 10 gave the
intercepts a median ESS of 80, 350, 740, 1,900 and 7,000 and the group scale 50, 85,
140, 176 and 218; the move costs about as much as the trajectory at 2 and grows
linearly."""

LEAPFROG_STEPS = 8
"""Leapfrog steps of each local move."""

TARGET_ACCEPT = 0.8
"""The acceptance rate the local move's step size is tuned to."""

STEP_JITTER = 0.5
"""Each move's step size is drawn uniformly within this fraction of the tuned one."""

CURVATURE_FIT_EVERY = 5
"""During tuning, the per-group move fits the curvature at one move in this many."""

CURVATURE_AVERAGING = 0.2
"""Weight of the newest fit in each coordinate's running curvature during tuning."""

MIN_CURVATURE = 1e-8
"""A group's curvature below this (not concave there) is raised to it in the proposal."""

SCORE_SHARE = 0.5
"""Share of the scores' mean square ``E[g gᵀ]`` below which a group's precision block is
not taken, whatever its Hessian says.

For a conditional density with a continuous score, ``E[g gᵀ] = E[−∇²log p]`` over draws
from it (the information identity), so either estimates a group's precision. Where the
prior has a kink (a Laplace law on the locals) its Hessian misses the kink's share: a
group of two rows of a Laplace hierarchy (noise sd 2, scale 0.6) had a Hessian of 0.18
where the precision is ~1.2, and its Newton proposal, with the prior's gradient of ±1
over that curvature, jumped ~5.5 sds and was never accepted (the intercepts of such
groups drifted with the kernel alone: 0.86 posterior sd off, ESS 3). The scores, averaged
over a few fits, are noisy (a mean of ~9 squares of a Gaussian score: ±47 %); at half of
them a Gaussian group's Hessian is overruled only where the mean square is twice its
expectation, about one fit in 30, and then by at most that factor."""

INITIAL_STEP_SIZE = 0.5
"""In units of the mass: the locals' conditional sds are at most their marginal ones."""

PROPOSAL_DEGREES_OF_FREEDOM = 4.0
"""Degrees of freedom of the anchored move's Student's t proposal.

The Newton step from where the chain stands is a near-independent draw where a group's
conditional is near-Gaussian; where it is skewed (a logistic group with few events) its
mean stays near where the chain stands. On 500 centred logistic groups of 100 rows (2 ×
(300 + 1,000), two seeds), that move left the intercepts' smallest ESS at 949-984 and
their squared deviations' at 1,076-1,123, all in groups of 4-15 events, even with extra
moves for the groups measured as slow. The anchored proposal, the Newton step from the
locals' mean over tuning, gave 1,256-1,313 and 1,099-1,330 with 8 degrees of freedom,
1,165-1,212 and 1,166-1,244 with 4, and 1,347 and 1,214 with 16 (one seed; its worst
groups had 4-6 events); with Gaussian spread the smallest fell to 495 (789-982 with two
moves a draw), groups of 1-4 events stuck in the conditional's long tail.

4 rather than 8: an independence proposal whose tails are lighter than the conditional's
keeps a chain that reached them there. On a non-centred Student-t hierarchy (``nu = 4``;
300 groups, half with 1-3 rows; 2 × (1,000 + 2,000)) groups of two rows far from the
others have a long tail towards their rows, and with 8 one chain spent ~300 draws 4-6
sds out: intercepts 0.33 sd off, sd ratios 0.86-1.64, min ESS 47. With 4: 0.067 sd,
0.89-1.08, 432 (with 2: 0.077 sd, 0.90-1.07, 870). On 500 logistic groups of 100 rows
(another data set than above, 2 × (300 + 1,000), two seeds) 4 against 8 gave the
intercepts a smallest ESS of 933-969 against 791-847, 1 % quantiles 1,202-1,234 against
1,167-1,173, medians 1,630-1,632 against 1,697-1,705 and squared deviations' smallest
951-1,147 against 1,041-1,064; 2 cost the median 15 % (1,441)."""

CENTRE_FROM = 0.5
"""The locals' mean, the anchored move's centre, is taken over the tuning draws after this
fraction of tuning: the start, far from the posterior, would pull it away."""


def local_step_size_adapter() -> DualAverageAdaptation:
    """A fresh dual averaging of the local move's step size (PyMC's NUTS constants)."""
    return DualAverageAdaptation(INITIAL_STEP_SIZE, TARGET_ACCEPT, 0.05, 0.75, 10)


class SweepChunk(NamedTuple):
    """The groups of one compiled call of the per-group move, their rows and coordinates.

    ``rows`` is a ``slice`` where the groups' rows are consecutive in the data (read in
    place), else their indices (gathered at each call); ``segments``: each row's place
    among ``groups``; ``coordinates``: ``(len(groups), r)`` flat positions of their locals.
    """

    groups: np.ndarray
    rows: np.ndarray | slice
    segments: np.ndarray
    coordinates: np.ndarray


def sweep_chunk(layout: GroupLayout, groups: np.ndarray) -> SweepChunk:
    """:class:`SweepChunk` of ``groups``, their rows as a ``slice`` where consecutive."""
    groups = np.asarray(groups, dtype=np.int64)
    rows, segments = layout.rows_of(groups)
    if rows.size and np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
        rows = slice(int(rows[0]), int(rows[0]) + rows.size)
    return SweepChunk(groups, rows, segments.astype(np.int64), layout.local_positions[groups])


def groups_in_row_order(layout: GroupLayout) -> np.ndarray:
    """Every group, ordered by its first row (groups without rows last).

    Where each group's rows are consecutive (data sorted by group, in any order of the
    groups), consecutive groups in this order have consecutive rows.
    """
    return np.argsort(layout.first_rows(), kind="stable")


class LocalMoveResult(NamedTuple):
    """What a local move returns.

    The kept position, the mean acceptance probability and, where the move fitted it,
    each moving group's precision block ``(M, r, r)`` where it started and its score's
    outer product ``g gᵀ`` there (:func:`precision_blocks`).
    """

    position: np.ndarray
    accept: float
    curvature: np.ndarray | None
    scores: np.ndarray | None = None


class CurvatureFactors(NamedTuple):
    """Each group's precision block ``H = LLᵀ`` as the moves use it, ``(J, r, r)`` each.

    ``shift``: ``H⁻¹``; ``spread``: ``L⁻ᵀ``; ``whitening``: ``Lᵀ``
    (:func:`~pymc_sgmcmc.dynamics.newton.curvature_factors`).
    """

    shift: np.ndarray
    spread: np.ndarray
    whitening: np.ndarray

    def of(self, groups: np.ndarray, dtype: np.dtype) -> list[np.ndarray]:
        """The factors of ``groups``, as the compiled moves take them."""
        return [np.ascontiguousarray(f[groups], dtype=dtype) for f in self]


def factors_of(curvature: np.ndarray, layout: GroupLayout) -> CurvatureFactors:
    """:class:`CurvatureFactors` of each group's blocks ``(J, r, r)``, or of a flat vector.

    A block never fitted (NaN) is taken as the identity; a flat vector (each coordinate's
    curvature, as long as the position) gives diagonal blocks. Eigenvalues are floored at
    :data:`MIN_CURVATURE`.
    """
    curvature = np.asarray(curvature, dtype=float)
    if curvature.ndim == 1:
        diagonal = curvature[layout.local_positions]
        blocks = diagonal[:, :, None] * np.eye(diagonal.shape[1])
    else:
        blocks = curvature
    unseen = np.isnan(blocks).any(axis=(1, 2))
    blocks = np.where(unseen[:, None, None], np.eye(blocks.shape[1]), blocks)
    return CurvatureFactors(*curvature_factors(blocks, MIN_CURVATURE))


class LocalsMean(NamedTuple):
    """The running mean of the locals' draws (``count`` of them), the anchored move's centre."""

    count: int
    mean: np.ndarray


def updated_mean(running: LocalsMean | None, draw: np.ndarray) -> LocalsMean:
    """``running`` with ``draw`` added (equal weights)."""
    draw = np.asarray(draw, dtype=float)
    if running is None:
        return LocalsMean(1, draw.copy())
    n = running.count + 1
    return LocalsMean(n, running.mean + (draw - running.mean) / n)


def averaged_blocks(
    average: np.ndarray | None, fitted: np.ndarray, groups: np.ndarray, n_groups: int
) -> np.ndarray:
    """Each group's running precision block ``(J, r, r)``, updated for ``groups``.

    An exponential average with weight :data:`CURVATURE_AVERAGING` on the newest fit
    (``fitted``, ``(M, r, r)`` for ``groups``); a group's first fit is taken as it is,
    and a group never fitted is NaN.
    """
    if average is None:
        average = np.full((n_groups, *fitted.shape[1:]), np.nan)
    average = average.copy()
    previous = average[groups]
    updated = (1.0 - CURVATURE_AVERAGING) * previous + CURVATURE_AVERAGING * fitted
    average[groups] = np.where(np.isnan(previous), fitted, updated)
    return average


def precision_blocks(hessian: np.ndarray, scores: np.ndarray | None) -> np.ndarray:
    """Each group's precision block ``(J, r, r)``: the Hessian's, raised where the scores say.

    ``hessian``: each group's average of ``−∇²log p``; ``scores``: its average of ``g gᵀ``
    (None, or NaN for a group: the Hessian alone). The result is ``A + (s S − A)₊`` with
    ``s`` = :data:`SCORE_SHARE` and ``(·)₊`` a symmetric matrix's part of positive
    eigenvalues: in each direction the larger of the Hessian and ``s`` times the scores
    (for one local, ``max(A, s S)``).
    """
    hessian = np.asarray(hessian, dtype=float)
    if scores is None:
        return hessian
    excess = SCORE_SHARE * np.asarray(scores, dtype=float) - hessian
    known = ~np.isnan(excess).any(axis=(1, 2))
    excess = np.where(known[:, None, None], excess, 0.0)
    if hessian.shape[1] == 1:
        return hessian + np.maximum(excess, 0.0)
    values, vectors = np.linalg.eigh(0.5 * (excess + excess.transpose(0, 2, 1)))
    positive = (vectors * np.maximum(values, 0.0)[:, None, :]) @ vectors.transpose(0, 2, 1)
    return hessian + positive


class ExactLocalMove:
    """A Metropolis-corrected Hamiltonian move of the drawn groups' locals.

    With per-group log densities, each group gets its own Metropolis test: the locals of
    different groups do not interact given the globals, so the trajectory is one
    independent trajectory per group, and a test per group keeps the acceptance from
    falling as more groups move at once. Without them (a prior that ties groups), one
    test judges all the drawn groups together.

    Parameters
    ----------
    grouped : GroupedGradient
        The grouped model's log density.
    layout : GroupLayout
        Rows and local coordinates of each group.
    per_group : GroupLogDensities, optional
        Each group's conditional log density.
    compile_kwargs : dict, optional
        Passed to the compile.
    """

    def __init__(
        self,
        grouped: GroupedGradient,
        layout: GroupLayout,
        per_group: GroupLogDensities | None,
        compile_kwargs: dict | None,
    ) -> None:
        self.grouped, self.layout, self.per_group = grouped, layout, per_group
        self.compile_kwargs = compile_kwargs
        self._function = None
        # By whether the rows are read in place (a slice) or gathered.
        self._newton: dict[bool, Any] = {}
        self._newton_fixed: dict[bool, Any] = {}
        self._anchored: dict[bool, Any] = {}
        self._sweep_chunks: list[SweepChunk] | None = None

    def __getstate__(self) -> dict:
        compiled = {"_function": None, "_newton": {}, "_newton_fixed": {}, "_anchored": {}}
        return self.__dict__ | compiled

    def sweep_chunks(self) -> list[SweepChunk]:
        """Every group once, in chunks of about :data:`ROWS_PER_CALL` rows, fixed per step.

        Given the globals the groups are independent, so the order in which they are
        updated does not matter: they are taken in the order of their rows, so that data
        sorted by group are read in place, and the chunks' rows are found once.
        """
        if self._sweep_chunks is None:
            order = groups_in_row_order(self.layout)
            self._sweep_chunks = [sweep_chunk(self.layout, c) for c in self.chunks(order)]
        return self._sweep_chunks

    def chunks(self, groups: np.ndarray) -> list[np.ndarray]:
        """``groups`` in consecutive chunks of about :data:`ROWS_PER_CALL` rows (< 2x)."""
        rows = np.cumsum(self.layout.counts[groups])
        bounds = np.searchsorted(rows, np.arange(ROWS_PER_CALL, rows[-1], ROWS_PER_CALL))
        return [c for c in np.split(groups, np.unique(bounds)) if c.size]

    def _compile_newton(self, in_place: bool, kind: str) -> None:
        """The per-group Newton proposal and its log acceptance ratio, compiled as ``kind``.

        ``_newton``: with each group's curvature fitted where it stands and where it
        goes (two Hessian products per local dimension), also returning each group's
        fitted precision block ``(M, r, r)`` where it stood; ``_newton_fixed``: with
        precision blocks given (no Hessian products: a sweep of 2,000 groups of 100
        rows took 28.8 ms instead of 40 ms), as their factors (:class:`CurvatureFactors`
        of the moving groups). Both work on the moving groups' locals alone (``(M, r)``
        of them, flattened), so that the gradient is taken with respect to them only: the
        globals' part of it (``Xᵀr`` in a regression) was about a tenth of the sweep.
        ``in_place``: the rows are a slice (inputs ``first`` and ``stop``), else a vector
        of indices (input ``rows``). ``_anchored``: the anchored move
        (:meth:`anchored_move`), with blocks given. ``kind`` (``"fit"``, ``"fixed"`` or
        ``"anchored"``) says which: each is compiled when first used, so that a chain that
        never makes a kind of move (no draws after tuning, a move called directly) does
        not compile it.
        """
        x = self.grouped.position
        dtype = x.dtype
        if in_place:
            first, stop = pt.scalar("first", dtype="int64"), pt.scalar("stop", dtype="int64")
            rows, row_inputs = slice(first, stop), [first, stop]
        else:
            rows = pt.vector("rows", dtype="int64")
            row_inputs = [rows]
        segments = pt.vector("segments", dtype="int64")
        groups = pt.vector("groups", dtype="int64")
        normal = pt.vector("normal", dtype=dtype)
        n_local = self.layout.local_positions.shape[1]
        coordinates = pt.as_tensor(self.layout.local_positions.astype(np.int64))[groups].ravel()
        # Each group's coordinates within the flattened locals.
        by_group = pt.arange(coordinates.shape[0]).reshape((groups.shape[0], n_local))

        def log_densities(local):
            local_x = pt.set_subtensor(x[coordinates], local)
            return self.per_group(x, rows, segments, groups, local_x)

        def local_fit(local):
            # Each group's log density, its gradient and its curvature −∂²/∂θ_k² (groups
            # do not interact: one Hessian product per local dimension gives column k of
            # every group's block at once).
            values = log_densities(local)
            gradient = pt.grad(values.sum(), local)
            columns = []
            for k in range(n_local):
                indicator = pt.zeros_like(local)[by_group[:, k]].set(1.0)
                product = pt.grad(
                    (gradient * indicator).sum(), local, consider_constant=[indicator]
                )
                columns.append(-product[by_group])
            blocks = pt.stack(columns, axis=2)  # (M, r, r): −∂²/∂θ_j∂θ_k per group
            curvature = pt.diagonal(blocks, axis1=1, axis2=2).ravel()
            return values, gradient, pt.maximum(curvature, MIN_CURVATURE), blocks

        def proposal_and_ratio():
            def log_proposal(to, fit_at, from_):
                _, gradient, curvature, _ = fit_at
                return newton_log_density(to, from_, gradient, curvature, by_group)

            start = x[coordinates]
            here = local_fit(start)
            proposal = newton_proposal(start, here[1], here[2], normal[coordinates])
            there = local_fit(proposal)
            log_ratio = (
                there[0]
                - here[0]
                + log_proposal(start, there, proposal)
                - log_proposal(proposal, here, start)
            )
            score = in_rows(here[1])
            return proposal, log_ratio, here[3], score[:, :, None] * score[:, None, :]

        shift = pt.tensor3("shift", dtype=dtype)
        spread = pt.tensor3("spread", dtype=dtype)
        whitening = pt.tensor3("whitening", dtype=dtype)
        factors = [shift, spread, whitening]

        def in_rows(flat):
            return flat.reshape((groups.shape[0], n_local))

        def fixed_proposal_and_ratio():
            # The Newton step from where the chain stands with fixed precision blocks.
            start = x[coordinates]
            values = log_densities(start)
            gradient = pt.grad(values.sum(), start)
            proposal = block_newton_proposal(
                in_rows(start), in_rows(gradient), shift, spread, in_rows(normal[coordinates])
            ).ravel()
            new_values = log_densities(proposal)
            new_gradient = pt.grad(new_values.sum(), proposal)

            def log_proposal(to, from_, gradient_at):
                return block_newton_log_density(
                    in_rows(to), in_rows(from_), in_rows(gradient_at), shift, whitening
                )

            log_ratio = (
                new_values
                - values
                + log_proposal(start, proposal, new_gradient)
                - log_proposal(proposal, start, gradient)
            )
            return proposal, log_ratio

        def anchored_proposal_and_ratio():
            # The Newton step from the fixed centre, given the globals: an independence
            # proposal, so the test needs the log densities at both ends, no gradient.
            at_centre = centre[coordinates]
            gradient = in_rows(pt.grad(log_densities(at_centre).sum(), at_centre))
            start = x[coordinates]
            proposal = block_newton_proposal(
                in_rows(at_centre), gradient, shift, spread, in_rows(student_t[coordinates])
            ).ravel()

            def log_proposal(to):
                return anchored_block_log_density(
                    in_rows(to), in_rows(at_centre), gradient, shift, whitening,
                    PROPOSAL_DEGREES_OF_FREEDOM,
                )  # fmt: skip

            log_ratio = (
                log_densities(proposal)
                - log_densities(start)
                + log_proposal(start)
                - log_proposal(proposal)
            )
            return proposal, log_ratio

        student_t = pt.vector("student_t", dtype=dtype)
        centre = pt.vector("centre", dtype=dtype)
        inputs = [x, *row_inputs, segments, groups]
        if kind == "anchored":
            self._anchored[in_place] = compile_graph(
                [*inputs, student_t, *factors, centre],
                list(anchored_proposal_and_ratio()),
                self.compile_kwargs,
            )
        elif kind == "fit":
            self._newton[in_place] = compile_graph(
                [*inputs, normal], list(proposal_and_ratio()), self.compile_kwargs
            )
        else:
            self._newton_fixed[in_place] = compile_graph(
                [*inputs, normal, *factors], list(fixed_proposal_and_ratio()), self.compile_kwargs
            )

    def _compile(self) -> None:
        """The Hamiltonian move of a block of groups, with one energy for all of them."""
        x = self.grouped.position
        dtype = x.dtype
        rows = pt.vector("rows", dtype="int64")
        momentum = pt.vector("momentum", dtype=dtype)
        inv_mass = pt.vector("inv_mass", dtype=dtype)  # zero on every held coordinate
        step_size = pt.scalar("step_size", dtype=dtype)
        logp, gradient = self.grouped.conditional(rows)

        def leapfrog(q, p, g):
            return leapfrog_step(q, p, g, gradient, step_size, inv_mass)

        positions_, momenta, _ = pytensor.scan(
            leapfrog,
            outputs_info=[x, momentum, gradient(x)],
            n_steps=LEAPFROG_STEPS,
            return_updates=False,
        )
        end, end_momentum = positions_[-1], momenta[-1]
        # H = −log p + pᵀM⁻¹p/2 on the moving block (Neal, eq. 2.6).
        start_energy = -logp(x) + kinetic_energy(inv_mass, momentum)
        end_energy = -logp(end) + kinetic_energy(inv_mass, end_momentum)
        self._function = compile_graph(
            [x, rows, momentum, inv_mass, step_size],
            [end, start_energy, end_energy],
            self.compile_kwargs,
        )

    def move(
        self,
        position: np.ndarray,
        groups: np.ndarray,
        inv_mass: np.ndarray | None,
        step_size: float,
        rng: np.random.Generator,
        curvature: np.ndarray | CurvatureFactors | None = None,
    ) -> LocalMoveResult:
        """One move of the locals of ``groups`` given everything else.

        With a test per group, ``curvature`` (each group's precision block or each
        coordinate's curvature, e.g. averaged over tuning; :func:`factors_of`) replaces
        the one fitted at each point; ``inv_mass`` and ``step_size`` are the Hamiltonian
        move's.
        """
        if self.per_group is not None:
            return self.newton_move(position, sweep_chunk(self.layout, groups), rng, curvature)
        rows, _ = self.layout.rows_of(groups)
        coordinates = self.layout.local_positions[groups]
        if self._function is None:
            self._compile()
        dtype = position.dtype
        moving = np.zeros(position.size, dtype=bool)
        moving[coordinates.ravel()] = True
        # p ~ N(0, M) on the moving block; M⁻¹ = 0 holds the rest.
        momentum = rng.standard_normal(position.size) / np.sqrt(np.where(moving, inv_mass, 1.0))
        momentum = np.where(moving, momentum, 0.0).astype(dtype)
        inv_mass = np.where(moving, inv_mass, 0.0).astype(dtype)
        # A fixed trajectory length resonates with some conditional sds (measured: an
        # sd 0.81x the exact one); a jittered step size breaks the period (Neal, sec. 5.4.2).
        jittered = step_size * rng.uniform(1.0 - STEP_JITTER, 1.0 + STEP_JITTER)
        end, start_energy, end_energy = self._function(
            position, rows.astype(np.int64), momentum, inv_mass, np.asarray(jittered, dtype=dtype)
        )
        log_accept = metropolis_log_acceptance(float(start_energy), float(end_energy))
        kept = position.copy()
        if np.log(rng.uniform()) < log_accept:
            kept[coordinates.ravel()] = end[coordinates.ravel()]
        return LocalMoveResult(kept, float(np.exp(log_accept)), None)

    def newton_move(
        self,
        position: np.ndarray,
        chunk: SweepChunk,
        rng: np.random.Generator,
        curvature: np.ndarray | CurvatureFactors | None = None,
    ) -> LocalMoveResult:
        """The per-group Newton move of ``chunk``'s groups, each with its own test.

        ``curvature`` (each group's precision block, e.g. averaged over tuning, or each
        coordinate's curvature: :func:`factors_of`) replaces the one fitted at each
        point, and then the proposal is dense within each group
        (:func:`~pymc_sgmcmc.dynamics.newton.block_newton_proposal`).
        """
        in_place = self._compiled_for(chunk, "fit" if curvature is None else "fixed")
        normal = rng.standard_normal(position.size).astype(position.dtype)
        arguments = [position, *self._rows(chunk), chunk.segments, chunk.groups, normal]
        if curvature is None:
            proposal, log_ratio, fitted, scores = self._newton[in_place](*arguments)
        else:
            fitted = scores = None
            factors = self._factors(curvature).of(chunk.groups, position.dtype)
            proposal, log_ratio = self._newton_fixed[in_place](*arguments, *factors)
        return per_group_test(position, chunk, proposal, log_ratio, rng, fitted, scores)

    def _factors(self, curvature: np.ndarray | CurvatureFactors) -> CurvatureFactors:
        if isinstance(curvature, CurvatureFactors):
            return curvature
        return factors_of(curvature, self.layout)

    def anchored_move(
        self,
        position: np.ndarray,
        chunk: SweepChunk,
        rng: np.random.Generator,
        curvature: np.ndarray | CurvatureFactors,
        centre: np.ndarray,
    ) -> LocalMoveResult:
        """The anchored move of ``chunk``'s groups, each with its own test.

        Each group proposes ``c + H⁻¹g(c) + L⁻ᵀt``, ``t`` Student's t with
        :data:`PROPOSAL_DEGREES_OF_FREEDOM` degrees of freedom per coordinate
        (:func:`~pymc_sgmcmc.dynamics.newton.block_newton_proposal`): the Newton step
        from ``centre`` (the locals' mean over tuning) given the globals, with each
        group's fixed precision block ``H = LLᵀ`` (``curvature``: :func:`factors_of`). It
        does not depend on where the chain stands, and it reads the rows at three points
        (the centre's gradient, the log densities at both ends) where the Newton move
        from the chain's point reads them at two, with gradients at both.
        """
        in_place = self._compiled_for(chunk, "anchored")
        dtype = position.dtype
        student_t = rng.standard_t(PROPOSAL_DEGREES_OF_FREEDOM, size=position.size)
        factors = self._factors(curvature).of(chunk.groups, dtype)
        proposal, log_ratio = self._anchored[in_place](
            position, *self._rows(chunk), chunk.segments, chunk.groups,
            student_t.astype(dtype), *factors, np.asarray(centre, dtype=dtype),
        )  # fmt: skip
        return per_group_test(position, chunk, proposal, log_ratio, rng, None)

    def _compiled_for(self, chunk: SweepChunk, kind: str) -> bool:
        """Whether ``chunk``'s rows are read in place; the move of ``kind`` compiled for that."""
        in_place = isinstance(chunk.rows, slice)
        table = {"fit": self._newton, "fixed": self._newton_fixed, "anchored": self._anchored}
        if in_place not in table[kind]:
            self._compile_newton(in_place, kind)
        return in_place

    @staticmethod
    def _rows(chunk: SweepChunk) -> list[np.ndarray]:
        """The compiled moves' row inputs: ``first`` and ``stop``, or the row indices."""
        if isinstance(chunk.rows, slice):
            return [np.asarray(chunk.rows.start, np.int64), np.asarray(chunk.rows.stop, np.int64)]
        return [chunk.rows.astype(np.int64)]


def per_group_test(
    position: np.ndarray,
    chunk: SweepChunk,
    proposal: np.ndarray,
    log_ratio: np.ndarray,
    rng: np.random.Generator,
    curvature: np.ndarray | None,
    scores: np.ndarray | None = None,
) -> LocalMoveResult:
    """Each of ``chunk``'s groups keeps its proposed locals with probability ``min(1, r)``.

    ``log_ratio``: each group's log Hastings ratio (NaN is a rejection); ``proposal``: the
    chunk's locals, flattened group by group; ``curvature`` and ``scores`` are passed on.
    """
    log_ratio = np.where(np.isnan(log_ratio), -np.inf, np.minimum(0.0, log_ratio))
    accepted = np.log(rng.uniform(size=log_ratio.size)) < log_ratio
    kept = position.copy()
    coordinates = chunk.coordinates
    kept[coordinates[accepted]] = proposal.reshape(coordinates.shape)[accepted]
    return LocalMoveResult(kept, float(np.mean(np.exp(log_ratio))), curvature, scores)
