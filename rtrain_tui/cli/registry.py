"""Which function serves which command: the commands that reach a host, each an
`async def cmd_NAME(engine, args) -> int` in its own module."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rtrain_tui.cli.fetch import cmd_fetch
from rtrain_tui.cli.metrics import cmd_metrics
from rtrain_tui.cli.notify import cmd_notify
from rtrain_tui.cli.preflight import cmd_preflight
from rtrain_tui.cli.resume import cmd_resume
from rtrain_tui.cli.runs import cmd_runs
from rtrain_tui.cli.start import cmd_start
from rtrain_tui.cli.status import cmd_status
from rtrain_tui.cli.stop import cmd_stop
from rtrain_tui.cli.tail import cmd_tail
from rtrain_tui.cli.watch import cmd_watch

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine

Command = Callable[["Engine", argparse.Namespace], Awaitable[int]]

COMMANDS: dict[str, Command] = {
    "preflight": cmd_preflight, "start": cmd_start, "tail": cmd_tail, "status": cmd_status,
    "fetch": cmd_fetch, "stop": cmd_stop, "runs": cmd_runs, "metrics": cmd_metrics,
    "resume": cmd_resume, "watch": cmd_watch, "notify": cmd_notify,
}
