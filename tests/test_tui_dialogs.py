"""The dialogs (fetch, stop, start, help, compare): what they preselect, what they say,
and that each shows its own keys and buttons inside an 80×24 terminal. Driven by Pilot,
against the real sshd pair where a host is involved."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Tree

from rtrain_tui.core.runs.index import RunIndex, RunRecord
from rtrain_tui.tui.screens.fetch_screen import FetchScreen
from tests.scenes import SCENES, make_scene_app
from tests.sshd import SshHosts
from tests.test_tui import SIZE, notifications, screen_text, tui, until


@pytest.fixture(autouse=True)
def _client_home(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "hosts" in request.fixturenames:
        monkeypatch.setenv("HOME", str(request.getfixturevalue("hosts").home))


def test_fetch_opens_on_lora_model_and_ctrl_s_fetches_it(hosts: SshHosts, tmp_path: Path) -> None:
    """The adapter is what people fetch: the browser opens with `lora_model/` under the
    cursor (not the run directory's root), so `f` then `ctrl+s` brings it home."""
    run_dir = tmp_path / "work" / "done"
    (run_dir / "lora_model").mkdir(parents=True)
    (run_dir / "checkpoint-5").mkdir()
    (run_dir / "checkpoint-5" / "trainer_state.json").write_text("{}")
    (run_dir / "lora_model" / "adapter_config.json").write_text('{"r": 16}')
    (run_dir / "train.log").write_text("training done, exit 0\n")
    (run_dir / "status").write_text("0\n")
    RunIndex(tmp_path / "runs.toml").add(RunRecord("gpu", "done", str(tmp_path / "work"),
                                                   state="completed"))

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.runs_table.row_count == 1, "the run in the table")
            app.runs_table.focus()
            await pilot.press("f")
            screen = app.screen
            assert isinstance(screen, FetchScreen)
            await until(pilot, lambda: screen.loaded, "the listing")
            await pilot.pause()
            node = screen.query_one("#tree", Tree).cursor_node
            assert node is not None and node.data is not None and node.data.path == "lora_model"
            await pilot.press("ctrl+s")
            await until(pilot, lambda: any(m.startswith("fetched to") for m in notifications(app)),
                        "the fetch toast")
            assert (tmp_path / "out" / "lora_model" / "adapter_config.json").read_text() == '{"r": 16}'

    asyncio.run(go())


@pytest.mark.parametrize("scene, keys, buttons", [
    ("fetch_browser", ["esc Cancel", "^s Fetch"], ["Fetch (ctrl+s)", "Cancel (esc)"]),
    ("stop_confirm", ["esc Cancel", "y Stop it"], ["Stop (y)", "Cancel (esc)"]),
    ("start_form_error", ["^s Start", "esc Cancel"], ["Start (ctrl+s)", "Cancel (esc)", "✗ Run id"]),
    ("help", ["esc Close"], []),
    ("compare", ["esc Close"], []),
])
def test_every_dialog_shows_its_own_keys_and_its_buttons_at_80x24(
        tmp_path: Path, scene: str, keys: list[str], buttons: list[str]) -> None:
    """The footer names the dialog's keys (never the main screen's); its buttons (and
    the start form's errors: its fields scroll instead) are on screen."""
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await SCENES[scene](pilot)
            lines = screen_text(app).splitlines()
            footer = next(line for line in reversed(lines) if line.strip())
            for key in keys:
                assert key in footer, (key, footer)
            assert "Preflight" not in footer  # the main screen's keys do nothing here
            shown = "\n".join(lines)
            for label in buttons:
                assert label in shown, (label, shown)
            if scene == "start_form_error":  # a field out of sight comes into view with focus
                app.screen.query_one("#env").focus()
                await pilot.pause()
                assert "Env" in screen_text(app)

    asyncio.run(go())


@pytest.mark.parametrize("backend, says", [
    ("", ["Every process of the run", "marker", "SIGTERM", "10 s", "SIGKILL", "gone"]),
    ("slurm", ["Every process of its Slurm job", "SIGTERM", "10 s", "scancel", "gone"]),
])
def test_the_stop_dialog_says_what_stop_does(tmp_path: Path, backend: str, says: list[str]) -> None:
    """Stop signals every process of the run, found on the host by the marker it was
    started with (workers that left the process group too), then checks they are gone;
    a Slurm run's job is signalled and cancelled. Never "the whole process group"."""
    from dataclasses import replace

    from rtrain_tui.tui.screens.stop_screen import StopScreen
    from tests.scenes import RUNS

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = StopScreen(None, replace(RUNS[0], backend=backend))
            await app.push_screen(screen)
            await pilot.pause()
            text = str(screen.query_one("#explain").render())
            for words in says:
                assert words in text, (words, text)
            assert "process group" not in text

    asyncio.run(go())
