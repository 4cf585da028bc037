"""Following a run's `train.log` from a byte offset, over the host's SFTP channel.

The stream remembers how many bytes it has delivered, so after a dropped connection it
resumes exactly there: no line lost, none repeated. Bytes become lines through an
incremental UTF-8 decoder (a character split across reads survives; an invalid byte
becomes U+FFFD, never an exception), and `\\r` counts as a line end so progress bars
show as lines. Many streams share one SFTP channel, so following 20 runs on one host
needs no more SSH sessions than following one.

What it costs the host: while lines flow, one SFTP fstat + read per poll; while idle,
the poll backs off to once a second, and the run's state (a shell round trip) is probed
at most once per `state_every` — sooner only when the wrapper's `status` file appears,
so a run that ends is noticed within a poll, not a state interval.

What it costs the app: a log is opened from its last `max_lines` lines (found by
reading backwards from the end, so a 200 MiB log is never loaded whole), read in
bounded chunks, and handed out in batches of at most `batch_lines` with an event-loop
turn between batches. A line longer than `MAX_LINE` is cut and marked, and a line that
never ends cannot grow memory: the splitter keeps at most `MAX_LINE` characters of it.

Failures: a `PermanentError` (host key changed, auth refused, a name that is no alias
and does not resolve) and a `ValidationError` end the stream by raising at once. Any
other failure is an outage: the stream reports `reconnecting` and retries at most
`retry_max` seconds apart, so it is following again within about a second of the host
answering.
"""

from __future__ import annotations

import asyncio
import codecs
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rtrain_tui.core.errors import (
    NotRegularFileError,
    PermanentError,
    RemoteError,
    UnreachableError,
    ValidationError,
)
from rtrain_tui.core.runs import probes
from rtrain_tui.core.transport.bounded import bounded
from rtrain_tui.core.transport.connection import LOG_LANE

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection


class LogSource(Protocol):
    """What following or reading a run's log needs of the engine (`Engine` is one): the
    host's connection, the run dir as an absolute path, and a probe of the run."""

    def host(self, alias: str) -> HostConnection: ...
    async def run_dir(self, host: str, workdir: str, run_id: str) -> str: ...
    async def probe(self, host: str, workdir: str, run_id: str) -> probes.RunProbe: ...


MAX_LINE = 8192  # longer lines are cut: one runaway line must not stall a pane
CUT_MARK = f"… [line cut at {MAX_LINE} chars]"
READ_SIZE = 1 << 20  # one SFTP read (asyncssh pipelines it into parallel requests)
FEED_SIZE = 1 << 18  # bytes split into lines per event-loop turn
BATCH_LINES = 2000  # lines per LogLines event
BACK_CHUNK = 1 << 18  # bytes read per step when looking backwards for the last lines
MAX_BACK_BYTES = 16 << 20  # never read back further than this for the last window
DEFAULT_POLL = 0.25
DEFAULT_MAX_POLL = 1.0
DEFAULT_STATE_EVERY = 2.0
DEFAULT_RETRY_MAX = 1.0
DEFAULT_OP_TIMEOUT = 30.0  # a bound on each SFTP call, whatever the connection does
# The wrapper writes `status` when the trainer ends: its appearance is worth a probe.
END_MARKERS = ("status",)

_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_END_BYTES = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class LogLines:
    lines: list[str]


@dataclass(frozen=True)
class StreamState:
    """`live`, `reconnecting` (with `detail`: why), `queued` (a scheduler holds the run;
    `detail`: its reason; said again when the reason changes), or `ended` with the run's
    final state."""

    status: str
    run_state: str = ""
    detail: str = ""


