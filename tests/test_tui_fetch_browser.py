"""The fetch browser: opens at once, keeps a fetch asked for while loading, sorts
checkpoints the way people count and shows host names literally. (A fetch asked for
while the listing loads, and the remembered destination: tests/faults/test_fetch_browser_slow.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.transfers.transfer import RemoteEntry
from rtrain_tui.tui.screens.fetch_screen import FetchScreen, natural_key, sorted_entries
from tests.scenes import make_scene_app
from tests.test_tui import SIZE, screen_text


def test_checkpoints_sort_by_number_and_folders_come_before_their_files() -> None:
    names = ["checkpoint-100", "checkpoint-50", "Checkpoint-7", "train.log", "checkpoint-1000"]
    assert sorted(names, key=natural_key) == [
        "Checkpoint-7", "checkpoint-50", "checkpoint-100", "checkpoint-1000", "train.log"]
    entries = [RemoteEntry("checkpoint-100/a", 1, False), RemoteEntry("checkpoint-100", 0, True),
               RemoteEntry("checkpoint-50", 0, True), RemoteEntry("checkpoint-50/a", 1, False)]
    assert [e.path for e in sorted_entries(entries)] == [
        "checkpoint-50", "checkpoint-50/a", "checkpoint-100", "checkpoint-100/a"]


def test_the_users_artefacts_come_first_and_our_bookkeeping_last() -> None:
    """lora_model, checkpoints and outputs (and the run's log and config) lead the list;
    rtrain-tui's own files (pids, marks, records, scripts, `.rtrain/`) follow them all."""
    names = [".rtrain", ".rtrain/attempts", ".rtrain/attempts/1", ".rtrain/attempts.jsonl",
             "attempts.jsonl", "launch.json", "launch.lock", "notify.json", "run.sh",
             f"run.sh.{'a' * 32}", "status", "status.tmp", "train.pid", "train.token",
             "checkpoint-100", "checkpoint-20", "config.yaml", "lora_model",
             "lora_model/adapter.bin", "outputs", "train.jsonl", "train.log", "zz.txt"]
    entries = [RemoteEntry(n, 0, "." not in n.rpartition("/")[2]) for n in reversed(names)]
    got = [e.path for e in sorted_entries(entries)]
    assert got[:9] == ["checkpoint-20", "checkpoint-100", "config.yaml", "lora_model",
                       "lora_model/adapter.bin", "outputs", "train.jsonl", "train.log", "zz.txt"]
    assert sorted(got[9:]) == sorted(names[:14])


def test_host_names_and_file_names_are_shown_literally(tmp_path: Path) -> None:
    record = RunRecord(host="box[@click=app.quit]", run_id="r1", workdir="~/rt",
                       started_at="2026-11-30T08:00:00Z", state="completed")
    entries = [RemoteEntry("[bold]x[red]\x1b]0;pwned\x07.bin", 10, False),
               RemoteEntry("lora_model", 0, True)]

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await app.push_screen(FetchScreen(None, record, tmp_path, entries))
            await pilot.pause()
            text = screen_text(app)
            assert "Fetch from r1 on box[@click=app.quit]" in text
            assert "[bold]x[red].bin" in text and "pwned" not in text
            app.notify("fetched to /tmp/[red]x[/red]\x1b]52;c;cHduZWQ=\x07")
            await pilot.pause()
            toast = list(app._notifications)[-1]
            assert (toast.message, toast.markup) == ("fetched to /tmp/[red]x[/red]", False)
            assert app.is_running  # the [@click] in the title did nothing

    asyncio.run(go())
