"""The runs table: host, run id, status badge, started, elapsed, latest progress, and
(once some host has a price in config.toml) what each run cost so far.

Live runs (anything not final: running, starting, queued, unknown) on top, then the
newest first. A refresh changes only the rows that changed: a cell whose text moved is
updated in place, and only a run that appeared, went, changed its place (it ended) or
its visibility under the filters moves rows — never a clear and rebuild of 10,000 rows
(that froze the screen 1.3 s per host's refresh; how rows change cheaply is
`keyed_table.py`'s). The selected run stays selected, by key, whatever moved around it.

Filters: `/` text (host, run id, state, progress, the whole failure reason), `h` one
host, `s` the state filter (all → live → failed → all), shown in the border subtitle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import compress
from operator import is_not

from rich.text import Text
from textual.binding import Binding

from rtrain_tui.core.runs import cost
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.probes import LOST, is_final
from rtrain_tui.tui.badges import elapsed, run_badge, started_text
from rtrain_tui.tui.widgets.keyed_table import Cell, KeyedTable, no_collection

RunKey = tuple[str, str, str]
STATE_FILTERS = ("all", "live", "failed")  # `s` cycles through them, in this order


@dataclass(slots=True)  # 10,000 of them
class RunView:
    record: RunRecord
    progress: str = ""
    ended_at: str = ""  # when it ended: the host's time, else when the index saw it end
    reason: str = ""  # why it ended badly, whole (the `/` filter matches it)
    started: str = ""  # the start, as its cell says it (worded once per record)
    eta_s: float | None = None  # a running run's time left (its cost's projection)
    cost: tuple[RunRecord, str] | None = None  # an ended run's cost cell, for its record

    def elapsed(self, now: datetime) -> str:
        """End − start for an ended run, frozen; start → now while it runs."""
        return elapsed(self.record.started_at, now, self.ended_at if is_final(self.record.state) else "")

    @property
    def key(self) -> RunKey:
        return self.record.key


def row_key(key: RunKey) -> str:
    return "\x1f".join(key)


def order_key(record: RunRecord) -> tuple[bool, str, str, str]:
    """Sorted descending: live runs first, then the newest start (ties by host and id)."""
    return (not is_final(record.state), record.started_at, record.host, record.run_id)


def state_matches(state_filter: str, state: str) -> bool:
    """`live`: not ended yet; `failed`: ended badly (failed with any code, or lost)."""
    if state_filter == "live":
        return not is_final(state)
    if state_filter == "failed":
        return state.startswith("failed") or state == LOST
    return True


# What a row shows, as plain values: compared to tell a changed row from an unchanged one
# without building its renderables.
_Cells = tuple[str, str, str, bool, str, str, str] | tuple[str, str, str, bool, str, str, str, str]


def _literal(text: str) -> Cell:
    """Text from a host or a config as a cell that shows it literally. A plain string
    cell is read as markup (`[b]`, `:emoji:`), so it is one only when it holds neither
    `[` nor `:`: most cells, and a string costs a tenth of a Text's memory (10,000 rows)."""
    return Text(text) if "[" in text or ":" in text else text


STALL_MARK = "⚠ "  # host_view.stall_cell's: a stalled run's progress, in the warning colour


def _progress_cell(text: str) -> Cell:
    if text.startswith(STALL_MARK):
        return Text(text, style="bold yellow")
    return _literal(text)


@lru_cache(maxsize=256)
def _badge(state: str, stale: bool) -> Text:
    """One badge per state, shared by every row that shows it (never changed in place)."""
    return run_badge(state, stale)


