"""Peak memory of a control-variate run on 10⁶ × 20 rows: at most 2.5 times the data's size.

A control-variate run reads all rows several times before its first draw: the mode
finder's full-data passes, the Laplace curvature, the anchor's gradient. Each pass
streams row slices (views) through the model, so none of them may copy the data. The
run happens in a fresh process (its peak resident memory is its own), which

1. imports everything and reads its resident set size (RSS): the baseline;
2. builds the data in place, in slices (no temporaries the size of the data);
3. builds the model on ``pm.Minibatch`` and runs ``SGHMC()`` with default arguments,
   i.e. ``find_mode`` with the Laplace covariance, control variates anchored at the mode,
   compilation and ``pm.sample`` (one chain);
4. reads its peak RSS (the kernel's high-water mark).

Peak − baseline counts the data itself once, everything the run allocates, and a part
that does not depend on the data: compiled code and the compilers, about 165 MiB when
the compiled functions come from the on-disk cache and 250 MiB when they are compiled
afresh (measured). The same run on 10⁴ rows measures that part, so the test bounds what
grows with the data: the data itself, the one shuffled copy that the trajectory reads its
minibatches from (``pymc_sgmcmc.sampling.row_windows``; the run on 10⁴ rows, 1.6 MB, has
one too), and at most half a data-sized array more. Another copy of the data anywhere
breaks it. (Measured: the run on 10⁶ rows grew by 1.1x the extra data before the
shuffled copy, 2.2x with it.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads VmRSS/VmHWM from /proc (Linux)"
)

PROBE = textwrap.dedent(
    """
    import json, sys

    import numpy as np
    import pymc as pm

    import pymc_sgmcmc as pmsg

    ROWS, COLS = int(sys.argv[1]), 20
    SLICE = min(ROWS, 100_000)


    def memory():
        fields = {}
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields["VmRSS"], fields["VmHWM"]


    baseline, _ = memory()
    rng = np.random.default_rng(7)
    x = np.empty((ROWS, COLS))
    y = np.empty(ROWS)
    weights = rng.normal(0.0, 0.5, COLS)
    for start in range(0, ROWS, SLICE):
        rows = slice(start, start + SLICE)
        x[rows] = rng.standard_normal((SLICE, COLS))
        y[rows] = rng.random(SLICE) < 1 / (1 + np.exp(-x[rows] @ weights))
    with pm.Model():
        x_batch, y_batch = pm.Minibatch(x, y, batch_size=1000)
        w = pm.Normal("w", 0.0, 10.0, shape=COLS)
        pm.Bernoulli("y", logit_p=x_batch @ w, observed=y_batch, total_size=ROWS)
        step = pmsg.SGHMC(mode_kwargs={"progressbar": False, "random_seed": 1})
        idata = pm.sample(
            draws=200,
            tune=200,
            chains=1,
            step=step,
            random_seed=2,
            progressbar=False,
            compute_convergence_checks=False,
        )
    _, peak = memory()
    print(json.dumps({
        "baseline": baseline,
        "peak": peak,
        "data": x.nbytes + y.nbytes,
        "gradient": step.gradient,
        "finite": bool(np.isfinite(idata.posterior["w"].values).all()),
    }))
    """
)


def run_probe(rows: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(rows)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["gradient"] == "control_variates"
    assert result["finite"]
    result["increase"] = result["peak"] - result["baseline"]
    return result


def test_control_variate_run_peak_memory_is_within_the_data_its_copy_and_a_half():
    control, large = run_probe(10_000), run_probe(1_000_000)
    grows = large["increase"] - control["increase"]
    data = large["data"] - control["data"]
    mib = 2**20
    print(
        f"\npeak RSS increase: {large['increase'] / mib:.1f} MiB with "
        f"{large['data'] / mib:.1f} MiB of data, {control['increase'] / mib:.1f} MiB with "
        f"{control['data'] / mib:.1f} MiB; grows by {grows / mib:.1f} MiB for "
        f"{data / mib:.1f} MiB more data: {grows / data:.2f}x"
    )
    assert grows <= 2.5 * data, (
        f"a control-variate run on 10^6 x 20 rows peaked {grows / mib:.0f} MiB higher than "
        f"on 10^4 rows, {grows / data:.2f}x the extra data's {data / mib:.0f} MiB (limit "
        "2.5x: the data itself, its shuffled copy and at most half a data-sized array "
        "more): something copies the data"
    )
