"""The TUI's rough edges from the new-user trial (issue 10), each driven by Pilot.

Deterministic scenes (tests/scenes.py) unless the behaviour needs a host: log search and
follow, elapsed of ended runs, the start form's keys and messages, small terminals.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
from textual.widget import Widget

from rtrain_tui.tui.widgets.curves_pane import CurvesPane
from rtrain_tui.tui.widgets.log_pane import LogPane
from tests.scenes import RUNS, make_scene_app
from tests.test_tui import SIZE, screen_text


async def _pane_with_lines(app, pilot, count: int = 300) -> LogPane:  # type: ignore[no-untyped-def]
    pane = app.open_log(RUNS[0], follow=False)
    await pilot.pause()
    pane.add_lines([f"step {i} · {'loss' if i % 10 == 0 else 'tick'} {i}" for i in range(count)])
    pane._flush()
    await pilot.pause()
    return pane


def _lit(pane: LogPane, index: int) -> bool:
    strip = pane.log_widget._render_line_strip(index, pane.log_widget.rich_style)
    return any(seg.style is not None and seg.style.reverse for seg in strip)


def test_search_enter_walks_every_match_in_order_and_wraps(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = await _pane_with_lines(app, pilot)
            pane.log_widget.focus()
            await pilot.press("slash", *"loss", "enter")
            await pilot.pause()
            # searched from the top of the screen (the end of the log): the first match there
            first = pane.match_line
            assert first is not None and pane.log_widget.lines[first].startswith("step ")
            seen = [first]
            for _ in range(30):
                await pilot.press("enter")
                seen.append(pane.match_line)  # type: ignore[arg-type]
            hits = [i for i in range(300) if i % 10 == 0]
            start = hits.index(first)
            assert seen == [hits[(start + k) % 30] for k in range(31)]
            await pilot.pause()
            assert f"match {start + 31 - 30}/30 for 'loss'" in screen_text(app)
            # the last matches, below the last full screen, are counted too (was stuck 22/25)
            while pane.match_line != hits[-1]:
                await pilot.press("enter")
            await pilot.pause()
            assert "match 30/30 for 'loss'" in screen_text(app)
            await pilot.press("enter")
            await pilot.pause()
            assert pane.match_line == 0 and "match 1/30 for 'loss'" in screen_text(app)
            assert pane.log_widget.scroll_y == 0
            # the current match is lit; another matching line is not, only its word
            assert _lit(pane, 0) and not _lit(pane, 10)
            strip = pane.log_widget._render_line_strip(10, pane.log_widget.rich_style)
            assert any(seg.text == "loss" and seg.style.bgcolor for seg in strip)
            await pilot.press("escape")
            assert pane.match_line is None and not _lit(pane, 0)

    asyncio.run(go())


def test_search_counts_right_whatever_the_scroll_position(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = await _pane_with_lines(app, pilot)
            pane.log_widget.scroll_to(y=95, animate=False, immediate=True)
            await pilot.pause()
            assert pane.find_next("loss") == 100
            assert "match 11/30" in pane._match
            pane.log_widget.scroll_home(animate=False, immediate=True)
            await pilot.pause()
            assert pane.find_next("loss") == 110  # from the current match, not the screen
            assert "match 12/30" in pane._match

    asyncio.run(go())


def test_scrolling_up_pauses_at_once_and_one_F_resumes(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = await _pane_with_lines(app, pilot)
            log = pane.log_widget
            log.focus()
            assert pane.follow and "follow on (F)" in screen_text(app)
            await pilot.press("k")
            await pilot.pause()
            assert log.scroll_y == log.max_scroll_y - 1
            assert not pane.follow and "paused (F follows)" in screen_text(app)
            pane.add_lines(["one more"])
            pane._flush()
            await pilot.pause()
            assert re.search(r"▼ 1 new line(?!s)", screen_text(app))
            await pilot.press("F")  # one press resumes
            await pilot.pause()
            assert pane.follow and pane.new_lines == 0 and log.scroll_y == log.max_scroll_y
            assert "follow on (F)" in screen_text(app)

    asyncio.run(go())


def test_j_k_home_end_move_the_log(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = await _pane_with_lines(app, pilot)
            log = pane.log_widget
            log.focus()
            await pilot.press("home")
            # The Log's own home/end scroll with an animation: on a loaded machine (CI's
            # parallel workers) one pause did not see it end.
            await pilot.wait_for_scheduled_animations()
            assert log.scroll_y == 0 and not pane.follow
            await pilot.press("j", "j", "j")
            assert log.scroll_y == 3
            await pilot.press("k")
            assert log.scroll_y == 2
            await pilot.press("end")
            await pilot.wait_for_scheduled_animations()
            assert log.scroll_y == log.max_scroll_y and pane.follow  # back at the end: following

    asyncio.run(go())


def test_end_resumes_following_however_it_was_paused(tmp_path: Path) -> None:
    """`end` follows again, as the README and help say, also when the view is already at
    the end (paused with F) and after a search (which pauses to show its match)."""
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = await _pane_with_lines(app, pilot)
            log = pane.log_widget
            log.focus()
            await pilot.press("F")  # paused where it is: at the end
            await pilot.pause()
            assert not pane.follow
            await pilot.press("end")
            await pilot.pause()
            assert pane.follow and "follow on (F)" in screen_text(app)
            await pilot.press("slash", *"loss 10", "enter")
            await pilot.pause()
            assert not pane.follow and pane.match_line is not None
            log.focus()
            await pilot.press("end")
            await pilot.pause()
            assert pane.follow and log.scroll_y == log.max_scroll_y
            pane.add_lines(["one more"])
            pane._flush()
            await pilot.pause()
            assert pane.new_lines == 0 and log.scroll_y == log.max_scroll_y

    asyncio.run(go())


def test_one_line_is_not_one_lines(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.open_log(RUNS[0], follow=False)
            await pilot.pause()
            pane.add_lines(["only"])
            pane._flush()
            await pilot.pause()
            text = screen_text(app)
            assert re.search(r" 1 line(?!s)", text) and "1 lines" not in text

    asyncio.run(go())


# -- elapsed of an ended run: end − start, by the host's clock, never growing ----------
def test_the_probe_reports_when_a_run_ended_only_when_asked(tmp_path: Path) -> None:
    from rtrain_tui.core.backends.direct import scripts as direct_sh
    from rtrain_tui.core.runs import probes
    from tests.unit.test_remote_sh import sh

    for run_id, code in (("done", "0\n"), ("gone", None)):
        run_dir = tmp_path / run_id
        run_dir.mkdir()
        (run_dir / "train.pid").write_text("999999999\n")
        (run_dir / "train.log").write_text("x\n")
        os.utime(run_dir / "train.log", (1_700_000_100, 1_700_000_100))
        if code is not None:
            (run_dir / "status").write_text(code)
            os.utime(run_dir / "status", (1_700_000_005, 1_700_000_005))
    runs = [(str(tmp_path), "done"), (str(tmp_path), "gone")]
    asked = probes.parse_run_states(sh(direct_sh.run_states(runs, need_end={0, 1})), 2)
    assert [(p.state, p.ended_at) for p in asked] == [("completed", 1_700_000_005),
                                                       ("lost", 1_700_000_100)]
    unasked = probes.parse_run_states(sh(direct_sh.run_states(runs)), 2)
    assert [p.ended_at for p in unasked] == [None, None]


def test_refresh_records_the_hosts_end_time_once(hosts, tmp_path: Path, workdir: str) -> None:  # type: ignore[no-untyped-def]
    from rtrain_tui.core import Engine, RunIndex
    from rtrain_tui.core.runs.index import RunRecord
    from rtrain_tui.core.transport.connection import ConnectionPool

    run_dir = Path(workdir) / "quick"
    run_dir.mkdir(parents=True)
    (run_dir / "train.pid").write_text("999999999\n")
    (run_dir / "status").write_text("0\n")
    os.utime(run_dir / "status", (1_700_000_005, 1_700_000_005))
    index = RunIndex(tmp_path / "runs.toml")
    # seen running 20 minutes before anyone looked again (the app was closed meanwhile)
    index.add(RunRecord("gpu", "quick", workdir, state="running",
                        started_at="2023-11-14T22:13:20+00:00", updated_at="2023-11-14T22:13:20+00:00"))

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), index)
        try:
            await engine.refresh()
            os.utime(run_dir / "status", (1_700_009_999, 1_700_009_999))  # touched later
            await engine.refresh()
        finally:
            await engine.close()

    asyncio.run(go())
    [record] = index.load()
    assert record.state == "completed"
    assert record.ended_at == "2023-11-14T22:13:25+00:00"  # 1_700_000_005: 5 s after start


def test_elapsed_of_an_ended_run_is_end_minus_start_and_never_grows(tmp_path: Path) -> None:
    from datetime import timedelta

    from rtrain_tui.core.runs.index import RunIndex, RunRecord
    from rtrain_tui.tui.app import make_app
    from tests.scenes import NOW, SSH_CONFIG

    (tmp_path / "ssh_config").write_text(SSH_CONFIG)
    index = RunIndex(tmp_path / "runs.toml")
    # ended 5 s after its start; the index saw it end 20 minutes later (a relaunch)
    index.add(RunRecord("h100-lab", "five-s", "~/w", state="completed",
                        started_at="2026-11-29T14:00:00+00:00", updated_at="2026-11-29T14:20:55+00:00",
                        ended_at="2026-11-29T14:00:05+00:00"))
    clock = [NOW]

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", index, clock=lambda: clock[0], poll_runs=False)
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.runs_table.get_row_at(0)[app.runs_table.COLUMNS.index("elapsed")] == "5s"
            clock[0] = NOW + timedelta(hours=3)
            app.load_runs()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.runs_table.get_row_at(0)[app.runs_table.COLUMNS.index("elapsed")] == "5s"

    asyncio.run(go())


# -- preflight panel: the whole error of an unreachable host --------------------------
def test_preflight_panel_wraps_the_whole_error_of_an_unreachable_host() -> None:
    from rich.console import Console

    from rtrain_tui.core.runs.probes import PreflightReport
    from rtrain_tui.tui.widgets.preflight_panel import render_report

    error = ("cannot reach a100-rented: its host key is not on record and StrictHostKeyChecking "
             "is yes for a100-rented: run `ssh a100-rented` once to check the key and record it.")
    console = Console(width=34, record=True, color_system=None)
    console.print(render_report(PreflightReport("a100-rented", reachable=False, error=error),
                                "a100-rented"))
    shown = console.export_text()
    assert "…" not in shown
    words = " ".join(line[2:].strip() for line in shown.splitlines() if line.strip())
    assert error in words


def test_preflight_panel_wraps_a_failed_or_warning_check_to_its_end() -> None:
    """A check that is not ok says what to do at its end; the sidebar (34 columns) cut it
    to `praisonai_train is not…`, hiding `(pip install praisonai-train)`. Passed checks
    stay one line each."""
    from rich.console import Console

    from rtrain_tui.core.runs import probes
    from rtrain_tui.tui.widgets.preflight_panel import render_report

    report = probes.parse_preflight("box", "python=3.11.9\ntrainer=missing\ndisk_free_kb=1\nsetsid=yes\n",
                                    "python3", 0, ship_bytes=10 << 30)
    console = Console(width=34, record=True, color_system=None)
    console.print(render_report(report, "box"))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    words = " ".join(line[2:].strip() for line in lines if line.strip())
    assert "(pip install praisonai-train)" in words, lines
    assert words.count("free some space on box") == 1, lines
    assert "✓ python  python3 3.11.9" in lines and "✓ setsid  setsid present" in lines, lines


def test_no_hosts_names_the_ssh_config_the_app_reads(tmp_path: Path) -> None:
    """Started with --ssh-config, the panel still said `No hosts in ~/.ssh/config`: the
    file the user had just named was not the one it pointed them to."""
    from rtrain_tui.core.runs.index import RunIndex
    from rtrain_tui.tui.app import make_app
    from rtrain_tui.tui.widgets.preflight_panel import PreflightPanel

    config = tmp_path / "lab_config"
    config.write_text("")

    async def go() -> None:
        app = make_app(config, RunIndex(tmp_path / "runs.toml"), poll_runs=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            app.show_preflight()
            await pilot.pause()
            shown = str(app.query_one("#preflight", PreflightPanel).render())
            assert shown == f"No hosts in {config}. Add one, or start with --demo.", shown

    asyncio.run(go())


def test_preflight_panel_in_the_app_shows_the_error_to_its_end(tmp_path: Path) -> None:
    from rtrain_tui.core.runs.probes import PreflightReport

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.set_preflight(PreflightReport(
                "a100-rented", reachable=False,
                error="cannot reach a100-rented: no answer within 10 s (ConnectTimeout), "
                      "check the VPN: the END"))
            app.host_list.focus()
            app.host_list.highlighted = 1  # a100-rented
            await pilot.pause()
            assert "the END" in screen_text(app)

    asyncio.run(go())


# -- the start form ------------------------------------------------------------------
async def _open_form(app, pilot):  # type: ignore[no-untyped-def]
    from rtrain_tui.tui.screens.start_screen import StartScreen

    await pilot.press("n")
    await pilot.pause()
    assert isinstance(app.screen, StartScreen)
    return app.screen


def test_start_form_shows_its_keys_in_the_footer_and_not_the_main_screens(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await _open_form(app, pilot)
            footer = screen_text(app).splitlines()
            last = next(line for line in reversed(footer) if line.strip())
            assert "^s Start" in last and "esc Cancel" in last
            assert "Preflight" not in last and "Quit" not in last

    asyncio.run(go())


def test_the_footer_shows_the_help_key_at_80_columns(tmp_path: Path) -> None:
    """The footer shows what fits; `? Help` came after ten other keys and was cut off below
    about 130 columns, so a new user at 80×24 was never told where the rest are."""
    from tests.scenes import SCENES

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await SCENES["main"](pilot)
            lines = screen_text(app).splitlines()
            last = next(line for line in reversed(lines) if line.strip())
            assert "? Help" in last and "n New run" in last, last

    asyncio.run(go())


def test_enter_in_a_field_moves_to_the_next_field_and_never_launches(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("model: tiny\n")

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = await _open_form(app, pilot)
            form.query_one("#config").value = str(config)
            await pilot.pause()
            assert app.focused is form.query_one("#config")
            await pilot.press("enter")
            assert app.focused is form.query_one("#dataset")
            await pilot.press("enter", "enter", "enter")  # dataset → GPUs → GPU ids → run id
            assert app.focused is form.query_one("#run_id")
            assert not [w for w in form.workers if w.group == "start"]  # nothing launched
            assert app.screen is form

    asyncio.run(go())


def test_tab_in_a_field_moves_to_the_next_field_and_shift_tab_back(tmp_path: Path) -> None:
    """The form bound tab to a screen action that does not exist: tab did nothing, so a
    user who tabbed from Config to Dataset and typed a path overwrote the config."""
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = await _open_form(app, pilot)
            assert app.focused is form.query_one("#config")
            await pilot.press("tab")
            assert app.focused is form.query_one("#dataset")
            await pilot.press("tab")
            assert app.focused is form.query_one("#gpus")
            await pilot.press("shift+tab")
            assert app.focused is form.query_one("#dataset")

    asyncio.run(go())


def test_gpus_follow_the_chosen_host_unless_changed_by_hand(tmp_path: Path) -> None:
    """The form opened on the demo host says GPUs 0; choosing a GPU box kept the 0, so the
    run started there CPU-only. GPUs follows the host's default, not a number typed in."""
    from textual.widgets import Input, Select

    from rtrain_tui.tui.screens.start_screen import StartDefaults, StartScreen

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = StartScreen(None, ["demo", "h100-lab", "a100-rented"], StartDefaults("demo", gpus=0),
                               gpus_for=lambda host: 0 if host == "demo" else 1)
            await app.push_screen(form)
            await pilot.pause()
            gpus, host = form.query_one("#gpus", Input), form.query_one("#host", Select)
            assert gpus.value == "0"
            host.value = "h100-lab"
            await pilot.pause()
            assert gpus.value == "1"
            host.value = "demo"
            await pilot.pause()
            assert gpus.value == "0"
            gpus.value = "2"  # by hand: kept whichever host is chosen
            host.value = "a100-rented"
            await pilot.pause()
            assert gpus.value == "2"

    asyncio.run(go())


