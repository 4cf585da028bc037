"""`rtrain-tui stop HOST RUN`: stop the run's process group (or job) and verify it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import Cancelled, hint
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import probes
from rtrain_tui.core.safety import validate

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def cmd_stop(engine: Engine, args: argparse.Namespace) -> int:
    import asyncio

    signalled: list[str] = []

    def step(message: str) -> None:
        if "sent" in message or "cancelled" in message:
            signalled.append(message)
        if sys.stderr.isatty():
            print(f"  {message}", file=sys.stderr)

    validate.check_grace(args.grace)  # a bad grace is said before the host is asked
    await engine.require_run(args.host, args.workdir, args.run_id)
    try:
        print(await engine.stop(args.host, args.workdir, args.run_id, args.grace, step))
    except asyncio.CancelledError:
        raise Cancelled(await _stop_cancelled(engine, args, signalled)) from None
    return 0


async def _stop_cancelled(engine: Engine, args: argparse.Namespace, signalled: list[str]) -> str:
    """Did the run stop? Asked of the host once more (bounded), and said as it answers."""
    from rtrain_tui.core.transport.bounded import bounded

    sent = f"stop cancelled after {signalled[-1]}" if signalled else \
        "stop cancelled before any signal was sent"
    try:
        state = (await bounded(engine.probe(args.host, args.workdir, args.run_id), 10.0)).state
    except (RemoteError, TimeoutError):
        return f"{sent}; {args.run_id} on {args.host} could not be asked how it is: " \
               f"`{hint(args, 'status', args.run_id)}` tells."
    if state in (probes.RUNNING, probes.QUEUED, probes.STARTING):
        more = " (it may still be saving a checkpoint)" if signalled else ""
        return (f"{sent}; {args.run_id} is still {state} on {args.host}{more}; "
                f"`{hint(args, 'stop', args.run_id)}` stops it.")
    return f"{sent}; {args.run_id} on {args.host} is no longer running: {state}."