class LineSplitter:
    """Bytes in, complete lines out; `\\n`, `\\r\\n` and lone `\\r` all end a line.

    A line longer than `MAX_LINE` characters comes out cut, ending in `CUT_MARK`; of a
    line still being written only its first `MAX_LINE` characters are kept, so a writer
    that never sends a newline cannot grow memory.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._cut = False  # the pending line already lost characters
        self._cr = False  # the last byte fed was \r: the first half of \r\n, maybe

    def feed(self, data: bytes) -> list[str]:
        text = self._decoder.decode(data)
        if self._cr:
            text = "\r" + text
        # A trailing \r may be the first half of \r\n: keep it until more arrives.
        self._cr = text.endswith("\r")
        if self._cr:
            text = text[:-1]
        parts = _LINE_END.split(text)
        lines = []
        for part in parts[:-1]:
            self._add(part)
            lines.append(self._take())
        self._add(parts[-1])
        return lines

    def flush(self) -> list[str]:
        self._add(self._decoder.decode(b"", final=True))
        self._cr = False
        if not self._pending and not self._cut:
            return []
        return [self._take()]

    def _add(self, text: str) -> None:
        room = MAX_LINE + 1 - len(self._pending)  # one over: enough to know it is cut
        if len(text) > room:
            text = text[:max(room, 0)]
            self._cut = True
        self._pending += text

    def _take(self) -> str:
        line, cut = self._pending, self._cut or len(self._pending) > MAX_LINE
        self._pending, self._cut = "", False
        return line[:MAX_LINE] + CUT_MARK if cut else line


def _is_permanent(exc: BaseException) -> bool:
    # A FIFO stays one: retrying would only stat it again every second.
    return isinstance(exc, (PermanentError, ValidationError, NotRegularFileError))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


class LogFollower:
    """Yields LogLines and StreamState events until the run reaches a final state.

    `max_lines`: start at the last `max_lines` lines of the log instead of its start
    (the TUI passes its pane's cap); None replays the whole log (the CLI's `tail`).
    `poll` is the SFTP poll while lines flow; it doubles up to `max_poll` while idle.
    `state_every` bounds how often the run's state is probed (a shell round trip).
    `retry_max` caps the pause between attempts during an outage.
    `give_up_after`: when the host has not answered once within this many seconds,
    raise the last error instead of retrying (None: retry for as long as it takes).

    Raises `PermanentError` / `ValidationError` at once; never raises for an outage.
    """

    def __init__(self, engine: LogSource, host: str, workdir: str, run_id: str,
                 poll: float = DEFAULT_POLL, state_every: float = DEFAULT_STATE_EVERY, *,
                 max_poll: float = DEFAULT_MAX_POLL, max_lines: int | None = None,
                 batch_lines: int = BATCH_LINES, retry_max: float = DEFAULT_RETRY_MAX,
                 give_up_after: float | None = None,
                 op_timeout: float = DEFAULT_OP_TIMEOUT) -> None:
        self.engine = engine
        self.host = host
        self.workdir = workdir
        self.run_id = run_id
        self.offset = 0  # bytes of train.log already turned into lines
        self.poll = poll
        self.max_poll = max(max_poll, poll)
        self.state_every = state_every
        self.max_lines = max_lines
        self.batch_lines = max(1, batch_lines)
        self.retry_max = retry_max
        self.give_up_after = give_up_after
        self.op_timeout = op_timeout
        self.probes = 0  # state probes sent: what an idle follower costs the host
        self._splitter = LineSplitter()
        self._positioned = max_lines is None  # the start offset is known
        self._markers_seen = False

    async def events(self) -> AsyncIterator[LogLines | StreamState]:
        conn = self.engine.host(self.host)
        handle = None
        began = time.monotonic()
        ever_live = False
        live = False
        last_detail: str | None = None
        retry = min(0.25, self.retry_max)
        wait = self.poll
        last_probe = float("-inf")
        queued_why: str | None = None  # the reason last said for a queued run
        try:
            while True:
                try:
                    run_dir = await self.engine.run_dir(self.host, self.workdir, self.run_id)
                    if handle is None:
                        handle = await self._open(conn, run_dir)
                    if not live:
                        live = ever_live = True
                        last_detail = None
                        retry = min(0.25, self.retry_max)
                        yield StreamState("live")
                    got = False
                    if handle is not None:
                        async for batch in self._drain(handle):
                            got = True
                            yield LogLines(batch)
                    wait = self.poll if got else min(wait * 2, self.max_poll)
                    now = time.monotonic()
                    due = now - last_probe >= self.state_every
                    if not due and not got and await self._ended_marker(conn, run_dir):
                        due = True
                    if due:
                        last_probe = time.monotonic()
                        self.probes += 1
                        found = await self.engine.probe(self.host, self.workdir, self.run_id)
                        state = found.state
                        if state == probes.QUEUED and found.reason != queued_why:
                            queued_why = found.reason
                            yield StreamState("queued", state, detail=found.reason)
                        elif state != probes.QUEUED and queued_why is not None:
                            queued_why = None
                            yield StreamState("started", state)
                        if probes.is_final(state) or state == probes.UNKNOWN:
                            # The trainer has ended: whatever it wrote is in the file now,
                            # even a file that did not exist at the last open.
                            if handle is None:
                                handle = await self._open(conn, run_dir)
                            if handle is not None:
                                async for batch in self._drain(handle):
                                    yield LogLines(batch)
                            tail = self._splitter.flush()
                            if tail:
                                yield LogLines(tail)
                            yield StreamState("ended", state)
                            return
                    await asyncio.sleep(wait)
                except Exception as exc:  # noqa: BLE001 - sorted into permanent and transient
                    if _is_permanent(exc):
                        raise
                    if not isinstance(exc, (RemoteError, OSError, asyncio.TimeoutError)) \
                            and not _is_asyncssh_error(exc):
                        raise  # a bug, not an outage: let it show
                    await _close(handle)
                    handle = None
                    live = False
                    if self.give_up_after is not None and not ever_live \
                            and time.monotonic() - began >= self.give_up_after:
                        if isinstance(exc, RemoteError):
                            raise
                        raise UnreachableError(f"cannot reach {self.host}: {_describe(exc)}") from None
                    detail = _describe(exc)
                    if detail != last_detail:
                        last_detail = detail
                        yield StreamState("reconnecting", detail=detail)
                    await asyncio.sleep(retry)
                    retry = min(retry * 2, self.retry_max)
                    # Our own pace decides when to try again, not the connection's
                    # backoff: the host must be followed again soon after it answers.
                    retry_now = getattr(conn, "retry_now", None)
                    if retry_now is not None:
                        retry_now()
        finally:
            await _close(handle)

    async def _bounded(self, aw: Any) -> Any:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel (a closed pane).
        async with asyncio.timeout(self.op_timeout):
            return await aw

    async def _open(self, conn: Any, run_dir: str) -> Any:
        """The open log, or None while the trainer has not created it yet."""
        import asyncssh

        sftp = await conn.sftp(LOG_LANE)
        try:
            handle = await self._bounded(sftp.open_regular(f"{run_dir}/train.log"))
        except asyncssh.SFTPNoSuchFile:
            return None
        if not self._positioned:
            try:
                self.offset = await self._window_start(handle, self.max_lines or 0)
            except BaseException:
                await _close(handle)
                raise
            self._positioned = True
        return handle

    async def _window_start(self, handle: Any, count: int) -> int:
        """The offset where the last `count` lines of the file begin.

        Reads backwards from the end in chunks, at most MAX_BACK_BYTES: a log of very
        long lines starts at the earliest line start inside that window instead.
        """
        size = (await self._bounded(handle.stat())).size or 0
        if count <= 0:
            return size
        hi = size
        after = b""  # the byte just after the current chunk (for \r\n at a boundary)
        found = 0  # line starts seen, not counting the end of the file
        floor = max(0, size - MAX_BACK_BYTES)
        earliest = size
        while hi > floor:
            lo = max(floor, hi - BACK_CHUNK)
            data = await self._read_at(handle, lo, hi - lo)
            if len(data) != hi - lo:
                return 0  # truncated under us: replay what is there
            starts = [lo + m.end() for m in _LINE_END_BYTES.finditer(data)]
            if data.endswith(b"\r") and after == b"\n":
                starts.pop()  # half of a \r\n whose \n the later chunk counted
            for pos in reversed(starts):
                if pos == size:
                    continue  # the end of the last line, not the start of one
                found += 1
                earliest = pos
                if found >= count:
                    return pos
            after = data[:1]
            hi = lo
        if floor == 0:
            return 0
        return earliest if earliest < size else floor

    async def _read_at(self, handle: Any, offset: int, size: int) -> bytes:
        """`size` bytes at `offset`, however the server splits them; fewer only at EOF."""
        data = b""
        while len(data) < size:
            got = await self._bounded(handle.read(size - len(data), offset + len(data)))
            if not got:
                break
            data += got
        return data

    async def _drain(self, handle: Any) -> AsyncIterator[list[str]]:
        """Lines appended since `offset`, up to the size a stat just saw, in batches.

        Never asking past the end matters: asyncssh splits a large read into parallel
        requests, and those that hit end-of-file fail in tasks nobody awaits.
        At most FEED_SIZE bytes are split per event-loop turn, and `offset` always
        counts exactly the bytes the splitter has seen, so a resume neither skips nor
        repeats.
        """
        size = (await self._bounded(handle.stat())).size or 0
        while self.offset < size:
            data = await self._bounded(handle.read(min(READ_SIZE, size - self.offset), self.offset))
            if not data:
                return  # truncated under us
            for start in range(0, len(data), FEED_SIZE):
                piece = data[start:start + FEED_SIZE]
                lines = self._splitter.feed(piece)
                self.offset += len(piece)
                for first in range(0, len(lines), self.batch_lines):
                    yield lines[first:first + self.batch_lines]
                await asyncio.sleep(0)  # let the app breathe between pieces

    async def _ended_marker(self, conn: Any, run_dir: str) -> bool:
        """True the first time a file that marks the run's end is seen (cheap: SFTP)."""
        import asyncssh

        if self._markers_seen:
            return False
        sftp = await conn.sftp(LOG_LANE)
        for name in END_MARKERS:
            try:
                await self._bounded(sftp.stat(f"{run_dir}/{name}"))
            except asyncssh.SFTPNoSuchFile:
                continue
            self._markers_seen = True
            return True
        return False


