"""LogFollower over a real sshd's SFTP: the last window of a big log, read from its end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, LogFollower, LogLines, RunIndex, StreamState
from tests.sshd import SshHosts


@pytest.mark.serial
def test_a_big_finished_log_opens_at_its_last_window_without_blocking_the_loop(
        hosts: SshHosts, tmp_path: Path) -> None:
    run_dir = tmp_path / "work" / "big"
    run_dir.mkdir(parents=True)
    with open(run_dir / "train.log", "wb") as f:
        for first in range(0, 400_000, 100_000):
            f.write(b"".join(b"{'loss': 0.25, 'step': %d}\n" % i for i in range(first, first + 100_000)))
    (run_dir / "status").write_text("0\n")
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
    lags: list[float] = []

    async def go() -> tuple[list[str], list[StreamState]]:
        async def ticker() -> None:
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0)
                lags.append(time.perf_counter() - t)

        lines: list[str] = []
        states: list[StreamState] = []
        await engine.run_dir("gpu", str(tmp_path / "work"), "big")  # connect before timing
        tick = asyncio.ensure_future(ticker())
        try:
            follower = LogFollower(engine, "gpu", str(tmp_path / "work"), "big", max_lines=10_000)
            async for ev in follower.events():
                if isinstance(ev, LogLines):
                    assert len(ev.lines) <= 2000
                    lines += ev.lines
                else:
                    states.append(ev)
        finally:
            tick.cancel()
            await engine.close()
        return lines, states

    lines, states = asyncio.run(go())
    assert len(lines) == 10_000
    assert lines[0] == "{'loss': 0.25, 'step': 390000}" and lines[-1] == "{'loss': 0.25, 'step': 399999}"
    assert states[-1] == StreamState("ended", "completed")
    assert max(lags) < 0.05, max(lags)
