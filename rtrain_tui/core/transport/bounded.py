"""One way to bound a wait that never swallows a cancel.

`asyncio.wait_for` on Python 3.11 returns the result when the awaited call finishes in
the same loop turn that a cancel arrives, and the cancel is lost: an Esc or Ctrl-C that
lands as an upload or a launch completes would be ignored. `asyncio.timeout` does not
have that flaw, so every bounded wait in the engine goes through here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T], seconds: float) -> T:
    """Await `awaitable` for at most `seconds`; TimeoutError after that."""
    async with asyncio.timeout(seconds):
        return await awaitable
