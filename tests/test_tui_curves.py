"""Curves, the progress column and failure reasons in the TUI, against the real sshd."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import TabbedContent

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.transport.connection import ConnectionPool
from rtrain_tui.tui.screens.compare_screen import CompareScreen
from rtrain_tui.tui.widgets.curves_pane import CurvesPane
from rtrain_tui.tui.widgets.run_tab import RunTab
from tests.conftest import write_config
from tests.sshd import SshHosts
from tests.test_tui import SIZE, notifications, screen_text, start_run, tui, until


@pytest.fixture(autouse=True)
def _cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_c_toggles_a_runs_tab_between_log_and_falling_loss_curve(hosts: SshHosts, tmp_path: Path) -> None:
    start_run(hosts, tmp_path, "curvy", hf_style=True, steps=40, step_seconds=0.02, eval_steps=10)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.runs_table.row_count == 1, "the run in the table")
            app.runs_table.focus()
            await pilot.press("c")
            await until(pilot, lambda: bool(app.query(CurvesPane)), "the curves pane")
            curves = app.query_one(CurvesPane)
            await until(pilot, lambda: curves.parser is not None and len(curves.parser.losses) == 20,
                        "the whole loss series")
            losses = [v for _, v in curves.parser.losses]
            assert losses[0] > losses[-1]  # it learned
            assert [s for s, _ in curves.parser.eval_losses] == [10, 20, 30, 40]
            await pilot.pause()
            text = screen_text(app)
            assert "step 40/40 (100%)" in text and "finished" in text
            assert "loss" in text and "eval loss" in text and "grad norm" in text
            tab = app.query_one(RunTab)
            assert tab.showing_curves
            await pilot.press("c")
            await pilot.pause()
            assert not tab.showing_curves
            assert app.query_one(RunTab).current == "run-log"

    asyncio.run(go())


def test_c_in_the_runs_table_shows_the_selected_runs_curves_not_the_open_tabs(
        hosts: SshHosts, tmp_path: Path) -> None:
    """Found in a new-user trial: with another run's tab in front, `c` on a run in the
    table toggled the tab in front instead."""
    start_run(hosts, tmp_path, "first", hf_style=True, steps=10, step_seconds=0.01)
    start_run(hosts, tmp_path, "second", hf_style=True, steps=10, step_seconds=0.01)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.runs_table.row_count == 2, "both runs in the table")
            table = app.runs_table
            table.focus()
            keys = {v.record.run_id: v.key for v in table.views.values()}
            table.select_run(keys["first"])
            await pilot.press("enter")  # first's log tab, in front
            await until(pilot, lambda: len(app.query(RunTab)) == 1, "first's tab")
            table.focus()
            table.select_run(keys["second"])
            await pilot.press("c")
            await until(pilot, lambda: len(app.query(RunTab)) == 2, "second's tab")
            tabs = {t.record.run_id: t for t in app.query(RunTab)}
            await pilot.pause()
            assert tabs["second"].showing_curves and not tabs["first"].showing_curves
            front = app.query_one("#logs", TabbedContent).active
            assert app.log_panes[tabs["second"].record.key] == front
            table.select_run(keys["first"])
            await pilot.press("c")  # first's tab exists, behind: to the front, as curves
            await pilot.pause()
            assert tabs["first"].showing_curves and tabs["second"].showing_curves
            await pilot.press("c")  # now in front: back to its log
            await pilot.pause()
            assert not tabs["first"].showing_curves and tabs["second"].showing_curves

    asyncio.run(go())


def test_progress_column_shows_final_step_and_loss_once_ended(hosts: SshHosts, tmp_path: Path) -> None:
    start_run(hosts, tmp_path, "done", hf_style=True, steps=10, step_seconds=0.01)

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            view = lambda: next(iter(app.runs_table.views.values()), None)  # noqa: E731
            await until(pilot, lambda: view() is not None and view().record.state == "completed"
                        and view().progress != "", "the final progress")
            # "Writing model shards 1/1" was the last bar: the run's progress is 10/10.
            assert view().progress.startswith("10/10 ▕██████▏ loss 1.000")
            assert "·" not in view().progress  # no ETA once ended

    asyncio.run(go())


def test_failed_run_shows_its_reason_in_the_table_and_the_toast(hosts: SshHosts, tmp_path: Path) -> None:
    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            # An OOM run started while the app watches: it sees it run, then die.
            engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
            config = write_config(tmp_path / "oom.yaml", hf_style=True, steps=40, step_seconds=0.05,
                                  crash="cuda_oom")
            await engine.start(StartRequest("gpu", config, run_id="oom", workdir=str(tmp_path / "work")))
            await engine.close()
            key = ("gpu", str(tmp_path / "work"), "oom")
            await until(pilot, lambda: key in app.runs_table.views
                        and app.runs_table.views[key].record.state == "failed (exit 1)"
                        and app.runs_table.views[key].progress.startswith("✗"), "the reason")
            assert app.runs_table.views[key].progress.startswith("✗ CUDA out of memory: tried to allocate")
            assert "CUDA out of memory" in screen_text(app)
            toast = [m for m in notifications(app) if m.startswith("oom on gpu: failed (exit 1)")]
            assert toast and "CUDA out of memory: tried to allocate 2.00 GiB on GPU 0" in toast[0]

    asyncio.run(go())


def test_space_marks_runs_and_C_overlays_their_loss_curves(hosts: SshHosts, tmp_path: Path) -> None:
    start_run(hosts, tmp_path, "lr-high", hf_style=True, steps=20, step_seconds=0.01)
    start_run(hosts, tmp_path, "lr-low", hf_style=True, steps=10, step_seconds=0.01)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.runs_table.row_count == 2, "both runs in the table")
            app.runs_table.focus()
            await pilot.press("space", "down", "space")
            await pilot.pause()
            assert len(app.runs_table.marked) == 2
            assert screen_text(app).count("● lr-") == 2
            await pilot.press("C")
            await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                        and len(app.screen.metrics) == 2, "both runs' metrics")
            await pilot.pause()
            screen: CompareScreen = app.screen  # type: ignore[assignment]
            runs = {k[2]: len(p.losses) for k, p in screen.metrics.items()}
            assert runs == {"lr-high": 10, "lr-low": 5}
            text = screen_text(app)
            assert "gpu/lr-high" in text and "gpu/lr-low" in text
            assert "20/20" in text and "10/10" in text
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, CompareScreen)
            await pilot.press("space")  # unmark
            assert len(app.runs_table.marked) == 1

    asyncio.run(go())


def test_a_reason_with_brackets_shows_literally_in_the_runs_table(tmp_path: Path) -> None:
    from rtrain_tui.tui.widgets.runs_table import row_key
    from tests.scenes import RUNS, make_scene_app

    reason = "✗ ValueError: [b]x[/b] [Errno 2]"

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await app.load_runs({RUNS[1].key: reason}).wait()
            await until(pilot, lambda: app.runs_table.views[RUNS[1].key].progress == reason, "the cell")
            cell = app.runs_table.get_cell(row_key(RUNS[1].key), "progress")
            assert cell.plain == reason  # type: ignore[union-attr]  # not parsed as markup
            await until(pilot, lambda: "✗ ValueError: [b]x[/b]" in screen_text(app), "it on screen")

    asyncio.run(go())


def test_compare_follows_a_live_run_until_it_ends(hosts: SshHosts, tmp_path: Path) -> None:
    """The compare view polls as the runs table does: a run still training when `C` was
    pressed moves on in the view (its step, its curve) to its end, and then is `finished`."""
    go_on = tmp_path / "go_on"  # the run waits at step 30 until the view has seen it live
    start_run(hosts, tmp_path, "live", hf_style=True, steps=60, step_seconds=0.1,
              hold_at=30, hold_file=go_on)

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.runs_table.row_count == 1, "the run in the table")
            app.runs_table.focus()
            await pilot.press("space", "C")
            await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                        and bool(app.screen.metrics), "the run's metrics")
            screen: CompareScreen = app.screen  # type: ignore[assignment]
            assert "Loss of 1 run " in screen_text(app)
            first = next(iter(screen.metrics.values())).summary()
            assert not first.finished
            go_on.touch()
            await until(pilot, lambda: next(iter(screen.metrics.values())).summary().finished,
                        "the view to follow the run to its end")
            assert len(next(iter(screen.metrics.values())).losses) == 30
            await until(pilot, lambda: "finished" in screen_text(app), "its row to say finished")
            polls = screen.polls
            await pilot.pause(1.0)
            assert screen.polls <= polls + 1  # an ended run is read once more, then left

    asyncio.run(go())


def test_compare_rows_name_their_columns_and_tell_runs_apart(tmp_path: Path) -> None:
    """A header names each column; two runs with the same id on two hosts, and two with
    the same host and id in two workdirs, are four distinct names, each in its own colour."""
    from dataclasses import replace

    from rich.console import Console

    from rtrain_tui.core.metrics.metrics import parse_text
    from rtrain_tui.tui.screens.compare_screen import look, run_names
    from tests.scenes import RUNS, curves_log, make_scene_app

    runs = [RUNS[0], replace(RUNS[0], host="a100-rented"),
            replace(RUNS[0], workdir="/scratch/other"), RUNS[2]]
    assert len(set(run_names(runs))) == 4
    assert run_names(runs)[1:3] == ["a100-rented/llama3-sft-r16",
                                    "h100-lab/llama3-sft-r16 (/scratch/other)"]
    assert len({look(i)[:3] for i in range(12)}) == 12  # colours, then markers, never a twin
    assert all(Console().get_style(look(i)[1]).color is not None for i in range(8))

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = CompareScreen(None, runs)
            await app.push_screen(screen)
            await pilot.pause()
            screen.show({r.key: parse_text(curves_log()) for r in runs})
            await pilot.pause()
            console = Console(width=130, record=True)
            console.print(screen.table)
            lines = console.export_text().splitlines()
            assert lines[0].split() == ["host/run", "step", "loss", "eval", "loss", "ETA"]
            assert len(lines) == 1 + len(runs)
            for line, name in zip(lines[1:], run_names(runs)):
                assert name in line, (name, line)

    asyncio.run(go())


def test_curves_at_80x24_give_the_loss_curve_every_row(tmp_path: Path) -> None:
    """At 80×24 the curves pane has ~9 rows: the loss plot takes them all (learning rate
    and grad norm are numbers in the summary there), with no legend over the curve; at
    140×40 all three plots show."""
    from tests.scenes import SCENES, make_scene_app

    async def go(size: tuple[int, int]) -> None:
        (tmp_path / f"{size[0]}").mkdir()
        app = make_scene_app(tmp_path / f"{size[0]}")
        async with app.run_test(size=size) as pilot:
            await SCENES["curves"](pilot)
            pane = app.query_one(CurvesPane)
            loss = pane.query_one("#plot-loss")
            lower = pane.query_one("#curves-lower")
            if size == (80, 24):
                assert not lower.display or lower.size.height == 0
                assert loss.size.height >= pane.size.height - 2
                assert loss.size.height >= 7 and pane.has_class("-short")  # no legend
                assert "lr 7.733e-05" in screen_text(app)
            else:
                assert lower.size.height >= 6 and loss.size.height >= 10
                assert not pane.has_class("-short")

    asyncio.run(go((80, 24)))
    asyncio.run(go((140, 40)))


@pytest.mark.parametrize("state", ["stopped", "failed (exit 1)", "lost"])
def test_an_ended_run_shows_no_eta_or_rate_in_curves_or_compare(tmp_path: Path, state: str) -> None:
    """A run that stopped, failed or was lost mid-way keeps its step and loss, but has
    no ETA and no steps/s in the curves' summary, its progress line or its compare row
    (whose ETA column says its state instead)."""
    from dataclasses import replace

    from rtrain_tui.core.metrics.metrics import parse_text
    from tests.scenes import RUNS, curves_log, make_scene_app

    record = replace(RUNS[0], state=state)  # its log stops at 1840/3000, mid-run

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.open_log(record, follow=False, curves=True)
            await pilot.pause()
            curves = app.query_one(CurvesPane)
            curves.state_of = lambda: state
            curves.show(parse_text(curves_log()))
            await pilot.pause()
            summary = str(curves.query_one("#curves-summary").render())
            progress = str(curves.query_one("#curves-progress").render())
            assert "step 1840/3000" in summary and "loss" in summary
            for text in (summary, progress):
                assert "ETA" not in text and "steps/s" not in text
            screen = CompareScreen(None, [record])
            await app.push_screen(screen)
            await pilot.pause()
            screen.show({record.key: parse_text(curves_log())})
            await pilot.pause()
            row = next(line for line in screen_text(app).splitlines() if "llama3-sft-r16" in line
                       and "1840/3000" in line)
            assert "48m58s" not in row and state.split()[0] in row
            del pane

    asyncio.run(go())
