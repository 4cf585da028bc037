"""The TUI driven by Pilot against the real sshd pair and the built-in demo host."""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.transport.connection import ConnectionPool
from rtrain_tui.tui.app import RTrainApp, make_app
from rtrain_tui.tui.screens.fetch_screen import FetchScreen
from rtrain_tui.tui.screens.start_screen import StartScreen
from rtrain_tui.tui.widgets.log_pane import LogPane
from tests.conftest import write_config
from tests.scenes import RUNS, make_scene_app
from tests.sshd import SshHosts

SIZE = (140, 40)


@pytest.fixture(autouse=True)
def _client_home(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process tests see the test client's ~/.ssh, as the CLI subprocesses do."""
    if "hosts" in request.fixturenames:
        monkeypatch.setenv("HOME", str(request.getfixturevalue("hosts").home))


def screen_text(app: RTrainApp) -> str:
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


async def until(pilot: Pilot, predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Wait (bounded) for something a remote process does; the app keeps running meanwhile."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


async def open_start_form(app: RTrainApp, pilot: Pilot, host_row: int = 1,
                          **fields: str) -> StartScreen:
    """Press n on the host at `host_row` (1: gpu) and fill the form's fields by id."""
    app.host_list.highlighted = host_row
    await pilot.press("n")
    await pilot.pause()
    form = app.screen
    assert isinstance(form, StartScreen)
    for name, value in fields.items():
        form.query_one(f"#{name}", Input).value = value
    return form


def notifications(app: RTrainApp) -> list[str]:
    return [n.message for n in app._notifications]


def tui(hosts: SshHosts, tmp_path: Path, poll_runs: bool = False, **kwargs: object) -> RTrainApp:
    return make_app(hosts.ssh_config, RunIndex(tmp_path / "runs.toml"), poll_runs=poll_runs,
                    out_dir=tmp_path / "out", **kwargs)  # type: ignore[arg-type]


def start_run(hosts: SshHosts, tmp_path: Path, run_id: str, **cfg: object) -> None:
    """A run on `gpu`, on its CPU: these tests are about logs and curves, and a second run
    started while the first still holds the one free GPU would (rightly) be refused."""
    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        config = write_config(tmp_path / f"{run_id}.yaml", **cfg)
        await engine.start(StartRequest("gpu", config, run_id=run_id, workdir=str(tmp_path / "work"),
                                        gpus=0))
        await engine.close()

    asyncio.run(go())


def test_host_list_matches_the_ssh_config(hosts: SshHosts, tmp_path: Path) -> None:
    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE):
            assert list(app.host_list.hosts) == ["included", "gpu", "cpu", "refused", "silent"]

    asyncio.run(go())


def test_preflight_fills_the_panel_and_the_badge(hosts: SshHosts, tmp_path: Path) -> None:
    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.host_list.focus()
            app.host_list.highlighted = 1  # gpu
            assert app.host_list.hosts["gpu"].status == "not checked"
            await pilot.press("p")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.host_list.hosts["gpu"].status == "ready"
            assert app.host_list.hosts["gpu"].summary == "2× H200 · 1 busy"
            text = screen_text(app)
            assert "2 GPU(s), 1 busy" in text and "GPU1" in text and "97%" in text

    asyncio.run(go())


def test_an_unreachable_host_does_not_block_the_others(hosts: SshHosts, tmp_path: Path) -> None:
    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.host_list.focus()
            app.host_list.highlighted = 4  # silent: ConnectTimeout 2
            await pilot.press("p")
            app.host_list.highlighted = 1  # gpu
            await pilot.press("p")
            await until(pilot, lambda: app.host_list.hosts["gpu"].status == "ready", "gpu ready")
            assert app.host_list.hosts["silent"].status == "checking"
            await until(pilot, lambda: app.host_list.hosts["silent"].status == "unreachable",
                        "silent unreachable")
            # enter on a host checks it again (a fresh attempt, not a backed-off one)
            app.host_list.highlighted = 2  # cpu
            await pilot.press("enter")
            await until(pilot, lambda: app.host_list.hosts["cpu"].status == "not ready", "cpu checked")
            assert "needs 1 GPU(s), found 0" in screen_text(app)

    asyncio.run(go())


def test_start_form_launches_a_run_whose_log_streams(hosts: SshHosts, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", steps=5, step_seconds=0.1)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await open_start_form(app, pilot, config=str(config), workdir=str(tmp_path / "work"),
                                  run_id="from-tui")
            await pilot.pause()
            await pilot.press("ctrl+s")
            await until(pilot, lambda: app.query(LogPane), "a log pane")
            pane = app.query_one(LogPane)
            await until(pilot, lambda: pane.stream == "ended", "the run to end")
            await pilot.pause(0.1)
            lines = pane.log_widget.lines
            assert lines[-1] == "training done, exit 0" and pane.final_state == "completed"
            assert [v.record.run_id for v in app.runs_table.views.values()] == ["from-tui"]
            app.refresh_runs()
            await until(pilot, lambda: "from-tui on gpu: completed" in notifications(app),
                        "the completion toast")
            assert "completed" in screen_text(app)

    asyncio.run(go())


def test_start_form_validates_as_you_type(hosts: SshHosts, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml")

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("n")
            await pilot.pause()
            form = app.screen
            form.query_one("#config").value = str(config)  # type: ignore[attr-defined]
            form.query_one("#run_id").value = "a b"  # type: ignore[attr-defined]
            await pilot.pause()
            assert form.query_one("#start").disabled  # type: ignore[attr-defined]
            assert "run id 'a b' is not usable" in screen_text(app)
            form.query_one("#run_id").value = "ab"  # type: ignore[attr-defined]
            await pilot.pause()
            assert not form.query_one("#start").disabled  # type: ignore[attr-defined]

    asyncio.run(go())


def test_fetch_brings_the_file_home(hosts: SshHosts, tmp_path: Path) -> None:
    start_run(hosts, tmp_path, "done", steps=2)
    time.sleep(1.0)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.runs_table.focus()
            await pilot.press("f")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, FetchScreen)
            await app.workers.wait_for_complete()
            await pilot.pause()
            tree = screen.query_one("#tree")
            node = next(n for n in tree.root.children if n.data and n.data.path == "train.log")  # type: ignore[attr-defined]
            tree.move_cursor(node)  # type: ignore[attr-defined]
            await pilot.press("ctrl+s")
            await until(pilot, lambda: any(m.startswith("fetched to") for m in notifications(app)),
                        "the fetch toast")
            fetched = tmp_path / "out" / "train.log"
            assert fetched.read_text() == (tmp_path / "work" / "done" / "train.log").read_text()

    asyncio.run(go())


def test_stop_turns_the_badge_to_stopped(hosts: SshHosts, tmp_path: Path) -> None:
    start_run(hosts, tmp_path, "long", steps=10000, step_seconds=0.05)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.runs_table.focus()
            await pilot.press("x")
            await pilot.pause()
            assert "Stop long on gpu?" in screen_text(app)
            await pilot.press("y")
            await until(pilot, lambda: "stopped long on gpu" in notifications(app), "the verdict")
            await app.workers.wait_for_complete()
            await pilot.pause()
            view = next(iter(app.runs_table.views.values()))
            assert view.record.state == "stopped"
            assert "stopped" in screen_text(app)

    asyncio.run(go())


def test_log_pane_counts_new_lines_when_scrolled_up_and_searches(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.open_log(RUNS[0], follow=False)
            await pilot.pause()
            pane.add_lines([f"line {i}" for i in range(300)])
            pane._flush()
            await pilot.pause()
            pane.log_widget.scroll_home(animate=False)
            await pilot.pause()
            pane.add_lines(["fresh 1", "fresh 2", "fresh 3"])
            pane._flush()
            await pilot.pause()
            assert pane.new_lines == 3 and "▼ 3 new lines" in screen_text(app)
            pane.log_widget.focus()
            await pilot.press("G")
            assert pane.new_lines == 0
            assert pane.find_next("line 150") == 150 and not pane.follow
            assert "match 1/1 for 'line 150'" in screen_text(app)

    asyncio.run(go())


def test_log_pane_keeps_a_bounded_window(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.open_log(RUNS[0], follow=False)
            await pilot.pause()
            pane.max_lines = 1000
            pane.log_widget.max_lines = 1000
            for batch in range(5):
                pane.add_lines([f"{batch}-{i}" for i in range(500)])
                pane._flush()
            await pilot.pause()
            assert len(pane.log_widget.lines) == 1000 and pane.log_widget.lines[-1] == "4-499"
            assert "2500 lines (last 1000 shown)" in screen_text(app)

    asyncio.run(go())


def test_filter_narrows_the_runs_table(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("slash", "u", "n", "i")
            await pilot.pause()
            assert app.runs_table.row_count == 2
            await pilot.press("escape")
            await pilot.pause()
            assert app.runs_table.row_count == len(RUNS)

    asyncio.run(go())


def test_demo_host_preflights_trains_and_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    (tmp_path / "ssh_config").write_text("")
    quick = tmp_path / "quick.yaml"
    quick.write_text("max_steps: 12\nstep_seconds: 0.02\nsave_steps: 5\n")

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(tmp_path / "runs.toml"), demo=True,
                       poll_runs=False, out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.host_list.hosts["demo"].status == "ready", "demo ready")
            assert app.host_list.hosts["demo"].summary == "no GPU"
            await pilot.press("n")
            await pilot.pause()
            app.screen.query_one("#config").value = str(quick)  # type: ignore[attr-defined]
            await pilot.pause()
            await pilot.press("ctrl+s")
            await until(pilot, lambda: app.query(LogPane), "a log pane")
            pane = app.query_one(LogPane)
            await until(pilot, lambda: pane.stream == "ended", "the demo run to end")
            await pilot.pause(0.1)
            assert pane.final_state == "completed"
            assert "Saved adapter to lora_model/" in pane.log_widget.lines
        workdir = tmp_path / "xdg" / "rtrain-tui" / "demo-host" / ".praisonai-train"
        run_dirs = [p for p in workdir.iterdir() if not p.name.startswith(".")]  # not .datasets
        assert len(run_dirs) == 1
        assert (run_dirs[0] / "lora_model" / "adapter_model.safetensors").stat().st_size > 0
        assert (run_dirs[0] / "checkpoint-10" / "adapter_config.json").exists()

    asyncio.run(go())


def test_refresh_of_a_silent_host_does_not_hold_up_the_others(hosts: SshHosts, tmp_path: Path) -> None:
    from rtrain_tui.core.runs.index import RunRecord

    run_dir = tmp_path / "work" / "ok"
    run_dir.mkdir(parents=True)
    (run_dir / "status").write_text("0\n")
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("gpu", "ok", str(tmp_path / "work"), state="running"))
    index.add(RunRecord("silent", "far", "~/w", state="running"))
    # The silent host waits out 8 s here, not the shared config's 2: on a loaded CI
    # machine gpu's answer can take longer than 2 s, and the test would then see silent
    # already given up on, which says nothing about whether it held gpu up.
    patient = tmp_path / "ssh_config"
    text = hosts.ssh_config.read_text()
    assert "  ConnectTimeout 2\n" in text
    patient.write_text(text.replace("  ConnectTimeout 2\n", "  ConnectTimeout 8\n"))

    async def go() -> None:
        app = tui(replace(hosts, ssh_config=patient), tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.refresh_runs()
            states = lambda: {v.record.run_id: (v.record.state, v.record.stale)  # noqa: E731
                              for v in app.runs_table.views.values()}
            # the index is read in a thread: until it has been, the table holds no run at all
            await until(pilot, lambda: states().get("ok") == ("completed", False), "gpu's run")
            assert "silent" in app.refresher.in_flight  # still waiting out its ConnectTimeout
            await until(pilot, lambda: states().get("far") == ("running", True), "silent's run stale")
            assert app.host_list.hosts["silent"].status == "unreachable"
            await until(pilot, lambda: "?stale" in screen_text(app), "the stale mark drawn")

    asyncio.run(go())


def test_command_palette_offers_every_action(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE):
            titles = [c.title for c in app.get_system_commands(app.screen)]
            for wanted in ("Preflight (p)", "New run (n)", "Fetch (f)", "Stop (x)", "Refresh (r)"):
                assert wanted in titles

    asyncio.run(go())


def test_quitting_the_app_leaves_runs_running(hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            started = await app.engine.start(StartRequest("gpu", config, run_id="outlives", workdir=workdir))
            app._started(started)
            await until(pilot, lambda: app.query(LogPane) and app.query_one(LogPane).stream == "live",
                        "the live log")
            await pilot.press("q")

    asyncio.run(go())

    async def status() -> str:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        try:
            return (await engine.probe("gpu", workdir, "outlives")).state
        finally:
            await engine.close()

    time.sleep(0.5)
    assert asyncio.run(status()) == "running"


def test_an_unexpected_worker_failure_is_shown_not_swallowed(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            async def broken() -> None:
                raise ValueError("the index went sideways")

            app.run_worker(broken(), group="test", exit_on_error=False)
            await until(pilot, lambda: "ValueError: the index went sideways" in notifications(app),
                        "the error toast")

    asyncio.run(go())


def test_states_refresh_live_and_an_ended_run_rings(hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """With polling on (as a user runs it): a run started elsewhere appears, its badge goes
    running -> completed on its own, and the end raises a toast."""
    config = write_config(tmp_path / "c.yaml", steps=15, step_seconds=0.1)

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            # started by another process (the CLI), after the app was already up
            engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
            await engine.start(StartRequest("gpu", config, run_id="elsewhere", workdir=workdir))
            await engine.close()
            # no key pressed: the app's own discovery finds the new host's run
            states = lambda: [v.record.state for v in app.runs_table.views.values()]  # noqa: E731
            await until(pilot, lambda: states() == ["running"], "the run to show as running")
            await until(pilot, lambda: "step" in next(iter(app.runs_table.views.values())).progress,
                        "the progress column")
            await until(pilot, lambda: states() == ["completed"], "the badge to turn completed")
            await until(pilot, lambda: "elsewhere on gpu: completed" in notifications(app), "toast")

    asyncio.run(go())


def test_a_corrupt_index_is_reported_once_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text("Host a\n")
    broken = tmp_path / "runs.toml"
    broken.write_text("[[runs]\nnot toml")

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(broken), poll_runs=True, refresh_seconds=0.05)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.5)  # several discovery ticks
            said = [m for m in notifications(app) if str(broken) in m]
            assert len(said) == 1 and "left untouched" in said[0]

    asyncio.run(go())
    assert broken.read_text() == "[[runs]\nnot toml"
