"""Transfers: uploading a dataset and fetching a run's files, landed atomically, and the
fetch folders remembered per host.

Layer: beside backends and logs, below the engine (docs/design.md, "Layers").
"""
