"""The TUI with a cluster beside a box: Slurm runs in the same runs table, one refresh."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.logs import retry_rule
from rtrain_tui.core.runs.hostconfig import HostConfig, HostSettings
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
                # the box's stand-in GPU 1 is busy: its run shares it, as --allow-busy does
                await engine.start(StartRequest(host, long, run_id=run_id, workdir=workdir,
                                                gpus=2, allow_busy=host == "gpu"))
            # The app refreshes once: let the scheduler start `hog` first.
            for _ in range(100):
                if (await engine.probe(LOGIN, workdir, "hog")).state == "running":
                    break
                await asyncio.sleep(0.2)
        finally:
            await engine.close()

    asyncio.run(start_all())
    # The app knows nothing of config.toml here: each run's backend is in the index.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no_config"))
    assert {r.run_id: r.backend for r in index.load()} == {"hog": "slurm", "waiter": "slurm",
                                                           "boxrun": "direct"}

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
            # Slurm may give the reason a scheduler cycle after the job is queued, so
            # refresh until it shows. Asked once, a refresh that found the host still
            # refreshing did nothing, and under load the wait timed out (a full run, once).
            want_reason = "waiting: Resources, 1st in the queue"
            reason = lambda: {v.record.run_id: v.progress  # noqa: E731
                              for v in app.runs_table.views.values()}["waiter"]
            deadline = time.monotonic() + 30
            while reason() != want_reason:
                assert time.monotonic() < deadline, f"the queued run's reason: {reason()!r}"
                app.refresh_runs()
                await pilot.pause(0.5)

    asyncio.run(go())


def test_preflight_panel_of_a_cluster_shows_partitions_and_free_gpus(
        hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    conf = tmp_path / "xdg" / "rtrain-tui"
    conf.mkdir(parents=True)
    (conf / "config.toml").write_text(f'[hosts.{LOGIN}]\nbackend = "slurm"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert slurm.ssh_config is not None

    async def go() -> None:
        app = make_app(slurm.ssh_config, RunIndex(tmp_path / "runs.toml"), poll_runs=False,
                       out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            app.host_list.focus()
            app.host_list.highlighted = list(app.host_list.hosts).index(LOGIN)
            await pilot.press("p")
            await until(pilot, lambda: app.host_list.hosts[LOGIN].status == "ready", "preflight")
            await pilot.pause()
            assert app.host_list.hosts[LOGIN].summary == "Slurm · 4/4 GPUs free"
            text = screen_text(app)
            assert "gpu* ░░░░░░░░ 2/2 GPUs free" in text and "1 node(s): idle" in text
            assert "multi ░░░░░░░░ 2/2 GPUs free" in text and "2 node(s): idle" in text

    asyncio.run(go())


def test_the_start_form_asks_a_login_node_for_partition_nodes_and_time(
        hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path, workdir: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Input, Select

    from rtrain_tui.tui.screens.start_screen import StartScreen

    monkeypatch.setenv("HOME", str(hosts.home))
    conf = tmp_path / "xdg_config" / "rtrain-tui"
    conf.mkdir(parents=True)
    (conf / "config.toml").write_text(f'[hosts.{LOGIN}]\nbackend = "slurm"\npartition = "gpu"\n'
                                      'time = "5"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg_config"))
    assert slurm.ssh_config is not None
    config = write_config(tmp_path / "c.yaml", steps=2)

    async def go() -> None:
        app = make_app(slurm.ssh_config, RunIndex(tmp_path / "runs.toml"), poll_runs=False,
                       out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("n")
            await pilot.pause()
            form = app.screen
            assert isinstance(form, StartScreen)
            form.query_one("#host", Select).value = "gpu"
            await pilot.pause()
            assert form.query_one("#gpu_ids", Input).display
            assert not form.query_one("#partition", Input).display
            form.query_one("#host", Select).value = LOGIN
            await pilot.pause()
            # a login node: the Slurm fields, prefilled from config.toml; no GPU ids
            assert not form.query_one("#gpu_ids", Input).display
            assert form.query_one("#partition", Input).value == "gpu"
            assert form.query_one("#time", Input).value == "5"
            form.query_one("#time", Input).value = "ten minutes"
            await pilot.pause()
            assert "Time limit: " in screen_text(app) and form.query_one("#start").disabled
            form.query_one("#time", Input).value = "0:10:00"
            for name, value in (("config", str(config)), ("workdir", workdir),
                                ("run_id", "fromform"), ("gpus", "1")):
                form.query_one(f"#{name}", Input).value = value
            await pilot.pause()
            await pilot.press("ctrl+s")
            await until(pilot, lambda: not isinstance(app.screen, StartScreen), "the start")
        batch = (Path(workdir) / "fromform" / "run.sbatch").read_text()
        assert "#SBATCH --partition=gpu" in batch and "#SBATCH --time=0:10:00" in batch
        record = next(r for r in RunIndex(tmp_path / "runs.toml").load() if r.run_id == "fromform")
        assert record.backend == "slurm" and record.job_id

    asyncio.run(go())


def test_a_host_with_sbatch_is_offered_and_marked_as_slurm_from_the_app(
        hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtrain_tui.core.runs.hostconfig import default_config_path, load

    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg_config"))  # no config.toml yet
    assert slurm.ssh_config is not None
    notes = lambda app: [n.message for n in app._notifications]  # noqa: E731

    async def go() -> None:
        app = make_app(slurm.ssh_config, RunIndex(tmp_path / "runs.toml"), poll_runs=False,
                       out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            app.host_list.focus()
            app.host_list.highlighted = list(app.host_list.hosts).index(LOGIN)
            await pilot.press("p")
            await until(pilot, lambda: LOGIN in app.reports, "the preflight")
            assert app.reports[LOGIN][0].backend != "slurm"
            await until(pilot, lambda: any("press m" in m for m in notes(app)), "the offer")
            await pilot.press("m")
            await until(pilot, lambda: LOGIN in app.reports
                        and app.reports[LOGIN][0].backend == "slurm", "a Slurm preflight")
            assert [p.name for p in app.reports[LOGIN][0].partitions] == ["gpu", "multi"]

    asyncio.run(go())
    assert load(default_config_path()).for_host(LOGIN).backend == "slurm"


def test_a_silent_slurm_job_shows_its_stall_in_the_runs_table(
        hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path, workdir: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's watchdog (on its batch node) is read by the app's refresh as a box's is:
    `running`, with the stall beside it in the warning colour (issue 18 on Slurm)."""
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setenv(retry_rule.STALL_CHECK_ENV, "0.2")
    assert slurm.ssh_config is not None
    index = RunIndex(tmp_path / "runs.toml")
    hung = write_config(tmp_path / "hung.yaml", steps=100, step_seconds=0.05, hang_at=3)

    async def start() -> None:
        engine = Engine(ConnectionPool(slurm.ssh_config), index,
                        HostConfig({LOGIN: HostSettings("slurm")}))
        try:
            await engine.start(StartRequest(LOGIN, hung, run_id="hung", workdir=workdir, gpus=0,
                                            stall_after_s=3))
        finally:
            await engine.close()

    asyncio.run(start())
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no_config"))

    async def go() -> None:
        app = make_app(slurm.ssh_config, index, poll_runs=False, out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            deadline = time.monotonic() + 60
            while "⚠ stalled: no output for" not in screen_text(app):
                assert time.monotonic() < deadline, screen_text(app)
                app.refresh_runs()
                await pilot.pause(0.5)
            view = next(iter(app.runs_table.views.values()))
            assert view.record.state == "running"
            row = app.runs_table.get_row_at(0)
            assert any(getattr(c, "style", "") == "bold yellow" for c in row)
            await app.workers.wait_for_complete()

    asyncio.run(go())
