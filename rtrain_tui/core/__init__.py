"""The headless engine: SSH, remote shell text, transfers, the run index, validation.

Never imports textual (a test proves it); the CLI and the TUI are both thin over this.

The public names below are imported on first use (PEP 562), not when the package is:
every `rtrain_tui.core.*` import runs this file first, and importing the engine here
(asyncio and all) cost `rtrain-tui runs` ~70 ms before it read a byte of the index.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine, StartedRun, StartRequest, StartTrace
    from rtrain_tui.core.errors import (
        HostKeyChangedError,
        IndexCorruptError,
        RemoteError,
        UnreachableError,
        ValidationError,
    )
    from rtrain_tui.core.logs.logstream import LogFollower, LogLines, StreamState
    from rtrain_tui.core.runs.index import RunIndex, RunRecord
    from rtrain_tui.core.runs.probes import PreflightReport, RunProbe
    from rtrain_tui.core.transport.connection import ConnectionPool, HostConnection

# Each public name and the module that defines it.
_HOMES = {
    "Engine": "engine", "StartedRun": "engine", "StartRequest": "engine",
    "StartTrace": "engine",
    "HostKeyChangedError": "errors", "IndexCorruptError": "errors", "RemoteError": "errors",
    "UnreachableError": "errors", "ValidationError": "errors",
    "LogFollower": "logs.logstream", "LogLines": "logs.logstream",
    "StreamState": "logs.logstream",
    "RunIndex": "runs.index", "RunRecord": "runs.index",
    "PreflightReport": "runs.probes", "RunProbe": "runs.probes",
    "ConnectionPool": "transport.connection", "HostConnection": "transport.connection",
}

__all__ = [
    "ConnectionPool", "Engine", "HostConnection", "HostKeyChangedError", "IndexCorruptError",
    "LogFollower", "LogLines", "PreflightReport", "RemoteError", "RunIndex", "RunProbe",
    "RunRecord", "StartRequest", "StartTrace", "StartedRun", "StreamState", "UnreachableError",
    "ValidationError",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value
