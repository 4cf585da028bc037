"""The runs' tabs: a run's live log or loss curves, marking runs and comparing their curves.

The tabs themselves are the main screen's (`screens/main_screen.py`); this is what the
app's keys do with them: which run a key is about, and what to say when there is none.
"""

from __future__ import annotations

from typing import Any, Protocol

from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.tui.app_face import AppFace
from rtrain_tui.tui.screens.compare_screen import CompareScreen
from rtrain_tui.tui.widgets.log_pane import LogPane


class LogTabsApp(AppFace, Protocol):
    """What the tabs' keys use of the app besides `AppFace`."""

    def open_log(self, record: RunRecord, follow: bool = True, curves: bool = False) -> LogPane: ...
    def push_screen(self, screen: Any, callback: Any = ...) -> Any: ...


class LogTabs:
    def __init__(self, app: LogTabsApp) -> None:
        self.app = app

    def open_selected(self) -> None:
        view = self.app.runs_table.selected
        if view is None:
            self.app.notify("No run selected.", severity="warning")
            return
        self.open(view.record)

    def open(self, record: RunRecord, follow: bool = True, curves: bool = False) -> LogPane:
        """The run's tab (opened, or brought to the front); `follow=False`: no engine
        behind it (the screenshots' and tests' fixed scenes)."""
        app = self.app
        return app.main_screen.open_log(record, app.engine if follow else None,
                                        state_of=lambda: self.state_of(record), curves=curves)

    def state_of(self, record: RunRecord) -> str:
        """The run's latest known state, as the refresh loop last saw it."""
        view = self.app.runs_table.views.get(record.key)
        return view.record.state if view is not None else record.state

    async def toggle_curves(self) -> None:
        """Show the selected run's curves in its tab (opening the tab if need be), or
        switch the open tab back to its log."""
        app = self.app
        screen = app.main_screen
        view = app.runs_table.selected
        # From the runs table (or with no tab open) `c` is about the selected run, not
        # whichever tab happens to be in front; inside a tab, about that tab.
        if view is not None and (app.runs_table.has_focus or not screen.log_panes):
            if not await screen.show_curves(view.key):
                app.open_log(view.record, curves=True)  # its tab mounts showing the curves
            return
        if view is None and not screen.log_panes:
            app.notify("No run selected.", severity="warning")
            return
        await screen.toggle_front_tab()

    def mark_run(self) -> None:
        view = self.app.runs_table.selected
        if view is None:
            self.app.notify("No run selected.", severity="warning")
            return
        self.app.runs_table.toggle_mark(view.key)

    def compare(self) -> None:
        app = self.app
        table = app.runs_table
        records = [v.record for k, v in table.views.items() if k in table.marked]
        if not records and table.selected is not None:
            records = [table.selected.record]
        if not records:
            app.notify("Mark runs with space first.", severity="warning")
            return
        app.push_screen(CompareScreen(app.engine, records, state_of=self.state_of,
                                      price_of=app.price_of(), clock=app.clock))
