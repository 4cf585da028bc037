"""The main screen's layout: hosts and their preflight on the left; the run filter, the
runs table and the log tabs on the right.

It owns what is only about its own widgets (the filter box, folding the host sidebar,
the table or its empty-state text); the app does the rest (what runs there are, what a
key does to a run). It is the app's default screen, so the app's queries find its widgets.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static, TabbedContent

from rtrain_tui.core.index import RunRecord
from rtrain_tui.tui.widgets.host_list import HostList
from rtrain_tui.tui.widgets.preflight_panel import PreflightPanel
from rtrain_tui.tui.widgets.runs_table import RunKey, RunsTable

EMPTY_RUNS = "No runs yet: press n to start a run."
NO_LOG = "No log open — select a run and press enter."


def main_layout(hosts: list[str], clock: Callable[[], datetime]) -> ComposeResult:
    """The main screen's widgets. The app composes them (`RTrainApp.compose`) into its
    default screen, a `MainScreen`: a screen's own compose would run after the app's
    mount, and the app reads these widgets from its first moment."""
    yield Header()
    with Horizontal(id="main"):
        with Vertical(id="left"):
            yield HostList(hosts, id="hosts")
            yield PreflightPanel(id="preflight")
        with Vertical(id="right"):
            yield Input(placeholder="filter runs by host, id, state or progress (esc: close)",
                        id="run-filter", classes="hidden")
            yield RunsTable(clock, id="runs")
            yield Static(EMPTY_RUNS, id="runs-empty", classes="hidden")
            yield Static(NO_LOG, id="logs-empty")
            yield TabbedContent(id="logs", classes="hidden")
    yield Footer()


class MainScreen(Screen[None]):
    """The app's default screen: the widgets of `main_layout`, and what only they do."""

    @property
    def host_list(self) -> HostList:
        return self.query_one("#hosts", HostList)

    @property
    def runs_table(self) -> RunsTable:
        return self.query_one("#runs", RunsTable)

    def show_runs(self, records: list[RunRecord], progress: dict[RunKey, str] | None) -> None:
        """The table, or while the index has no runs at all, what to do about that."""
        self.runs_table.set_runs(records, progress)
        self.runs_table.set_class(not records, "hidden")
        self.query_one("#runs-empty").set_class(bool(records), "hidden")

    # -- the filter box ----------------------------------------------------------
    def open_filter(self) -> None:
        box = self.query_one("#run-filter", Input)
        box.remove_class("hidden")
        box.focus()

    @on(Input.Changed, "#run-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.runs_table.text_filter = event.value
        self.runs_table.refilter()

    @on(Input.Submitted, "#run-filter")
    def _filter_done(self) -> None:
        self.runs_table.focus()

    def on_key(self, event: events.Key) -> None:
        box = self.query_one("#run-filter", Input)
        if event.key == "escape" and box.has_focus:
            box.value = ""
            box.add_class("hidden")
            self.runs_table.focus()
            event.stop()

    # -- the host sidebar --------------------------------------------------------
    def toggle_hosts(self) -> None:
        main = self.query_one("#main")
        narrow = self.has_class("-narrow")
        # On a narrow terminal the sidebar is hidden unless asked for; elsewhere shown
        # unless asked away: one class each way keeps the rule in the stylesheet.
        main.toggle_class("-show-hosts" if narrow else "-hide-hosts")
        main.remove_class("-hide-hosts" if narrow else "-show-hosts")
        shown = main.has_class("-show-hosts") if narrow else not main.has_class("-hide-hosts")
        # after the stylesheet applied the class: a hidden widget cannot take focus
        self.call_after_refresh((self.host_list if shown else self.runs_table).focus)
