"""Slurm ends a job itself (a time limit), and a re-sent submit: both against the real cluster."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex
from rtrain_tui.core.backends import slurm as slurm_backend
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs.hostconfig import HostConfig, HostSettings
from rtrain_tui.tui.app import make_app
from tests.conftest import write_config
from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm_cluster import SlurmCluster
from tests.sshd import SshHosts
from tests.test_tui import SIZE


def test_time_limit_says_timeout_in_the_table_the_toast_and_status(
        scli: SlurmCli, slurm: SlurmCluster, hosts: SshHosts, tmp_path: Path, workdir: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One reason everywhere: the runs table, the end-of-run toast, `status` and its JSON."""
    # Slurm's smallest limit is one minute, and it checks limits every ~30 s: this test
    # takes 60-100 s, the price of a real TIMEOUT.
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.5)
    r = scli("start", LOGIN, "-c", str(config), "--workdir", workdir, "--run-id", "slow",
             "--time", "1", "--no-follow")
    assert r.rc == 0, r.err
    assert "#SBATCH --time=1" in (Path(workdir) / "slow" / "run.sbatch").read_text()
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no_config"))  # the index says slurm
    assert slurm.ssh_config is not None

    async def watch() -> tuple[str, str, list[str]]:
        app = make_app(slurm.ssh_config, RunIndex(scli.index), poll_runs=False,
                       out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            view = lambda: next(iter(app.runs_table.views.values()))  # noqa: E731
            deadline = time.monotonic() + 150
            # Refreshed as the poll would: once running, then until Slurm ends the job.
            while not app.runs_table.views or view().record.state in ("queued", "running", "starting") \
                    or not view().progress.startswith("✗"):
                assert time.monotonic() < deadline, "the job never timed out"
                app.refresh_runs()
                await pilot.pause(1.0)
            return view().record.state, view().progress, [n.message for n in app._notifications]

    state, cell, toasts = asyncio.run(watch())
    assert state.startswith("failed (exit ") and cell == "✗ TIMEOUT", (state, cell)
    assert f"slow on {LOGIN}: {state}\nTIMEOUT" in toasts, toasts
    got = json.loads(scli("status", LOGIN, "slow", "--workdir", workdir, "--json").out)
    assert (got["state"], got["reason"], got["slurm_state"]) == (state, "TIMEOUT", "TIMEOUT")
    plain = scli("status", LOGIN, "slow", "--workdir", workdir)
    assert (plain.out, plain.err) == (f"{state}\n", f"rtrain-tui: slow on {LOGIN}: TIMEOUT\n")


def test_a_resent_submit_makes_one_job(hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path,
                                       workdir: str) -> None:
    """The connection re-sends a script once after a dropped link: that must not submit twice."""
    engine = Engine(ConnectionPool(slurm.ssh_config), RunIndex(tmp_path / "runs.toml"),
                    HostConfig({LOGIN: HostSettings("slurm")}))
    token = "ab" * 16
    run_dir = Path(workdir) / "twice"

    async def go() -> list[str]:
        conn = engine.host(LOGIN)
        try:
            await conn.run(remote_sh.make_run_dir(workdir, "twice", token))
            (run_dir / "config.yaml").write_text("model: tiny\nsteps: 1\n")
            (run_dir / "run.sbatch").write_text(slurm_backend.batch_script(
                "twice", token, "python3 -m praisonai_train llm --config config.yaml", {},
                slurm_backend.SlurmOptions(), 0))
            script = slurm_backend.submit(str(run_dir), token)
            return list(await asyncio.gather(conn.run(script), conn.run(script)))
        finally:
            await engine.close()

    first, second = asyncio.run(go())
    assert first == second and first.startswith("job=")
    job = first.splitlines()[0].removeprefix("job=")  # then the cluster's notice
    names = slurm.client("squeue", "-h", "-t", "all", "-o", "%i %j").splitlines()
    assert [n for n in names if n.endswith("rtrain-twice")] == [f"{job} rtrain-twice"]


def test_backend_flag_works_without_a_config_file(pcli: SlurmCli) -> None:
    r = pcli("preflight", LOGIN, "--backend", "slurm", "--gpus", "3")
    assert r.rc == 1
    assert "needs 3 GPU(s) per node, partition gpu has at most 2" in r.err


def test_slurm_flags_for_a_box_are_refused_not_ignored(pcli: SlurmCli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml")
    r = pcli("start", "gpu", "-c", str(config), "--partition", "gpu", "--time", "5")
    assert r.rc == 1 and r.err.count("\n") == 1
    assert "--partition, --time only apply to Slurm hosts: add --backend slurm" in r.err
    assert not (tmp_path / "runs.toml").exists()
