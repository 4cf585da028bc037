"""tui.refresher's schedule: never two probes of one host, the next armed only once the
last was shown. These start nothing: the app is a stand-in that records what the
refresher asked of it (its `Scheduler` protocol); what a refresh does against a real
host is proven through the app (tests/test_tui.py, tests/test_tui_faults.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rtrain_tui.tui.refresher import Refresher


class StandInTimer:
    def __init__(self, delay: float, callback: Callable[[], Any]) -> None:
        self.delay = delay
        self.callback = callback
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


class StandInApp:
    """Records workers (closing their coroutines unrun), timers and messages."""

    def __init__(self) -> None:
        self.groups: list[str] = []
        self.timers: list[StandInTimer] = []
        self.messages: list[Any] = []

    def run_worker(self, work: Any, *, group: str = "default", exit_on_error: bool = True,
                   description: str = "") -> None:
        work.close()
        self.groups.append(group)

    def set_timer(self, delay: float, callback: Callable[[], Any]) -> StandInTimer:
        self.timers.append(StandInTimer(delay, callback))
        return self.timers[-1]

    def post_message(self, message: Any) -> bool:
        self.messages.append(message)
        return True


async def _no_index() -> None:
    return None


def make(rearm: bool = True) -> tuple[StandInApp, Refresher]:
    app = StandInApp()
    return app, Refresher(app, engine=None, read_index=_no_index, period=2.0,  # type: ignore[arg-type]
                          rearm=rearm, gpus_only=lambda host: False)


def test_a_host_being_refreshed_is_not_probed_again_until_its_refresh_was_shown() -> None:
    app, refresher = make()
    refresher.refresh_now("gpu")
    refresher.refresh_now("gpu")
    refresher.refresh_now("lab")
    assert app.groups == ["refresh:gpu", "refresh:lab"]
    assert refresher.in_flight == {"gpu", "lab"} and not refresher.idle("gpu")
    refresher.finished("gpu")
    assert refresher.in_flight == {"lab"}


def test_the_next_refresh_is_armed_when_the_last_was_shown_and_starts_when_it_fires() -> None:
    app, refresher = make()
    refresher.refresh_now("gpu")
    assert app.timers == []  # nothing armed while the probe is out
    refresher.finished("gpu")
    [timer] = app.timers
    assert timer.delay == 2.0 and not refresher.idle("gpu")
    timer.callback()
    assert app.groups == ["refresh:gpu", "refresh:gpu"]


def test_refreshing_an_armed_host_now_disarms_it_so_it_is_never_probed_twice() -> None:
    app, refresher = make()
    refresher.refresh_now("gpu")
    refresher.finished("gpu")
    [timer] = app.timers
    refresher.refresh_now("gpu")
    assert timer.stopped and app.groups == ["refresh:gpu", "refresh:gpu"]


def test_without_polling_a_shown_refresh_arms_nothing() -> None:
    app, refresher = make(rearm=False)
    refresher.refresh_now("gpu")
    refresher.finished("gpu")
    assert app.timers == [] and refresher.idle("gpu")


def test_only_runs_in_sight_and_runs_that_just_ended_get_their_lines_read() -> None:
    """Reading a run's progress costs SFTP reads: with 10,000 runs only those on screen
    (or open), and a run that ended since the last refresh (its toast says why)."""
    from rtrain_tui.core.runs.index import RunRecord

    def rec(run_id: str, state: str) -> RunRecord:
        return RunRecord("gpu", run_id, "~/w", state=state)

    shown, hidden, ended, old, old_hidden = (
        rec("shown", "running"), rec("hidden", "running"), rec("ended", "running"),
        rec("old", "completed"), rec("old-hidden", "completed"))
    records = [shown, hidden, ended, old, old_hidden]
    states = {shown.key: "running", hidden.key: "running", ended.key: "completed",
              old.key: "completed", old_hidden.key: "completed"}
    app = StandInApp()
    refresher = Refresher(app, engine=None, read_index=_no_index, period=2.0,  # type: ignore[arg-type]
                          rearm=True, gpus_only=lambda host: False,
                          wanted=lambda: {shown.key, old.key})
    assert refresher._worth_reading(records, states) == [shown, ended, old]
    # without a `wanted`, every run
    everyone = Refresher(app, engine=None, read_index=_no_index, period=2.0,  # type: ignore[arg-type]
                         rearm=True, gpus_only=lambda host: False)
    assert everyone._worth_reading(records, states) == records


def test_a_hosts_runs_follow_the_index_as_it_changes() -> None:
    """The index is grouped by host once per change: a run added, rewritten or removed
    is in its host's list at the next refresh."""
    from dataclasses import replace

    from rtrain_tui.core.runs.index import RunRecord

    _, refresher = make()
    a, b = RunRecord("gpu", "a", "~/w", state="running"), RunRecord("cpu", "b", "~/w")
    assert refresher._of_host([a, b], "gpu") == [a]
    c = RunRecord("gpu", "c", "~/w")
    assert refresher._of_host([a, b, c], "gpu") == [a, c]
    ended = replace(a, state="completed")
    assert refresher._of_host([ended, b, c], "gpu")[0] is ended
    assert refresher._of_host([b], "gpu") == [] and refresher._of_host([b], "cpu") == [b]


def test_on_warm_is_called_once_when_every_host_of_the_first_round_was_shown() -> None:
    """What the first round of refreshes made (connections, caches) lives as long as the
    app: the app freezes it out of the collector's passes then, once."""
    from rtrain_tui.core.runs.index import IndexReport, RunRecord

    async def index() -> IndexReport:
        return IndexReport([RunRecord("gpu", "a", "~/w"), RunRecord("cpu", "b", "~/w")], [])

    warm: list[bool] = []
    app = StandInApp()
    refresher = Refresher(app, engine=None, read_index=index, period=2.0,  # type: ignore[arg-type]
                          rearm=True, gpus_only=lambda host: False, on_warm=lambda: warm.append(True))
    asyncio.run(refresher._refresh_hosts_with_runs(only_new=False))
    refresher.finished("gpu")
    assert warm == []
    refresher.finished("cpu")
    refresher.finished("gpu")
    asyncio.run(refresher._refresh_hosts_with_runs(only_new=False))
    refresher.finished("cpu")
    assert warm == [True]
