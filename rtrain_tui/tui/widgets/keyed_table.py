"""A DataTable kept in step with a keyed list of one-line rows, paying for what changed.

Textual's DataTable is made to be filled once: with 10,000 rows, `update_cell` bumps a
counter that keys every render cache (one changed cell had every row on screen rendered
again, ~26 ms of CPU), its list of every line and of every row is rebuilt on the next
paint after any change (90% of a refresh's repaint), it has no insert, `remove_row`
renumbers every row once per row removed, and `add_row` with the measuring of new rows
costs ~0.25 ms a row. `KeyedTable` offers two moves instead:

- `set_cells`: cells changed in place; only their rows are painted again;
- `set_rows`: the rows in a new order, some dropped, some new, written in one step the
  way DataTable's own `sort` writes an order (one row → index map).

Both reach into DataTable's internals (`_data`, `rows`, `_row_locations`, its render
caches); textual is pinned exactly, and tests/test_tui_table.py holds the runs table to
what it draws.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, overload

from rich.cells import cell_len
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.cache import LRUCache
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, Row, RowKey

Cell = Text | str


@contextmanager
def no_collection() -> Iterator[None]:
    """No collector pass while rows are made: 10,000 rows make ~200,000 objects, none in
    a cycle, and the passes over them while they were made cost 0.6 s of 0.78 s."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def cell_width(cell: Cell) -> int:
    """A one-line cell's width, as DataTable would measure it (its widest line)."""
    plain = cell.plain if isinstance(cell, Text) else cell
    if plain.isascii() and "\n" not in plain:
        return len(plain)  # nearly every cell: 10,000 rows are measured in ~10 ms
    return max(cell_len(line) for line in plain.split("\n"))


class _LineOffsets(Sequence[tuple[RowKey, int]]):
    """DataTable's y → (row key, line within the row), read from the row order as asked
    instead of a list of every line rebuilt after each cell update. Every row here is one
    line high."""

    def __init__(self, rows: TwoWayDict[RowKey, int]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, y: int) -> tuple[RowKey, int]: ...
    @overload
    def __getitem__(self, y: slice) -> Sequence[tuple[RowKey, int]]: ...

    def __getitem__(self, y: int | slice) -> tuple[RowKey, int] | Sequence[tuple[RowKey, int]]:
        if isinstance(y, slice):
            return [self[i] for i in range(*y.indices(len(self)))]
        key = self._rows.get_key(y if y >= 0 else y + len(self))
        if key is None:
            raise IndexError(y)
        return key, 0

    def clear(self) -> None:
        """(DataTable.clear clears its own list; there is nothing kept here.)"""


class KeyedTable(DataTable):
    """A DataTable of one-line rows changed through `set_rows` and `set_cells` only."""

    # `ordered_rows`, until the order changes (a class default: DataTable's __init__ asks)
    _ordered: list[Row] | None = None

    @property
    def _y_offsets(self) -> _LineOffsets:  # type: ignore[override]
        return _LineOffsets(self._row_locations)

    @property
    def ordered_rows(self) -> list[Row]:
        """The rows top to bottom, kept until the order changes: DataTable's own is kept
        only until any cell changes (it rebuilt a 10,000-row list on every refresh)."""
        if self._ordered is None or len(self._ordered) != len(self.rows):
            get_key = self._row_locations.get_key
            self._ordered = [self.rows[get_key(i)] for i in range(len(self.rows))]  # type: ignore[index]
        return self._ordered

    def set_rows(self, order: Sequence[str], new: Mapping[str, Sequence[Cell]],
                 changed: Mapping[str, Mapping[str, Cell]] | None = None) -> None:
        """The rows, top to bottom, as `order` (row keys) says: rows not in it dropped,
        `new` ones (their cells, in column order) made, `changed` cells of kept rows set.
        The cursor keeps its index (clamped); the caller moves it to where it belongs."""
        had_rows = bool(self.row_count)
        keep = set(order)
        for key in [key for key in self.rows if key.value not in keep]:
            del self.rows[key], self._data[key]
            self._new_rows.discard(key)
        if self._updated_cells:
            self._updated_cells = {c for c in self._updated_cells if c.row_key in self.rows}
        for rk, cells in (changed or {}).items():
            self._set_data(rk, cells)
        columns = [column.key for column in self.ordered_columns]
        for rk, values in new.items():
            key = RowKey(rk)
            self._data[key] = dict(zip(columns, values, strict=True))
            self.rows[key] = Row(key, 1)
        for column, in_column in zip(columns, zip(*new.values()), strict=False):
            col = self.columns[column]
            col.content_width = max(col.content_width, *(cell_width(v) for v in in_column))
        self._row_locations = TwoWayDict({RowKey(rk): i for i, rk in enumerate(order)})
        self._ordered = None
        self._update_count += 1
        self._clear_caches()
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate  # clamped to the rows there are
        self.refresh(layout=True)
        self.check_idle()
        if self.row_count and not had_rows:
            self._highlight_cursor()  # as add_row does for a table's first row

    def set_cells(self, changed: Mapping[str, Mapping[str, Cell]]) -> None:
        """Cells changed in place (by row key, then column): only their rows are painted
        again. Their cached renders are dropped; every other row's stay."""
        keys = set()
        for rk, cells in changed.items():
            if cells:
                self._set_data(rk, cells)
                keys.add(RowKey(rk))
        if not keys:
            return
        indices = {self._row_locations.get(key) for key in keys}
        top = self.header_height if self.show_header else 0
        lines = {i + top for i in indices if i is not None}
        caches: list[tuple[LRUCache[Any, Any], int, set[Any]]] = [
            (self._cell_render_cache, 0, keys), (self._row_render_cache, 0, keys),
            (self._row_renderable_cache, 1, indices), (self._line_cache, 0, lines)]
        for cache, field, gone in caches:
            for key in [k for k in cache.keys() if k[field] in gone]:
                cache.discard(key)
        for index in indices:
            if index is not None:
                self.refresh_row(index)

    def _set_data(self, rk: str, cells: Mapping[str, Cell]) -> None:
        data = self._data[RowKey(rk)]
        for column, value in cells.items():
            data[ColumnKey(column)] = value
            self._widen(column, value)

    def _widen(self, column: str, value: Cell) -> None:
        """A cell wider than its column widens it. (`update_cell(update_width=True)`
        measures the whole column whenever a cell gets narrower: 10,000 cells.)"""
        col = self.columns[ColumnKey(column)]
        width = cell_width(value)
        if width > col.content_width:
            col.content_width = width
            self._require_update_dimensions = True
            self.check_idle()

    def _update_dimensions(self, new_rows):  # type: ignore[no-untyped-def]
        """The table's size; then redraw rows drawn before the columns widened.

        New rows' cells were measured as they came (`set_rows`: their plain text's
        width), so none is measured again here. Textual 8.2's DataTable keeps rows it
        drew before with the old widths in its render caches: a progress column (not the
        last one any more) then stayed cut at its header's width. One redraw per change.
        """
        super()._update_dimensions(())
        self._clear_caches()
        self.refresh()
