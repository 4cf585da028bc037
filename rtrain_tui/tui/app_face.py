"""What the app's helpers use of the app, as a Protocol: they take it passed in and never
import `app.py` back (an import cycle, with the app importing them).

`AppFace` is what every helper (hosts_panel, log_tabs, run_actions, runs_view) uses: the
engine, the clock, the main screen's widgets, workers and toasts. Each helper module adds
the few other members it needs in a Protocol of its own (`HostsPanelApp`, ...), so reading
a helper tells exactly what it touches; `RTrainApp` satisfies them all (mypy checks it
where it hands itself over).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from textual.notifications import SeverityLevel

from rtrain_tui.core.engine import Engine
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.tui.refresher import Refresher
from rtrain_tui.tui.screens.main_screen import MainScreen
from rtrain_tui.tui.widgets.host_list import HostList
from rtrain_tui.tui.widgets.runs_table import RunsTable


class AppFace(Protocol):
    """The app as every helper sees it."""

    @property
    def engine(self) -> Engine: ...
    @property
    def refresher(self) -> Refresher: ...
    @property
    def main_screen(self) -> MainScreen: ...
    @property
    def host_list(self) -> HostList: ...
    @property
    def runs_table(self) -> RunsTable: ...
    def clock(self) -> datetime: ...
    def price_of(self) -> Callable[[str], Price | None] | None: ...
    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None: ...
    # Textual's App.run_worker, as the refresher's Scheduler words it (its types are generic).
    def run_worker(self, work: Any, *, group: str = ..., exclusive: bool = ...,
                   exit_on_error: bool = ..., description: str = ...) -> Any: ...
