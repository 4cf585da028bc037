"""The headless engine: SSH, remote shell text, transfers, the run index, validation.

Never imports textual (a test proves it); the CLI and the TUI are both thin over this.
"""

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

__all__ = [
    "ConnectionPool", "Engine", "HostConnection", "HostKeyChangedError", "IndexCorruptError",
    "LogFollower", "LogLines", "PreflightReport", "RemoteError", "RunIndex", "RunProbe",
    "RunRecord", "StartRequest", "StartTrace", "StartedRun", "StreamState", "UnreachableError",
    "ValidationError",
]
