"""`rtrain-tui tail HOST RUN`, and the log following that `start` ends with."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from rtrain_tui.cli.base import Cancelled, err, hint
from rtrain_tui.core.runs import probes

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def follow(engine: Engine, host: str, workdir: str, run_id: str, raw: bool = False,
                  args: argparse.Namespace | None = None) -> int:
    """Print the log until the run ends; exit 0 only when it completed.

    Cancelled (Ctrl-C, SIGTERM), it detaches: the line says the run goes on.

    An outage is waited out (the run keeps going on the host). A permanent failure
    (host key changed, auth refused, no such host) ends the stream by raising a
    RemoteError, which `main` prints as one line before exiting 1.
    """
    from rtrain_tui.core.logs.logstream import LogFollower, LogLines
    from rtrain_tui.log_view import LogWriter

    # A host never reached in 30 s (a dead port, a down box) is given up on; one that
    # answered once is waited for as long as the outage lasts.
    follower = LogFollower(engine, host, workdir, run_id, give_up_after=30.0)
    final = probes.UNKNOWN
    lost = False
    log = LogWriter(raw=raw)

    def say(message: str) -> None:
        log.interrupt()  # the message takes the bar's line; the next write redraws the bar
        err(message)

    try:
        async for event in _detaching(follower.events(), host, run_id, args):
            if isinstance(event, LogLines):
                log.write(event.lines)
            elif event.status == "reconnecting":
                lost = True
                say(f"lost {host} ({event.detail}); reconnecting, the run keeps going…")
            elif event.status == "live" and lost:
                lost = False
                say(f"reconnected to {host}; following again")
            elif event.status == "queued":
                why = f" ({event.detail})" if event.detail else ""
                say(f"{run_id} is queued on {host}{why}; waiting for it to start…")
            elif event.status == "started":
                say(f"{run_id} left the queue on {host}: {event.run_state}")
            elif event.status == "ended":
                final = event.run_state
    finally:
        log.close()  # an error or Ctrl-C too: what follows starts on a line of its own
    await engine.observed(host, workdir, run_id, final)  # a notification, once, if its end is one
    for notice in engine.notices:
        err(notice)
    print(f"{run_id} on {host}: {final}")
    return 0 if final == probes.COMPLETED else 1


async def _detaching(events: AsyncIterator[Any], host: str, run_id: str,
                     args: argparse.Namespace | None) -> AsyncIterator[Any]:
    """`events`, and a cancel turned into the line that says following stopped, not the run."""
    import asyncio

    try:
        async for event in events:
            yield event
    except asyncio.CancelledError:
        again = f"; `{hint(args, 'tail', run_id)}` follows it again" if args is not None else ""
        raise Cancelled(f"detached from {run_id} on {host}: nothing was stopped, the run "
                         f"keeps going{again}.") from None


async def cmd_tail(engine: Engine, args: argparse.Namespace) -> int:
    await engine.require_run(args.host, args.workdir, args.run_id)
    return await follow(engine, args.host, args.workdir, args.run_id, raw=args.raw, args=args)
