"""Starting, stopping and fetching a run from the app, and the toasts that say how each went.

The app owns one `RunActions`: its `n`, `f` and `x` keys push the dialog from here, the
dialog's result comes back to `started`, `fetched` or `stopped`, and each refresh hands
its records to `notify_transitions`, which says when a run ended on its own (a stop the
user issued has its own toast).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from textual.notifications import SeverityLevel

from rtrain_tui.core.engine import StartedRun
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.transfers.fetch_dirs import FetchDirs
from rtrain_tui.tui.app_face import AppFace
from rtrain_tui.tui.screens.fetch_screen import FetchScreen
from rtrain_tui.tui.screens.start_screen import StartDefaults, StartScreen
from rtrain_tui.tui.screens.stop_screen import StopScreen
from rtrain_tui.tui.widgets.log_pane import LogPane
from rtrain_tui.tui.widgets.runs_table import RunKey


class ShowsRuns(Protocol):
    """The runs table's filler (runs_view.py): a started run is selected once it shows."""

    async def show(self, progress: dict[RunKey, str] | None, first: bool) -> None: ...


class RunActionsApp(AppFace, Protocol):
    """What starting, stopping, fetching and resuming use of the app besides `AppFace`."""

    @property
    def hosts(self) -> list[str]: ...
    @property
    def demo(self) -> bool: ...
    @property
    def is_running(self) -> bool: ...
    @property
    def out_dir(self) -> Path: ...
    @property
    def fetch_dirs(self) -> FetchDirs: ...
    @property
    def runs_view(self) -> ShowsRuns: ...
    def gpus_for(self, host: str) -> int: ...
    def load_runs(self) -> object: ...
    def refresh_runs(self) -> None: ...
    def open_log(self, record: RunRecord, follow: bool = True, curves: bool = False) -> LogPane: ...
    def push_screen(self, screen: Any, callback: Any = ...) -> Any: ...
    def bell(self) -> None: ...


