"""The headless engine: SSH, remote shell text, transfers, the run index, validation.

Never imports textual (a test proves it); the CLI and the TUI are both thin over this.
"""

from rtrain_tui.core.connection import ConnectionPool, HostConnection
from rtrain_tui.core.engine import Engine, StartedRun, StartRequest, StartTrace
from rtrain_tui.core.errors import (
    HostKeyChangedError,
    IndexCorruptError,
    RemoteError,
    UnreachableError,
    ValidationError,
)
from rtrain_tui.core.index import RunIndex, RunRecord
from rtrain_tui.core.logstream import LogFollower, LogLines, StreamState
from rtrain_tui.core.probes import PreflightReport, RunProbe

__all__ = [
    "ConnectionPool", "Engine", "HostConnection", "HostKeyChangedError", "IndexCorruptError",
    "LogFollower", "LogLines", "PreflightReport", "RemoteError", "RunIndex", "RunProbe",
    "RunRecord", "StartRequest", "StartTrace", "StartedRun", "StreamState", "UnreachableError",
    "ValidationError",
]
