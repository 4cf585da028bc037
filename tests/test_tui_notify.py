"""Notifications from the app (issue 19), against the real sshd and a real HTTP receiver:
the refresher's sight of a stall is sent once, and a URL that refuses is one toast while
the app goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rtrain_tui.core.logs import retry_rule
from tests.notify_receiver import Receiver
from tests.sshd import SshHosts
from tests.test_tui import SIZE, notifications, tui, until
from tests.test_tui_stall import start_hung_run


def test_the_apps_refresh_sends_a_stall_once_and_a_refusing_url_is_one_toast(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: Receiver) -> None:
    monkeypatch.setenv(retry_rule.STALL_CHECK_ENV, "0.2")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    secret = "SECRETtoken123"
    config_toml = tmp_path / "cfg" / "rtrain-tui" / "config.toml"
    config_toml.parent.mkdir(parents=True)
    config_toml.write_text(f'[notify]\non_host = false\nurls = ["{receiver.url()}", "json://127.0.0.1:9/{secret}"]\n')
    workdir = str(tmp_path / "work")

    start_hung_run(hosts, tmp_path, "hung", workdir)

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: bool(receiver.messages()), "the stall's message", timeout=40)
            await until(pilot, lambda: any("not sent" in m for m in notifications(app)), "the toast")
            for _ in range(3):  # more refreshes of the same stall: nothing sent or said again
                await app.refresher.refresh_all_now()
            got = receiver.messages()
            assert len(got) == 1 and "hung on gpu stalled: no output for" in str(got[0]["title"])
            assert "stop: rtrain-tui stop gpu hung" in str(got[0]["message"])
            said = [m for m in notifications(app) if "not sent" in m]
            assert len(said) == 1 and secret not in said[0] and "json://127.0.0.1:9/SE…" in said[0]
            await pilot.press("x")  # the app goes on: a stop works as ever
            await pilot.pause()
            await pilot.press("y")
            await until(pilot, lambda: "stopped hung on gpu" in notifications(app), "the stop")
            await app.workers.wait_for_complete()

    asyncio.run(go())
