"""The backends: how a run is launched, probed and stopped on one kind of host.

`direct` is a box (a `setsid` wrapper, its process group); `slurm` is a cluster's login
node (`sbatch`, `squeue`, `scancel`). A run's backend is fixed when it starts and kept in
its index record; everything else (connections, the run directory, transfers, logs, the
index) is the engine's and shared.
"""

from __future__ import annotations

from rtrain_tui.core.errors import ValidationError

BACKENDS = ("direct", "slurm")


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValidationError(f"--backend {backend!r} is unknown: use one of {', '.join(BACKENDS)}.")
    return backend
