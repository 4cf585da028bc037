"""The host panel's GPU rows, driven by Pilot against the real sshd (stand-in nvidia-smi)."""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
from pathlib import Path

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.transport.connection import ConnectionPool
from tests.conftest import write_config
from tests.sshd import TWO_GPUS, SshHosts
from tests.test_tui import (  # noqa: F401 (_client_home: a fixture)
    SIZE,
    _client_home,
    open_start_form,
    screen_text,
    tui,
    until,
)

ME = pwd.getpwuid(os.getuid()).pw_name


def test_host_panel_shows_a_sparkline_per_gpu_and_who_holds_it(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """A run of ours on GPU 0 and another process on GPU 1: after a preflight the app keeps
    sampling the host with its refresh, and the panel names both holders."""
    other = subprocess.Popen(["sleep", "120"])
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        started = await engine.start(StartRequest("gpu", config, run_id="mine", workdir=workdir))
        await engine.close()
        hosts.apps_file.write_text(f"GPU-fake-0, {started.pid}, 3072\nGPU-fake-1, {other.pid}, 69000\n")
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            app.host_list.focus()
            app.host_list.highlighted = 1  # gpu
            await pilot.press("p")
            await until(pilot, lambda: f"{ME}, pid {other.pid}" in screen_text(app),
                        "the other process on GPU 1")
            text = screen_text(app)
            assert "↳ run mine · 3G" in text
            lines = {line.split("GPU", 1)[1][:1]: line for line in text.splitlines() if "GPU0 " in line
                     or "GPU1 " in line}
            # the load now and the memory, after a sparkline of block characters
            assert "97% 68/140G" in lines["1"] and " 0% 1/140G" in lines["0"]
            assert any(c in lines["1"] for c in "▇█")
            history = app.engine.gpu_history["gpu"]
            assert history.latest is not None and {p.run_id for p in history.latest.processes} == {"mine", ""}

    try:
        asyncio.run(go())
    finally:
        hosts.apps_file.unlink(missing_ok=True)
        hosts.gpu_file.write_text(TWO_GPUS)
        other.kill()
        other.wait()


def test_start_form_chooses_gpus_by_hand_refuses_a_busy_one_and_takes_it_when_allowed(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    from textual.widgets import Checkbox, Input, Static

    other = subprocess.Popen(["sleep", "120"])
    hosts.apps_file.write_text(f"GPU-fake-1, {other.pid}, 69000\n")
    config = write_config(tmp_path / "c.yaml", steps=1)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_start_form(app, pilot, config=str(config), workdir=workdir,
                                         run_id="by-hand", gpu_ids="1,0")
            await pilot.pause()
            assert form.query_one("#gpus", Input).value == "2"  # follows the ids
            form.query_one("#gpu_ids", Input).value = "1"
            await pilot.pause()
            assert form.query_one("#gpus", Input).value == "1"
            await pilot.press("ctrl+s")
            errors = form.query_one("#errors", Static)
            await until(pilot, lambda: "in use" in str(errors.render()), "the refusal in the form")
            assert f"GPU 1: 97% busy, 68 GiB, held by {ME}, pid {other.pid}" in str(errors.render())
            assert not (Path(workdir) / "by-hand").exists()
            form.query_one("#allow_busy", Checkbox).value = True
            await pilot.pause()
            await pilot.press("ctrl+s")
            log = Path(workdir) / "by-hand" / "train.log"
            await until(pilot, lambda: log.exists() and "CUDA_VISIBLE_DEVICES" in log.read_text(),
                        "the trainer's log")
            assert "CUDA_VISIBLE_DEVICES=1 " in log.read_text()

    try:
        asyncio.run(go())
    finally:
        hosts.apps_file.unlink(missing_ok=True)
        other.kill()
        other.wait()
