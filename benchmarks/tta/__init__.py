"""The parts of ``benchmarks/time_to_accuracy.py``: time to accuracy against every NUTS.

``config`` (constants and names), ``problems`` (the data and the models in PyMC and
NumPyro), ``reference`` (the reference posterior), ``accuracy`` (the accuracy check, ESS
and the extrapolation of short NUTS runs), ``clocks`` (time and memory measurement),
``runners`` (NUTS, nutpie, NumPyro, ADVI and ours, inside a worker), ``worker`` (the
worker process and how the parent starts it), ``driver`` (the parent's run) and
``report`` (the Markdown table). Run it with ``python benchmarks/time_to_accuracy.py``.
"""
