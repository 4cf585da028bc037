"""When each host is refreshed: never two probes of one host at once, each re-armed only
after its last one was shown, one period per host.

A slow or unreachable host therefore never stacks probes and never delays the others.
The refresher does the I/O in named workers (`refresh:<host>`, `discover`) and posts one
`HostRefreshed` per refresh; `runs_view.py` shows it and calls `finished`, which arms
the next one. What a row says is `core.host_view`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, Protocol

from textual.timer import Timer

from rtrain_tui.core import host_view
from rtrain_tui.core.errors import IndexBusyError, IndexCorruptError, RemoteError
from rtrain_tui.core.runs.index import IndexReport, RunRecord
from rtrain_tui.core.runs.probes import is_final
from rtrain_tui.tui.messages import HostRefreshed

RunKey = tuple[str, str, str]


class Scheduler(Protocol):
    """What the refresher needs of the app: workers, timers and a way to tell it."""

    def run_worker(self, work: Any, *, group: str = ..., exit_on_error: bool = ...,
                   description: str = ...) -> Any: ...
    def set_timer(self, delay: float, callback: Callable[[], Any]) -> Timer: ...
    def post_message(self, message: Any) -> bool: ...


class Refresher:
    def __init__(self, app: Scheduler, engine: Any,
                 read_index: Callable[[], Awaitable[IndexReport | None]],
                 period: float, rearm: bool, gpus_only: Callable[[str], bool],
                 wanted: Callable[[], Collection[RunKey]] | None = None,
                 on_warm: Callable[[], None] | None = None) -> None:
        """`gpus_only(host)`: poll a host that has no runs for its GPUs alone (it was
        checked and answered); `rearm`: arm each host's next refresh (the app's poll);
        `wanted()`: the runs whose progress is worth reading (on screen, or open in a
        tab); None: every run. `on_warm()`: called once, when every host of the first
        `refresh_all` has been shown once (connected, probed)."""
        self.app = app
        self.engine = engine
        self.read_index = read_index
        self.period = period
        self.rearm = rearm
        self.gpus_only = gpus_only
        self.wanted = wanted
        self.on_warm = on_warm
        self._first_round: set[str] | None = None  # hosts of the first refresh_all not shown yet
        self.in_flight: set[str] = set()
        self.discovering = False
        self.settled: set[RunKey] = set()  # ended runs whose final line is shown
        self._timers: dict[str, Timer] = {}
        self._next_find: dict[str, float] = {}  # when a host's refresh lists its workdirs next
        # Runs whose progress read got no answer, left unread until then (host_view.lines_for).
        self.stalled: dict[RunKey, float] = {}
        self._done: dict[str, int] = {}  # refreshes shown, per host (`refresh_all_now` waits on it)
        self._grouped_from: list[RunRecord] = []  # the index records `_grouped` was made from
        self._grouped: dict[str, list[RunRecord]] = {}  # their runs by host

    def idle(self, host: str) -> bool:
        """Neither being refreshed nor armed."""
        return host not in self.in_flight and host not in self._timers

    def refresh_all(self) -> None:
        """Refresh every host that has runs now (those already refreshing are left be)."""
        self.app.run_worker(self._refresh_hosts_with_runs(only_new=False), group="discover",
                            exit_on_error=False, description="refresh runs")

    def discover(self) -> None:
        """Start polling hosts that gained runs elsewhere (e.g. `rtrain-tui start`)."""
        if not self.discovering:  # a slow read must not stack one more per tick
            self.app.run_worker(self._refresh_hosts_with_runs(only_new=True), group="discover",
                                exit_on_error=False, description="look for new runs")

    async def _refresh_hosts_with_runs(self, only_new: bool) -> None:
        self.discovering = True
        try:
            report = await self.read_index()
        finally:
            self.discovering = False
        hosts = sorted({r.host for r in report.records} if report else ())
        if not only_new and self._first_round is None:
            self._first_round = set(hosts)
            self._warm_if_done()
        for host in hosts:
            if not only_new or self.idle(host):
                self.refresh_now(host)

    def refresh_now(self, host: str, all_runs: bool = False) -> bool:
        """Probe `host` now (with `all_runs`, its settled runs too); False when it is
        being probed already."""
        if host in self.in_flight:
            return False  # never two probes of one host at once
        timer = self._timers.pop(host, None)
        if timer is not None:
            timer.stop()
        self.in_flight.add(host)
        self.app.run_worker(self._refresh_host(host, all_runs), group=f"refresh:{host}",
                            exit_on_error=False)
        return True

    async def refresh_all_now(self, all_runs: bool = False) -> None:
        """Refresh every host with runs, and return once each one's answer is shown. A
        host already refreshing is waited for: its answer is on its way; with `all_runs`
        (every run asked about, the settled ones too: the `r` key) it is asked again
        once that answer is shown, as that probe left its settled runs out."""
        report = await self.read_index()
        hosts = sorted({r.host for r in report.records}) if report else []
        before = {h: self._done.get(h, 0) for h in hosts}
        asked = {h for h in hosts if self.refresh_now(h, all_runs)}
        while any(self._done.get(h, 0) == before[h] or h not in asked for h in hosts):
            for h in hosts:
                if h not in asked and self._done.get(h, 0) != before[h]:
                    if not all_runs:
                        asked.add(h)
                    elif self.refresh_now(h, all_runs):
                        asked.add(h)
                        before[h] = self._done.get(h, 0)
            await asyncio.sleep(0.05)

    async def _refresh_host(self, host: str, all_runs: bool = False) -> None:
        """One probe of one host (`all_runs`: its settled runs too); always ends in one
        `HostRefreshed`."""
        message = HostRefreshed(host)
        try:
            report = await self.read_index()
            if report is None:
                return
            records = self._of_host(report.records, host)
            # The same probe reports the host's GPUs (the host panel's sparklines), and
            # every fifth one lists its workdirs too: runs started elsewhere join the
            # table within seconds, and the listing's forks (+7 ms on the host) are not
            # paid on every refresh.
            now = time.monotonic()
            find = now >= self._next_find.get(host, 0.0)
            if find and records:
                self._next_find[host] = now + self.period * 5
            view = (await host_view.refresh(self.engine, records, sample_gpus=True, find=find,
                                            words=False, all_runs=all_runs)).get(host) if records else None
            message.view = view or host_view.HostView(host)
            if not records and self.gpus_only(host):
                message.gpus_unreached = not await self._poll_gpus(host)
            report = await self.read_index()
            message.records = report.records if report is not None else None
            if view is not None:
                # The states first: a run's progress read can wait its whole bound.
                self.app.post_message(replace(message, final=False))
                # A run live again (resumed: a new attempt) ends anew, and its new final
                # line is read then.
                self.settled.difference_update(k for k, s in view.states.items() if not is_final(s))
                lines = await host_view.lines_for(self.engine,
                                                  self._worth_reading(records, view.states),
                                                  view.states, self.settled, self.stalled)
                message.view = replace(view, lines=lines, found=())
                self.settled.update(line.key for line in lines if line.settled)
        except (IndexCorruptError, IndexBusyError) as exc:
            message.trouble = exc
        finally:
            self.app.post_message(message)

    def _worth_reading(self, records: list[RunRecord], states: Mapping[RunKey, str]) -> list[RunRecord]:
        """The runs whose lines this refresh reads.

        Reading a run's progress costs SFTP reads on its host: with 10,000 runs in the
        index only the runs on screen or open in a tab are read, and a run that ended
        since the last refresh (its toast says why). An ended run's final line is read
        once (`settled`), when it is first in sight.
        """
        if self.wanted is None:
            return records
        keys = self.wanted()
        ids = {key[2] for key in keys}  # a run id first: cheaper than each record's key
        return [r for r in records if (r.run_id in ids and r.key in keys)
                or (not is_final(r.state) and is_final(states.get(r.key, "")))]

    def _of_host(self, records: list[RunRecord], host: str) -> list[RunRecord]:
        """One host's runs. The index is grouped by host once per change of it (an
        unchanged index compares equal in C), not gone through once per host's refresh:
        10,000 runs, ten refreshes a second."""
        if records != self._grouped_from:
            grouped: dict[str, list[RunRecord]] = {}
            for r in records:
                grouped.setdefault(r.host, []).append(r)
            self._grouped_from, self._grouped = records, grouped
        return list(self._grouped.get(host, ()))

    def _warm_if_done(self) -> None:
        if self._first_round == set() and self.on_warm is not None:
            on_warm, self.on_warm = self.on_warm, None
            on_warm()

    async def _poll_gpus(self, host: str) -> bool:
        """A checked host without runs is still polled, for its GPUs alone; did it answer?"""
        try:
            await self.engine.poll_gpus(host)
        except RemoteError:
            return False
        return True

    def finished(self, host: str) -> None:
        """The app showed the host's refresh: arm its next one."""
        self.in_flight.discard(host)
        self._done[host] = self._done.get(host, 0) + 1
        if self._first_round:
            self._first_round.discard(host)
            self._warm_if_done()
        if self.rearm:
            self._timers[host] = self.app.set_timer(self.period, lambda: self.refresh_now(host))
