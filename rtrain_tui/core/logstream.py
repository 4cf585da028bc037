"""Following a run's `train.log` from a byte offset, over the host's SFTP channel.

The stream remembers how many bytes it has delivered, so after a dropped connection it
resumes exactly there: no line lost, none repeated. Bytes become lines through an
incremental UTF-8 decoder (a character split across reads survives; an invalid byte
becomes U+FFFD, never an exception), and `\\r` counts as a line end so progress bars
show as lines. Many streams share one SFTP channel, so following 20 runs on one host
needs no more SSH sessions than following one.
"""

from __future__ import annotations

import asyncio
import codecs
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rtrain_tui.core import probes
from rtrain_tui.core.errors import RemoteError

if TYPE_CHECKING:
    import asyncssh  # imported on first use: see connection.py

MAX_LINE = 8192  # longer lines are cut: one runaway line must not stall a pane
READ_SIZE = 1 << 20


@dataclass(frozen=True)
class LogLines:
    lines: list[str]


@dataclass(frozen=True)
class StreamState:
    """`live`, `reconnecting`, or `ended` with the run's final state."""

    status: str
    run_state: str = ""
    detail: str = ""


class LineSplitter:
    """Bytes in, complete lines out; `\\n`, `\\r\\n` and lone `\\r` all end a line."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes) -> list[str]:
        text = self._pending + self._decoder.decode(data)
        # A trailing \r may be the first half of \r\n: keep it until more arrives.
        keep_cr = text.endswith("\r")
        if keep_cr:
            text = text[:-1]
        parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._pending = parts.pop() + ("\r" if keep_cr else "")
        return [p[:MAX_LINE] for p in parts]

    def flush(self) -> list[str]:
        text = (self._pending + self._decoder.decode(b"", final=True)).rstrip("\r")
        self._pending = ""
        return [text[:MAX_LINE]] if text else []


class LogFollower:
    """Yields LogLines and StreamState events until the run reaches a final state."""

    def __init__(self, engine, host: str, workdir: str, run_id: str,  # type: ignore[no-untyped-def]
                 poll: float = 0.2, state_every: float = 1.0) -> None:
        self.engine = engine
        self.host = host
        self.workdir = workdir
        self.run_id = run_id
        self.offset = 0
        self.poll = poll
        self.state_every = state_every
        self._splitter = LineSplitter()

    async def events(self) -> AsyncIterator[LogLines | StreamState]:
        import asyncssh

        conn = self.engine.host(self.host)
        backoff = 0.5
        handle = None
        last_state_check = 0.0
        announced_live = False
        while True:
            try:
                run_dir = await self.engine.run_dir(self.host, self.workdir, self.run_id)
                if handle is None:
                    handle = await self._open(conn, run_dir)
                if not announced_live:
                    yield StreamState("live")
                    announced_live = True
                got = await self._drain(handle) if handle else []
                if got:
                    yield LogLines(got)
                    backoff = 0.5
                    if time.monotonic() - last_state_check < self.state_every:
                        continue
                last_state_check = time.monotonic()
                state = (await self.engine.probe(self.host, self.workdir, self.run_id)).state
                if probes.is_final(state) or state == probes.UNKNOWN:
                    # The trainer has ended: whatever it wrote is in the file now.
                    tail = await self._drain(handle) if handle else []
                    tail += self._splitter.flush()
                    if tail:
                        yield LogLines(tail)
                    yield StreamState("ended", state)
                    return
                await asyncio.sleep(self.poll)
            except (RemoteError, asyncssh.Error, OSError) as exc:
                handle = None
                announced_live = False
                yield StreamState("reconnecting", detail=str(exc).splitlines()[0] if str(exc) else "")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _open(self, conn, run_dir: str):  # type: ignore[no-untyped-def]
        """The open log, or None while the trainer has not created it yet."""
        import asyncssh

        sftp = await conn.sftp()
        try:
            return await sftp.open(f"{run_dir}/train.log", "rb")
        except asyncssh.SFTPNoSuchFile:
            return None

    async def _drain(self, handle) -> list[str]:  # type: ignore[no-untyped-def]
        """Read what was appended since `offset`, up to the size a stat just saw.

        Never asking past the end matters: asyncssh splits a large read into parallel
        requests, and those that hit end-of-file fail in tasks nobody awaits.
        """
        lines: list[str] = []
        size = (await handle.stat()).size or 0
        while self.offset < size:
            data = await handle.read(min(READ_SIZE, size - self.offset), self.offset)
            if not data:
                break  # truncated under us
            self.offset += len(data)
            lines += self._splitter.feed(data)
        return lines


async def read_tail(engine, host: str, workdir: str, run_id: str,  # type: ignore[no-untyped-def]
                    nbytes: int = 4096) -> list[str]:
    """The last lines of a run's log (over SFTP: no process started on the host)."""
    import asyncssh

    run_dir = await engine.run_dir(host, workdir, run_id)
    sftp = await engine.host(host).sftp()
    try:
        async with sftp.open(f"{run_dir}/train.log", "rb") as f:
            size = (await f.stat()).size or 0
            data = await f.read(nbytes, max(0, size - nbytes))
    except asyncssh.SFTPNoSuchFile:
        return []
    except (asyncssh.Error, OSError) as exc:
        raise RemoteError(f"{host}: cannot read the log of {run_id}: {exc}") from None
    splitter = LineSplitter()
    lines = splitter.feed(data) + splitter.flush()
    return lines[1:] if size > nbytes else lines  # the first may be a partial line