class RunActions:
    def __init__(self, app: RunActionsApp) -> None:
        self.app = app
        self.last_states: dict[RunKey, str] = {}
        self.reasons: dict[RunKey, str] = {}  # why each failed or lost run ended
        self._seen: list[RunRecord] = []  # the records notify_transitions last went through

    # -- start ---------------------------------------------------------------------
    def new_run(self) -> None:
        app = self.app
        host = app.host_list.selected_alias or (app.hosts[0] if app.hosts else None)
        if host is None:
            app.notify("No hosts: add one to ~/.ssh/config or start with --demo.", severity="warning")
            return
        app.push_screen(StartScreen(app.engine, app.hosts, self.start_defaults(host),
                                    gpus_for=app.gpus_for), self.started)

    def start_defaults(self, host: str) -> StartDefaults:
        if self.app.demo and host == "demo":
            from rtrain_tui.demo.server import SAMPLES

            return StartDefaults(host, str(SAMPLES / "config.yaml"),
                                 str(SAMPLES / "pirate_chat.jsonl"), gpus=0)
        return StartDefaults(host, gpus=self.app.gpus_for(host))

    def started(self, started: StartedRun | None) -> None:
        app = self.app
        if not app.is_running:
            # The form's result came back while the app closes (its panes are being
            # removed): the run goes on on its host, and the next app shows it.
            return
        if started is None:
            # Cancelled or failed: a run the engine entered as `starting` still shows, and
            # the next refresh of its host tells what became of it.
            app.load_runs()
            app.refresh_runs()
            return
        said = f"\n{started.host} said: {started.submit_message}" if started.submit_message else ""
        shipped = f"\n{started.dataset}" if started.dataset else ""
        app.notify(f"started {started.run_id} on {started.host}{shipped}{said}",
                   title="Run started", markup=False)
        self.last_states[started.record.key] = started.record.state  # running, or queued (Slurm)
        app.run_worker(self._show_started(started.record.key), group="index-load",
                       exclusive=True, exit_on_error=False, description="read the run index")
        app.refresher.refresh_now(started.host)
        app.open_log(started.record)

    async def _show_started(self, key: RunKey) -> None:
        await self.app.runs_view.show(None, first=False)
        self.app.runs_table.select_run(key)

    # -- fetch and stop ------------------------------------------------------------
    def fetch(self, record: RunRecord) -> None:
        app = self.app
        host = record.host
        out = app.fetch_dirs.get(host) or app.out_dir
        app.push_screen(FetchScreen(app.engine, record, out,
                                    remember_dir=lambda d: app.fetch_dirs.remember(host, d)),
                        self.fetched)

    def fetched(self, dest: Path | None) -> None:
        if dest is not None:
            self.app.notify(f"fetched to {dest}", title="Fetched")

    def stop(self, record: RunRecord) -> None:
        if probes.is_final(record.state) and not record.stale:
            # Nothing to confirm: say what it is instead of offering to stop it.
            self.app.notify(f"{record.run_id} on {record.host} already ended ({record.state}); "
                            "nothing to stop.", title="Stop", markup=False)
            return
        self.app.push_screen(StopScreen(self.app.engine, record), self.stopped)

    def stopped(self, result: tuple[bool, str] | None) -> None:
        if result is None:
            return
        ok, verdict = result
        self.app.notify(verdict, title="Stop", severity="information" if ok else "error",
                        timeout=10 if ok else 30)
        self.app.load_runs()
        self.app.refresh_runs()

    # -- resume --------------------------------------------------------------------
    def resume(self, record: RunRecord) -> None:
        """`R`: a new attempt from the newest complete checkpoint (core/resume.py); the
        engine refuses a run that is live or completed, and the toast says why."""
        self.app.notify(f"resuming {record.run_id} on {record.host}…", title="Resume", markup=False)
        self.app.run_worker(self._resume(record), group="resume", exclusive=False,
                            exit_on_error=False, description=f"resume {record.run_id}")

    async def _resume(self, record: RunRecord) -> None:
        app = self.app
        try:
            resumed = await app.engine.resume(record.host, record.workdir, record.run_id,
                                              reason=self.reasons.get(record.key, ""))
        except RemoteError as exc:
            app.notify(str(exc), title="Resume", severity="error", timeout=30, markup=False)
            return
        how = f"from {resumed.checkpoint}" if resumed.checkpoint else "from the start"
        skipped = "".join(f"\nskipped {line}" for line in resumed.skipped)
        app.notify(f"resumed {record.run_id} on {record.host}: attempt {resumed.attempt}, {how}"
                   f"{skipped}", title="Resumed", markup=False)
        self.last_states[record.key] = resumed.started.record.state
        app.load_runs()
        app.refresher.refresh_now(record.host)

    # -- runs that ended on their own ----------------------------------------------
    def notify_transitions(self, records: list[RunRecord]) -> None:
        if records == self._seen:
            return  # the same records as the last time (compared in C): no run changed
        seen = {id(r) for r in self._seen}  # a run whose record is the same did not change
        self._seen = records
        for r in records:
            if id(r) in seen:
                continue
            before = self.last_states.get(r.key)
            if before in (probes.RUNNING, probes.QUEUED, probes.STARTING) and r.state != before \
                    and not r.stale:
                # completed, failed or lost; a stop the user issued has its own toast
                if probes.is_final(r.state) and r.state != probes.STOPPED:
                    severity: SeverityLevel = ("information" if r.state == probes.COMPLETED
                                               else "error")
                    reason = self.reasons.get(r.key, "")
                    self.app.notify(f"{r.run_id} on {r.host}: {r.state}" + (f"\n{reason}" if reason else ""),
                                    title="Run ended", severity=severity, timeout=10, markup=False)
                    self.app.bell()
            self.last_states[r.key] = r.state
