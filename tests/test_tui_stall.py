"""A stalled run in the app (issue 18, Notice a stall), against the real sshd: the row
keeps `running` with the reason in the warning colour, and one toast says so."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.logs import retry_rule
from tests.conftest import write_config
from tests.sshd import SshHosts
from tests.test_tui import SIZE, notifications, screen_text, tui, until


def test_a_stalled_run_keeps_running_with_a_warning_and_one_toast(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(retry_rule.STALL_CHECK_ENV, "0.2")
    workdir = str(tmp_path / "work")

    async def start() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        config = write_config(tmp_path / "hung.yaml", steps=100, step_seconds=0.05, hang_at=3)
        await engine.start(StartRequest("gpu", config, run_id="hung", workdir=workdir, gpus=0,
                                        stall_after_s=3))
        await engine.close()

    asyncio.run(start())

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "⚠ stalled: no output for" in screen_text(app), "the stall",
                        timeout=30)
            view = next(iter(app.runs_table.views.values()))
            assert view.record.state == "running"
            said = [m for m in notifications(app) if "stalled: no output for" in m]
            assert len(said) == 1 and said[0].startswith("hung on gpu: stalled: no output for ")
            row = app.runs_table.get_row_at(0)
            assert any(getattr(c, "style", "") == "bold yellow" for c in row)
            for _ in range(5):  # more refreshes of the same stall: still one toast
                await app.refresher.refresh_all_now()
            assert len([m for m in notifications(app) if "stalled: no output for" in m]) == 1
            await pilot.press("x")
            await pilot.pause()
            await pilot.press("y")
            await until(pilot, lambda: "stopped hung on gpu" in notifications(app), "the stop")
            await app.workers.wait_for_complete()

    asyncio.run(go())
