"""`rtrain-tui resume HOST RUN`: a new attempt of an ended run, in its run directory."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import err, hint, program
from rtrain_tui.core.runs import probes

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def cmd_resume(engine: Engine, args: argparse.Namespace) -> int:
    from rtrain_tui.core import host_view, resume

    resume.check_request(args.from_path, args.restart)  # before connecting: user input

    def step(message: str) -> None:
        if sys.stderr.isatty():
            print(f"  {message}", file=sys.stderr)

    # Why the attempt before ended, worded as `status` words it: attempts.jsonl keeps it.
    probe = await engine.require_run(args.host, args.workdir, args.run_id)
    line = await host_view.run_line(engine, args.host, args.workdir, args.run_id, probe)
    resumed = await engine.resume(args.host, args.workdir, args.run_id, from_path=args.from_path,
                                  restart=args.restart, on_step=step, reason=line.reason,
                                  queue=args.queue)
    for skipped in resumed.skipped:
        err(f"skipped {skipped}")
    started = resumed.started
    if started.record.gpu_ids:
        err(f"{started.run_id} gets GPU(s) {started.record.gpu_ids} on {args.host}")
    if started.submit_message:
        err(f"{args.host} said: {started.submit_message}")
    if started.record.state == probes.QUEUED and not started.job_id:
        err(f"{started.run_id} is queued on {args.host}: it waits there for free GPUs, in the "
             "order runs were queued (it holds with this client closed)")
    how = f"from {resumed.checkpoint}" if resumed.checkpoint else "from the start"
    job = f" (Slurm job {started.job_id})" if started.job_id else ""
    print(f"resumed {started.run_id} on {args.host}: attempt {resumed.attempt}, {how}{job}")
    print(f"  tail: {hint(args, 'tail', started.run_id)}")
    print(f"  stop: {hint(args, 'stop', started.run_id)}", flush=True)
    if started.unrecorded:
        err(f"warning: {started.run_id} is running on {args.host}, but the run index could "
             f"not record it ({started.unrecorded}); the next `{program()} runs --refresh` "
             "records it.")
    return 0
