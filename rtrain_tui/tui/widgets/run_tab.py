"""One run's tab: its live log, or its curves (`c` toggles). The curves are built on
first use, so a tab that is only ever a log costs nothing more."""

from __future__ import annotations

from collections.abc import Callable

from textual.widget import Widget
from textual.widgets import ContentSwitcher

from rtrain_tui.core.logs.logstream import LogSource
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.tui.widgets.curves_pane import CurvesPane
from rtrain_tui.tui.widgets.log_pane import LogPane


class RunTab(ContentSwitcher):
    def __init__(self, log: LogPane, engine: LogSource | None, record: RunRecord,
                 state_of: Callable[[], str] | None = None, curves_first: bool = False,
                 **kwargs: object) -> None:
        log.id = log.id or "run-log"
        self.engine = engine
        self.record = record
        self.state_of = state_of
        children: list[Widget] = [log]
        if curves_first:
            children.append(self._make_curves())
        super().__init__(*children, initial="run-curves" if curves_first else log.id,
                         **kwargs)  # type: ignore[arg-type]

    def _make_curves(self) -> CurvesPane:
        # It starts polling once mounted: it is made only to be shown.
        return CurvesPane(self.engine, self.record, state_of=self.state_of, id="run-curves",
                          autostart=True)

    @property
    def showing_curves(self) -> bool:
        return self.current == "run-curves"

    @property
    def curves(self) -> CurvesPane | None:
        found = self.query("#run-curves")
        return found.first(CurvesPane) if found else None

    async def toggle(self) -> None:
        """Log → curves → log."""
        if self.showing_curves:
            self.current = self.query_one(LogPane).id
            return
        curves = self.curves
        if curves is None:
            curves = self._make_curves()
            await self.mount(curves)
        self.current = "run-curves"
        curves.start_polling()  # shown again: catch up
