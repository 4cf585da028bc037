"""LogFollower and LineSplitter against a stand-in host: a local file behind a fake SFTP.

No sshd here: these prove what the follower asks of a host (how many probes, how many
bytes, which handles stay open) and what it hands the app (batches, cut lines), which a
real sshd cannot count for us. tests/faults/ proves the same stream under real faults.
Its pace over real seconds (probes, polls, retries, giving up) is in
tests/test_logstream_pacing.py: the fast lane waits on no clock.
"""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

from rtrain_tui.core.errors import HostKeyChangedError, UnknownHostError
from rtrain_tui.core.logs import logstream
from rtrain_tui.core.logs.logstream import (
    CUT_MARK,
    MAX_LINE,
    LineSplitter,
    LogFollower,
    LogLines,
    StreamState,
)
from rtrain_tui.core.runs.probes import RunProbe


# -- a stand-in host -----------------------------------------------------------------
@dataclass
class _Attrs:
    size: int


class FakeFile:
    def __init__(self, host: FakeHost, path: Path) -> None:
        self.host, self.path, self.closed = host, path, False
        self.fd = open(path, "rb")  # noqa: SIM115 - closed by close(), which is the test

    async def stat(self) -> _Attrs:
        await self.host.gate()
        return _Attrs(os.fstat(self.fd.fileno()).st_size)

    async def read(self, size: int, offset: int) -> bytes:
        await self.host.gate()
        self.fd.seek(offset)
        data = self.fd.read(size)
        self.host.bytes_read += len(data)
        return data

    async def close(self) -> None:
        self.closed = True
        self.fd.close()


class FakeSftp:
    def __init__(self, host: FakeHost) -> None:
        self.host = host

    async def open(self, path: str, mode: str) -> FakeFile:
        await self.host.gate()
        if not Path(path).exists():
            raise asyncssh.SFTPNoSuchFile("no such file")
        f = FakeFile(self.host, Path(path))
        self.host.files.append(f)
        return f

    async def open_regular(self, path: str) -> FakeFile:
        """As BoundedSFTP's: a stat, then the open."""
        await self.stat(path)
        return await self.open(path, "rb")

    async def stat(self, path: str) -> _Attrs:
        await self.host.gate()
        self.host.stats += 1
        if not Path(path).exists():
            raise asyncssh.SFTPNoSuchFile("no such file")
        return _Attrs(Path(path).stat().st_size)


@dataclass
class FakeHost:
    """The engine and connection surface the follower uses, over a local run dir."""

    dir: Path
    state: str = "running"
    probes: int = 0
    stats: int = 0
    bytes_read: int = 0
    retry_nows: int = 0
    files: list[FakeFile] = field(default_factory=list)
    error: BaseException | None = None  # raised by every call while set

    async def gate(self) -> None:
        if self.error is not None:
            raise self.error

    # engine
    def host(self, alias: str) -> FakeHost:
        return self

    async def run_dir(self, host: str, workdir: str, run_id: str) -> str:
        await self.gate()
        return str(self.dir)

    async def probe(self, host: str, workdir: str, run_id: str) -> RunProbe:
        await self.gate()
        self.probes += 1
        return _probe(self.state)

    # connection
    async def sftp(self, lane: str = "") -> FakeSftp:
        await self.gate()
        return FakeSftp(self)

    def retry_now(self) -> None:
        self.retry_nows += 1

    @property
    def log(self) -> Path:
        return self.dir / "train.log"

    def finish(self, code: int = 0) -> None:
        (self.dir / "status").write_text(f"{code}\n")
        self.state = "completed" if code == 0 else f"failed (exit {code})"


def _probe(state: str) -> RunProbe:
    if state == "running":
        return RunProbe(exists=True, pid=1, alive=True)
    if state == "completed":
        return RunProbe(exists=True, pid=1, exit_code=0)
    if state.startswith("failed"):
        return RunProbe(exists=True, pid=1, exit_code=int(state.split()[-1].rstrip(")")))
    return RunProbe(exists=False)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