class RunsTable(KeyedTable):
    BINDINGS = [
        Binding("enter", "select_cursor", "Open log", tooltip="Open the run's live log"),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]
    # What matters first comes first: on a narrow terminal the last columns are the
    # ones cut (they stay a sideways scroll away).
    COLUMNS: tuple[str, ...] = ("host", "run", "status", "progress", "elapsed", "started")

    def __init__(self, clock: Callable[[], datetime],
                 price_of: Callable[[str], Price | None] | None = None, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.clock = clock
        # A cost column only when some host has a price (core/runs/cost.py: from the
        # index, so a live run's cost moves with its elapsed time).
        self.price_of = price_of
        if price_of is not None:
            self.COLUMNS = (*self.COLUMNS, "cost")
        self.views: dict[RunKey, RunView] = {}
        self.host_filter: str | None = None
        self.text_filter = ""
        self.state_filter = "all"
        self.marked: set[RunKey] = set()  # runs picked with space to compare their curves
        self._records: list[RunRecord] = []  # as last set: an equal list changes no row
        self._shown: dict[str, _Cells] = {}  # each row in the table, by row key: its cells
        self._keys: dict[str, RunKey] = {}  # row key → run key, for the rows shown
        self._live: set[RunKey] = set()  # runs not ended: their elapsed time moves
        self._placed: dict[str, tuple[bool, str, str, str]] = {}  # each row's order_key
        self._ticked: datetime | None = None  # when live runs' elapsed times were last worded

    def on_mount(self) -> None:
        self.border_title = "Runs"
        for name in self.COLUMNS:
            self.add_column(name, key=name)

    @property
    def selected(self) -> RunView | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        run = self._keys.get(key or "")
        return self.views.get(run) if run is not None else None

    def on_screen(self) -> set[RunKey]:
        """The runs whose rows are in the viewport now (every row is one line high)."""
        if not self.display or not self.row_count:
            return set()
        top = int(self.scroll_y)
        bottom = min(self.row_count, top + self.scrollable_content_region.height)
        keys = (self._row_locations.get_key(i) for i in range(top, bottom))
        return {self._keys[rk.value] for rk in keys if rk is not None and rk.value is not None}

    def set_runs(self, records: list[RunRecord] | None, progress: Mapping[RunKey, str] | None = None,
                 reasons: Mapping[RunKey, str] | None = None,
                 etas: Mapping[RunKey, float | None] | None = None) -> None:
        """Show these runs (None: the runs shown) with these progress texts and failure
        reasons: only the rows that changed change; the cursor stays on its run.

        Records are compared by identity first: the index hands back the very same
        record for a run that did not change, so a refresh costs in proportion to what
        changed (plus one list comparison), not to the size of the index.
        """
        with no_collection():
            self._set_runs(records, progress or {}, reasons or {}, etas or {})

    def _set_runs(self, records: list[RunRecord] | None, progress: Mapping[RunKey, str],
                  reasons: Mapping[RunKey, str], etas: Mapping[RunKey, float | None]) -> None:
        changed: set[RunKey] = set()
        removed: list[RunKey] = []
        if records is not None and records != self._records:
            changed, removed = self._take_records(records)
            self._records = records
        for key, text in progress.items():
            view = self.views.get(key)
            if view is not None and view.progress != text:
                view.progress = text
                changed.add(key)
        for key, eta in etas.items():
            view = self.views.get(key)
            if view is not None and view.eta_s != eta:
                view.eta_s = eta
                changed.add(key)
        for key, reason in reasons.items():
            view = self.views.get(key)
            if view is not None and view.reason != reason:
                view.reason = reason
                changed.add(key)
        # Live runs' elapsed times move: worded again once a second at most, not on
        # each of ten refreshes a second (20 hosts).
        now = self.clock()
        if self._ticked is None or abs((now - self._ticked).total_seconds()) >= 1:
            self._ticked = now
            changed |= self._live
        self._sync(changed, removed)

    def _take_records(self, records: list[RunRecord]) -> tuple[set[RunKey], list[RunKey]]:
        """The new records into `views`: the runs changed (new or another record) and gone."""
        old = self._records
        if len(old) == len(records):
            # The same runs in the same places, a few of them written again: found by a
            # comparison that runs in C (10,000 runs: ~0.3 ms, against ~8 ms in Python).
            moved = list(compress(range(len(records)), map(is_not, old, records)))
            if all(old[i].key == records[i].key for i in moved):
                changed = set()
                for i in moved:
                    changed.add(self._take(records[i], self.views.get(records[i].key)))
                return changed, []
        views = self.views
        self.views = {}
        changed = set()
        for rec in records:
            view = views.get(rec.key)
            if view is not None and view.record is rec:
                self.views[rec.key] = view
            else:
                changed.add(self._take(rec, view))
        # Some run went only if fewer of the old runs are left than there were.
        kept = len(self.views) - sum(1 for k in changed if k not in views)
        removed = [k for k in views if k not in self.views] if kept < len(views) else []
        for key in removed:
            self._live.discard(key)
        return changed, removed

    def _take(self, rec: RunRecord, view: RunView | None) -> RunKey:
        """One run's new record into its view (made if it is new); its key."""
        key = rec.key
        if view is None:
            view = RunView(rec)
        self.views[key] = view
        view.record = rec
        view.started = started_text(rec.started_at)
        if is_final(rec.state) and (rec.ended_at or not view.ended_at):
            # The host's end time once known; before that, when the state changed
            # (kept in the index, so a relaunch reads the same), never this refresh.
            view.ended_at = rec.ended_at or rec.updated_at or view.ended_at or self.clock().isoformat()
        if is_final(rec.state):
            self._live.discard(key)
        else:
            self._live.add(key)
        return key

    def select_run(self, key: RunKey) -> None:
        try:
            self.move_cursor(row=self.get_row_index(row_key(key)))
        except Exception:
            pass

    def _matcher(self) -> Callable[[RunView], bool]:
        """The filters as one test (made once per pass over 10,000 runs)."""
        host, state, needle = self.host_filter, self.state_filter, self.text_filter.lower()

        def visible(view: RunView) -> bool:
            r = view.record
            if host and r.host != host:
                return False
            if state != "all" and not state_matches(state, r.state):
                return False
            return not needle or any(needle in s.lower() for s in
                                     (r.host, r.run_id, r.state, view.progress, view.reason))
        return visible

    def _cells(self, view: RunView, now: datetime) -> _Cells:
        r = view.record
        cells = (r.host, ("● " if r.key in self.marked else "") + r.run_id, r.state, r.stale,
                 view.progress, view.elapsed(now), view.started)
        if self.price_of is None:
            return cells
        if view.cost is not None and view.cost[0] is r:
            return (*cells, view.cost[1])  # ended: its cost no longer moves (~14 µs a run)
        spent = cost.run_cost(r, self.price_of(r.host), now, eta_s=view.eta_s)
        text = spent.text() if spent is not None else ""
        if is_final(r.state):
            view.cost = (r, text)
        return (*cells, text)

    @staticmethod
    def _renderables(cells: _Cells) -> tuple[Cell, ...]:
        """The row's cells: what came from a host or a config (an alias, a run id, a
        traceback line as a failure reason) shown literally (a `[` in it is text, never
        markup); the times, which are ours, as plain strings."""
        host, run, state, stale, progress, took, started, *spent = cells
        return (_literal(host), _literal(run), _badge(state, stale), _progress_cell(progress),
                took, started, *map(_literal, spent))

    def _sync(self, changed: Iterable[RunKey], removed: Iterable[RunKey]) -> None:
        """Bring the rows in line with `views` for these runs; rows move only when the
        order or the filters' verdict changed (a new run, one that went or ended)."""
        now = self.clock()
        visible = self._matcher()
        moved = any(row_key(k) in self._shown for k in removed)
        updates: dict[str, _Cells] = {}
        for key in changed:
            view = self.views.get(key)
            if view is None:
                continue
            rk = row_key(key)
            before = self._shown.get(rk)
            if not visible(view):
                moved = moved or before is not None
                continue
            cells = self._cells(view, now)
            if before is None or order_key(view.record) != self._placed[rk]:
                moved = True
            if cells != before:
                updates[rk] = cells
        if moved:
            self._reorder(now, updates)
            return
        self.set_cells({rk: self._update_row(rk, cells) for rk, cells in updates.items()})

    def _update_row(self, rk: str, cells: _Cells) -> dict[str, Cell]:
        """The row's new cells (kept in `_shown`); the ones that changed, by column."""
        before = self._renderables(self._shown[rk])
        self._shown[rk] = cells
        return {column: new for column, old, new
                in zip(self.COLUMNS, before, self._renderables(cells), strict=True) if old != new}

    def _reorder(self, now: datetime, updates: Mapping[str, _Cells] | None = None) -> None:
        """Rows in the new order (live first, then newest, as the filters let through):
        rows that go are dropped, new ones made, `updates` applied, in one step."""
        with no_collection():
            selected = self.selected
            visible = self._matcher()
            ranked = sorted(((order_key(v.record), v) for v in self.views.values() if visible(v)),
                            key=lambda pair: pair[0], reverse=True)
            wanted = {row_key(v.key): (rank, v) for rank, v in ranked}
            for rk in [rk for rk in self._shown if rk not in wanted]:
                del self._shown[rk], self._keys[rk]
            changed = {rk: self._update_row(rk, cells)
                       for rk, cells in (updates or {}).items() if rk in self._shown}
            new: dict[str, tuple[Cell, ...]] = {}
            for rk, (_rank, view) in wanted.items():
                if rk not in self._shown:
                    self._shown[rk] = (updates or {}).get(rk) or self._cells(view, now)
                    self._keys[rk] = view.key
                    new[rk] = self._renderables(self._shown[rk])
            self._placed = {rk: rank for rk, (rank, _view) in wanted.items()}
            self.set_rows(list(wanted), new, changed)
            if selected is not None and row_key(selected.key) in wanted:
                self.select_run(selected.key)

    def toggle_mark(self, key: RunKey) -> None:
        self.marked.symmetric_difference_update({key})
        self._sync([key], ())

    def cycle_state_filter(self) -> str:
        """`s`: all → live → failed → all; the filter now in force."""
        at = STATE_FILTERS.index(self.state_filter)
        self.state_filter = STATE_FILTERS[(at + 1) % len(STATE_FILTERS)]
        self.refilter()
        return self.state_filter

    def refilter(self) -> None:
        self._reorder(self.clock())
        self.border_subtitle = " · ".join(
            f for f in (f"host: {self.host_filter}" if self.host_filter else "",
                        f"state: {self.state_filter}" if self.state_filter != "all" else "",
                        f"filter: {self.text_filter}" if self.text_filter else "") if f)