def _is_asyncssh_error(exc: BaseException) -> bool:
    import asyncssh

    return isinstance(exc, asyncssh.Error)


async def _close(handle: Any) -> None:
    """Close an SFTP file, best effort and bounded: on a dead channel it cannot fail us."""
    if handle is None:
        return
    try:
        await bounded(handle.close(), 2.0)
    except Exception:  # noqa: BLE001 - the channel may be gone; the handle is with it
        pass


async def read_tail(engine: LogSource, host: str, workdir: str, run_id: str,
                    nbytes: int = 4096) -> list[str]:
    """The last lines of a run's log (over SFTP: no process started on the host)."""
    import asyncssh

    run_dir = await engine.run_dir(host, workdir, run_id)
    sftp = await engine.host(host).sftp()
    try:
        async with await sftp.open_regular(f"{run_dir}/train.log") as f:
            size = (await f.stat()).size or 0
            data = await f.read(nbytes, max(0, size - nbytes))
    except asyncssh.SFTPNoSuchFile:
        return []
    except (asyncssh.Error, OSError) as exc:
        raise RemoteError(f"{host}: cannot read the log of {run_id}: {exc}") from None
    splitter = LineSplitter()
    lines = splitter.feed(data) + splitter.flush()
    return lines[1:] if size > nbytes else lines  # the first may be a partial line
