"""The reason beside a run's status word: the one function every face asks.

The runs table, the end-of-run toast, `status` (on stderr) and `status --json` all take
a run's reason from `reason_for`, so a job that hit its time limit says TIMEOUT
everywhere. The scheduler's word wins (why a job waits, or how Slurm ended it: TIMEOUT,
OUT_OF_MEMORY, NODE_FAIL…): it names the cause, where the log only shows the SIGTERM that
followed. Otherwise an ended run's reason comes from its exit code and its log's tail.

Costs one SFTP read of the log's last `TAIL_BYTES` (a traceback fits), and only for runs
that failed or were lost without a scheduler's word; a log that cannot be read leaves
what the exit code says.
"""

from __future__ import annotations

from typing import Any

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logs.logstream import read_tail
from rtrain_tui.core.logs.reasons import why_it_ended
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.probes import RunProbe

TAIL_BYTES = 32 * 1024


def needs_reason(state: str) -> bool:
    # `stopped`: a run its stall watchdog stopped says so (the probe reads it); a user's stop has none.
    return state.startswith("failed") or state in (probes.LOST, probes.STOPPED)


async def reason_for(engine: Any, host: str, workdir: str, run_id: str,
                     probe: RunProbe | None = None) -> str:
    """Why the run waits or ended badly ('' for any other run); probes it when no probe is given."""
    if probe is None:
        probe = await engine.probe(host, workdir, run_id)
    if probe.state in (probes.QUEUED, probes.STARTING):  # why it waits; a submission under way
        return probe.reason
    if probe.state == probes.RUNNING:  # running on: only a stall has a reason
        return probe.reason if (probe.stalled_for, probe.gpus_idle_for) != (None, None) else ""
    if not needs_reason(probe.state):
        return ""
    if probe.reason or probe.state == probes.STOPPED:  # a stop's reason is the probe's or none
        return probe.reason
    try:
        tail = await read_tail(engine, host, workdir, run_id, nbytes=TAIL_BYTES)
    except RemoteError:
        tail = []
    return why_it_ended(probe.state, probe.exit_code, probe.stop_requested, tail, host,
                        disk_free_kb=probe.disk_free_kb)