def test_an_empty_config_says_choose_a_config_file(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = await _open_form(app, pilot)
            form.query_one("#config").value = ""
            await pilot.pause()
            assert "✗ Config: choose a config file" in screen_text(app)
            assert "does not exist" not in screen_text(app)

    asyncio.run(go())


def test_an_env_error_is_reported_on_the_env_field(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("model: tiny\n")

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = await _open_form(app, pilot)
            form.query_one("#config").value = str(config)
            for bad, said in (('A="unclosed', "✗ Env: no closing quotation"),
                              ("NOKEY", "✗ Env: 'NOKEY' is not usable: write KEY=VALUE")):
                form.query_one("#env").value = bad
                await pilot.pause()
                text = screen_text(app)
                assert said in text and "GPUs" not in text.split("✗", 1)[1]
                assert form.query_one("#env").has_class("invalid")
                assert not form.query_one("#gpus").has_class("invalid")
                assert form.query_one("#start").disabled

    asyncio.run(go())


# -- small terminals -----------------------------------------------------------------
def _table_lines(app, count: int = 6) -> list[str]:  # type: ignore[no-untyped-def]
    """The runs table's visible lines as drawn (the SVG's text squeezes spaces)."""
    return ["".join(seg.text for seg in app.runs_table.render_line(y)) for y in range(count)]


def test_at_80x24_the_runs_table_keeps_host_run_status_and_progress(tmp_path: Path) -> None:
    from tests.scenes import PROGRESS, SCENES

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await SCENES["main"](pilot)
            lines = _table_lines(app)
            assert lines[0].split()[:4] == ["host", "run", "status", "progress"]
            assert lines[1].split()[:3] == ["h100-lab", "llama3-sft-r32", "starting"]
            assert app.query_one("#left").styles.display == "none"
            # the running run's progress: step/total, its bar and the loss (the ETA may
            # be cut at the right edge)
            whole = PROGRESS[RUNS[0].key]
            assert whole[:whole.index("loss") + len("loss 0.812")] in lines[2], (whole, lines[2])
            await pilot.press("b")  # the host sidebar comes back on demand
            await pilot.pause()
            assert app.query_one("#left").styles.display == "block"
            assert app.focused is app.host_list
            await pilot.press("b")
            await pilot.pause()
            assert app.query_one("#left").styles.display == "none"

    asyncio.run(go())


def test_at_60x20_the_status_is_still_visible(tmp_path: Path) -> None:
    from tests.scenes import SCENES

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=(60, 20)) as pilot:
            await SCENES["main"](pilot)
            lines = _table_lines(app)
            assert lines[0].split()[:3] == ["host", "run", "status"]
            assert [line.split()[2] for line in lines[1:4]] == ["starting", "running", "running"]
            assert "running ?stale" in lines[3]

    asyncio.run(go())


def test_dialogs_fit_in_80_columns(tmp_path: Path) -> None:
    from tests.scenes import SCENES

    async def go() -> None:
        for scene in ("start_form_error", "stop_confirm", "fetch_browser", "help"):
            app = make_scene_app(tmp_path / scene)
            async with app.run_test(size=(80, 24)) as pilot:
                await SCENES[scene](pilot)
                for dialog in app.screen.query("#dialog"):
                    region = dialog.region
                    assert region.x >= 0 and region.right <= 80, (scene, region)

    for scene in ("start_form_error", "stop_confirm", "fetch_browser", "help"):
        (tmp_path / scene).mkdir()
    asyncio.run(go())


def test_help_scrolls_by_keyboard_in_80x24(tmp_path: Path) -> None:
    """At 80×24 the help is taller than the screen: its last lines (`q` quit, the note
    that quitting stops no run) were out of reach but by the mouse; `end` and `↓` scroll it."""
    from tests.scenes import SCENES

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await SCENES["help"](pilot)
            dialog = app.screen.query_one("#dialog")
            assert dialog.max_scroll_y > 0, "the help fits: this test proves nothing at this size"
            await pilot.press("down")
            await pilot.pause()
            assert dialog.scroll_y == 1
            await pilot.press("end")
            await pilot.pause()
            assert dialog.scroll_y == dialog.max_scroll_y

    asyncio.run(go())


# -- refresh, toasts, stop, the empty table ------------------------------------------
def test_r_says_refreshed_at_what_time(tmp_path: Path) -> None:
    from tests.test_tui import notifications, until

    async def go() -> None:
        app = make_scene_app(tmp_path)  # scene hosts do not resolve: each answers unreachable
        async with app.run_test(size=SIZE) as pilot:
            app.runs_table.focus()
            await pilot.press("r")
            await until(pilot, lambda: "refreshed 14:30:00" in notifications(app), "the toast")

    asyncio.run(go())


def test_r_is_described_as_it_acts_every_run_re_checked_the_ended_ones_too(tmp_path: Path) -> None:
    """The palette's line (the binding's tooltip) and the help screen said what `r` did
    before it asked about the ended runs as well."""
    from rtrain_tui.tui.screens.help_screen import KEYS as HELP

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE):
            said = {c.title: c.help for c in app.get_system_commands(app.screen)}
            assert "every run" in said["Refresh (r)"] and "the ended ones too" in said["Refresh (r)"]

    asyncio.run(go())
    assert "every run now, the ended ones too" in dict(HELP)["r"]


