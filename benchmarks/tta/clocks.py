"""Measurement inside a worker: peak memory, JAX compilation time, the first draw's time."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import numpy as np

JAX_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class PeakMemory:
    """Peak resident memory of this process and its children above a baseline."""

    def __init__(self, interval: float = 0.1) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:  # reset the high-water mark
                f.write("5")
            self.reset = True
        except OSError:
            self.reset = False
        self.baseline = self._self_rss()
        self.tree_peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(interval,), daemon=True)
        self._thread.start()

    @staticmethod
    def _self_rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _watch(self, interval: float) -> None:
        try:
            import psutil
        except ImportError:
            return
        me = psutil.Process()
        while not self._stop.wait(interval):
            try:
                children = me.children(recursive=True)
                if not children:
                    continue
                total = me.memory_full_info().pss
                for child in children:
                    with contextlib.suppress(psutil.Error):
                        total += child.memory_full_info().pss
                self.tree_peak = max(self.tree_peak, total)
            except psutil.Error:
                pass

    def stop(self) -> int:
        """Stop watching; the peak in bytes above the baseline."""
        import resource

        self._stop.set()
        self._thread.join()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.reset:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = int(line.split()[1]) * 1024
        return max(peak, self.tree_peak) - self.baseline


class JaxCompileClock:
    """Sums JAX's compilation events (tracing, lowering, XLA compile) with their end times."""

    def __init__(self) -> None:
        import jax.monitoring

        self.events: list[tuple[float, float]] = []

        def listener(event: str, duration_secs: float, **kwargs) -> None:
            if event in JAX_COMPILE_EVENTS:
                self.events.append((time.perf_counter(), duration_secs))

        jax.monitoring.register_event_duration_secs_listener(listener)

    def within(self, start: float, stop: float) -> float:
        """Seconds of compilation between two times (nested events counted once)."""
        spans = sorted((max(start, end - d), min(stop, end)) for end, d in self.events)
        total, reached = 0.0, start
        for lo, hi in spans:
            if hi > max(lo, reached):
                total += hi - max(lo, reached)
                reached = hi
        return total


class DrawClock:
    """``pm.sample`` callback: time of the first draw and tree sizes per chain and phase."""

    def __init__(self, chains: int) -> None:
        self.first = None
        self.steps = {"tune": np.zeros(chains), "draw": np.zeros(chains)}

    def __call__(self, trace, draw) -> None:
        """Record one draw (called by ``pm.sample`` after every draw of every chain)."""
        if self.first is None:
            self.first = time.perf_counter()
        for stats in draw.stats:
            if "tree_size" in stats:  # NUTS's raw name of the n_steps statistic
                self.steps["tune" if draw.tuning else "draw"][draw.chain] += stats["tree_size"]
