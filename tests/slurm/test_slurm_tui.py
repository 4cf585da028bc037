"""The TUI with a cluster beside a box: Slurm runs in the same runs table, one refresh."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.hostconfig import HostConfig, HostSettings
from rtrain_tui.tui.app import make_app
from tests.conftest import write_config
from tests.slurm.conftest import LOGIN
from tests.slurm_cluster import SlurmCluster
from tests.sshd import SshHosts
from tests.test_tui import SIZE, screen_text, until


def test_queued_and_running_slurm_runs_show_next_to_a_box_run(
        hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path, workdir: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    assert slurm.ssh_config is not None
    index = RunIndex(tmp_path / "runs.toml")
    long = write_config(tmp_path / "long.yaml", steps=100000, step_seconds=0.2)

    async def start_all() -> None:
        engine = Engine(ConnectionPool(slurm.ssh_config), index,
                        HostConfig({LOGIN: HostSettings("slurm")}))
        try:
            for host, run_id in ((LOGIN, "hog"), (LOGIN, "waiter"), ("gpu", "boxrun")):
                await engine.start(StartRequest(host, long, run_id=run_id, workdir=workdir,
                                                gpus=2))
        finally:
            await engine.close()

    asyncio.run(start_all())
    # The app knows nothing of config.toml here: each run's backend is in the index.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no_config"))
    assert {r.run_id: r.backend for r in index.load()} == {"hog": "slurm", "waiter": "slurm",
                                                           "boxrun": ""}

    async def go() -> None:
        app = make_app(slurm.ssh_config, index, poll_runs=False, out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            app.refresh_runs()
            states = lambda: {v.record.run_id: v.record.state  # noqa: E731
                              for v in app.runs_table.views.values()}
            want = {"hog": "running", "waiter": "queued", "boxrun": "running"}
            await until(pilot, lambda: states() == want, f"states {want}")
            text = screen_text(app)
            assert "queued" in text and "waiter" in text and "boxrun" in text

    asyncio.run(go())