def test_toasts_wait_while_an_input_is_being_typed_in(tmp_path: Path) -> None:
    from tests.test_tui import notifications, until

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = await _pane_with_lines(app, pilot, 50)
            pane.log_widget.focus()
            await pilot.press("slash", "x")
            app.notify("run-7 on h100-lab: completed", title="Run ended")
            await pilot.pause(0.6)
            assert "run-7 on h100-lab: completed" not in notifications(app)
            await pilot.press("escape")  # done typing: the toast shows now
            await until(pilot, lambda: "run-7 on h100-lab: completed" in notifications(app),
                        "the held toast")

    asyncio.run(go())


def test_stop_on_an_ended_run_says_so_instead_of_asking(tmp_path: Path) -> None:
    from rtrain_tui.tui.screens.stop_screen import StopScreen
    from tests.test_tui import notifications

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            app.runs_table.focus()
            app.runs_table.select_run(RUNS[2].key)  # completed
            await pilot.press("x")
            await pilot.pause()
            assert not isinstance(app.screen, StopScreen)
            assert f"{RUNS[2].run_id} on h100-lab already ended (completed); nothing to stop." \
                in notifications(app)
            app.runs_table.select_run(RUNS[0].key)  # running: asks
            await pilot.press("x")
            await pilot.pause()
            assert isinstance(app.screen, StopScreen)

    asyncio.run(go())


