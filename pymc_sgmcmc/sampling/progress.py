"""What the package's samplers show in ``pm.sample``'s progress bar."""

from __future__ import annotations

from rich.progress import TextColumn
from rich.table import Column


class DivergencesAndStepSize:
    """PyMC's progress-bar protocol for a step method: divergences and step size per chain.

    A mixin placed before PyMC's step-method base, whose hooks show nothing.
    """

    @staticmethod
    def _progressbar_config(n_chains=1):
        columns = [
            TextColumn("{task.fields[divergences]}", table_column=Column("Divergences", ratio=1)),
            TextColumn("{task.fields[step_size]:0.2g}", table_column=Column("Step size", ratio=1)),
        ]
        stats = {"divergences": [0] * n_chains, "step_size": [0] * n_chains}
        return columns, stats

    @staticmethod
    def _make_progressbar_update_functions():
        def update_stats(stats):
            return {key: stats[key] for key in ("divergences", "step_size")} | {
                "failing": stats["divergences"] > 0,
            }

        return (update_stats,)
