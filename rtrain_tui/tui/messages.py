"""App-wide messages: what workers tell the app (widget messages live in their widget)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host_view import HostView
from rtrain_tui.core.runs.index import RunRecord


@dataclass
class HostRefreshed(Message):
    """One refresh of one host is over; the app shows it, then re-arms the host.

    Posted exactly once per refresh with `final`, whatever happened: the refresher arms
    the host's next refresh only when the app has handled that one (`Refresher.finished`),
    so the table never shows an older refresh after a newer one. Before it, a refresh
    that has runs to word posts its states alone (`final=False`): a progress read that
    hangs (a log on a hung NFS mount) must not hold them back.
    """

    host: str
    view: HostView | None = None  # None: nothing to show (the index could not be read)
    records: list[RunRecord] | None = None  # the index once the refresh wrote it
    gpus_unreached: bool = False  # a host without runs did not answer its GPU poll
    trouble: RemoteError | None = None  # the index was corrupt or busy on the way
    final: bool = True  # False: the states alone, the lines (progress, reasons) to follow