def test_the_empty_runs_table_says_press_n(tmp_path: Path) -> None:
    from rtrain_tui.core.runs.index import RunIndex
    from rtrain_tui.tui.app import make_app
    from tests.scenes import SSH_CONFIG

    (tmp_path / "ssh_config").write_text(SSH_CONFIG)

    async def go() -> None:
        app = make_app(tmp_path / "ssh_config", RunIndex(tmp_path / "runs.toml"), poll_runs=False)
        async with app.run_test(size=SIZE) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert "No runs yet: press n to start a run." in screen_text(app)

    asyncio.run(go())


def test_ctrl_o_in_the_config_field_picks_a_local_file(tmp_path: Path) -> None:
    from textual.widgets import Input
    from textual_fspicker import FileOpen

    picked = tmp_path / "configs" / "sft.yaml"
    picked.parent.mkdir()
    picked.write_text("model: tiny\n")

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = await _open_form(app, pilot)
            form.query_one("#config").value = str(picked.parent / "missing.yaml")
            await pilot.pause()
            assert "^o Browse" in screen_text(app)
            await pilot.press("ctrl+o")
            await pilot.pause()
            dialog = app.screen
            assert isinstance(dialog, FileOpen)
            name = dialog.query_one(Input)
            name.value = "sft.yaml"  # relative: the picker opened where the typed path points
            name.focus()
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is form
            assert form.query_one("#config").value == str(picked)
            assert app.focused is form.query_one("#config")
            assert "✗ Config" not in screen_text(app)
            # from another field it picks the config; esc leaves the field as it was
            form.query_one("#gpus").focus()
            await pilot.press("ctrl+o")
            await pilot.pause()
            assert isinstance(app.screen, FileOpen)
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is form and form.query_one("#config").value == str(picked)

    asyncio.run(go())


