"""A stalled run in the app (issue 18, Notice a stall), against the real sshd: the row
keeps `running` with the reason in the warning colour, and one toast says so; and a run
the app's refresh resumed after a reboot, said in a toast."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.logs import retry_rule
from tests.conftest import Cli, write_config
from tests.sshd import SshHosts
from tests.test_resume_sshd import marked, wait_for
from tests.test_tui import SIZE, notifications, screen_text, tui, until


def start_hung_run(hosts: SshHosts, tmp_path: Path, run_id: str, workdir: str,
                   on_stall: str = "warn") -> None:
    """Start, and leave, a run whose trainer hangs silently at step 3 (stall after 3 s)."""
    async def start() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        config = write_config(tmp_path / "hung.yaml", steps=100, step_seconds=0.05, hang_at=3)
        await engine.start(StartRequest("gpu", config, run_id=run_id, workdir=workdir, gpus=0,
                                        stall_after_s=3, on_stall=on_stall))
        await engine.close()

    asyncio.run(start())


def test_a_stalled_run_keeps_running_with_a_warning_and_one_toast(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(retry_rule.STALL_CHECK_ENV, "0.2")
    workdir = str(tmp_path / "work")

    start_hung_run(hosts, tmp_path, "hung", workdir)

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


def test_a_run_its_watchdog_stopped_reads_stopped_with_the_stall_and_no_stall_toast(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--on-stall stop`: the row said a bare `stopped`, as for a user's stop; why goes
    beside it, and the toast for a running run that turns stalled is not raised again
    for a run that ended."""
    monkeypatch.setenv(retry_rule.STALL_CHECK_ENV, "0.2")
    workdir = str(tmp_path / "work")

    start_hung_run(hosts, tmp_path, "hs", workdir, on_stall="stop")
    wait_for("the watchdog's stop", lambda: (Path(workdir) / "hs" / "status").exists(), timeout=30)

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "✗ stalled: no output for" in screen_text(app), "the reason",
                        timeout=30)
            assert next(iter(app.runs_table.views.values())).record.state == "stopped"
            assert not [m for m in notifications(app) if "stalled" in m], notifications(app)
            await app.workers.wait_for_complete()

    asyncio.run(go())


def test_the_app_says_when_its_refresh_resumed_a_run_lost_to_a_reboot(
        hosts: SshHosts, tmp_path: Path) -> None:
    """As tests/test_retry_sshd.py's reboot stand-in, seen from the app: its own refresh
    resumes the run, and a toast says so."""
    boot = tmp_path / "boot_id"
    config = tmp_path / "ssh_config"
    config.write_text(hosts.ssh_config.read_text() + hosts.extra_host(
        "rebooting", sftp="Subsystem sftp internal-sftp\n",
        extra_env={"RTRAIN_TEST_BOOT_ID_FILE": str(boot)}))
    moved = replace(hosts, ssh_config=config)
    cli = Cli(moved, tmp_path / "runs.toml")
    cfg = write_config(tmp_path / "t6.yaml", steps=10000, step_seconds=0.05)
    r = cli("start", "rebooting", "-c", str(cfg), "--workdir", str(tmp_path / "work"),
            "--run-id", "t6", "--no-follow", "--gpus", "0", "--retries", "1")
    assert r.rc == 0, r.err
    token = (tmp_path / "work" / "t6" / "train.token").read_text().strip()
    for pid in marked(token):
        os.kill(pid, signal.SIGKILL)
    wait_for("the run's processes to go", lambda: marked(token) == [])
    boot.write_text("00000000-0000-4000-8000-000000000000\n")

    async def go() -> None:
        app = tui(moved, tmp_path, poll_runs=True)
        async with app.run_test(size=SIZE) as pilot:
            want = "t6 on rebooting was lost to a reboot of the host; resumed it: attempt 2, from the start"
            await until(pilot, lambda: want in notifications(app), "the toast")
            await until(pilot, lambda: "attempt 2 ·" in screen_text(app), "the row's attempt")
            await app.workers.wait_for_complete()

    try:
        asyncio.run(go())
    finally:
        for pid in marked((tmp_path / "work" / "t6" / "train.token").read_text().strip()):
            os.kill(pid, signal.SIGKILL)
