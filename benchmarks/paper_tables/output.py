"""Printing: the environment, Markdown tables, numbers and progress lines."""

from __future__ import annotations

import os
import platform
import time

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import scipy

import pymc_sgmcmc as pmsg


def cpu_name() -> str:
    """The processor's model name (Linux's ``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def environment() -> list[str]:
    """Two lines: the machine, and the versions of the libraries."""
    cpu = cpu_name()
    return [
        f"CPU: {cpu}, {os.cpu_count()} logical cores; {platform.system()} "
        f"{platform.machine()}; Python {platform.python_version()}",
        f"NumPy {np.__version__}, SciPy {scipy.__version__}, PyMC {pm.__version__}, "
        f"PyTensor {pytensor.__version__} (linker {pytensor.config.linker}), ArviZ "
        f"{az.__version__}, pymc_sgmcmc {pmsg.__version__}",
    ]


def print_table(title: str, header: list[str], rows: list[list[str]], notes=()) -> None:
    """A Markdown table (also readable as plain text)."""
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(f"\n### {title}\n")
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    for note in notes:
        print(f"\n{note}")
    print(flush=True)


def fmt(x: float, digits: int = 4) -> str:
    """A number with ``digits`` decimals, or a dash for None and non-finite values."""
    return "—" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def progress(message: str) -> None:
    """A time-stamped progress line."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)
