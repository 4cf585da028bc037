"""The hosts and their preflight: checks, reports, reachability badges and the GPU panel.

The app owns one `HostsPanel` and dispatches to it (its key actions, the host list's
messages, each refresh's reachability and GPU samples); everything it shows goes on the
main screen's host list and preflight panel. Checks run in app workers named
`preflight:<host>`, so a slow host never blocks the screen or the other hosts.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, TypeVar

from textual.widget import Widget

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import hostconfig
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.probes import PreflightReport
from rtrain_tui.core.transport.sshconfig import shown_path
from rtrain_tui.tui.app_face import AppFace
from rtrain_tui.tui.widgets.preflight_panel import PreflightPanel

W = TypeVar("W", bound=Widget)


class HostsPanelApp(AppFace, Protocol):
    """What the hosts panel uses of the app besides `AppFace`."""

    @property
    def demo(self) -> bool: ...
    @property
    def poll_runs(self) -> bool: ...
    def gpus_for(self, host: str) -> int: ...
    def load_runs(self) -> object: ...
    def query_one(self, selector: str, expect_type: type[W]) -> W: ...


class HostsPanel:
    def __init__(self, app: HostsPanelApp) -> None:
        self.app = app
        self.reports: dict[str, tuple[PreflightReport, str]] = {}
        self.checking: set[str] = set()
        self._offered_slurm: set[str] = set()  # hosts we said "press m" for

    def checked_reachable(self, host: str) -> bool:
        report = self.reports.get(host, (None, ""))[0]
        return report is not None and report.reachable

    def gpus_changed(self, host: str) -> None:
        if host == self.app.host_list.selected_alias and host not in self.checking:
            self.show_preflight()

    def show_reachability(self, host: str, reached: bool) -> None:
        """An unanswered probe marks the host unreachable; an answer restores its badge."""
        host_list = self.app.host_list
        current = host_list.hosts.get(host)
        if not reached:
            host_list.set_status(host, "unreachable")
        elif current is not None and current.status == "unreachable" and host not in self.checking:
            report = self.reports.get(host, (None, ""))[0]
            status = "not checked" if report is None else ("ready" if report.ok else "not ready")
            host_list.set_status(host, status)

    def show_preflight(self) -> None:
        app = self.app
        host = app.host_list.selected_alias
        report, checked = self.reports.get(host or "", (None, ""))
        app.query_one("#preflight", PreflightPanel).show(
            report, host, checked, host in self.checking,
            gpus=app.engine.gpu_history.get(host or ""), now=app.clock().timestamp(),
            price=self.price_label(host), ssh_config=shown_path(app.engine.pool.ssh_config))

    def price_label(self, host: str | None) -> str:
        """The host's price as the panel shows it (`$2.49/h`), or "" when it has none."""
        price_of = self.app.price_of()
        price = price_of(host) if price_of is not None and host else None
        return price.label() if price is not None else ""

    def check_selected(self) -> None:
        host = self.app.host_list.selected_alias
        if host is None:
            self.app.notify("No host selected.", severity="warning")
            return
        self.preflight_host(host)

    def preflight_host(self, host: str) -> None:
        self.checking.add(host)
        self.app.host_list.set_status(host, "checking")
        self.show_preflight()
        self.app.run_worker(self._preflight(host), group=f"preflight:{host}", exclusive=True,
                            exit_on_error=False)

    async def _preflight(self, host: str) -> None:
        app = self.app
        try:
            report = await app.engine.preflight(host, gpus=app.gpus_for(host))
        except RemoteError as exc:
            report = PreflightReport(host=host, reachable=False, error=str(exc))
        self.set_preflight(report)
        if report.slurm_login and host not in self._offered_slurm and self.backend(host) == "direct":
            self._offered_slurm.add(host)  # once per host and session
            app.notify(f"{host} looks like a Slurm login node: press m to run its jobs through "
                       "Slurm (adds it to config.toml).", title="Slurm", timeout=20)
        if report.reachable:
            await self._discover_runs(host)

    async def _discover_runs(self, host: str) -> None:
        """A checked host's workdirs are scanned for runs started elsewhere (another
        laptop, `praisonai train remote`); those found join the table, marked in the index."""
        try:
            added = await self.app.engine.discover(host)
        except RemoteError:
            return  # the host just answered preflight; the next check tries again
        if added:
            self.found_elsewhere(host, added)
            self.app.load_runs()
            self.app.refresher.refresh_now(host)

    def found_elsewhere(self, host: str, added: list[RunRecord]) -> None:
        """Say which runs were found on the host (by a preflight or a refresh's listing);
        the refresh re-reads the index after its probe, so they join the table there."""
        names = ", ".join(r.run_id for r in added[:5]) + (" …" if len(added) > 5 else "")
        self.app.notify(f"{len(added)} run{'' if len(added) == 1 else 's'} started elsewhere: "
                        f"{names}", title=f"Found on {host}", markup=False)

    def backend(self, host: str) -> str:
        try:
            return self.app.engine.backend_of_host(host)
        except RemoteError:
            return "direct"  # a broken config.toml: starts will say so

    def mark_slurm(self) -> None:
        app = self.app
        host = app.host_list.selected_alias
        report = self.reports.get(host, (None, ""))[0] if host else None
        if app.demo and host == "demo":
            app.notify("The demo host runs on this machine: it is never a Slurm login node.",
                       severity="warning")
            return
        if host is None or report is None or not report.slurm_login:
            app.notify("Check a host first (p): only one with sbatch can be marked as Slurm.",
                       severity="warning")
            return
        if self.backend(host) == "slurm":
            app.notify(f"{host} already runs its jobs through Slurm.")
            return
        app.run_worker(self._mark_slurm(host), group="mark-slurm", exit_on_error=False)

    async def _mark_slurm(self, host: str) -> None:
        app = self.app
        try:
            path = await asyncio.to_thread(hostconfig.mark_slurm, host)
        except RemoteError as exc:
            app.notify(str(exc), title="Slurm", severity="error", timeout=30)
            return
        app.engine.reload_hosts()
        app.notify(f"{host} now runs its jobs through Slurm ({path}).", title="Slurm")
        self.preflight_host(host)  # its partitions and GPUs, as a login node

    def set_preflight(self, report: PreflightReport) -> None:
        """Show a preflight result (also how tests and screenshots inject one)."""
        app = self.app
        host = report.host
        self.checking.discard(host)
        self.reports[host] = (report, app.clock().strftime("%H:%M:%S"))
        status = "ready" if report.ok else ("unreachable" if not report.reachable else "not ready")
        app.host_list.set_status(host, status, report.gpu_summary() if report.reachable else "")
        self.show_preflight()
        if app.poll_runs and report.reachable and report.gpus and app.refresher.idle(host):
            app.refresher.refresh_now(host)  # from now on its GPUs are sampled with each refresh
