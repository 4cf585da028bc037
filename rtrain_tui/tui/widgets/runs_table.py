"""The runs table: host, run id, status badge, started, elapsed, latest progress."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.probes import is_final
from rtrain_tui.tui.badges import elapsed, run_badge, started_text

RunKey = tuple[str, str, str]


@dataclass
class RunView:
    record: RunRecord
    progress: str = ""
    ended_at: str = ""  # when it ended: the host's time, else when the index saw it end

    def elapsed(self, now: datetime) -> str:
        """End − start for an ended run, frozen; start → now while it runs."""
        return elapsed(self.record.started_at, now, self.ended_at if is_final(self.record.state) else "")

    @property
    def key(self) -> RunKey:
        return self.record.key


def row_key(key: RunKey) -> str:
    return "\x1f".join(key)


class RunsTable(DataTable):
    BINDINGS = [
        Binding("enter", "select_cursor", "Open log", tooltip="Open the run's live log"),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]
    # What matters first comes first: on a narrow terminal the last columns are the
    # ones cut (they stay a sideways scroll away).
    COLUMNS = ("host", "run", "status", "progress", "elapsed", "started")

    def __init__(self, clock: Callable[[], datetime], **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self.views: dict[RunKey, RunView] = {}
        self.host_filter: str | None = None
        self.text_filter = ""
        self.marked: set[RunKey] = set()  # runs picked with space to compare their curves

    def on_mount(self) -> None:
        self.border_title = "Runs"
        for name in self.COLUMNS:
            self.add_column(name, key=name)

    @property
    def selected(self) -> RunView | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return next((v for v in self.views.values() if row_key(v.key) == key), None)

    def set_runs(self, records: list[RunRecord], progress: dict[RunKey, str] | None = None) -> None:
        """Replace the data; keep the cursor on the same run."""
        now = self.clock().isoformat()
        old = self.views
        self.views = {}
        for rec in records:
            prev = old.get(rec.key)
            view = RunView(rec, prev.progress if prev else "", prev.ended_at if prev else "")
            if is_final(rec.state) and (rec.ended_at or not view.ended_at):
                # The host's end time once known; before that, when the state changed
                # (kept in the index, so a relaunch reads the same), never this refresh.
                view.ended_at = rec.ended_at or rec.updated_at or view.ended_at or now
            if progress and rec.key in progress:
                view.progress = progress[rec.key]
            self.views[rec.key] = view
        self._render_rows()

    def select_run(self, key: RunKey) -> None:
        try:
            self.move_cursor(row=self.get_row_index(row_key(key)))
        except Exception:
            pass

    def _visible(self, view: RunView) -> bool:
        r = view.record
        if self.host_filter and r.host != self.host_filter:
            return False
        needle = self.text_filter.lower()
        return not needle or any(needle in s.lower() for s in (r.host, r.run_id, r.state, view.progress))

    def _render_rows(self) -> None:
        selected = self.selected
        now = self.clock()
        self.clear()
        for view in sorted(self.views.values(), key=lambda v: v.record.started_at, reverse=True):
            if not self._visible(view):
                continue
            r = view.record
            self.add_row(
                r.host, ("● " if r.key in self.marked else "") + r.run_id,
                run_badge(r.state, r.stale),
                # Host text (a traceback line as a failure reason): literal, never markup.
                Text(view.progress),
                view.elapsed(now), started_text(r.started_at), key=row_key(r.key),
            )
        if selected is not None:
            self.select_run(selected.key)

    def toggle_mark(self, key: RunKey) -> None:
        self.marked.symmetric_difference_update({key})
        self._render_rows()

    def _update_dimensions(self, new_rows):  # type: ignore[no-untyped-def]
        """Column widths measured for new rows; then redraw rows drawn before that.

        Textual 8.2's DataTable measures new cells on idle but keeps rows it drew
        before with the old widths in its render caches: a progress column (not the last
        one any more) then stayed cut at its header's width. One redraw per refill.
        """
        super()._update_dimensions(new_rows)
        self._clear_caches()
        self.refresh()

    def refilter(self) -> None:
        self._render_rows()
        self.border_subtitle = " · ".join(
            f for f in (f"host: {self.host_filter}" if self.host_filter else "",
                        f"filter: {self.text_filter}" if self.text_filter else "") if f)
