"""The TUI under faults: log tabs in any order, a slow or locked or half-broken index,
a cancelled start. Driven by Pilot against the real sshd pair, as users run the app."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Input, TabbedContent

from rtrain_tui.core.runs.index import IndexReport, RunIndex, RunRecord
from rtrain_tui.tui.app import RTrainApp, make_app
from rtrain_tui.tui.badges import RUN_STYLES, run_badge
from rtrain_tui.tui.screens.start_screen import StartScreen
from rtrain_tui.tui.widgets.log_pane import LogPane
from tests.conftest import Throttled, write_config
from tests.sshd import SshHosts
from tests.test_tui import SIZE, notifications, open_start_form, screen_text, until
from tests.unit.test_index import lock_held_elsewhere


@pytest.fixture(autouse=True)
def _client_home(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "hosts" in request.fixturenames:
        monkeypatch.setenv("HOME", str(request.getfixturevalue("hosts").home))


def finished_runs(tmp_path: Path, ids: list[str]) -> RunIndex:
    """Runs on `gpu` that completed, newest first in the table, each with a short log."""
    work = tmp_path / "work"
    index = RunIndex(tmp_path / "runs.toml")
    for n, run_id in enumerate(ids):
        run_dir = work / run_id
        run_dir.mkdir(parents=True)
        (run_dir / "train.log").write_text(f"hello from {run_id}\n")
        (run_dir / "status").write_text("0\n")
        index.add(RunRecord("gpu", run_id, str(work), state="completed",
                            started_at=f"2026-11-29T1{9 - n}:00:00+00:00"))
    return index


def app_for(hosts: SshHosts, tmp_path: Path, index: RunIndex, **kwargs: object) -> RTrainApp:
    kwargs.setdefault("poll_runs", False)
    return make_app(hosts.ssh_config, index, out_dir=tmp_path / "out", **kwargs)  # type: ignore[arg-type]


def open_tabs(app: RTrainApp) -> list[str]:
    return [pane.record.run_id for pane in app.query(LogPane)]


def test_log_tabs_open_and_close_in_any_order(hosts: SshHosts, tmp_path: Path) -> None:
    ids = ["a", "b", "c", "d"]
    index = finished_runs(tmp_path, ids)

    async def go() -> None:
        app = app_for(hosts, tmp_path, index)
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            table = app.runs_table
            tabs = app.query_one("#logs", TabbedContent)

            async def open_log(run_id: str) -> None:
                table.focus()
                table.move_cursor(row=ids.index(run_id))
                await pilot.press("enter")
                await pilot.pause()

            async def close_log(run_id: str) -> None:
                tabs.active = app.log_panes[("gpu", str(tmp_path / "work"), run_id)]
                await pilot.pause()
                table.focus()
                await pilot.press("w")
                await pilot.pause()

            for run_id in ("a", "b", "c"):
                await open_log(run_id)
            assert open_tabs(app) == ["a", "b", "c"]
            await close_log("b")  # not the last one
            await open_log("d")  # used to reuse a live tab's id: DuplicateIds, app gone
            assert open_tabs(app) == ["a", "c", "d"]
            await close_log("a")
            await open_log("b")
            await open_log("a")
            assert open_tabs(app) == ["c", "d", "b", "a"]
            await close_log("d")
            await close_log("c")
            await open_log("c")
            assert open_tabs(app) == ["b", "a", "c"]
            for _ in range(4):  # one more than there are tabs
                table.focus()
                await pilot.press("w")
                await pilot.pause()
            assert open_tabs(app) == [] and "No log open" in screen_text(app)
            await open_log("d")
            pane = app.query_one(LogPane)
            await until(pilot, lambda: pane.log_widget.lines == ["hello from d"], "d's log")
            assert app.is_running and tabs.active == app.log_panes[pane.record.key]

    asyncio.run(go())


def test_starting_has_its_own_style_in_the_runs_table() -> None:
    starting = run_badge("starting")
    assert starting.plain == "starting" and starting.style
    others = {run_badge(s).style for s in (*RUN_STYLES, "failed (exit 1)") if s != "starting"}
    assert starting.style not in others


def test_an_invalid_record_shows_the_other_runs_and_one_warning(tmp_path: Path) -> None:
    # a host that refuses at once: its runs turn stale, so the index is rewritten
    (tmp_path / "ssh_config").write_text("Host a\n  HostName 127.0.0.1\n  Port 1\n")
    path = tmp_path / "runs.toml"
    path.write_text(
        '[[runs]]\nhost = "a"\nrun_id = "good"\nworkdir = "~/w"\nstate = "stopped"\n\n'
        '[[runs]]\nhost = 1\nrun_id = "bad"\nworkdir = "~/w"\nstate = 7\n\n'
        '[[runs]]\nhost = "a"\nrun_id = "also-good"\nworkdir = "~/w"\nstate = "starting"\n')
    before = tomllib.loads(path.read_text())["runs"][1]

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(path), poll_runs=True, refresh_seconds=0.05)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.runs_table.row_count == 2, "the valid runs")
            await pilot.pause(0.5)  # several discovery ticks
            said = [m for m in notifications(app) if "run #2" in m]
            assert len(said) == 1 and "host should be text" in said[0]
            text = screen_text(app)
            assert "good" in text and "also-good" in text and "starting" in text
            await until(pilot, lambda: "?stale" in screen_text(app), "the refusing host's runs stale")
            assert app.is_running

    asyncio.run(go())
    assert tomllib.loads(path.read_text())["runs"][1] == before  # kept, as it was


class SlowIndex(RunIndex):
    """An index on a slow disk (a busy NFS home): every read takes `delay` seconds."""

    def __init__(self, path: Path, delay: float) -> None:
        super().__init__(path)
        self.delay = delay
        self.reading = threading.Event()

    def load_report(self) -> IndexReport:
        self.reading.set()
        time.sleep(self.delay)
        self.reading.clear()
        return super().load_report()


@pytest.mark.serial
def test_a_slow_index_read_never_freezes_the_screen(tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text("Host a\n")
    index = SlowIndex(tmp_path / "runs.toml", delay=2.0)
    index.add(RunRecord("a", "r", "~/w", state="stopped"))

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", index, poll_runs=False)
        async with app.run_test(size=SIZE) as pilot:
            assert index.reading.wait(5)  # the first load is under way
            began = time.monotonic()
            await pilot.press("slash")
            await pilot.pause()
            assert time.monotonic() - began < 1.0 and index.reading.is_set()
            assert app.query_one("#run-filter", Input).has_focus
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.runs_table.row_count == 1

    asyncio.run(go())


@pytest.mark.serial
def test_a_lock_held_by_another_process_never_freezes_the_screen(hosts: SshHosts, tmp_path: Path) -> None:
    """The run completed on the host while the index says running, so the refresh must
    write; another process holds the lock the whole time."""
    index = finished_runs(tmp_path, ["done"])
    index.set_states({("gpu", str(tmp_path / "work"), "done"): ("running", False, "t")})
    index = RunIndex(index.path, lock_timeout=2.0)

    async def go() -> None:
        app = app_for(hosts, tmp_path, index)
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            with lock_held_elsewhere(index.lock_path):
                app.refresh_runs()
                await until(pilot, lambda: "gpu" in app.refresher.in_flight, "the refresh to start")
                worst = 0.0
                deadline = time.monotonic() + 2.5  # past the lock wait
                while time.monotonic() < deadline:
                    began = time.monotonic()
                    await pilot.press("j")
                    worst = max(worst, time.monotonic() - began)
                # A frozen screen waits out the whole 2 s lock; a loaded 2-core machine
                # can take half a second for a key on its own, so the bound sits between.
                assert worst < 1.5, f"a key took {worst:.1f} s to be handled"
                await until(pilot, lambda: any("locked by another process" in m
                                               for m in notifications(app)), "the busy warning")
            assert app.is_running
            app.refresh_runs()  # the lock is free again: the next refresh writes
            await until(pilot, lambda: [v.record.state for v in app.runs_table.views.values()]
                        == ["completed"], "the completed badge")

    asyncio.run(go())


def test_escape_during_a_start_cancels_it_without_a_crash(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "c.yaml", steps=2, step_seconds=0.05)
    dataset = tmp_path / "big.jsonl"
    # Random bytes (no compression shrinks them) over a slow link: the upload is still
    # under way when escape is pressed, however loaded the machine. (Repeated lines
    # compressed 1000x, and the whole start could end before the key arrived.)
    dataset.write_bytes(os.urandom(4_000_000))
    link = throttled("gpu", rate_mbit=8)
    work = tmp_path / "work"

    async def go() -> None:
        app = make_app(link.ssh_config, RunIndex(tmp_path / "runs.toml"), poll_runs=False,
                       out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            form = await open_start_form(app, pilot, host_row=app.hosts.index(link.alias),
                                         config=str(config), dataset=str(dataset),
                                         workdir=str(work), run_id="cancelled")
            await pilot.press("ctrl+s")
            step = form.query_one("#step")
            # The dataset's own bytes moving, not "uploading to <run dir>" after them.
            await until(pilot, lambda: "uploading big.jsonl" in str(step.render()), "the upload")
            await pilot.press("escape")
            # The form stays (saying "cancelling: undoing…") until the engine has undone
            # what the start made: on a loaded machine that takes more than one frame.
            await until(pilot, lambda: not isinstance(app.screen, StartScreen),
                        "the form to close once the start is undone")
            await app.workers.wait_for_complete()
            said = lambda: [m for m in notifications(app) if "start was cancelled" in m]  # noqa: E731
            await until(pilot, lambda: said() != [], "the toast")
            assert app.is_running
            errors = [m for m in notifications(app) if "Error" in m or "Traceback" in m]
            assert errors == []
            assert len(said()) == 1
            # Nothing launched, nothing recorded: the dataset goes while the preflight and
            # the run dir are under way, so the escape lands before the run dir exists or
            # after (it is removed); the toast says which, and both leave nothing.
            assert app.runs_table.views == {}
            assert RunIndex(tmp_path / "runs.toml").load() == []
            assert not (work / "cancelled").exists(), said()
            assert (f"no run was created on {link.alias}." in said()[0]
                    or f"run cancelled was removed from {link.alias}, nothing is left of it."
                    in said()[0]), said()
            # and no half-sent dataset: the host program removes its part file when its
            # channel closes, a moment after the cancel (a whole one may have arrived:
            # the store holds only verified content, shared by every run)
            parts = lambda: list((work / ".datasets").glob(".up-*.part"))  # noqa: E731
            await until(pilot, lambda: parts() == [], "the part file to go")
            await pilot.press("n")  # the app still takes new work
            await pilot.pause()
            assert isinstance(app.screen, StartScreen)

    asyncio.run(go())


def test_an_index_broken_again_after_a_fix_is_reported_again(tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text("Host a\n  HostName 127.0.0.1\n  Port 1\n")
    path = tmp_path / "runs.toml"
    path.write_text("[[runs]\nnot toml")

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(path), poll_runs=True, refresh_seconds=0.05)
        async with app.run_test(size=SIZE) as pilot:
            said = lambda: [m for m in notifications(app) if "not valid TOML" in m]  # noqa: E731
            await until(pilot, lambda: len(said()) == 1, "the first report")
            path.write_text('[[runs]]\nhost = "a"\nrun_id = "r"\nworkdir = "~/w"\n')
            app.load_runs()
            await until(pilot, lambda: app.runs_table.row_count == 1, "the fixed index")
            path.write_text("[[runs]\nnot toml")
            await until(pilot, lambda: len(said()) == 2, "the second report")
            await pilot.pause(0.3)
            assert len(said()) == 2  # still once per breakage, not once per tick

    asyncio.run(go())


def test_a_cancel_that_lands_as_the_launch_finishes_closes_the_form_once(
        hosts: SshHosts, tmp_path: Path) -> None:
    """CI found this race: Esc pressed while the start was finishing, the start returned
    anyway (the cancel came too late), the form closed with the run, then closed again on
    the worker's end: "Can't pop screen", and the app died. The engine here finishes the
    launch whatever the cancel says, which pins that order every time."""
    config = write_config(tmp_path / "c.yaml", steps=2, step_seconds=0.05)

    async def go() -> None:
        app = app_for(hosts, tmp_path, RunIndex(tmp_path / "runs.toml"))
        real_start = app.engine.start
        launching = asyncio.Event()

        async def start_ignoring_cancel(*args: object, **kwargs: object) -> object:
            task = asyncio.ensure_future(real_start(*args, **kwargs))  # type: ignore[arg-type]
            launching.set()
            while True:
                try:
                    return await asyncio.shield(task)
                except asyncio.CancelledError:
                    continue  # too late to stop: the launch goes on, as a swallowed cancel does

        app.engine.start = start_ignoring_cancel  # type: ignore[method-assign]
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await open_start_form(app, pilot, config=str(config), workdir=str(tmp_path / "work"),
                                  run_id="late")
            await pilot.pause()
            await pilot.press("ctrl+s")
            await until(pilot, launching.is_set, "the start")
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, StartScreen), "the form to close")
            await app.workers.wait_for_complete()
            await pilot.pause(0.5)
            assert app.is_running
            said = notifications(app)
            assert any("cancelled too late: late had already launched" in m for m in said), said
            assert [r.run_id for r in RunIndex(tmp_path / "runs.toml").load()] == ["late"]
            await pilot.press("n")  # the app still takes new work
            await pilot.pause()
            assert isinstance(app.screen, StartScreen)

    asyncio.run(go())


def test_ctrl_s_during_a_start_is_refused_never_a_second_start(hosts: SshHosts, tmp_path: Path) -> None:
    """A second ctrl+s (or Start) while the first start is under way says so in the form
    and starts nothing: it never cancels the first start and begins another (a start
    cancelled after its trainer launched plus a new one were two trainers in one run).
    The first start is held at its beginning until the second ctrl+s was answered."""
    config = write_config(tmp_path / "c.yaml", steps=2, step_seconds=0.05)

    async def go() -> None:
        app = app_for(hosts, tmp_path, RunIndex(tmp_path / "runs.toml"))
        starts = []
        go_on = asyncio.Event()
        real_start = app.engine.start

        async def held_start(*args: object, **kwargs: object) -> object:
            starts.append(args)
            await go_on.wait()
            return await real_start(*args, **kwargs)  # type: ignore[arg-type]

        app.engine.start = held_start  # type: ignore[method-assign]
        async with app.run_test(size=SIZE) as pilot:
            form = await open_start_form(app, pilot, config=str(config),
                                         workdir=str(tmp_path / "work"))
            await pilot.pause()
            await pilot.press("ctrl+s")
            await until(pilot, lambda: len(starts) == 1, "the start")
            first = [w for w in form.workers if w.group == "start"]
            form.query_one("#run_id", Input).value = "x"  # typing re-validates the form
            form.query_one("#run_id", Input).value = ""
            await pilot.pause()
            assert form.query_one("#start").disabled  # still under way: Start stays off
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert "a start is already under way" in str(form.query_one("#errors").render())
            assert not any(w.is_cancelled for w in first)
            go_on.set()
            await until(pilot, lambda: not isinstance(app.screen, StartScreen), "the start")
            await app.workers.wait_for_complete()
            assert len(starts) == 1
            runs = RunIndex(tmp_path / "runs.toml").load()
            assert len(runs) == 1 and runs[0].state in ("running", "completed")
            assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [runs[0].run_id]

    asyncio.run(go())


def test_a_refresh_that_lands_while_the_app_tears_its_widgets_down_is_dropped(tmp_path: Path) -> None:
    """A refresh posted late (the app closing under a fast poll) found the host list gone:
    its handler raised NoMatches and the app died with it (seen under load at exit)."""
    from rtrain_tui.core.host_view import HostView
    from rtrain_tui.tui.messages import HostRefreshed

    (tmp_path / "ssh_config").write_text("Host a\n  HostName 127.0.0.1\n  Port 1\n")

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(tmp_path / "runs.toml"))
        async with app.run_test(size=SIZE) as pilot:
            await app.host_list.remove()  # what closing does to the screen's widgets
            app.post_message(HostRefreshed("a", view=HostView("a")))
            await pilot.pause(0.2)
            assert app.is_running and app.return_code is None

    asyncio.run(go())


def test_a_start_whose_result_comes_back_as_the_app_closes_is_dropped(tmp_path: Path) -> None:
    """The start form's result reached the app while it shut down (a start that ended as
    the user quit): opening its log pane raised NoMatches on #logs (seen under load)."""
    from rtrain_tui.core.engine import StartedRun

    (tmp_path / "ssh_config").write_text("Host a\n  HostName 127.0.0.1\n  Port 1\n")
    app = make_app(tmp_path / "ssh_config", RunIndex(tmp_path / "runs.toml"))

    async def go() -> None:
        async with app.run_test(size=SIZE):
            pass
        record = RunRecord("a", "late", "~/w", state="running")
        app.run_actions.started(StartedRun("a", "late", "~/w/late", 42, record))

    asyncio.run(go())
