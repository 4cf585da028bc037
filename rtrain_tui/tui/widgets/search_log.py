"""A `Log` that shows a search: every occurrence of the needle marked, the current match's line lit.

`Log` renders each line through one highlighter, and caches the result; the needle is
the highlighter's state, so a new needle clears that cache. The current match is styled
after the cache, so moving between matches re-renders nothing but what is on screen.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Log

NEEDLE_STYLE = "bold black on yellow"
CURRENT_LINE = Style(reverse=True)


class NeedleHighlighter(Highlighter):
    """Marks every case-insensitive occurrence of `needle`; nothing when it is empty."""

    def __init__(self) -> None:
        self.pattern: re.Pattern[str] | None = None

    def set_needle(self, needle: str) -> None:
        self.pattern = re.compile(re.escape(needle), re.IGNORECASE) if needle else None

    def highlight(self, text: Text) -> None:
        if self.pattern is not None:
            for found in self.pattern.finditer(text.plain):
                text.stylize(NEEDLE_STYLE, found.start(), found.end())


class SearchLog(Log):
    """A Log with `show_search(needle, line)`; `line` indexes `lines` (None: no current)."""

    class EndPressed(Message):
        """`end` was pressed: the reader wants the end, and to follow from there."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(highlight=True, **kwargs)  # type: ignore[arg-type]
        self.needle_highlighter = NeedleHighlighter()
        self.highlighter = self.needle_highlighter
        self.current_line: int | None = None
        # Whether the view should stay at the end (the pane follows): asked on a resize,
        # since a view that was at the end is not once the window shrinks (a smaller
        # terminal, or the live bar's row appearing under the log).
        self.keep_at_end: Callable[[], bool] = lambda: False

    def show_search(self, needle: str, line: int | None) -> None:
        self.needle_highlighter.set_needle(needle)
        self.current_line = line
        self.notify_style_update()  # drops the rendered-line cache: the needle changed
        self.refresh()

    def action_scroll_end(self) -> None:
        # Said before scrolling: a view already at the end does not scroll, and a log
        # shorter than its view refuses to (SkipAction), yet both mean "follow again".
        self.post_message(self.EndPressed())
        super().action_scroll_end()

    def on_resize(self) -> None:
        if self.keep_at_end():
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def _render_line_strip(self, y: int, rich_style: Style) -> Strip:
        strip = super()._render_line_strip(y, rich_style)
        return strip.apply_style(CURRENT_LINE) if y == self.current_line else strip