def test_the_search_count_stays_on_screen_in_a_narrower_pane(tmp_path: Path) -> None:
    """At 100 columns the status line is cut at its end: the count comes before the rest."""
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            pane = await _pane_with_lines(app, pilot)
            pane.log_widget.focus()
            await pilot.press("k", "slash", *"loss", "enter")
            await pilot.pause()
            status = next(line for line in screen_text(app).splitlines() if "paused" in line)
            assert re.search(r"match \d+/30 for 'loss'", status), status

    asyncio.run(go())


@pytest.mark.parametrize("pane", [LogPane, CurvesPane])
def test_a_pane_removed_while_its_children_mount_does_not_crash_the_app(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pane: type[Widget]) -> None:
    # On a loaded machine a run's tab opened just as the app closed (a start, then quit):
    # Textual mounts nothing under a widget being removed, and the pane's on_mount found
    # no status line (NoMatches) and crashed the app. The delay stands in for the load.
    async def slow(self: Widget, widgets: list[Widget]) -> None:
        await asyncio.sleep(0.2)
        await Widget.mount_composed_widgets(self, widgets)

    monkeypatch.setattr(pane, "mount_composed_widgets", slow)

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            app.open_log(RUNS[0], follow=False, curves=pane is CurvesPane)
            await asyncio.sleep(0)  # the tab starts mounting; the app closes before its children
        assert app.return_code in (None, 0)

    asyncio.run(go())
