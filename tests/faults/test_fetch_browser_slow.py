"""The fetch browser on a slow host: it opens at once with "loading…", keeps a fetch
asked for while the listing loads (and fetches the adapter once it arrives), and
remembers the destination per host, across sessions too."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.transport.connection import ConnectionPool
from rtrain_tui.tui.app import make_app
from rtrain_tui.tui.screens.fetch_screen import FetchScreen
from tests.conftest import write_config
from tests.faults.conftest import ALIAS
from tests.faults.proxy import FaultProxy
from tests.sshd import SshHosts
from tests.test_tui import (
    SIZE,
    _client_home,  # noqa: F401  (autouse: the test client's HOME)
    notifications,
    until,
)


def test_a_fetch_asked_for_while_loading_fetches_the_adapter_and_the_folder_is_remembered(
        hosts: SshHosts, tmp_path: Path, proxy: FaultProxy, proxy_config: Path) -> None:
    async def start() -> None:
        engine = Engine(ConnectionPool(proxy_config), RunIndex(tmp_path / "runs.toml"))
        await engine.start(StartRequest(ALIAS, write_config(tmp_path / "c.yaml", steps=2),
                                        run_id="done", workdir=str(tmp_path / "work")))
        await engine.close()

    asyncio.run(start())
    # The stalled connect below must outlast the assertions, on a loaded machine too.
    proxy_config.write_text(proxy_config.read_text().replace("ConnectTimeout 2", "ConnectTimeout 15"))
    run_dir = tmp_path / "work" / "done"
    deadline = time.monotonic() + 30
    while not (run_dir / "status").exists():
        assert time.monotonic() < deadline, "the stand-in run did not finish"
        time.sleep(0.1)
    elsewhere = tmp_path / "adapters"

    def tui() -> object:
        return make_app(proxy_config, RunIndex(tmp_path / "runs.toml"), poll_runs=False,
                        out_dir=tmp_path / "out")

    async def go() -> None:
        app = tui()
        async with app.run_test(size=SIZE) as pilot:
            app.runs_table.focus()
            proxy.stall()  # the host is slow to answer: the listing cannot arrive yet
            await pilot.press("f")
            screen = app.screen
            assert isinstance(screen, FetchScreen)
            assert not screen.loaded  # the host has not answered yet
            assert "loading…" in str(screen.query_one("#tree").root.label)  # type: ignore[attr-defined]
            screen.query_one("#dest").value = str(elsewhere)  # type: ignore[attr-defined]
            await pilot.press("down", "down", "ctrl+s")  # typed while the listing loads
            assert not screen.loaded
            proxy.resume()
            await until(pilot, lambda: any(m.startswith("fetched to") for m in notifications(app)),
                        f"the fetch toast ({screen.query_one('#errors').render()!s} {screen.query_one('#tree').root.label} {[(w.name, w.state) for w in app.workers]} {notifications(app)})")
            assert (elsewhere / "lora_model" / "adapter_config.json").read_text() == \
                (run_dir / "lora_model" / "adapter_config.json").read_text()
            # Opened again: the destination of the last fetch from this host.
            await pilot.press("f")
            await pilot.pause()
            assert app.screen.query_one("#dest").value == str(elsewhere)  # type: ignore[attr-defined]

    asyncio.run(go())

    async def again() -> None:  # a new session remembers it too
        app = tui()
        async with app.run_test(size=SIZE) as pilot:
            # On a loaded machine one pause did not see the browser open (CI): `f` acts on
            # the selected row, so wait for the row, then for the browser.
            await until(pilot, lambda: app.runs_table.row_count > 0, "the run's row")
            app.runs_table.focus()
            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, FetchScreen), "the fetch browser")
            assert app.screen.query_one("#dest").value == str(elsewhere)  # type: ignore[attr-defined]

    asyncio.run(again())
