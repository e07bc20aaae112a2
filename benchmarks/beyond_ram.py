"""A logistic regression whose data on disk exceed the memory the sampler may use.

The data (``--rows`` × ``--cols`` float32 features and a 0/1 label, rows in random order)
are written once to an uncompressed Zarr store (``--store``; kept for the next run). The
sampling runs in a child process whose memory is capped at ``--memory-limit`` by a Linux
memory cgroup where one can be made (root; cgroup v1 or v2), so that neither the
process nor the page cache it fills may hold the data: every full-data pass reads them
from disk again. Where no cgroup can be made the cap is not enforced and the table
says so; the peak resident memory (``VmHWM``) is reported either way. The page cache is
dropped before the child starts where the kernel allows it.

The child builds the model on ``pmsg.Minibatch`` of the Zarr arrays (``batch_size``
1,000, prior ``N(0, 10²)``), runs ``pmsg.SGHMC()`` with default arguments (control
variates anchored at the mode its search finds over streamed full-data passes) for
2 × (1,000 + 1,000) draws, and compares the draws with the Laplace approximation at that
mode: its covariance is the inverse of the exact Hessian (``Xᵀ diag(p(1 − p)) X`` plus
the prior's precision), accumulated in one more streamed pass over the store. With
10⁸ rows the posterior is Gaussian to within ``O(1/√N)``, so the Laplace approximation is
its reference: means within 0.1 sd and sds within 10 % are the criterion.

    bash run.sh python benchmarks/beyond_ram.py --rows 125000000 --memory-limit 4GiB

writes a 10 GB store and samples it under 4 GiB. ``--figure PATH`` draws the first
coefficients' marginals against the Laplace densities.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CHUNK_ROWS = 100_000
WRITE_ROWS = 1_000_000
BATCH_SIZE = 1_000
PRIOR_SD = 10.0


def parse_bytes(text: str) -> int:
    """``4GiB``, ``512MiB``, ``4e9``: a number of bytes."""
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 1e3, "mb": 1e6, "gb": 1e9}
    lowered = text.strip().lower()
    for unit, factor in units.items():
        if lowered.endswith(unit):
            return int(float(lowered[: -len(unit)]) * factor)
    return int(float(lowered))


def true_weights(cols: int) -> np.ndarray:
    """The coefficients the labels are drawn from."""
    return np.random.default_rng(12345).normal(0.0, 0.5, cols)


def write_store(path: Path, rows: int, cols: int) -> float:
    """The data, written block by block (no array the size of the data in memory)."""
    import zarr

    started = time.perf_counter()
    group = zarr.open_group(str(path), mode="w")
    X = group.create_array(
        "X", shape=(rows, cols), chunks=(CHUNK_ROWS, cols), dtype="f4", compressors=None
    )
    y = group.create_array("y", shape=(rows,), chunks=(CHUNK_ROWS,), dtype="i1", compressors=None)
    w = true_weights(cols)
    rng = np.random.default_rng(0)
    for start in range(0, rows, WRITE_ROWS):
        stop = min(start + WRITE_ROWS, rows)
        block = rng.standard_normal((stop - start, cols), dtype=np.float32)
        X[start:stop] = block
        y[start:stop] = rng.random(stop - start) < 1.0 / (1.0 + np.exp(-(block @ w)))
        print(f"written {stop:,} of {rows:,} rows", file=sys.stderr, end="\r")
    group.attrs["complete"] = True
    print(file=sys.stderr)
    return time.perf_counter() - started


def store_ready(path: Path, rows: int, cols: int) -> bool:
    """Whether ``path`` holds a complete store of this shape."""
    import zarr

    try:
        group = zarr.open_group(str(path), mode="r")
        return bool(group.attrs.get("complete")) and group["X"].shape == (rows, cols)
    except Exception:  # noqa: BLE001 - absent or partial: written again
        return False


def memory_cgroup(limit: int) -> str | None:
    """A memory cgroup capped at ``limit`` bytes (its ``cgroup.procs`` path), or ``None``."""
    name = f"pmsg-beyond-ram-{os.getpid()}"
    unified = Path("/sys/fs/cgroup/cgroup.controllers")
    try:
        if unified.exists():  # cgroup v2
            own = Path(f"/sys/fs/cgroup{_own_cgroup('')}")
            group = own / name
            group.mkdir()
            (group / "memory.max").write_text(str(limit))
            (group / "memory.swap.max").write_text("0")
        else:  # cgroup v1
            own = Path(f"/sys/fs/cgroup/memory{_own_cgroup('memory')}")
            group = own / name
            group.mkdir()
            (group / "memory.limit_in_bytes").write_text(str(limit))
        return str(group / "cgroup.procs")
    except OSError:
        return None


def _own_cgroup(controller: str) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller and controller in controllers.split(",")) or (
            not controller and controllers == ""
        ):
            return path
    raise OSError("no cgroup found")


def drop_page_cache() -> bool:
    """Empty the kernel's page cache (root only), so the first pass reads the disk."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def peak_memory() -> int:
    """The process's peak resident set (``VmHWM``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return -1


def laplace_covariance(group, mode: np.ndarray) -> tuple[np.ndarray, float]:
    """The inverse Hessian of the negative log posterior at ``mode``, in one streamed pass."""
    started = time.perf_counter()
    X, y = group["X"], group["y"]
    cols = X.shape[1]
    hessian = np.eye(cols) / PRIOR_SD**2
    for start in range(0, X.shape[0], 10 * CHUNK_ROWS):
        block = np.asarray(X[start : start + 10 * CHUNK_ROWS], dtype=np.float64)
        p = 1.0 / (1.0 + np.exp(-(block @ mode)))
        hessian += (block * (p * (1.0 - p))[:, None]).T @ block
    del y
    return np.linalg.inv(hessian), time.perf_counter() - started


def child(args: argparse.Namespace) -> None:
    """Sample the store and compare with the Laplace reference; print one JSON line."""
    import arviz as az
    import pymc as pm
    import zarr

    import pymc_sgmcmc as pmsg

    group = zarr.open_group(str(args.store), mode="r")
    rows, cols = group["X"].shape
    started = time.perf_counter()
    with pm.Model() as model:
        X_batch, y_batch = pmsg.Minibatch(group["X"], group["y"], batch_size=BATCH_SIZE)
        w = pm.Normal("w", 0.0, PRIOR_SD, shape=cols)
        pm.Bernoulli("y", logit_p=X_batch @ w, observed=y_batch, total_size=rows)
        step = pmsg.SGHMC(mode_kwargs={"random_seed": 1})
    setup = time.perf_counter() - started
    with model:
        idata = pm.sample(
            draws=args.draws, tune=args.tune, chains=2, cores=1, step=step, random_seed=2,
            progressbar=False, compute_convergence_checks=False,
        )  # fmt: skip
    total = time.perf_counter() - started
    draws = idata.posterior["w"].values.reshape(-1, cols)
    mode = np.asarray(step.mode.position, dtype=np.float64)
    covariance, reference_seconds = laplace_covariance(group, mode)
    sd = np.sqrt(np.diag(covariance))
    ess = az.ess(idata, var_names=["w"])["w"].values
    buffer = step._flat.groups[0].buffer
    print(
        json.dumps(
            {
                "rows": rows,
                "cols": cols,
                "data_bytes": rows * (cols * 4 + 1),
                "setup_s": setup,
                "mode_s": step.mode_seconds,
                "sampling_s": total - setup,
                "total_s": total,
                "reference_s": reference_seconds,
                "setup_passes": step.rows_touched_by_setup / rows,
                "peak_rss": peak_memory(),
                "buffer_slots": buffer.slots,
                "buffer_bytes": buffer.buffer_bytes,
                "chunks_read": buffer.counts.chunks_read,
                "seconds_waiting": buffer.counts.seconds_waiting,
                "mean_error_sd": ((draws.mean(0) - mode) / sd).tolist(),
                "sd_ratio": (draws.std(0) / sd).tolist(),
                "ess": ess.tolist(),
                "mode": mode.tolist(),
                "laplace_sd": sd.tolist(),
                "draws": draws[:, : args.figure_cols].tolist() if args.figure else None,
            }
        )  # fmt: skip
    )


def figure(result: dict, path: str) -> None:
    """The first coefficients' draws against their Laplace densities."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    draws = np.asarray(result["draws"])
    k = draws.shape[1]
    fig, axes = plt.subplots(1, k, figsize=(3.2 * k, 2.6), constrained_layout=True)
    for j, ax in enumerate(np.atleast_1d(axes)):
        mode, sd = result["mode"][j], result["laplace_sd"][j]
        ax.hist((draws[:, j] - mode) / sd, bins=40, density=True, alpha=0.6, label="SGHMC")
        grid = np.linspace(-4, 4, 200)
        ax.plot(grid, np.exp(-(grid**2) / 2) / np.sqrt(2 * np.pi), "k", label="Laplace")
        ax.set_xlabel(f"(w[{j}] − mode) / Laplace sd")
        ax.set_yticks([])
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.suptitle(
        f"{result['rows']:,} rows on disk ({result['data_bytes'] / 1e9:.1f} GB), "
        f"sampled in {result['peak_rss'] / 2**30:.2f} GiB of memory"
    )
    fig.savefig(path, dpi=110)


