"""The host panel's GPU rows, driven by Pilot against the real sshd (stand-in nvidia-smi)."""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
from pathlib import Path

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.connection import ConnectionPool
from tests.conftest import write_config
from tests.sshd import TWO_GPUS, SshHosts
from tests.test_tui import SIZE, _client_home, screen_text, tui, until  # noqa: F401 (fixture)

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
