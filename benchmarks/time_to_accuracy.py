"""Time to accuracy: NUTS, ADVI and our stochastic-gradient samplers on one exact posterior.

Problems (float64 throughout, prior sds as written):

* ``--model logistic`` (default): Bayesian logistic regression, ``X ~ N(0, 1)`` of shape
  (N, D) from ``--rows N --cols D`` (default 100,000 × 10), true weights ``w ~ N(0, 0.5²)``,
  ``y ~ Bernoulli(sigmoid(X w))``; prior ``w ~ N(0, 10²)``.
* ``--model hierarchical``: varying-intercept logistic regression, ``--groups G`` groups of
  ``--rows-per-group R`` rows (default 10⁴ × 100), D = 5 shared slopes ``w ~ N(0, 10²)``,
  ``logit = a[group] + X w`` with ``a_g ~ N(mu, sigma)``, ``mu ~ N(0, 5²)``,
  ``sigma ~ HalfNormal(2)``, written NON-CENTRED in every sampler (``z_g ~ N(0, 1)``,
  ``a = mu + sigma z``), or CENTRED with ``--centered`` (``a_g ~ N(mu, sigma)``, better
  when every group has many rows). Accuracy is judged on ``mu, sigma, w`` and all G
  intercepts ``a``. ``--group-sizes heavy`` draws the group sizes from a lognormal law of
  mean R and log-sd 2 (with R = 100, a quarter of the groups get 1-3 rows and the largest
  thousands).

Reference posterior. Logistic: the mode by Newton's method on all rows and the Laplace
covariance (means = mode, sds = sqrt(diag(inv(-Hessian)))), accurate at these sizes;
``--confirm-laplace`` also runs NumPyro's NUTS directly in JAX (4 chains × 5,000 draws after
1,000 warm-up) and prints the worst ``|mean difference| / sd`` and the range of the sd ratio
between the two. Hierarchical: no closed form, so the reference is that long NumPyro NUTS
run itself (``--reference-chains/--reference-draws``, default 4 × 5,000), in the run's
parameterisation or the one ``--reference-form`` names (``mixed``: centred for groups of
10 rows or more, non-centred below; all forms are the same posterior): its Monte Carlo
standard error is ``sd / sqrt(ESS)``, printed in the header as ``max 1/sqrt(ESS)`` (about
0.01 sd for an ESS of 10⁴, a tenth of the 0.1 sd tolerance). It is cached in
``--cache DIR`` (default: a temporary directory, removed at the end) keyed by the problem
and its length, together with the data, so repeated runs reuse both.

Rows. Each configuration runs in a fresh process of this script (``--worker CONFIG``), so
that compilation is counted and peak memory is its own. The parent writes the data once to
.npy files; a worker imports its libraries, reads its resident set size (the baseline),
loads the data fully into memory (``np.load``), builds the model and samples:

1. ``nuts``: PyMC's NUTS, ``pm.sample(draws, tune, chains, nuts_sampler="pymc")`` on the
   full-data model (PyMC 6 picks nutpie when it is installed, so "pymc" is named);
2. ``nutpie``: ``pm.sample(..., nuts_sampler="nutpie")``;
3. ``numpyro-pymc``: ``pm.sample(..., nuts_sampler="numpyro")``; ``numpyro``: a hand-written
   NumPyro model, ``MCMC(NUTS(model), ..., num_chains=chains, chain_method="vectorized")``
   and its ``run`` (JAX arrays of the data as arguments, not constants);
   ``numpyro-sequential`` and ``numpyro-parallel``: the same with
   ``chain_method="sequential"`` or ``"parallel"`` (one JAX device per chain, asked for
   with ``numpyro.set_host_device_count`` before JAX starts). ``--nuts-form``
   writes these two in another parameterisation than ours (the fastest NUTS a user could
   run on the same posterior);
4. ``advi``: ``pm.fit(--advi-iterations, method="advi")`` on ``pm.Minibatch(X, y,
   batch_size=1000)`` with ``total_size=N``, then ``approx.sample(chains × draws)``;
   judged on the final approximation only;
5. ``ours``: every sampler of ``--ours`` (default SGLD, SGHMC, SGNHT, SGHMCEM, SGNHTEM) with
   default arguments, ``cls(gradient=G)`` for every G of ``--gradients`` (default
   minibatch, control_variates), on the minibatched model, in ``pm.sample(draws, tune,
   chains, cores=--cores, step=step)``; by default PyMC's own ``cores`` (``min(4, logical
   cores)``: the chains run side by side in worker processes), as a user gets it.

``pm.sample`` runs with ``progressbar=False, compute_convergence_checks=False`` and
``random_seed`` fixed per configuration (``--seed`` and the row's name).

Columns. *wall s*: in the worker, from model construction to the end of sampling
(compilation included). *setup s*: the part before the first draw, where it is known:
PyMC's step methods (NUTS, ours) the time of the first draw (a ``pm.sample`` callback);
nutpie the total less its ``sampling_time``; NumPyro the total less its sampler call plus
the JAX compilation inside it (``jax.monitoring`` events); ADVI the time of the first
iteration (a ``pm.fit`` callback). For ours the mode-finding time ``step.mode_seconds`` of
control variates is shown beside it where the package reports it. *time to acc. s*: the
first prefix of the kept draws (the first k draws of every chain, pooled; k = 50, 100, ...,
``--check-every``) at which every mean is within ``--mean-tol`` (0.1) reference sd of the
reference mean and every sd within ``--sd-tol`` (10 %) of the reference sd. Its time is
ESTIMATED as setup + (tune + k) / (tune + draws) × (wall − setup): every draw is assumed to
cost the same and the chains to advance together (true of parallel or vectorised chains;
with ``--cores 1`` the chains of ours run one after the other, so this is the time the
pooled prefix would take with chains interleaved on the same core). ADVI: the wall time if the
final approximation is accurate. *|Δmean|/sd* and *sd ratio*: of all kept draws.
*min ESS*: the smallest bulk ESS (``az.ess``) over the parameters, and whose;
*ESS/s* = min ESS / wall.
*rows touched*: data rows read by gradients: NUTS the sum of its tree sizes × N (where the
warm-up's tree sizes are not reported, warm-up × mean tree size of the draws, marked
"(warm-up est.)"); ours (tune + draws) × chains × n_steps × batch × (2 for control variates
or SVRG) + ``step.rows_touched_by_setup``; ADVI iterations × batch. *peak MB*: the largest
resident memory of the worker and its child processes (PSS summed when there are
children, sampled every 0.1 s; the worker's own peak from the kernel's high-water mark)
less the baseline; the data's size is printed beside it.

NUTS at large N. A NUTS row whose rough projected run time (one numpy gradient pass × a
guessed tree size × iterations × chains) exceeds a tenth of ``--nuts-budget-s`` (3,600)
first runs only ``--nuts-short`` (100) warm-up and 100 kept draws per chain (fewer when
even that would take half the budget). Its full cost is extrapolated: seconds per
leapfrog step of the short run × (its warm-up steps + the remaining warm-up and all draws
at the short run's mean tree size), plus its setup. With vectorised chains (NumPyro's
default) the chains take each leapfrog step together and an iteration costs the largest
of their trees, so the steps counted are the per-iteration maxima over the chains; and
NumPyro's short runs warm up apart (``warmup()``, then ``run()``) so that the warm-up's
own tree sizes, the largest of the run, are counted rather than estimated from the draws'
(the second compile that costs is not counted). If that fits the budget the full run
follows; otherwise the row shows the extrapolation, marked "~": ESS scaled with the number
of draws, time to accuracy from the prefix found in the short run (or "> ~T", the end of
the short run's draws after the full warm-up, when none was), accuracy columns and peak
memory of the short run.

Output: a Markdown table on stdout (and ``--out FILE.md``), raw results as JSON (``--json
FILE``). A worker that fails or passes ``--worker-timeout-s`` gives a row with its error.

Code: this script parses the command line (and runs a worker with ``--worker``); the rest
is in ``benchmarks/tta/``: ``problems`` (data, models), ``reference``, ``runners`` (NUTS,
nutpie, NumPyro, ADVI, ours), ``worker``, ``accuracy``, ``clocks``, ``driver`` (the
parent's run) and ``report``.

    python benchmarks/time_to_accuracy.py --rows 100000 --cols 10 --confirm-laplace
    python benchmarks/time_to_accuracy.py --rows 1000000 --cols 20 --out t.md --json t.json
    python benchmarks/time_to_accuracy.py --model hierarchical --cache ~/.cache/tta
    python benchmarks/time_to_accuracy.py --rows 20000 --draws 300 --tune 300 \\
        --only nuts,ours --ours SGHMC --gradients minibatch     # a quick look
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from tta.config import GRADIENTS, HIER_COLS, KINDS, OURS
from tta.driver import run
from tta.problems import group_sizes
from tta.worker import worker


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0], formatter_class=argparse.RawTextHelpFormatter
    )
    add = parser.add_argument
    add("--model", choices=("logistic", "hierarchical"), default="logistic")
    add("--rows", dest="n_rows", type=int, default=100_000, help="logistic: rows N")
    add("--cols", dest="n_cols", type=int, default=None, help="features D (10; hierarchical 5)")
    add("--groups", type=int, default=10_000, help="hierarchical: groups G")
    add("--rows-per-group", type=int, default=100, help="hierarchical: rows per group R")
    add(
        "--centered",
        action="store_true",
        help="hierarchical: a_g ~ N(mu, sigma) sampled directly (default: non-centred)",
    )
    add(
        "--group-sizes",
        choices=("equal", "heavy"),
        default="equal",
        help="hierarchical: every group R rows, or lognormal sizes of mean R (log-sd 2)",
    )
    add(
        "--reference-form",
        choices=("same", "centred", "non-centred", "mixed"),
        default="same",
        help="hierarchical: the NUTS reference's parameterisation (mixed: centred where a "
        "group has 10 rows or more)",
    )
    add(
        "--nuts-form",
        choices=("same", "centred", "non-centred", "mixed"),
        default="same",
        help="hierarchical: the parameterisation of the NumPyro rows (as --reference-form)",
    )
    add("--chains", type=int, default=2)
    add(
        "--cores",
        type=int,
        default=None,
        help="ours: pm.sample's cores (default: PyMC's, min(4, logical cores))",
    )
    add("--tune", type=int, default=1000)
    add("--draws", type=int, default=2000, help="kept draws per chain (default 2,000)")
    add("--nuts-tune", type=int, default=1000, help="NUTS warm-up per chain")
    add("--nuts-draws", type=int, default=1000, help="NUTS kept draws per chain")
    add("--batch-size", type=int, default=1000)
    add("--advi-iterations", type=int, default=30_000)
    add("--only", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    add("--ours", default=",".join(OURS), help="our samplers (class names)")
    add("--gradients", default="minibatch,control_variates", help=f"of {','.join(GRADIENTS)}")
    add("--nuts-budget-s", type=float, default=3600.0)
    add("--nuts-short", type=int, default=100, help="warm-up = draws of a short NUTS run")
    add("--worker-timeout-s", type=float, default=3600.0)
    add("--reference-timeout-s", type=float, default=4 * 3600.0)
    add("--reference-chains", type=int, default=4)
    add("--reference-draws", type=int, default=5000)
    add("--reference-tune", type=int, default=1000)
    add("--confirm-laplace", action="store_true")
    add("--mean-tol", type=float, default=0.1, help="in reference sds")
    add("--sd-tol", type=float, default=0.1, help="relative")
    add("--check-every", type=int, default=50, help="draws per chain between checks")
    add("--cache", type=Path, default=None, help="data and reference cache (default: temp)")
    add("--seed", type=int, default=1)
    add("--data-seed", type=int, default=20240601)
    add("--out", type=Path, default=None, metavar="FILE.md")
    add("--json", type=Path, default=None, metavar="FILE")
    return parser


def parse_args() -> argparse.Namespace:
    """Parse and complete the arguments: the model's columns and rows, names checked."""
    parser = build_parser()
    args = parser.parse_args()
    hier = args.model == "hierarchical"
    if args.n_cols is None:
        args.n_cols = HIER_COLS if hier else 10
    if hier:
        sizes = group_sizes(args.groups, args.rows_per_group, args.group_sizes, args.data_seed)
        args.n_rows = int(sizes.sum())
    else:
        args.groups = 0
    unknown = set(args.only.split(",")) - set(KINDS)
    unknown |= set(args.gradients.split(",")) - set(GRADIENTS)
    if unknown:
        parser.error(f"unknown names: {sorted(unknown)}")
    return args


def main() -> None:
    """A worker (``--worker CONFIG``, started by the parent) or the whole benchmark."""
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return
    args = parse_args()
    temporary = args.cache is None
    cache = Path(tempfile.mkdtemp(prefix="tta-")) if temporary else args.cache.expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="tta-work-"))
    try:
        run(args, cache, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if temporary:
            shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
