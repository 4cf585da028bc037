"""The main screen's layout: hosts and their preflight on the left; the run filter, the
runs table and the log tabs on the right.

It owns what is only about its own widgets (the filter box, folding the host sidebar,
the table or its empty-state text, the log tabs: where a run's tab is opened); the app does the rest (what runs there are, what a
key does to a run). It is the app's default screen, so the app's queries find its widgets.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from datetime import datetime

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static, TabbedContent, TabPane

from rtrain_tui.core.logs.logstream import LogSource
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.tui.widgets.host_list import HostList
from rtrain_tui.tui.widgets.log_pane import LogPane
from rtrain_tui.tui.widgets.preflight_panel import PreflightPanel
from rtrain_tui.tui.widgets.run_tab import RunTab
from rtrain_tui.tui.widgets.runs_table import RunKey, RunsTable

EMPTY_RUNS = "No runs yet: press n to start a run."
NO_LOG = "No log open — select a run and press enter."


def main_layout(hosts: list[str], clock: Callable[[], datetime],
                price_of: Callable[[str], Price | None] | None = None) -> ComposeResult:
    """The main screen's widgets. The app composes them (`RTrainApp.compose`) into its
    default screen, a `MainScreen`: a screen's own compose would run after the app's
    mount, and the app reads these widgets from its first moment. `price_of`: each host's
    price, when some host has one (the runs table then has a cost column)."""
    yield Header()
    with Horizontal(id="main"):
        with Vertical(id="left"):
            yield HostList(hosts, id="hosts")
            yield PreflightPanel(id="preflight")
        with Vertical(id="right"):
            yield Input(placeholder="filter runs by host, id, state, progress or reason (esc: close)",
                        id="run-filter", classes="hidden")
            yield RunsTable(clock, price_of, id="runs")
            yield Static(EMPTY_RUNS, id="runs-empty", classes="hidden")
            yield Static(NO_LOG, id="logs-empty")
            yield TabbedContent(id="logs", classes="hidden")
    yield Footer()


class MainScreen(Screen[None]):
    """The app's default screen: the widgets of `main_layout`, and what only they do."""

    def __init__(self, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name, id, classes)
        self.log_panes: dict[RunKey, str] = {}  # each open run's tab id
        self._log_ids = itertools.count()  # tab ids are never reused, whatever closes first

    @property
    def host_list(self) -> HostList:
        return self.query_one("#hosts", HostList)

    @property
    def runs_table(self) -> RunsTable:
        return self.query_one("#runs", RunsTable)

    def show_runs(self, records: list[RunRecord] | None, progress: Mapping[RunKey, str] | None,
                  reasons: Mapping[RunKey, str] | None = None,
                  etas: Mapping[RunKey, float | None] | None = None) -> None:
        """The table, or while the index has no runs at all, what to do about that
        (`records` None: the runs as they were, with these lines)."""
        self.runs_table.set_runs(records, progress, reasons, etas)
        if records is not None:
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

    # -- the log tabs: one per open run --------------------------------------------
    def open_log(self, record: RunRecord, source: LogSource | None,
                 state_of: Callable[[], str], curves: bool = False) -> LogPane:
        """The run's tab, opened (following its log through `source`, the engine) or
        brought to the front; `state_of` says the run's latest state to its curves."""
        tabs = self.query_one("#logs", TabbedContent)
        tabs.remove_class("hidden")
        self.query_one("#logs-empty").add_class("hidden")
        if record.key in self.log_panes:
            tabs.active = self.log_panes[record.key]
            return self.query_one(f"#{self.log_panes[record.key]} LogPane", LogPane)
        pane_id = f"log-{next(self._log_ids)}"
        self.log_panes[record.key] = pane_id
        pane = LogPane(source, record)
        tab = RunTab(pane, source, record, state_of=state_of, curves_first=curves)
        # Plain Content: an alias from the ssh config may hold `[`, never read as markup.
        tabs.add_pane(TabPane(Content(f"{record.host}/{record.run_id}"), tab, id=pane_id))
        tabs.active = pane_id
        return pane

    async def show_curves(self, key: RunKey) -> bool:
        """Bring the run's tab to the front showing its curves (a second `c` on the tab
        in front switches back to its log); False when the run has no tab open."""
        pane_id = self.log_panes.get(key)
        if pane_id is None:
            return False
        tabs = self.query_one("#logs", TabbedContent)
        tab = self.query_one(f"#{pane_id} RunTab", RunTab)
        if tabs.active == pane_id or not tab.showing_curves:
            await tab.toggle()
        tabs.active = pane_id
        return True

    async def toggle_front_tab(self) -> None:
        """Switch the tab in front between its log and its curves."""
        tabs = self.query_one("#logs", TabbedContent)
        if tabs.active:
            await self.query_one(f"#{tabs.active} RunTab", RunTab).toggle()

    def close_log(self) -> None:
        tabs = self.query_one("#logs", TabbedContent)
        active = tabs.active
        if not active or active not in self.log_panes.values():
            return  # nothing open, or this tab is already on its way out
        self.log_panes = {k: v for k, v in self.log_panes.items() if v != active}
        tabs.remove_pane(active)
        if not self.log_panes:
            tabs.add_class("hidden")
            self.query_one("#logs-empty").remove_class("hidden")
