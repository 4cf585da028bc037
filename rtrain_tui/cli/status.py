"""`rtrain-tui status HOST RUN`: the state word (or `--json`, with attempts and cost)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

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
        attempts = resume.attempts_view(
            await engine.attempts(args.host, args.workdir, args.run_id),
            line.state, probe.exit_code, line.reason, ended if probes.is_final(line.state) else None)
        print(json.dumps({
            "host": args.host, "run_id": args.run_id, "workdir": args.workdir,
            "state": line.state, "pid": probe.pid, "exit_code": probe.exit_code,
            "exists": probe.exists, "stop_requested": probe.stop_requested,
            "reason": line.reason, "queue_position": line.queue_place,
            "slurm_job_id": probe.job_id or None, "slurm_state": probe.scheduler_state or None,
            "attempt": attempts[-1]["attempt"], "attempts": attempts,
            "stalled_for": probe.stalled_for, "gpus_idle_for": probe.gpus_idle_for,
            **await _status_cost(engine, args, ended, line.state, attempts),
        }, indent=2))
        return 0
    # Exactly one status word on stdout: scripts parse it. Why goes beside it, on stderr.
    print(line.state, flush=True)
    if line.reason:
        err(f"{args.run_id} on {args.host}: {line.reason}")
    return 0


async def _status_cost(engine: Engine, args: argparse.Namespace, ended: int | None,
                       state: str, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """`cost` (so far) and `cost_at_end` (a running run's, from its ETA) for `status --json`:
    null on a host with no price in config.toml (which then costs no extra round trip)."""
    from dataclasses import replace

    from rtrain_tui.core.metrics.metrics_sync import sync_metrics
    from rtrain_tui.core.runs import cost
    from rtrain_tui.core.runs.index import RunRecord

    price = engine.hosts.for_host(args.host).price
    if price is None:
        return {"cost": None, "cost_at_end": None, "currency": None}
    record = engine.index.get(args.host, args.run_id) or RunRecord(args.host, args.run_id, args.workdir)
    if probes.is_final(state) and ended is not None:  # the host's clock, as a refresh records it
        record = replace(record, ended_at=datetime.fromtimestamp(ended, UTC).isoformat())
    eta = None
    if state == probes.RUNNING:
        eta = (await sync_metrics(engine, args.host, args.workdir, args.run_id)).summary().eta_seconds
    got = cost.run_cost(record, price, datetime.now(UTC), attempts, state, eta)
    assert got is not None
    # At its end: the projection of a running run with an ETA; what an ended run cost.
    at_end = got.at_end if got.at_end is not None else got.spent if probes.is_final(state) else None
    return {"cost": float(got.spent), "cost_at_end": None if at_end is None else float(at_end),
            "currency": got.currency}