async def collect(follower: LogFollower, until: float = 20.0,
                  on_event=None) -> tuple[list[str], list[StreamState], list[int]]:  # type: ignore[no-untyped-def]
    lines: list[str] = []
    states: list[StreamState] = []
    sizes: list[int] = []

    async def go() -> None:
        async for ev in follower.events():
            if isinstance(ev, LogLines):
                lines.extend(ev.lines)
                sizes.append(len(ev.lines))
            else:
                states.append(ev)
            if on_event is not None:
                await on_event(ev, lines)

    await asyncio.wait_for(go(), until)
    return lines, states, sizes


# -- the splitter ---------------------------------------------------------------------
def test_a_line_longer_than_max_line_is_cut_and_marked() -> None:
    s = LineSplitter()
    assert s.feed(b"x" * (MAX_LINE + 5) + b"\nshort\n") == ["x" * MAX_LINE + CUT_MARK, "short"]
    assert s.feed(b"y" * MAX_LINE + b"\n") == ["y" * MAX_LINE]  # exactly the cap: not cut
    assert CUT_MARK == f"… [line cut at {MAX_LINE} chars]"


def test_a_line_that_never_ends_cannot_grow_the_splitter() -> None:
    s = LineSplitter()
    for _ in range(2000):  # 2000 × 64 KiB = 125 MiB without a newline
        assert s.feed(b"z" * 65536) == []
        assert len(s._pending) <= MAX_LINE + 1
    assert s.feed(b"end\r\nnext") == ["z" * MAX_LINE + CUT_MARK]
    assert s.flush() == ["next"]


def test_a_cut_line_split_across_reads_and_crlf_still_counts_once() -> None:
    s = LineSplitter()
    assert s.feed(b"a" * MAX_LINE) == []
    assert s.feed(b"b\r") == []
    assert s.feed(b"\nc\n") == ["a" * MAX_LINE + CUT_MARK, "c"]
    assert s.feed(b"q" * (MAX_LINE + 1)) == [] and s.flush() == ["q" * MAX_LINE + CUT_MARK]


# -- cost to the host -----------------------------------------------------------------
def test_file_handles_are_closed_on_end_on_cancel_and_on_reconnect(host: FakeHost) -> None:
    host.log.write_text("one\n")

    async def break_once(ev: object, lines: list[str]) -> None:
        if isinstance(ev, LogLines) and len(host.files) == 1 and host.error is None:
            host.error = OSError("network is down")
            asyncio.get_running_loop().call_later(0.3, setattr, host, "error", None)
        if isinstance(ev, StreamState) and ev.status == "live" and len(host.files) == 2:
            host.log.write_text("one\ntwo\n")
            host.finish()

    lines, states, _ = asyncio.run(collect(LogFollower(host, "h", "/w", "r", poll=0.01), on_event=break_once))
    assert lines == ["one", "two"]
    assert [s.status for s in states] == ["live", "reconnecting", "live", "ended"]
    assert len(host.files) == 2 and all(f.closed for f in host.files)

    host.files.clear()
    host.state = "running"
    (host.dir / "status").unlink()

    async def cancel_after_first() -> None:
        task = asyncio.ensure_future(collect(LogFollower(host, "h", "/w", "r")))
        while not host.files:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_after_first())
    assert len(host.files) == 1 and host.files[0].closed


# -- cost to the app ------------------------------------------------------------------
def _write_big_log(path: Path, lines: int) -> None:
    with open(path, "wb") as f:
        chunk = 100_000
        for first in range(0, lines, chunk):
            f.write(b"".join(b"{'loss': 0.5, 'step': %d}\n" % i
                             for i in range(first, min(first + chunk, lines))))


