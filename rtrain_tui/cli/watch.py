"""`rtrain-tui watch`: headless refreshes that send the notifications they see."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import NOTHING_STOPPED, Cancelled, err
from rtrain_tui.core.safety import validate

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def cmd_watch(engine: Engine, args: argparse.Namespace) -> int:
    """`watch`: refresh every run in the index every --every seconds, so that what ends is
    told (core/notify) with no app open; Ctrl-C ends it, stopping nothing."""
    import asyncio

    from rtrain_tui.core import host_view

    if not 1 <= args.every <= 86_400:
        raise validate.ValidationError("--every must be 1 to 86400 seconds.")
    print(f"watching the runs in {engine.index.path} every {args.every:g}s; Ctrl-C ends it", flush=True)
    try:
        while True:
            records = await asyncio.to_thread(engine.index.load)
            await host_view.refresh(engine, records, words=False, went_on=True)
            await engine.notified()
            for line in engine.notices:
                err(line)
            engine.notices.clear()
            await asyncio.sleep(args.every)
    except asyncio.CancelledError:
        raise Cancelled(f"watch ended; {NOTHING_STOPPED}") from None
