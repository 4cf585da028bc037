"""The log pane folds tqdm redraws: the trainer's printed lines, and one live bar under them.

Driven on the demo host (a real local sshd-less host the app runs itself), whose trainer
writes what a Hugging Face Trainer writes: `\\r` bar redraws with loss dicts glued on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Static

from rtrain_tui.core.runs.index import RunIndex
from rtrain_tui.tui.app import make_app
from rtrain_tui.tui.widgets.log_pane import LogPane
from tests.test_tui import SIZE, until


def test_the_demo_run_log_shows_printed_lines_and_one_live_bar(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    (tmp_path / "ssh_config").write_text("")
    config = tmp_path / "slow.yaml"
    config.write_text("max_steps: 60\nstep_seconds: 0.05\nlogging_steps: 5\neval_steps: 20\n")

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(tmp_path / "runs.toml"), demo=True,
                       poll_runs=False, out_dir=tmp_path / "out")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.host_list.hosts["demo"].status == "ready", "demo ready")
            await pilot.press("n")
            await pilot.pause()
            app.screen.query_one("#config").value = str(config)  # type: ignore[attr-defined]
            await pilot.pause()
            await pilot.press("ctrl+s")
            await until(pilot, lambda: app.query(LogPane), "a log pane")
            pane = app.query_one(LogPane)
            await until(pilot, lambda: pane.query("#log-bar"), "the pane's widgets")
            live_bar = pane.query_one("#log-bar", Static)
            # While it trains: the bar is drawn under the log, never in it.
            await until(pilot, lambda: live_bar.display and "%|" in str(live_bar.render()),
                        "the live bar")
            assert not any("%|" in line for line in pane.log_widget.lines)
            await until(pilot, lambda: pane.stream == "ended", "the run to end")
            await pilot.pause(0.2)
            lines = list(pane.log_widget.lines)
            losses = [line for line in lines if line.startswith("{'loss'")]
            assert len(losses) == 12  # every loss dict, each on its own line, once
            bars = [line for line in lines if "%|" in line]
            assert len(bars) == 1 and "60/60" in bars[0]  # the finished bar, where it ended
            assert not live_bar.display  # nothing is being drawn any more
            assert len(lines) < 40  # 60 steps of redraws folded away
            assert f"{pane.total_lines} lines" in str(pane.query_one("#log-status", Static).render())

    asyncio.run(go())


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (140, 30)])
def test_a_following_pane_keeps_following_after_the_terminal_shrinks(
        tmp_path: Path, size: tuple[int, int]) -> None:
    """Found in a new-user trial: shrinking the terminal left the view behind the newest
    lines while the header still said `follow on` (the Log only scrolls when it is at
    its end, and a smaller window is no longer at the end)."""
    from tests.scenes import RUNS, make_scene_app

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.open_log(RUNS[0], follow=False)
            await pilot.pause()
            pane.add_lines([f"line {i}" for i in range(200)])
            pane._flush()
            await pilot.pause()
            log = pane.log_widget
            assert pane.follow and log.scroll_y == log.max_scroll_y
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await pilot.pause()
            pane.add_lines(["the newest line"])
            pane._flush()
            await pilot.pause()
            assert pane.follow
            assert log.scroll_y == log.max_scroll_y > 0  # the newest line is in view

    asyncio.run(go())