def test_opening_a_big_log_with_max_lines_reads_only_its_last_window(host: FakeHost) -> None:
    _write_big_log(host.log, 2_000_000)  # ~54 MiB
    size = host.log.stat().st_size
    host.finish()
    tracemalloc.start()
    try:
        lines, states, sizes = asyncio.run(collect(LogFollower(host, "h", "/w", "r", max_lines=10_000)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(lines) == 10_000
    assert lines[0] == "{'loss': 0.5, 'step': 1990000}" and lines[-1] == "{'loss': 0.5, 'step': 1999999}"
    assert host.bytes_read < 2 * 10_000 * 30 + 2 * logstream.BACK_CHUNK, (host.bytes_read, size)
    assert peak < 16 << 20, peak
    assert max(sizes) <= logstream.BATCH_LINES
    assert states[-1] == StreamState("ended", "completed")


def test_max_lines_window_counts_crlf_lone_cr_and_a_partial_last_line(host: FakeHost) -> None:
    host.finish()
    for body, n, want in [
        (b"a\r\nb\rc\nd", 2, ["c", "d"]),
        (b"a\r\nb\rc\nd", 3, ["b", "c", "d"]),
        (b"a\r\nb\rc\n", 2, ["b", "c"]),
        (b"a\r\nb\r\n", 1, ["b"]),
        (b"a\nb\n", 5, ["a", "b"]),
        (b"", 3, []),
    ]:
        host.log.write_bytes(body)
        lines, _, _ = asyncio.run(collect(LogFollower(host, "h", "/w", "r", max_lines=n)))
        assert lines == want, (body, n)


def test_max_lines_window_finds_a_crlf_split_between_backward_chunks(
        host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logstream, "BACK_CHUNK", 4)
    host.finish()
    host.log.write_bytes(b"aaa\r\nbbb\r\nccc\r\n")  # chunks end on "\r" and start on "\n"
    for n, want in [(1, ["ccc"]), (2, ["bbb", "ccc"]), (3, ["aaa", "bbb", "ccc"])]:
        lines, _, _ = asyncio.run(collect(LogFollower(host, "h", "/w", "r", max_lines=n)))
        assert lines == want, n


@pytest.mark.serial
def test_replaying_a_big_log_comes_in_bounded_batches_without_blocking_the_loop(host: FakeHost) -> None:
    _write_big_log(host.log, 1_000_000)
    host.finish()
    lags: list[float] = []

    async def go() -> tuple[list[str], list[int]]:
        async def ticker() -> None:
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0)
                lags.append(time.perf_counter() - t)

        tick = asyncio.ensure_future(ticker())
        lines, _, sizes = await collect(LogFollower(host, "h", "/w", "r"), until=60)
        tick.cancel()
        return lines, sizes

    lines, sizes = asyncio.run(go())
    assert len(lines) == 1_000_000 and lines[-1] == "{'loss': 0.5, 'step': 999999}"
    assert max(sizes) <= logstream.BATCH_LINES
    # a generous bound for a shared CI box: the work between two turns is one piece
    assert max(lags) < 0.05, max(lags)


# -- ends -----------------------------------------------------------------------------
def test_a_run_that_ends_before_its_log_is_first_seen_still_shows_its_last_lines(host: FakeHost) -> None:
    first = True

    async def end_fast(ev: object, lines: list[str]) -> None:
        nonlocal first
        if isinstance(ev, StreamState) and ev.status == "live" and first:
            first = False
            # the log appears and the run ends between the first open and the next poll
            host.log.write_text("loading\ntraining done, exit 0")
            host.finish()

    lines, states, _ = asyncio.run(collect(LogFollower(host, "h", "/w", "r", state_every=0.01),
                                           on_event=end_fast))
    assert lines == ["loading", "training done, exit 0"]
    assert states[-1] == StreamState("ended", "completed")


# -- failures -------------------------------------------------------------------------
@pytest.mark.serial
def test_permanent_failures_end_the_stream_at_once(host: FakeHost) -> None:
    for error in (HostKeyChangedError("cannot reach h: its host key changed"),
                  UnknownHostError("cannot reach nope: no such host")):
        host.error = error
        began = time.monotonic()
        with pytest.raises(type(error)):
            asyncio.run(collect(LogFollower(host, "h", "/w", "r")))
        assert time.monotonic() - began < 0.5


def test_a_bug_is_not_mistaken_for_an_outage(host: FakeHost) -> None:
    host.error = KeyError("oops")
    with pytest.raises(KeyError):
        asyncio.run(collect(LogFollower(host, "h", "/w", "r")))
