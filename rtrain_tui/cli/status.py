"""`rtrain-tui status HOST RUN`: the state word (or `--json`, with attempts and cost)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import err
from rtrain_tui.core.runs import probes

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def cmd_status(engine: Engine, args: argparse.Namespace) -> int:
    from rtrain_tui.core import host_view

    probe = await engine.require_run(args.host, args.workdir, args.run_id)
    await engine.observed(args.host, args.workdir, args.run_id, probe.state, probe)
    for notice in engine.notices:  # a notification that could not be sent
        err(notice)
    # Worded as the runs table words it (core.host_view): the same state word, and the
    # same reason the row and the end-of-run toast show (one function).
    line = await host_view.run_line(engine, args.host, args.workdir, args.run_id, probe)
    if args.json:
        from rtrain_tui.core import resume

        # When an ended run ended, by the host's clock (its status file): attempts.jsonl
        # has it only for attempts that a later one followed.
        ended = probe.ended_at
        if ended is None and probes.is_final(line.state):
            ended = (await engine.probe_many(args.host, [(args.workdir, args.run_id)], [0]))[0].ended_at
        recorded = await engine.attempts(args.host, args.workdir, args.run_id)
        attempts = resume.attempts_view(
            recorded, line.state, probe.exit_code, line.reason, ended if probes.is_final(line.state) else None)
        print(json.dumps({
            "host": args.host, "run_id": args.run_id, "workdir": args.workdir,
            "state": line.state, "pid": probe.pid, "exit_code": probe.exit_code,
            "exists": probe.exists, "stop_requested": probe.stop_requested,
            "reason": line.reason, "queue_position": line.queue_place,
            "slurm_job_id": probe.job_id or None, "slurm_state": probe.scheduler_state or None,
            "attempt": attempts[-1]["attempt"], "attempts": attempts,
            "stalled_for": probe.stalled_for, "gpus_idle_for": probe.gpus_idle_for,
            **await host_view.status_cost(engine, args.host, args.workdir, args.run_id, line.state,
                                          ended, recorded),
        }, indent=2))
        return 0
    # Exactly one status word on stdout: scripts parse it. Why goes beside it, on stderr.
    print(line.state, flush=True)
    if line.reason:
        err(f"{args.run_id} on {args.host}: {line.reason}")
    return 0
