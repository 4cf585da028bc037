"""Logs: following a run's log, reading progress and why a run ended from its text.

Layer: beside backends and transfers, below the engine (docs/design.md, "Layers").
"""
