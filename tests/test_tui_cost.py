"""The app's cost figures (issue 19): the runs table's cost column, the host panel's
price and the compare screen's cost, from config.toml's prices (core/runs/cost.py)."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console

from rtrain_tui.core.metrics.metrics import parse_text
from rtrain_tui.tui.app import RTrainApp
from rtrain_tui.tui.screens.compare_screen import CompareScreen
from rtrain_tui.tui.widgets.preflight_panel import PreflightPanel
from rtrain_tui.tui.widgets.runs_table import row_key
from tests.scenes import RUNS, SCENES, curves_log, make_scene_app
from tests.sshd import SshHosts
from tests.test_tui import notifications, start_run, tui, until

SIZE = (160, 40)


@pytest.fixture
def priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "xdg" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[hosts.h100-lab]\nprice_per_hour = 2.49\n'
                      '[hosts.uni-cluster]\nprice_per_gpu_hour = 1\ncurrency = "€"\n',
                      encoding="utf-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def text_of(renderable: object) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


@pytest.mark.usefixtures("priced")
def test_the_runs_table_shows_each_runs_cost_and_the_host_panel_its_price(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await SCENES["preflight"](pilot)  # the h100-lab host selected
            table = app.runs_table
            assert list(table.columns)[-1].value == "cost"
            cost = {r.run_id: str(table.get_row(row_key(r.key))[-1]) for r in RUNS}
            # running since 13:12, now 14:30: 1.3 h × 2.49 = 3.237
            assert cost["llama3-sft-r16"] == "$3.24"
            # ended (seen at 10:55:13) after 2 h 15 m 13 s: 5.6115…
            assert cost["run-1795961234"] == "$5.61"
            assert cost["phi3-chat"] == "€0.78"  # 46 m 30 s × 1 GPU × €1 = 0.775, half up
            assert cost["mistral-lora"] == ""  # a100-rented has no price
            assert cost["llama3-sft-r32"] == "$0.00"  # starting: nothing yet
            panel = app.query_one("#preflight", PreflightPanel)
            assert "price   $2.49/h" in text_of(panel.content)

    asyncio.run(go())


def test_no_price_anywhere_means_no_cost_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await SCENES["preflight"](pilot)
            assert "cost" not in [c.value for c in app.runs_table.columns]
            assert "price" not in text_of(app.query_one("#preflight", PreflightPanel).content)

    asyncio.run(go())


@pytest.mark.usefixtures("priced")
def test_compare_has_a_cost_with_a_running_runs_projection(tmp_path: Path) -> None:
    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = CompareScreen(None, [RUNS[0], RUNS[2]], price_of=app.price_of(), clock=app.clock)
            await app.push_screen(screen)
            await pilot.pause()
            screen.show({r.key: parse_text(curves_log()) for r in (RUNS[0], RUNS[2])})
            await pilot.pause()
            lines = text_of(screen.table).splitlines()
            assert lines[0].split()[-1] == "cost"
            assert "$3.24 → ~$" in lines[1] and lines[2].rstrip().endswith("$5.61")

    asyncio.run(go())


def test_a_running_runs_cost_cell_projects_its_end_from_the_eta(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the real sshd: the refresh reads the run's ETA with its progress, and the
    cell says `$spent → ~$at_end` (at $1 a second, its 55 s left are $55.00 more)."""
    config = tmp_path / "xdg" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[hosts.gpu]\nprice_per_hour = 3600\n", encoding="utf-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    hold = tmp_path / "go"  # held before step 5: its bar says 4/59 with 00:55 left
    start_run(hosts, tmp_path, "held", hf_style=True, steps=59, step_seconds=0.01, hold_at=5,
              hold_file=hold)

    def cell(app: RTrainApp) -> str:
        table = app.runs_table
        return str(table.get_row_at(0)[-1]) if table.row_count else ""

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "→ ~" in cell(app), "a projected cost")
            spent, at_end = (Decimal(part.strip(" ~$")) for part in cell(app).split("→"))
            assert at_end - spent == Decimal("55.00")
        hold.touch()

    asyncio.run(go())


def test_a_config_toml_that_cannot_be_read_is_said_when_the_app_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in config.toml left the app without its cost column and its notifications,
    and said nothing (the CLI says it on every command)."""
    config = tmp_path / "xdg" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[hosts.h100-lab]\nprice_per_hour = 2.49\nprice_per_hour = "cheap"\n',
                      encoding="utf-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await SCENES["main"](pilot)
            said = [m for m in notifications(app) if m.startswith(f"cannot read {config}")]
            assert len(said) == 1 and said[0].endswith("fix or move it."), notifications(app)

    asyncio.run(go())
