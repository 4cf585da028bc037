"""What the runs table shows: the run index read in threads, and each host's refresh.

The refresher (`refresher.py`) decides when a host is probed and posts one
`HostRefreshed` per refresh; the app hands it here, where it becomes the rows, the host's
badge and GPU panel (through `hosts_panel.py`) and, for a run that ended, its toast
(through `run_actions.py`). Index troubles are said once (`index_reader.py`).
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Protocol

from textual.css.query import NoMatches
from textual.widget import Widget
from textual.worker import Worker

from rtrain_tui.core.runs.index import IndexReport, RunRecord
from rtrain_tui.core.runs.probes import RUNNING, STALL_WORDS
from rtrain_tui.tui.app_face import AppFace
from rtrain_tui.tui.index_reader import IndexReader
from rtrain_tui.tui.messages import HostRefreshed
from rtrain_tui.tui.widgets.runs_table import RunKey


class HostBadges(Protocol):
    """What a refresh tells the hosts panel (hosts_panel.py)."""

    def found_elsewhere(self, host: str, added: list[RunRecord]) -> None: ...
    def show_reachability(self, host: str, reached: bool) -> None: ...
    def gpus_changed(self, host: str) -> None: ...


class RunToasts(Protocol):
    """What a refresh tells the run actions (run_actions.py): why runs ended, and which did."""

    @property
    def reasons(self) -> dict[RunKey, str]: ...
    def notify_transitions(self, records: list[RunRecord]) -> None: ...


class RunsViewApp(AppFace, Protocol):
    """What the runs table's filler uses of the app besides `AppFace`."""

    @property
    def hosts_panel(self) -> HostBadges: ...
    @property
    def run_actions(self) -> RunToasts: ...
    @property
    def is_running(self) -> bool: ...
    @property
    def focused(self) -> Widget | None: ...


class RunsView:
    def __init__(self, app: RunsViewApp) -> None:
        self.app = app
        self.index_reader = IndexReader(app.engine.index, app.notify, self._mark_skipped)
        self.stalls_said: set[RunKey] = set()  # stalled runs whose toast was shown

    async def read_index(self) -> IndexReport | None:
        return await self.index_reader.read()

    def _mark_skipped(self, count: int) -> None:
        self.app.runs_table.border_title = "Runs" + (
            f" · ⚠ {count} index record(s) skipped" if count else "")

    def load(self, progress: dict[RunKey, str] | None = None, first: bool = False) -> Worker[None]:
        """Read the index (in a thread) and show its runs; the worker says when it is done."""
        return self.app.run_worker(self.show(progress, first), group="index-load",
                                   exclusive=True, exit_on_error=False,
                                   description="read the run index")

    async def show(self, progress: dict[RunKey, str] | None, first: bool) -> None:
        app = self.app
        report = await self.read_index()
        if report is None:
            return
        app.main_screen.show_runs(report.records, progress)
        if first:
            # What is made so far (the index, its 10,000 rows) lives as long as the app:
            # the collector's full passes over it (50-160 ms each) were the slowest key
            # presses while polling (p95 82 ms, 24 ms without). `RTrainApp.on_unmount`
            # hands it back to the collector.
            gc.freeze()
        if first and app.runs_table.row_count and app.focused is app.host_list:
            app.runs_table.focus()

    def show_refresh(self, event: HostRefreshed) -> None:
        """Show one host's refresh, then arm its next one."""
        app = self.app
        host = event.host
        if not app.is_running:
            return  # the app is closing: its widgets may be gone, and nothing is re-armed
        try:
            if event.trouble is not None:
                self.index_reader.trouble(event.trouble)
                return
            view = event.view
            if view is None:
                return  # the index could not be read; that was said
            hosts = app.hosts_panel
            if view.found:
                hosts.found_elsewhere(host, list(view.found))
            if event.gpus_unreached:
                hosts.show_reachability(host, False)
            hosts.gpus_changed(host)
            hosts.show_reachability(host, view.reached)
            # Only this refresh's lines go to the table: a refresh costs what it changed.
            progress: dict[RunKey, str] = {}
            reasons: dict[RunKey, str] = {}
            etas: dict[RunKey, float | None] = {}
            for line in view.lines:
                if line.progress is not None:
                    progress[line.key] = line.progress
                    etas[line.key] = line.eta_s
                if line.reason:
                    reasons[line.key] = line.reason
            app.run_actions.reasons.update(reasons)
            # A stall is news while the run runs; one its watchdog stopped ended with it.
            self._say_stalls({line.key: line.reason for line in view.lines
                              if line.reason and line.state == RUNNING},
                             [line.key for line in view.lines if not line.reason])
            for notice in app.engine.notices:  # what a refresh did by itself (a reboot's retry)
                app.notify(notice, title="Runs", severity="warning", timeout=10, markup=False)
            app.engine.notices.clear()
            # (An index that could not be read this time keeps the rows it had.)
            app.main_screen.show_runs(event.records, progress, reasons, etas)
            if event.records is not None and event.final:
                # an ended run's toast says why: that comes with the lines
                app.run_actions.notify_transitions(event.records)
        except NoMatches:
            # The screen's widgets are being removed (the app closes under a fast poll,
            # and is_running is still true): there is nothing left to show this on.
            return
        finally:
            if event.final:
                app.refresher.finished(host)

    def _say_stalls(self, reasons: Mapping[RunKey, str], calm: list[RunKey]) -> None:
        """A toast when a running run starts to read stalled (once per stall)."""
        for key, reason in reasons.items():
            if reason.startswith(STALL_WORDS) and key not in self.stalls_said:
                self.stalls_said.add(key)
                self.app.notify(f"{key[2]} on {key[0]}: {reason}", title="Run stalled",
                                severity="warning", timeout=10, markup=False)
        self.stalls_said.difference_update(calm)

    def refresh_now(self) -> None:
        """Probe every host with runs now, every run of theirs (the settled ones too: a
        run resumed elsewhere reads as it is), then say when (`refreshed HH:MM:SS`)."""
        self.app.run_worker(self._refresh_now(), group="refresh-now", exclusive=True,
                            exit_on_error=False, description="refresh runs")

    async def _refresh_now(self) -> None:
        await self.app.refresher.refresh_all_now(all_runs=True)
        self.app.notify(f"refreshed {self.app.clock():%H:%M:%S}", title="Runs", timeout=3)
