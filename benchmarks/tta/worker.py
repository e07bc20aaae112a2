"""The worker process, and how the parent starts one.

:func:`worker` runs one configuration in a fresh process of the entry script
(``--worker CONFIG``), so that compilation is counted and peak memory is its own;
:func:`run_worker` is the parent's side: it starts the worker and reads its result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from .accuracy import summarise
from .clocks import PeakMemory
from .config import SCRIPT
from .runners import run_numpyro, run_pymc


def import_libraries(kind: str, chain_method: str | None = None, chains: int = 1) -> None:
    """Import what ``kind`` needs before the memory baseline is read.

    NumPyro's parallel chains need one JAX device per chain, which on a CPU must be asked
    for before JAX starts.
    """
    warnings.simplefilter("default")
    if kind in ("numpyro", "numpyro-pymc", "reference"):
        if chain_method == "parallel":
            import numpyro

            numpyro.set_host_device_count(chains)
        import jax

        jax.config.update("jax_enable_x64", True)
        import numpyro  # noqa: F401
    if kind != "numpyro" and kind != "reference":
        import pymc  # noqa: F401
    if kind == "ours":
        import pymc_sgmcmc  # noqa: F401
    if kind == "nutpie":
        import nutpie  # noqa: F401
    import arviz  # noqa: F401


def jax_devices() -> str:
    """JAX's default devices here, e.g. ``"gpu (NVIDIA H200)"``, ``"2 × cpu"``."""
    import jax

    counts = Counter(
        d.platform if d.device_kind.lower() == d.platform else f"{d.platform} ({d.device_kind})"
        for d in jax.devices()
    )
    return ", ".join(name if n == 1 else f"{n} × {name}" for name, n in counts.items())


def warning_messages(caught: list) -> list[str]:
    """The distinct warnings, each cut to 300 characters, at most 20."""
    messages = []
    for w in caught:
        text = f"{w.category.__name__}: {w.message}"[:300]
        if text not in messages:
            messages.append(text)
    return messages[:20]


def worker(cfg: dict) -> None:
    """One configuration in this fresh process; writes its result to cfg["result"]."""
    kind = cfg["kind"]
    import_libraries(kind, cfg.get("chain_method"), cfg.get("chains", 1))
    memory = PeakMemory()
    result: dict = {"label": cfg["label"], "kind": kind}
    try:
        paths = cfg["data"]
        X, y = np.load(paths["X"]), np.load(paths["y"])
        g = np.load(paths["g"]) if paths.get("g") else None
        result["data_mb"] = sum(a.nbytes for a in (X, y, g) if a is not None) / 2**20
        local = "z" if cfg.get("form", "non-centred") == "non-centred" else "a"
        names = ["w"] if g is None else ["mu", "sigma", local, "w"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            if kind in ("numpyro", "reference"):
                out = run_numpyro(cfg, X, y, g, names, t0)
            else:
                out = run_pymc(cfg, X, y, g, names, t0)
            total = time.perf_counter() - t0
        result["peak_mb"] = memory.stop() / 2**20
        result["warnings"] = warning_messages(caught)
        del X, y, g
        summarise(cfg, out, total, result)
    except BaseException as err:
        traceback.print_exc()
        result["error"] = f"{type(err).__name__}: {err}"
        with contextlib.suppress(Exception):
            memory.stop()
    if kind in ("numpyro", "numpyro-pymc", "reference"):
        with contextlib.suppress(Exception):  # after sampling: JAX is initialised by then
            result["jax_devices"] = jax_devices()
    Path(cfg["result"]).write_text(json.dumps(result, default=json_default))
    if "error" in result:
        sys.exit(1)


def json_default(value):
    """Encode numpy arrays and scalars for ``json.dumps``."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value))


def run_worker(cfg: dict, workdir: Path, timeout: float) -> dict:
    """Run one configuration in a worker process; its result, or a row with its error."""
    slug = hashlib.sha1(cfg["label"].encode()).hexdigest()[:10]
    cfg = {**cfg, "result": str(workdir / f"result-{slug}.json")}
    Path(cfg["result"]).unlink(missing_ok=True)
    log = workdir / f"worker-{slug}.log"
    command = [sys.executable, str(SCRIPT), "--worker", json.dumps(cfg)]
    started = time.perf_counter()
    with open(log, "w") as stream:
        proc = subprocess.Popen(
            command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and its chain processes
            proc.wait()
            return {
                "label": cfg["label"],
                "kind": cfg["kind"],
                "error": f"timed out after {timeout:.0f} s (--worker-timeout-s)",
            }
    elapsed = time.perf_counter() - started
    path = Path(cfg["result"])
    result = json.loads(path.read_text()) if path.exists() else {}
    if proc.returncode != 0 and "error" not in result:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        result["error"] = f"exit status {proc.returncode}: " + (tail[-1] if tail else "")
    result.setdefault("label", cfg["label"])
    result.setdefault("kind", cfg["kind"])
    result["process_s"] = elapsed
    if "error" in result:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        result["log_tail"] = tail
    return result
