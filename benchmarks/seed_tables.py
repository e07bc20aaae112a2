"""Tables 1–3 of the MCEM paper, reproduced, and the choice of the M step's estimator.

Roychowdhury and Parthasarathy, "Adaptive Bayesian Sampling with Monte Carlo EM", §4.1
(Table 1: mean and precision of a 1-D normal) and §4.2 (Table 2: 2-D Bayesian logistic
regression; Table 3: per-iteration times), for HMC, SGHMC, SGNHT and their EM variants.
The paper's numbers are printed beside ours. Its RMSE "against the true parameter"
rewards a chain that is too narrow (a chain stuck at the truth scores 0), so each table
also scores the draws against the exact posterior: the error of the mean in posterior
sds and the ratio of the sds (1 is right). Table 4 compares the two estimators of the
M step (``mass_estimator="position"`` and ``"momentum"``) and the two structures
(``mass_structure="diag"`` and ``"dense"``) on an ill-conditioned Gaussian posterior by the
effective sample size per gradient relative to the fixed-mass twin.

Table 6 is the Riemannian supplement's Tables 1–2 (:mod:`paper_tables.table6`): RMSE as
SGR-NPHMC's frictions ``A = B`` and SG-NHT's ``A`` vary, with the mapping of the
supplement's parameters to ours.

Table 7 is the MCEM paper's Table 4 and Figure 1 (:mod:`paper_tables.table7`): test
perplexity of a Gamma-process Poisson factor analysis topic model on the Lee corpus
against iterations and time, for SGHMC, SGNHT, SG-NPHMC and their EM variants.

Table 5 gives the Nosé–Poincaré and Riemannian rows of Tables 1–3 (SG-NPHMC,
SG-NPHMC-EM, SGR-NPHMC, RHMC, with SGNHT-EM and HMC-EM beside them), every sampler with
its default arguments (``step_size="auto"``, ``n_steps=10``), and tests the paper's claim
that its EM variants reach similar accuracy about an order of magnitude faster than the
Riemannian samplers.

Problems (fixed seeds)
----------------------
Table 1. 5,000 points from N(0, 1); ``τ ~ Gamma(shape 1/2, rate 1/2)``, which is the
paper's W(τ | 1, 1) in one dimension, ``μ | τ ~ N(0, 1/(κ₀τ))`` with ``κ₀ = 1``,
``x_i ~ N(μ, 1/τ)``: the normal–gamma model, whose posterior is normal–gamma in closed
form (``μ`` Student-t, ``τ`` gamma). ``τ`` is sampled on its own scale (no log
transform), as the paper's samplers do; a step to ``τ < 0`` gives a non-finite density,
which HMC rejects and the stochastic samplers treat as a divergence.

Table 2. 2,000 points ``x ~ ½ N([1, −1], I) + ½ N([−1, 1], I)``, labels
``y ~ Bernoulli(σ(xᵀw))`` with ``w = [1, −1]`` and no intercept, prior ``w ~ N(0, 10 I)``
(variance 10). Labels are Bernoulli draws, not ``sign(xᵀw)``: deterministic labels make
the data linearly separable, and the posterior then sits near ``w ≈ [11, −11]`` with
sds ≈ 1.3, which cannot give the paper's RMSEs of 0.01–0.3 against ``[1, −1]``. The exact
posterior is computed by quadrature on a 241 × 241 grid (±9 Laplace sds), and a long
NUTS run (PyMC's own sampler) is printed as a cross-check.

Table 3. The synthetic set of Table 2 and synthetic sets of the shapes of the UCI
Australian credit (690 × 14) and Heart (270 × 13) data (the real data cannot be
downloaded where this benchmark runs; the time per iteration depends on the shapes,
not on the values): standard normal features, Bernoulli labels. Also the 1-D set of
Table 1, for its time column.

Table 4. Bayesian linear regression with known noise sd 1, 1,000 rows, 5 features of
scales 0.25–4 of which two are correlated 0.95, prior N(0, 10 I): a Gaussian posterior
(exact) with posterior sds 0.007–0.12 along its principal axes (condition number
≈ 300). Exact gradients (all rows) and, separately, minibatches of 100.

Samplers
--------
10 leapfrog (integrator) steps per iteration everywhere; minibatches of 100 rows with a
fresh minibatch for every gradient for SGHMC and SGNHT; HMC uses all rows. The paper's
"A" is SGNHT's diffusion ``A``; for SGHMC we read it as the friction ``C`` with noise
estimate ``B̂ = 0``, so that both inject ``N(0, 2Aε)`` per step (SGHMC: A = 10, SGNHT:
A = 1). EM samplers use the package defaults (diagonal mass, ``S`` starting at 100 and
grown by the §3.2 rule, mass learned during tuning only) except where a row says
otherwise; Table 2 starts ``S`` at 300 as the paper does. Burn-in (= tuning) draws are
discarded: 5,000 in Table 1 and 10,000 in Table 2, as in the paper.

Timing
------
``step.step`` (the step method's whole call, as ``pm.sample`` makes it) in blocks of
300 iterations, by this process's CPU time (on a shared machine the wall time also counts
other processes); the blocks of all cases of a data set are interleaved (round-robin, the
order reversed every other round) so that a busy spell hits each case alike. An EM
sampler is timed while it learns (tuning), with ``S`` fixed at 300 as for the paper's
Table 3 (so every block holds exactly one M step), with the defaults, and after tuning
(mass frozen). Table 3b gives EM / twin as the median over rounds of the ratio of the
two cases' blocks and as the ratio of their fastest blocks; Table 3c measures the EM
bookkeeping itself (sample storage, test-function records, M steps) over the first
iterations of a new chain, as a share of the twin's time per iteration.

Code: this script parses the command line; the tables are in ``benchmarks/paper_tables/``,
one module per table (``table1`` … ``table5``) beside the shared ``config``, ``paper``
(the published numbers), ``problems``, ``chains``, ``timing`` and ``output``.

    python benchmarks/seed_tables.py              # everything (see docs/em.md for time)
    python benchmarks/seed_tables.py --quick      # shorter chains, fewer timing rounds
    python benchmarks/seed_tables.py --tables 1 3 # a subset
    python benchmarks/seed_tables.py --quick --tables 5  # the NP and Riemannian rows
    python benchmarks/seed_tables.py --tables 6          # the Riemannian supplement's Tables 1-2
    python benchmarks/seed_tables.py --tables 7 --plot docs/topic_perplexity.png
                                                         # the MCEM paper's Table 4 and Figure 1
"""

