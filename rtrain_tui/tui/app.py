"""The full-screen app: a table of contents, wiring each job to the module that does it.

All engine calls run in named worker groups, so nothing blocks the screen; the run index
is read only in threads, so a slow disk or a lock held by another process never freezes
it either. Where each job lives:

- the layout: `screens/main_screen.py`; the keys: `keys.py`;
- what the runs table shows (the index, each host's refresh): `runs_view.py`; when each
  host is refreshed: `refresher.py`; what a row says: `core.host_view`;
- the hosts and their preflight (badges, GPU panel, Slurm marking): `hosts_panel.py`;
- starting, stopping and fetching a run, and the toasts after: `run_actions.py`;
- what the keys do with a run's tab (log, curves, compare): `log_tabs.py`.

`make_app` is the one factory the CLI, the tests and the screenshot script use.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.worker import Worker, WorkerState

from rtrain_tui.core.engine import Engine, StartedRun
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunIndex, RunRecord
from rtrain_tui.core.runs.probes import PreflightReport
from rtrain_tui.core.safety.sanitize import safe_line, safe_text
from rtrain_tui.core.transfers.fetch_dirs import FetchDirs
from rtrain_tui.core.transport.connection import ConnectionPool
from rtrain_tui.core.transport.sshconfig import list_hosts
from rtrain_tui.tui.held_toasts import HeldToasts
from rtrain_tui.tui.hosts_panel import HostsPanel
from rtrain_tui.tui.keys import KEYS, MAIN_ACTIONS, palette_commands
from rtrain_tui.tui.log_tabs import LogTabs
from rtrain_tui.tui.messages import HostRefreshed
from rtrain_tui.tui.refresher import Refresher
from rtrain_tui.tui.run_actions import RunActions
from rtrain_tui.tui.runs_view import RunsView
from rtrain_tui.tui.screens.help_screen import HelpScreen
from rtrain_tui.tui.screens.main_screen import MainScreen, main_layout
from rtrain_tui.tui.widgets.host_list import HostList
from rtrain_tui.tui.widgets.log_pane import LogPane
from rtrain_tui.tui.widgets.runs_table import RunKey, RunsTable

if TYPE_CHECKING:
    from rtrain_tui.demo.server import DemoHost  # imported when --demo asks for it

Clock = Callable[[], datetime]


def utc_clock() -> datetime:
    return datetime.now(UTC)


class RTrainApp(HeldToasts):
    CSS_PATH = "app.tcss"
    # Narrower terminals narrow the host sidebar, then fold it away (`b` brings it back),
    # so the runs table keeps host, run, status and progress (see app.tcss).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-medium"), (120, "-wide")]
    TITLE = "rtrain-tui"
    SUB_TITLE = "fine-tuning runs on your SSH GPU hosts"
    BINDINGS: ClassVar[list[BindingType]] = [*KEYS]  # the table is keys.py's

    def __init__(self, engine: Engine, hosts: list[str], demo: bool = False,
                 clock: Clock = utc_clock, poll_runs: bool = True,
                 refresh_seconds: float = 2.0, out_dir: Path | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.hosts = hosts
        self.demo = demo
        self.clock = clock
        self.poll_runs = poll_runs
        self.refresh_seconds = refresh_seconds
        self.out_dir = out_dir or Path.cwd()
        self.fetch_dirs = FetchDirs(engine.index.path.with_name("fetch_dirs.toml"))
        self._demo_host: DemoHost | None = None
        self._first_load: Worker[None] | None = None  # the index's first read, until it ends
        self.runs_view = RunsView(self)
        self.hosts_panel = HostsPanel(self)
        self.run_actions = RunActions(self)
        self.log_tabs = LogTabs(self)
        self.refresher = Refresher(self, engine, self.runs_view.read_index, refresh_seconds, poll_runs,
                                   gpus_only=self.hosts_panel.checked_reachable,
                                   wanted=self._runs_in_sight,
                                   # The hosts' connections and caches live as long as the
                                   # app, as the first load's runs do (runs_view.py): out of
                                   # the collector's full passes too (40-110 ms each).
                                   on_warm=gc.freeze)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast shows its text literally: messages quote host aliases, file names and
        remote errors, where `[` is text, not markup (`x[@click=app.quit]` is a name)."""
        super().notify(safe_text(message), title=safe_line(title), severity=severity,
                       timeout=timeout, markup=markup)

    # -- layout: the main screen's ------------------------------------------------
    def get_default_screen(self) -> MainScreen:
        return MainScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield from main_layout(self.hosts, self.clock, self.price_of())

    def price_of(self) -> Callable[[str], Price | None] | None:
        """Each host's price (config.toml), or None when no host has one: then no cost
        column anywhere. A config.toml that cannot be used is said where it is used."""
        try:
            hosts = self.engine.hosts
        except RemoteError:
            return None
        return hosts.price_of if hosts.priced else None

    @property
    def main_screen(self) -> MainScreen:
        screen = self.default_screen
        assert isinstance(screen, MainScreen)
        return screen

    @property
    def host_list(self) -> HostList:
        return self.main_screen.host_list

    @property
    def runs_table(self) -> RunsTable:
        return self.main_screen.runs_table

    def on_mount(self) -> None:
        # What OpenSSH would warn about (a missing IdentityFile) shows as a toast.
        self.engine.pool.on_warning = lambda message: self.notify(
            safe_line(message), title="ssh", severity="warning", timeout=15, markup=False)
        first_load = self.load_runs(first=True)
        self.show_preflight()
        try:  # a broken config.toml leaves no cost column and no notifications: say why
            _ = self.engine.hosts
        except RemoteError as exc:
            self.notify(safe_line(str(exc)), title="config.toml", severity="error", timeout=30,
                        markup=False)
        # Connections start after the first frame: loading asyncssh takes ~150 ms.
        if self.demo:
            self.call_after_refresh(self.start_demo)
        if self.poll_runs:
            # Polling starts once the index's runs are shown (`_first_load_done`): its
            # index reads, connections and probes of 20 hosts took the CPU from filling
            # a table of 10,000 rows (full at 1.6-1.8 s instead of ~0.9 s).
            self._first_load = first_load
            # Cheap and cannot stack: it only starts hosts that are neither being probed
            # nor already armed.
            self.set_interval(self.refresh_seconds * 5, self.refresher.discover)
        self.host_list.focus()  # the runs table takes it once its runs are read

    async def on_unmount(self) -> None:
        gc.unfreeze()  # what the first load froze (runs_view.py) is collectable again
        await self.engine.close()
        if self._demo_host is not None:
            await self._demo_host.close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a worker's unexpected failure surfaces: a toast, never silence."""
        if event.worker is self._first_load and event.worker.is_finished:
            self._first_load = None
            self.call_after_refresh(self.refresher.refresh_all)
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            error = event.worker.error
            text = str(error) if isinstance(error, RemoteError) else f"{type(error).__name__}: {error}"
            self.notify(text, title=event.worker.description or event.worker.group,
                        severity="error", timeout=30)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A dialog's footer shows the dialog's keys: the main screen's do nothing there."""
        if isinstance(self.screen, ModalScreen) and action in MAIN_ACTIONS:
            return False
        return True

    # -- the demo host -------------------------------------------------------------
    @work(group="demo", exclusive=True, exit_on_error=False)
    async def start_demo(self) -> None:
        from rtrain_tui.demo.server import DEMO_ALIAS, start_demo_host

        self._demo_host = await start_demo_host()
        self.engine.pool.add(self._demo_host.connection())
        self.preflight_host(DEMO_ALIAS)

    def gpus_for(self, host: str) -> int:
        return 0 if self.demo and host == "demo" else 1

    # -- runs: the index read in threads and each host's refresh (runs_view.py) -----
    def load_runs(self, progress: dict[RunKey, str] | None = None, first: bool = False) -> Worker[None]:
        """Read the index (in a thread) and show its runs; the worker says when it is done."""
        return self.runs_view.load(progress, first)

    def refresh_runs(self) -> None:
        """Refresh every host that has runs now (those already refreshing are left be)."""
        self.refresher.refresh_all()

    def _runs_in_sight(self) -> set[RunKey]:
        """The runs whose progress a refresh reads: on screen in the table, or open."""
        return self.runs_table.on_screen() | self.main_screen.log_panes.keys()

    @on(HostRefreshed)
    def _host_refreshed(self, event: HostRefreshed) -> None:
        self.runs_view.show_refresh(event)

    def action_refresh(self) -> None:
        self.runs_view.refresh_now()

    # -- hosts and preflight -------------------------------------------------------
    @on(HostList.HostSelected)
    def _host_selected(self, event: HostList.HostSelected) -> None:
        self.show_preflight()
        if self.runs_table.host_filter is not None:
            self.runs_table.host_filter = event.alias
            self.runs_table.refilter()

    @on(HostList.PreflightRequested)
    def _preflight_requested(self, event: HostList.PreflightRequested) -> None:
        self.preflight_host(event.alias)

    @property
    def reports(self) -> dict[str, tuple[PreflightReport, str]]:
        return self.hosts_panel.reports

    def show_preflight(self) -> None:
        self.hosts_panel.show_preflight()

    def set_preflight(self, report: PreflightReport) -> None:
        """Show a preflight result (also how tests and screenshots inject one)."""
        self.hosts_panel.set_preflight(report)

    def preflight_host(self, host: str) -> None:
        self.hosts_panel.preflight_host(host)

    def action_preflight(self) -> None:
        self.hosts_panel.check_selected()

    def action_mark_slurm(self) -> None:
        self.hosts_panel.mark_slurm()

    # -- start ---------------------------------------------------------------------
    def action_new_run(self) -> None:
        self.run_actions.new_run()

    def _started(self, started: StartedRun | None) -> None:
        self.run_actions.started(started)

    # -- logs ----------------------------------------------------------------------
    @on(RunsTable.RowSelected)
    def _row_selected(self) -> None:
        self.action_open_log()

    def action_open_log(self) -> None:
        self.log_tabs.open_selected()

    @property
    def log_panes(self) -> dict[RunKey, str]:
        return self.main_screen.log_panes

    def open_log(self, record: RunRecord, follow: bool = True, curves: bool = False) -> LogPane:
        """The run's tab (opened, or brought to the front); `follow=False`: no engine
        behind it (the screenshots' and tests' fixed scenes)."""
        return self.log_tabs.open(record, follow, curves)

    async def action_toggle_curves(self) -> None:
        await self.log_tabs.toggle_curves()

    def action_mark_run(self) -> None:
        self.log_tabs.mark_run()

    def action_compare(self) -> None:
        self.log_tabs.compare()

    def action_close_log(self) -> None:
        self.main_screen.close_log()

    # -- fetch and stop ------------------------------------------------------------
    def _selected_record(self) -> RunRecord | None:
        view = self.runs_table.selected
        if view is None:
            self.notify("No run selected.", severity="warning")
            return None
        return view.record

    def action_fetch(self) -> None:
        record = self._selected_record()
        if record is not None:
            self.run_actions.fetch(record)

    def action_stop(self) -> None:
        record = self._selected_record()
        if record is not None:
            self.run_actions.stop(record)

    def action_resume_run(self) -> None:
        record = self._selected_record()
        if record is not None:
            self.run_actions.resume(record)

    # -- filter and help -----------------------------------------------------------
    def action_filter(self) -> None:
        self.main_screen.open_filter()

    def action_toggle_hosts(self) -> None:
        self.main_screen.toggle_hosts()

    def action_host_filter(self) -> None:
        table = self.runs_table
        table.host_filter = None if table.host_filter else self.host_list.selected_alias
        table.refilter()

    def action_state_filter(self) -> None:
        self.runs_table.cycle_state_filter()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every key's action in the command palette (ctrl+p) too, for those who search."""
        yield from super().get_system_commands(screen)
        yield from palette_commands(self)


def make_app(ssh_config: Path, index: RunIndex, demo: bool = False, clock: Clock = utc_clock,
             poll_runs: bool = True, refresh_seconds: float = 2.0,
             out_dir: Path | None = None) -> RTrainApp:
    hosts = list_hosts(ssh_config)
    if demo and "demo" not in hosts:
        hosts = ["demo", *hosts]
    engine = Engine(ConnectionPool(ssh_config), index)
    return RTrainApp(engine, hosts, demo=demo, clock=clock, poll_runs=poll_runs,
                     refresh_seconds=refresh_seconds, out_dir=out_dir)


def run_app(ssh_config: Path, index: RunIndex, demo: bool = False) -> int:
    make_app(ssh_config, index, demo=demo).run()
    return 0
