"""LogFollower's pace against the stand-in host of tests/unit/test_logstream.py: how
often an idle follower probes and polls, how soon it notices an end, how it retries an
outage and when it gives up on a host never reached.

Moved out of tests/unit: each waits out real seconds (1 to 3.2 s) of the follower's
intervals, and the fast lane sleeps nowhere. What needs no clock stays there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rtrain_tui.core.errors import UnreachableError
from rtrain_tui.core.logs.logstream import LogFollower, LogLines, StreamState
from tests.unit.test_logstream import FakeFile, FakeHost, _Attrs, collect


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


def test_an_idle_follower_probes_at_most_once_per_state_interval(host: FakeHost) -> None:
    host.log.write_text("one\n")
    follower = LogFollower(host, "h", "/w", "r", state_every=0.5)

    async def go() -> None:
        task = asyncio.ensure_future(collect(follower))
        await asyncio.sleep(1.6)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    # at 0, 0.5, 1.0 and 1.5 s at most (today: every 0.2 s poll, 8 of them)
    assert 2 <= host.probes <= 4, host.probes
    assert LogFollower(host, "h", "/w", "r").state_every == 2.0


def test_an_idle_follower_polls_the_file_at_most_once_a_second(host: FakeHost) -> None:
    host.log.write_text("one\n")
    follower = LogFollower(host, "h", "/w", "r", state_every=60)
    calls = 0
    original = FakeFile.stat

    async def counting_stat(self: FakeFile) -> _Attrs:
        nonlocal calls
        calls += 1
        return await original(self)

    async def go() -> None:
        task = asyncio.ensure_future(collect(follower))
        await asyncio.sleep(3.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    FakeFile.stat = counting_stat  # type: ignore[method-assign]
    try:
        asyncio.run(go())
    finally:
        FakeFile.stat = original  # type: ignore[method-assign]
    # 0.25 → 0.5 → 1 s: about 5 polls in 3.2 s, not 16
    assert calls <= 6, calls


@pytest.mark.serial
def test_a_run_ending_is_noticed_by_its_status_file_before_the_next_state_probe(host: FakeHost) -> None:
    host.log.write_text("step 1\n")

    def end() -> None:
        host.log.write_text("step 1\ndone\n")
        host.finish(3)

    async def end_soon(ev: object, lines: list[str]) -> None:
        if isinstance(ev, LogLines) and lines == ["step 1"]:
            asyncio.get_running_loop().call_later(0.3, end)  # after the first probe

    began = time.monotonic()
    lines, states, _ = asyncio.run(collect(LogFollower(host, "h", "/w", "r"), on_event=end_soon))
    assert lines == ["step 1", "done"] and states[-1] == StreamState("ended", "failed (exit 3)")
    assert time.monotonic() - began < 1.5  # the state interval is 2 s
    assert host.probes == 2


@pytest.mark.serial
def test_transient_failures_retry_at_most_a_second_apart_and_resume_without_loss(host: FakeHost) -> None:
    host.log.write_text("".join(f"line {i}\n" for i in range(10)))
    stamps: dict[str, float] = {}

    async def outage(ev: object, lines: list[str]) -> None:
        if isinstance(ev, LogLines) and "down" not in stamps:
            stamps["down"] = time.monotonic()
            host.error = UnreachableError("cannot reach h: connection refused")
            await asyncio.sleep(0)

            async def back() -> None:
                await asyncio.sleep(3.0)
                with open(host.log, "a") as f:
                    f.write("".join(f"line {i}\n" for i in range(10, 20)))
                host.finish()
                host.error = None
                stamps["up"] = time.monotonic()

            asyncio.ensure_future(back())
        if isinstance(ev, StreamState) and ev.status == "live" and "up" in stamps:
            stamps["live"] = time.monotonic()

    lines, states, _ = asyncio.run(collect(LogFollower(host, "h", "/w", "r", poll=0.01), on_event=outage))
    assert lines == [f"line {i}" for i in range(20)]
    # one `reconnecting` per outage (not one per retry), then live again
    assert [s.status for s in states] == ["live", "reconnecting", "live", "ended"]
    assert states[1].detail == "cannot reach h: connection refused"
    assert stamps["live"] - stamps["up"] < 1.2
    assert host.retry_nows >= 3  # our pace, not the connection's backoff, decides


@pytest.mark.serial
def test_a_host_never_reached_is_given_up_on_when_asked(host: FakeHost) -> None:
    host.error = UnreachableError("cannot reach h: connection refused")
    began = time.monotonic()
    with pytest.raises(UnreachableError, match="connection refused"):
        asyncio.run(collect(LogFollower(host, "h", "/w", "r", give_up_after=1.0)))
    assert 1.0 <= time.monotonic() - began < 3
