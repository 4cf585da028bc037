"""The start form's upload line: bytes of total, the ratio compression gives, rate and
time left (issue 20), worded by core/transfers/meter.py as the CLI words it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from textual.widgets import Static

from rtrain_tui.core.runs.index import RunIndex
from tests.conftest import write_config
from tests.sshd import SshHosts
from tests.test_tui import SIZE, notifications, open_start_form, tui, until


def test_the_upload_line_says_bytes_of_total_and_how_much_compression_saved(
    hosts: SshHosts, tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    dataset = tmp_path / "big.jsonl"
    dataset.write_bytes(b'{"text": "x"}\n' * 3_000_000)  # 42 MB that shrinks a thousandfold

    toasts: list[str] = []

    async def go() -> list[str]:
        app = tui(hosts, tmp_path)
        said: list[str] = []
        async with app.run_test(size=SIZE) as pilot:
            form = await open_start_form(app, pilot, config=str(config), dataset=str(dataset),
                                         workdir=str(tmp_path / "work"), run_id="shown",
                                         gpus="0")
            step = form.query_one("#step", Static)
            real = step.update
            step.update = lambda content="", **kw: (said.append(str(content)),  # type: ignore[method-assign]
                                                    real(content, **kw))[1]
            await pilot.pause()
            await pilot.press("ctrl+s")
            await app.workers.wait_for_complete()
            await until(pilot, lambda: any(t.startswith("started shown") for t in notifications(app)),
                        "the start's toast")
            toasts.extend(notifications(app))
        return said

    said = asyncio.run(go())
    uploads = [s for s in said if s.startswith("uploading big.jsonl: ")]
    assert uploads, said
    for line in uploads:
        assert re.fullmatch(r"uploading big\.jsonl: [\d.]+ k?M?B of 42 MB( · .*)?", line), line
    assert uploads[-1].startswith("uploading big.jsonl: 42 MB of 42 MB")
    # The first block is always compressed (the link is not measured yet), so a line
    # after it says so.
    assert any(re.search(r" · [\d.]+× compressed", line) for line in uploads), uploads
    assert (tmp_path / "work" / "shown" / "big.jsonl").read_bytes() == dataset.read_bytes()
    # Once the form is gone, the toast of the start says how the dataset went.
    started = [t for t in toasts if t.startswith("started shown on ")]
    assert len(started) == 1 and re.search(
        r"\nbig\.jsonl: sent 42 MB as [\d.]+ kB \(\d+× compressed\) in [\d.]+ s", started[0]), toasts
    # Only this test's workdir: the app also lists runs it finds in the host's default
    # workdir, which other tests of the same test host use (CI saw one there).
    assert [r.run_id for r in RunIndex(tmp_path / "runs.toml").load()
            if r.workdir == str(tmp_path / "work")] == ["shown"]
