"""The run index as the app reads it: in a thread, its troubles said once.

A slow disk or a lock held by another process never freezes the screen (the read runs
in a thread), and a corrupt, busy or partly unusable index is said once per distinct
problem, not on every poll; the file itself is never touched here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from textual.notifications import SeverityLevel

from rtrain_tui.core.errors import IndexBusyError, IndexCorruptError, RemoteError
from rtrain_tui.core.runs.index import IndexReport, RunIndex


class Notify(Protocol):
    """The app's `notify`, as far as the reader needs it."""

    def __call__(self, message: str, *, title: str = ..., severity: SeverityLevel = ...,
                 timeout: float | None = ..., markup: bool = ...) -> None: ...


class IndexReader:
    def __init__(self, index: RunIndex, notify: Notify,
                 mark_skipped: Callable[[int], None]) -> None:
        """`mark_skipped(n)`: show on the runs table that n records were skipped."""
        self.index = index
        self.notify = notify
        self.mark_skipped = mark_skipped
        self._error = ""
        self._error_kind: type[RemoteError] = RemoteError
        self._problems: tuple[str, ...] = ()

    async def read(self) -> IndexReport | None:
        """The index, read in a thread; None when it cannot be used (and that is said once)."""
        try:
            report = await asyncio.to_thread(self.index.load_report)
        except IndexCorruptError as exc:
            self.trouble(exc)
            return None
        self._recovered(IndexCorruptError)
        self._skipped(report.problems)
        return report

    def trouble(self, exc: RemoteError) -> None:
        """Say it once per distinct problem, not on every poll; the file stays untouched."""
        if str(exc) != self._error:
            self._error = str(exc)
            self._error_kind = type(exc)
            severity: SeverityLevel = "warning" if isinstance(exc, IndexBusyError) else "error"
            self.notify(str(exc), title="Run index", severity=severity, timeout=60)

    def _recovered(self, kind: type[RemoteError]) -> None:
        """A read that worked again: the same breakage later is news again. (A busy lock is
        not reset by one host's refresh that needed no write: that would toast every tick.)"""
        if self._error and issubclass(self._error_kind, kind):
            self._error = ""

    def _skipped(self, problems: list[str]) -> None:
        """Records the index could not use: one warning per new set, and a mark on the table."""
        if tuple(problems) == self._problems:
            return
        self._problems = tuple(problems)
        self.mark_skipped(len(problems))
        if problems:
            shown = problems[:5] + ([f"… and {len(problems) - 5} more"] if len(problems) > 5 else [])
            self.notify("\n".join(["These runs were skipped; they stay in the file as they are:",
                                    *shown]),
                        title="Run index", severity="warning", timeout=60, markup=False)
