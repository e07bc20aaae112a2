"""Peak memory of one SGHMC chain in ``pm.sample`` on a large minibatched data set.

Logistic regression on 10⁶ × 20 float64 features (160 MB, plus 8 MB of labels) through
``pm.Minibatch``. The question is whether sampling copies the data: a copy per gradient
or per trajectory would show up as a multiple of the data's size.

Method. Each measurement runs in a fresh process, which

1. builds the data in place (no temporaries the size of the data) and the model, and
   reads its resident set size (RSS): the baseline, data and model included;
2. resets the kernel's peak-RSS counter to the current RSS (``/proc/self/clear_refs``,
   Linux ≥ 4.0; elsewhere the peak so far, ``ru_maxrss``, stands in, which is close to
   the baseline since step 1 allocates nothing large besides the data);
3. creates the step method and runs ``pm.sample`` (one chain) a first time: step-method
   construction, Numba compilation, PyMC's set-up and the draws; reads the peak RSS;
4. resets the peak again and runs ``pm.sample`` a second time with the same step method
   (compiled already): the peak over that run is sampling alone.

Peak − baseline is the memory attributable to sampling. RSS counts everything (NumPy,
Numba's own allocations inside the compiled trajectory, the compilers), which
``tracemalloc`` would miss. The first call's increase is mostly the compilers' and does
not depend on the data, so the same process on a 1,000-row data set is the control: the
difference between the two increases is what grows with the data. A warm-up process
runs first so that both find Numba's on-disk cache in the same state.

    python benchmarks/memory.py            # 10⁶ × 20, 2,000 draws
    python benchmarks/memory.py --quick    # 500 draws

Long-run mode (``--long-run N``, default 10⁶ iterations): does a long run keep flat
memory? On the quickstart's logistic regression (10⁵ × 10, batch 100), in a fresh
process, the RSS is read at 10 %, 50 % and 100 % of N iterations of

1. ``step.step`` in a loop, no trace: everything the step method holds;
2. ``pm.sample(tune=N, draws=1, discard_tuned_samples=True)``, read from its per-draw
   callback: what a user gets. PyMC's in-memory trace keeps every tuning draw (and its
   statistics) until the run ends and only then discards it, so this run grows by that
   trace; the script prints the growth beside the bytes such a trace holds.

    python benchmarks/memory.py --long-run            # 10⁶ iterations, ~4 minutes
    python benchmarks/memory.py --long-run 200000     # shorter
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
import warnings

import numpy as np

N_FEATURES = 20
BATCH_SIZE = 100
SEED = 3


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB, from /proc, or ru_maxrss twice."""
    try:
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) / 1024  # kB
        return fields["VmRSS"], fields["VmHWM"]
    except (OSError, KeyError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
        return peak, peak


def reset_peak() -> bool:
    """Reset the peak-RSS counter to the current RSS, where the kernel allows it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def make_data(n_rows: int, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels, generated in place and in chunks: no data-sized temporaries."""
    rng = np.random.default_rng(SEED)
    X = np.empty((n_rows, n_features))
    rng.standard_normal(out=X)
    beta = rng.standard_normal(n_features) / np.sqrt(n_features)
    y = np.empty(n_rows)
    for start in range(0, n_rows, 65_536):
        rows = slice(start, start + 65_536)
        p = 1.0 / (1.0 + np.exp(-X[rows] @ beta))
        y[rows] = rng.random(p.shape[0]) < p
    return X, y


def measure(n_rows: int, draws: int) -> dict:
    """One measurement, in this process (see the module docstring)."""
    import pymc as pm

    import pymc_sgmcmc as pmsg

    X, y = make_data(n_rows, N_FEATURES)
    with pm.Model() as model:
        X_batch, y_batch = pm.Minibatch(X, y, batch_size=BATCH_SIZE)
        beta = pm.Normal("beta", 0.0, 1.0, shape=N_FEATURES)
        pm.Bernoulli("y", logit_p=X_batch @ beta, observed=y_batch, total_size=n_rows)

    exact = True

    def sample(step) -> float:
        """Run one chain; return its peak RSS increase over the RSS before it, in MiB."""
        nonlocal exact
        gc.collect()
        if reset_peak():
            before = rss_mb()[0]
        else:
            exact, before = False, rss_mb()[1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # return_inferencedata=False is deprecated
            pm.sample(
                draws=draws,
                tune=0,
                chains=1,
                cores=1,
                step=step,
                model=model,
                random_seed=SEED,
                progressbar=False,
                quiet=True,
                compute_convergence_checks=False,
                return_inferencedata=False,
            )
        return rss_mb()[1] - before

    gc.collect()
    baseline = rss_mb()[0]
    step = pmsg.SGHMC(step_size=1e-4, n_steps=10, model=model)
    start = time.perf_counter()
    first = sample(step)  # compiles the trajectory on its first draw
    seconds = time.perf_counter() - start
    second = sample(step)  # the same step method, compiled: sampling alone
    return {
        "rows": n_rows,
        "data_mb": (X.nbytes + y.nbytes) / 2**20,
        "baseline_mb": baseline,
        "first_mb": first,
        "second_mb": second,
        "first_seconds": seconds,
        "exact_reset": exact,
    }


def long_run(iterations: int) -> dict:
    """RSS along a long run of the step method alone and of pm.sample (module docstring)."""
    import pymc as pm

    import pymc_sgmcmc as pmsg

    rng = np.random.default_rng(SEED)
    X = rng.standard_normal((100_000, 10))
    y = (rng.random(100_000) < 1.0 / (1.0 + np.exp(-X @ np.linspace(-1, 1, 10)))) * 1.0
    with pm.Model() as model:
        X_batch, y_batch = pm.Minibatch(X, y, batch_size=BATCH_SIZE)
        w = pm.Normal("w", 0.0, 10.0, shape=10)
        pm.Bernoulli("y", logit_p=X_batch @ w, observed=y_batch, total_size=len(y))
    step = pmsg.SGHMC(step_size=1e-4, friction=10.0, n_steps=10, model=model)
    marks = sorted({iterations // 10, iterations // 2, iterations})
    step.setup_chain(np.random.default_rng(SEED), tune=iterations, draws=0)
    point = model.initial_point()
    for _ in range(1000):  # compile and warm up
        point, _ = step.step(point)
    loop, done, start = {}, 0, time.perf_counter()
    for mark in marks:
        for _ in range(mark - done):
            point, _ = step.step(point)
        done = mark
        gc.collect()
        loop[mark] = rss_mb()[0]
    loop_seconds = time.perf_counter() - start
    sampled: dict[int, float] = {}
    count = [0]

    def callback(trace, draw) -> None:
        count[0] += 1
        if count[0] in marks:
            sampled[count[0]] = rss_mb()[0]

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm.sample(
            tune=iterations - 1,
            draws=1,
            chains=1,
            cores=1,
            step=step,
            model=model,
            random_seed=SEED,
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=True,
            callback=callback,
        )
    stats_per_draw = len(step.stats_dtypes_shapes)
    return {
        "iterations": iterations,
        "loop": loop,
        "loop_seconds": loop_seconds,
        "sample": sampled,
        "sample_seconds": time.perf_counter() - start,
        "trace_bytes_per_draw": 8 * (10 + stats_per_draw),
    }


def report_long_run(r: dict) -> None:
    """Print the long-run table."""

    def growth(marks: dict) -> tuple[float, float, float]:
        keys = sorted(int(k) for k in marks)
        first, last = marks[str(keys[0])], marks[str(keys[-1])]
        return first, last, 100 * (last - first) / first

    n = r["iterations"]
    print(
        f"\nResident memory along a long run (SGHMC, logistic regression 100,000 × 10, "
        f"batch {BATCH_SIZE}, L=10), MiB, read at 10 %, 50 % and 100 % of {n:,} iterations:"
    )
    for label, key in (
        ("step.step loop, no trace", "loop"),
        ("pm.sample, tune discarded", "sample"),
    ):
        values = "  ".join(
            f"{int(k):>9,}: {v:7.1f}" for k, v in sorted(r[key].items(), key=lambda kv: int(kv[0]))
        )
        first, last, pct = growth(r[key])
        print(f"  {label:<28} {values}   growth {last - first:+.1f} MiB ({pct:+.1f} %)")
    expected = r["trace_bytes_per_draw"] * 0.9 * n / 2**20
    print(
        f"PyMC's in-memory trace holds {r['trace_bytes_per_draw']} bytes per tuning draw "
        f"(10 values, {r['trace_bytes_per_draw'] // 8 - 10} statistics) until the run "
        f"ends: {expected:.1f} MiB over the last 90 % of the run. Times: loop "
        f"{r['loop_seconds']:.0f} s, pm.sample {r['sample_seconds']:.0f} s."
    )


def in_subprocess(n_rows: int, draws: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(n_rows), "--draws", str(draws)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--draws", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="500 draws instead of 2,000")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--long-run",
        type=int,
        nargs="?",
        const=1_000_000,
        default=None,
        help="RSS along a long run of N iterations (default 10⁶) instead",
    )
    parser.add_argument("--long-run-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    draws = args.draws or (500 if args.quick else 2000)
    if args.long_run_child is not None:
        print(json.dumps(long_run(args.long_run_child)))
        return
    if args.long_run is not None:
        out = subprocess.run(
            [sys.executable, __file__, "--long-run-child", str(args.long_run)],
            check=True,
            capture_output=True,
            text=True,
        )
        report_long_run(json.loads(out.stdout.strip().splitlines()[-1]))
        return
    if args.child is not None:
        print(json.dumps(measure(args.child, draws)))
        return

    control_rows = 1_000
    in_subprocess(control_rows, draws)  # warm-up: fills Numba's cache, result unused
    big = in_subprocess(args.rows, draws)
    control = in_subprocess(control_rows, draws)

    print(
        f"\nPeak memory of pm.sample (1 chain, SGHMC, {draws} draws, batch {BATCH_SIZE}, "
        "L=10), each data set in a fresh process; MiB = 2^20 bytes. Increase = peak RSS "
        "during the call − RSS before it."
    )
    header = (
        "data set",
        "data MiB",
        "RSS before",
        "1st call: increase",
        "(÷ data)",
        "2nd call: increase",
        "(÷ data)",
    )
    rows = [header]
    for r in (big, control):
        # Ratios to the data's size mean nothing for the tiny control.
        share = r is big
        rows.append(
            (
                f"{r['rows']:,} × {N_FEATURES}",
                f"{r['data_mb']:.1f}",
                f"{r['baseline_mb']:.1f}",
                f"{r['first_mb']:.1f}",
                f"{r['first_mb'] / r['data_mb']:.2f}×" if share else "",
                f"{r['second_mb']:.1f}",
                f"{r['second_mb'] / r['data_mb']:.2f}×" if share else "",
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(header))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    worst = max(big["first_mb"], big["second_mb"])
    verdict = "meets" if worst <= 3 * big["data_mb"] else "misses"
    print(
        f"1st call: step-method construction, compilation ({big['first_seconds']:.1f} s "
        "with Numba's cache warm) and the draws; 2nd call: the same step method again, "
        f"sampling alone. Sampling adds at most {worst:.1f} MiB to {big['data_mb']:.1f} MiB "
        f"of data: {worst / big['data_mb']:.2f}× the data (target ≤ 3×: {verdict}). "
        f"Against the {control_rows:,}-row control, the 1st call's increase changes by "
        f"{big['first_mb'] - control['first_mb']:+.1f} MiB and the 2nd call's by "
        f"{big['second_mb'] - control['second_mb']:+.1f} MiB."
    )
    if not big["exact_reset"]:
        print("(The peak-RSS counter could not be reset: baselines are the peak so far.)")


if __name__ == "__main__":
    main()