def main() -> None:
    """Write the store if needed, sample it in a capped child process, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=125_000_000)
    parser.add_argument("--cols", type=int, default=20)
    parser.add_argument("--store", type=Path, default=Path("beyond_ram_data.zarr"))
    parser.add_argument("--memory-limit", type=parse_bytes, default=parse_bytes("4GiB"))
    parser.add_argument("--draws", type=int, default=1_000)
    parser.add_argument("--tune", type=int, default=1_000)
    parser.add_argument("--figure", default=None, help="a PNG of the first marginals")
    parser.add_argument("--figure-cols", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    import zarr

    print(f"# Beyond RAM: {' '.join(sys.argv)}")
    print(f"cores {os.cpu_count()}, numpy {np.__version__}, zarr {zarr.__version__}")
    if not store_ready(args.store, args.rows, args.cols):
        seconds = write_store(args.store, args.rows, args.cols)
        print(f"wrote the store in {seconds:.0f} s")
    procs = memory_cgroup(args.memory_limit)
    dropped = drop_page_cache()
    command = [sys.executable, __file__, "--child", *sys.argv[1:]]

    def enter_cgroup() -> None:
        if procs is not None:
            Path(procs).write_text(str(os.getpid()))

    started = time.perf_counter()
    done = subprocess.run(command, preexec_fn=enter_cgroup, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if procs is not None:
        Path(procs).parent.rmdir()
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-5_000:])
        raise SystemExit(f"the child failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    cap = f"{args.memory_limit / 2**30:.1f} GiB" + ("" if procs else " (NOT enforced)")
    errors, ratios = np.abs(result["mean_error_sd"]), np.asarray(result["sd_ratio"])
    print(f"page cache dropped first: {'yes' if dropped else 'no'}; memory cap: {cap}\n")
    print("| rows × cols | data on disk | peak RSS | set-up s (mode s) | set-up passes "
          "| sampling s | total s | worst mean error (sd) | sd ratios | min ESS |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {result['rows']:,} × {result['cols']} | {result['data_bytes'] / 1e9:.1f} GB "
        f"| {result['peak_rss'] / 2**30:.2f} GiB | {result['setup_s']:.0f} "
        f"({result['mode_s']:.0f}) | {result['setup_passes']:.1f} "
        f"| {result['sampling_s']:.0f} | {result['total_s']:.0f} | {errors.max():.3f} "
        f"| {ratios.min():.3f}–{ratios.max():.3f} | {min(result['ess']):.0f} |"
    )
    print(
        f"\nchild wall {wall:.0f} s; Laplace reference pass {result['reference_s']:.0f} s; "
        f"buffer: {result['buffer_slots']} slots in {result['buffer_bytes'] / 2**20:.0f} MiB, "
        f"{result['chunks_read']} chunks read, {result['seconds_waiting']:.1f} s waiting"
    )
    ok = errors.max() < 0.1 and np.all(np.abs(ratios - 1) < 0.1)
    print(f"criterion (means within 0.1 sd, sds within 10 %): {'met' if ok else 'NOT met'}")
    if args.figure:
        figure(result, args.figure)


if __name__ == "__main__":
    main()
