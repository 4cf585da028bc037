"""A log line no parser expected never freezes a host's rows (issue 15 item 17).

Against the real sshd: one run printed `train loss: --` (a real trainer's placeholder
before its first loss), which made the progress column's parser raise on every refresh,
so the whole host's refresh died and no state in the table ever changed again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.transport.connection import ConnectionPool
from tests.conftest import write_config
from tests.sshd import SshHosts
from tests.test_tui import SIZE, tui, until


@pytest.fixture(autouse=True)
def _client_home(hosts: SshHosts, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))


def test_an_odd_log_line_never_stops_the_hosts_states(hosts: SshHosts, tmp_path: Path) -> None:
    """The odd run and a run started after the app came up both read `completed`, the odd
    one with its last line as progress."""
    workdir = str(tmp_path / "work")

    async def start(engine: Engine, run_id: str, **cfg: object) -> None:
        config = write_config(tmp_path / f"{run_id}.yaml", **cfg)
        await engine.start(StartRequest("gpu", config, run_id=run_id, workdir=workdir, gpus=0))

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        await start(engine, "odd", steps=0, say="train loss: --")
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            await start(engine, "fine", steps=3, step_seconds=0.05)
            await engine.close()
            states = lambda: {v.record.run_id: v.record.state  # noqa: E731
                              for v in app.runs_table.views.values()}
            await until(pilot, lambda: states() == {"odd": "completed", "fine": "completed"},
                        "both runs to read completed")
            views = {v.record.run_id: v for v in app.runs_table.views.values()}
            await until(pilot, lambda: "training done" in views["odd"].progress,
                        "the odd run's last line as its progress")

    asyncio.run(go())
