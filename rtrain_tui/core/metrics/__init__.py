"""Metrics: a run's metrics (parse, cache, sync, the words a row shows) and the GPU
samples of a host.

Layer: above transport, runs and host scripts; below logs (docs/design.md, "Layers").
"""
