"""The backends: how a run is launched, probed and stopped on one kind of host.

`direct` is a box (a `setsid` wrapper, found and stopped by its marker; the client
chooses its GPUs); `slurm` is a cluster's login node (`sbatch`, `squeue`, `scancel`).
Each is a package with the same few parts behind one interface (`base.Backend`), and the
engine speaks to them only through it. A run's backend is fixed when it starts and kept in
its index record (`backend_for`); everything else (connections, the run directory,
transfers, logs, the index) is the engine's and shared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtrain_tui.core.backends.base import (
    Backend,
    BackendOptions,
    GpuChoice,
    HostShell,
    Launched,
    LaunchSpec,
    StepCallback,
)
from rtrain_tui.core.backends.direct import DirectBackend
from rtrain_tui.core.backends.slurm.backend import SlurmBackend
from rtrain_tui.core.runs.backend_names import BACKENDS, DEFAULT, check_backend

if TYPE_CHECKING:
    from rtrain_tui.core.runs.index import RunRecord

# In this order a host's probe sends their scripts (the first carries the shared parts).
_ALL: tuple[Backend, ...] = (DirectBackend(), SlurmBackend())
_BY_NAME = {b.name: b for b in _ALL}
# The names the index, config.toml and --backend accept (core/runs/backend_names.py) are
# exactly these backends, in this order: a name with no backend would pass every check.
if tuple(_BY_NAME) != BACKENDS:
    raise ImportError(f"backends {tuple(_BY_NAME)} differ from backend_names.BACKENDS {BACKENDS}")


def get(name: str) -> Backend:
    """The backend called `name` ('' = the default); ValidationError for an unknown one."""
    return _BY_NAME[check_backend(name or DEFAULT)]


def backend_for(record: RunRecord) -> Backend:
    """The backend a run was started with, as its record says: never its host's setting now."""
    return get(record.backend)


def all_backends() -> tuple[Backend, ...]:
    return _ALL


def gpu_chooser() -> GpuChoice:
    """The backend whose probe carries a host's GPU sample (the first with the capability)."""
    return next(b for b in _ALL if isinstance(b, GpuChoice))


def built_in_trainers() -> tuple[str, ...]:
    """The backends' own trainer templates (their `{dataset}` may be empty, as the default's)."""
    return tuple(t for b in _ALL for t in b.built_in_trainers)


__all__ = [
    "BACKENDS", "DEFAULT", "Backend", "BackendOptions", "GpuChoice", "HostShell", "LaunchSpec",
    "Launched", "StepCallback", "all_backends", "backend_for", "built_in_trainers", "check_backend", "get",
    "gpu_chooser",
]
