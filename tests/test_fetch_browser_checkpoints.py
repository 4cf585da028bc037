"""The fetch browser marks each checkpoint-N `✓` or `incomplete` (and why) by the rule
resume uses, and fetches an incomplete one only at a second ctrl+s."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.widgets import Button, Tree

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.runs.checkpoints import Checkpoint
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.transfers.transfer import RemoteEntry
from rtrain_tui.core.transport.connection import ConnectionPool
from rtrain_tui.tui.screens.fetch_screen import FetchScreen
from tests.checkpoint_files import save_order, write_checkpoint
from tests.conftest import write_config
from tests.scenes import make_scene_app
from tests.sshd import SshHosts
from tests.test_tui import (
    SIZE,
    _client_home,  # noqa: F401  (autouse: the test client's HOME)
    notifications,
    screen_text,
    tui,
    until,
)


def test_checkpoints_are_marked_complete_or_incomplete_with_why(tmp_path: Path) -> None:
    record = RunRecord(host="gpu", run_id="r1", workdir="~/rt",
                       started_at="2026-11-30T08:00:00Z", state="failed (exit 1)")
    entries = [RemoteEntry("outputs", 0, True), RemoteEntry("outputs/checkpoint-150", 0, True),
               RemoteEntry("outputs/checkpoint-200", 0, True), RemoteEntry("train.log", 9, False)]
    judged = [Checkpoint("outputs/checkpoint-200", 200, "no trainer_state.json: cut off mid-save"),
              Checkpoint("outputs/checkpoint-150", 150)]

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await app.push_screen(FetchScreen(None, record, tmp_path, entries, checkpoints=judged))
            await pilot.pause()
            app.screen.query_one("#tree", Tree).root.children[0].expand()
            await pilot.pause()
            text = screen_text(app)
            assert "checkpoint-150/ ✓" in text
            assert "checkpoint-200/ incomplete (no trainer_state.json: cut off mid-save)" in text
            assert "outputs/ ✓" not in text and "outputs/ incomplete" not in text

    asyncio.run(go())


def test_an_incomplete_checkpoint_is_fetched_only_at_a_second_ctrl_s(
        hosts: SshHosts, tmp_path: Path) -> None:
    workdir = tmp_path / "work"

    async def start() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        await engine.start(StartRequest("gpu", write_config(tmp_path / "c.yaml", steps=2),
                                        run_id="r1", workdir=str(workdir), gpus=0))
        await engine.close()

    asyncio.run(start())
    write_checkpoint(workdir / "r1", "checkpoint-150", 150, save_order())
    write_checkpoint(workdir / "r1", "checkpoint-200", 200, save_order()[:3])
    out = tmp_path / "out"

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.runs_table.focus()
            await pilot.press("f")
            screen = app.screen
            assert isinstance(screen, FetchScreen)
            await until(pilot, lambda: screen.loaded, "the listing")
            await pilot.pause()
            text = screen_text(app)
            assert "checkpoint-150/ ✓" in text
            assert "checkpoint-200/ incomplete (no trainer_state.json: cut off mid-save)" in text
            tree = screen.query_one("#tree", Tree)
            node = next(n for n in tree.root.children
                        if n.data is not None and n.data.path == "checkpoint-200")
            tree.move_cursor(node)
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert ("checkpoint-200 is incomplete (no trainer_state.json: cut off mid-save); the "
                    "newest complete one is checkpoint-150. ctrl+s again fetches it anyway."
                    ) in str(screen.query_one("#errors").render())
            # Nothing started: the button stays enabled, nothing landed.
            assert not screen.query_one("#fetch", Button).disabled
            assert app.screen is screen and not (out / "checkpoint-200").exists()
            await pilot.press("ctrl+s")
            await until(pilot, lambda: any(m.startswith("fetched to") for m in notifications(app)),
                        "the fetch toast")
            assert sorted(p.name for p in (out / "checkpoint-200").iterdir()) == sorted(
                save_order()[:3])

    asyncio.run(go())
