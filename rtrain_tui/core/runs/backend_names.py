"""Which backends exist, by name, and which one a host or record that names none means.

A word of the run's record (the index keeps it), of config.toml's `backend =` (the host
config checks it) and of `--backend`: those readers sit below the backends, so the names
live here, and core/backends/__init__.py checks at import that its backends are exactly
these (a third backend is one more name here and one more folder there).
"""

from __future__ import annotations

from rtrain_tui.core.errors import ValidationError

# In this order a host's probe sends their scripts (core/backends/__init__.py's `_ALL`).
BACKENDS = ("direct", "slurm")
DEFAULT = BACKENDS[0]  # what a record without a backend (older versions wrote none) ran on


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValidationError(f"--backend {backend!r} is unknown: use one of {', '.join(BACKENDS)}.")
    return backend
