"""Transfer progress for the command line: a rich bar on a terminal, silence otherwise.

Kept out of `core/` (which renders nothing); the engine only calls `update`.
"""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)


class TerminalProgress:
    def __init__(self) -> None:
        self._enabled = sys.stderr.isatty()
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> TerminalProgress:
        if self._enabled:
            self._progress = Progress(
                # markup=False: a file name such as `x[@click(].jsonl` is shown as it is.
                TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(),
                TransferSpeedColumn(), console=Console(stderr=True), transient=True,
            )
            self._progress.start()
        return self

    def update(self, label: str, done: int, total: int) -> None:
        if self._progress is None:
            return
        if label not in self._tasks:
            self._tasks[label] = self._progress.add_task(label, total=total or None)
        self._progress.update(self._tasks[label], completed=done, total=total or None)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
