"""The start form's retries and stall fields (issue 18): prefilled from the host's
config.toml, checked as the CLI checks `--retries`, `--stall-after` and `--on-stall` (a bad
value is refused naming its field), and what the form says is what the host runs with
(the run dir's launch.json, written by the engine's start).

Pilot against the real sshd.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.sshd import SshHosts
from tests.test_tui import (  # noqa: F401 (_client_home: a fixture)
    SIZE,
    _client_home,
    open_start_form,
    tui,
    until,
)


def test_start_form_retries_and_stall_reach_the_host_and_bad_values_name_their_field(
        hosts: SshHosts, tmp_path: Path, workdir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Button, Input, Select, Static

    conf = tmp_path / "xdg" / "rtrain-tui"
    conf.mkdir(parents=True)
    (conf / "config.toml").write_text('[hosts.gpu]\nretries = 2\nstall_after = "20m"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = write_config(tmp_path / "c.yaml", steps=2)

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_start_form(app, pilot, config=str(config), workdir=workdir,
                                         run_id="tries", gpus="0")
            retries, stall = form.query_one("#retries", Input), form.query_one("#stall_after", Input)
            assert (retries.value, stall.value) == ("2", "20m")  # the host's config.toml
            errors, start = form.query_one("#errors", Static), form.query_one("#start", Button)
            retries.value = "25"
            stall.value = "soon"
            await pilot.pause()
            shown = str(errors.render())
            assert "Retries: must be 0 to 20, not 25." in shown
            assert "Stall after: 'soon' is not a duration" in shown
            assert retries.has_class("invalid") and stall.has_class("invalid") and start.disabled
            retries.value = "0"
            stall.value = "90s"
            form.query_one("#on_stall", Select).value = "restart"
            await pilot.pause()
            assert "On stall: restart needs Retries of 1 or more" in str(errors.render())
            assert start.disabled
            retries.value = "3"
            await pilot.pause()
            assert not start.disabled, str(errors.render())
            await pilot.press("ctrl+s")
            await until(pilot, lambda: app.screen is not form, "the start")
            launched = json.loads(Path(workdir, "tries", ".rtrain", "launch.json").read_text())
            assert (launched["retries"], launched["stall_after_s"], launched["on_stall"]) == \
                (3, 90, "restart")
            await app.workers.wait_for_complete()

    asyncio.run(go())
