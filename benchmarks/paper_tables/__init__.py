"""The parts of ``benchmarks/seed_tables.py``: the MCEM paper's Tables 1–5, reproduced.

``config`` (seeds, sizes, sampler names), ``paper`` (the published numbers), ``problems``
(data sets, models, exact posteriors), ``chains`` (running and scoring chains), ``timing``
(time per iteration), ``output`` (printing) and one module per table: ``table1`` to
``table5``. Run the tables with ``python benchmarks/seed_tables.py``.
"""