from __future__ import annotations

import argparse
import os
import time

from paper_tables.config import Sizes
from paper_tables.output import environment
from paper_tables.table1 import table1, table1_times
from paper_tables.table2 import table2
from paper_tables.table3 import run_timings, table3
from paper_tables.table4 import table4
from paper_tables.table5 import NP_TIMING_SETS, table5
from paper_tables.table6 import table6
from paper_tables.table7 import table7


def parse_args() -> argparse.Namespace:
    """The command line: ``--quick``, ``--tables``, ``--np-timing-sets``, ``--np-timing-only``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter chains, fewer rounds")
    parser.add_argument(
        "--tables",
        nargs="+",
        type=int,
        default=[1, 2, 3, 4, 5, 6, 7],
        choices=[1, 2, 3, 4, 5, 6, 7],
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", help="Table 7: save the MCEM paper's Figure 1 here"
    )
    parser.add_argument(
        "--table7-mass-estimator",
        choices=["position", "momentum"],
        help="Table 7: the EM rows' M-step estimator (default: the package's)",
    )
    parser.add_argument(
        "--np-timing-sets",
        nargs="*",
        default=list(NP_TIMING_SETS),
        choices=list(NP_TIMING_SETS),
        help="Table 5's timing data sets (the Riemannian samplers compile for minutes each)",
    )
    parser.add_argument("--np-timing-only", action="store_true", help="Table 5: timing only")
    return parser.parse_args()


def main() -> None:
    """Print the environment, then the tables asked for (timings first: Tables 1 and 3)."""
    args = parse_args()
    sizes = Sizes.from_args(args.quick)
    start = time.perf_counter()
    print(*environment(), sep="\n")
    print(f"Load average (1 min) at start: {os.getloadavg()[0]:.2f}")
    timing_names = []
    if 1 in args.tables:
        timing_names.append("normal")
    if 3 in args.tables:
        timing_names += ["synthetic", "australian", "heart"]
    times = run_timings(sizes, timing_names) if timing_names else {}
    if 1 in args.tables:
        table1(sizes, table1_times(times))
    if 2 in args.tables:
        table2(sizes)
    if 3 in args.tables:
        table3(sizes, times, timing_names)
    if 4 in args.tables:
        table4(sizes)
    if 5 in args.tables:
        table5(sizes, tuple(args.np_timing_sets), not args.np_timing_only)
    if 6 in args.tables:
        table6(sizes)
    if 7 in args.tables:
        table7(args.quick, args.plot, args.table7_mass_estimator)
    print(f"Load average (1 min) at end: {os.getloadavg()[0]:.2f}")
    print(f"Total time: {(time.perf_counter() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()
