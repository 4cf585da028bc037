"""The reason beside an ended run's status word: its probe plus the tail of its log.

Costs one SFTP read of the log's last `TAIL_BYTES` (a traceback fits), and only for runs
that failed or were lost; a log that cannot be read leaves what the exit code says.
"""

from __future__ import annotations

from typing import Any

from rtrain_tui.core import probes
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logstream import read_tail
from rtrain_tui.core.probes import RunProbe
from rtrain_tui.core.reasons import why_it_ended

TAIL_BYTES = 32 * 1024


def needs_reason(state: str) -> bool:
    return state.startswith("failed") or state == probes.LOST


async def reason_for(engine: Any, host: str, workdir: str, run_id: str,
                     probe: RunProbe | None = None) -> str:
    """Why the run ended badly ('' when it did not); probes it when no probe is given."""
    if probe is None:
        probe = await engine.probe(host, workdir, run_id)
    if not needs_reason(probe.state):
        return ""
    try:
        tail = await read_tail(engine, host, workdir, run_id, nbytes=TAIL_BYTES)
    except RemoteError:
        tail = []
    return why_it_ended(probe.state, probe.exit_code, probe.stop_requested, tail, host,
                        disk_free_kb=probe.disk_free_kb)
