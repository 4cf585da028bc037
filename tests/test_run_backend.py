"""A run's backend is fixed when it starts (issue 15 item 2): marking its host as a Slurm
login node later changes only the runs started after that."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.runs import hostconfig
from rtrain_tui.tui.app import make_app
from tests.conftest import write_config
from tests.sshd import SshHosts
from tests.test_tui import SIZE, until


def test_a_box_run_stays_direct_after_its_host_is_marked_as_slurm(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """It used to follow config.toml: probed as a Slurm job it read `lost`, and `stop`
    asked Slurm, leaving the trainer running. An entry with no backend (older versions)
    is a box run too."""
    index = RunIndex(tmp_path / "runs.toml")
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    marked = tmp_path / "config.toml"
    hostconfig.mark_slurm("gpu", marked)

    async def go() -> None:
        box = Engine(ConnectionPool(hosts.ssh_config), index, hostconfig.HostConfig())
        try:
            for run_id in ("new", "old"):
                await box.start(StartRequest("gpu", config, run_id=run_id, workdir=workdir, gpus=0))
        finally:
            await box.close()
        assert {r.run_id: r.backend for r in index.load()} == {"new": "direct", "old": "direct"}
        # As an older version recorded it: no backend.
        index.update(lambda runs: [replace(r, backend="") if r.run_id == "old" else r for r in runs])
        # Later, with the host marked as a login node (the app's `m`, or by hand):
        cluster = Engine(ConnectionPool(hosts.ssh_config), index, hostconfig.load(marked))
        try:
            assert cluster.backend_of_host("gpu") == "slurm"
            states = await cluster.refresh()
            assert sorted(states.values()) == ["running", "running"]
            for run_id in ("new", "old"):
                assert await cluster.stop("gpu", workdir, run_id, grace=5) == f"stopped {run_id} on gpu"
        finally:
            await cluster.close()

    asyncio.run(go())
    assert {r.run_id: (r.state, r.backend) for r in index.load()} == {
        "new": ("stopped", "direct"), "old": ("stopped", "")}


def test_the_demo_host_is_never_offered_as_a_slurm_login_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs on this machine and sees this machine's `sbatch` (the test Slurm's)."""
    assert shutil.which("sbatch", path="/usr/local/bin:/usr/bin:/bin"), \
        "sbatch is not installed: apt-get install slurm-client (this test needs it on the PATH)"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg_config"))
    (tmp_path / "ssh_config").write_text("")
    notes = lambda app: [n.message for n in app._notifications]  # noqa: E731

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(tmp_path / "runs.toml"), demo=True,
                       poll_runs=False, out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.host_list.hosts["demo"].status == "ready", "demo ready")
            report = app.reports["demo"][0]
            assert not report.slurm_login and "slurm" not in [c.name for c in report.checks]
            app.host_list.focus()
            await pilot.press("m")
            await until(pilot, lambda: any("never a Slurm login node" in m for m in notes(app)),
                        "the refusal")
            assert not any("press m" in m for m in notes(app)), notes(app)
            await app.workers.wait_for_complete()

    asyncio.run(go())
    assert not hostconfig.default_config_path().exists()
