"""Runs: the local run index (atomic writes under a lock), the words of a run's state
and what probes answer, and the per-host settings of config.toml.

Layer: beside transport and host scripts, above safety (docs/design.md, "Layers").
"""
