"""Transfer progress for the command line: a rich bar on a terminal, silence otherwise.

Kept out of `core/` (which renders nothing); the engine only calls `update`. The words
after the bar are core's (transfers/meter.py), as the start form says them:
`412 MB of 1.0 GB · 3.8× compressed · 31 MB/s · 19 s left`. rich is imported only when
there is a terminal to draw on: a scripted `start` or `fetch` (stderr a pipe or a file)
draws nothing and need not pay for it.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING

from rtrain_tui.core.transfers.meter import Meter

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


NAME_WIDTH = 24  # the file name's columns at most: what moves and how fast come first
DETAIL_WIDTH = 56  # `102 MB of 105 MB · 5.7× compressed · 93 MB/s · 0 s left`


class TerminalProgress:
    def __init__(self, console: Console | None = None) -> None:
        """`console`: where to draw (tests); by default stderr, when it is a terminal."""
        self._console = console
        self._enabled = console is not None or sys.stderr.isatty()
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._meter = Meter()

    def __enter__(self) -> TerminalProgress:
        if self._enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn
            from rich.table import Column

            self._progress = Progress(
                # markup=False: a file name such as `x[@click(].jsonl` is shown as it is.
                # The name gives way first (…), then the bar: on 80 columns a long name
                # cut the numbers to `5.5× compres…` and hid the rate and time left.
                TextColumn("{task.description}", markup=False,
                           table_column=Column(max_width=NAME_WIDTH, no_wrap=True, overflow="ellipsis")),
                BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=0)),
                TextColumn("{task.fields[detail]}", markup=False,
                           table_column=Column(no_wrap=True, min_width=DETAIL_WIDTH)),
                console=self._console or Console(stderr=True), transient=True,
            )
            self._progress.start()
        return self

    def update(self, label: str, done: int, total: int) -> None:
        if self._progress is None:
            return
        detail = self._meter.line(label, done, total)
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total or None, detail=detail)
        self._progress.update(self._tasks[label], completed=done, total=total or None,
                              detail=detail)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
