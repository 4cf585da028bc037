"""A live log pane: follows a run's train.log, batched, bounded, searchable.

Lines arrive from `LogFollower` in chunks and are written to the `Log` at most every
50 ms in one `write_lines` call (one per line is ~50× slower on a flood). The `Log`
keeps at most `max_lines`; the whole log stays on the host and can be fetched.
When the reader scrolls up, following pauses (the header says so) and new lines are
counted instead of yanking the view down; scrolling back to the end, `end` or one `F`
resumes it. Search walks the matches from the current one, wrapping, and lights it.
Progress-bar redraws are folded (core/logs/progress_fold.py): the log shows the lines the
trainer printed, and the bar being drawn lives on one line under them.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logs.logstream import LogFollower, LogLines, LogSource
from rtrain_tui.core.logs.progress_fold import ProgressFolder
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.safety.sanitize import safe_line
from rtrain_tui.tui.badges import run_badge
from rtrain_tui.tui.widgets.search_log import SearchLog

FLUSH_SECONDS = 0.05
DEFAULT_MAX_LINES = 10_000


class LogPane(Vertical):
    BINDINGS = [
        Binding("F", "toggle_follow", "Follow", tooltip="Follow new lines / pause"),
        Binding("/", "search", "Search", tooltip="Search this log"),
        Binding("G", "jump_end", "End", show=False),
        # up/down/home/end/pgup/pgdn are the Log's own; these follow them for vi hands
        Binding("j", "scroll_lines(1)", "Down", show=False),
        Binding("k", "scroll_lines(-1)", "Up", show=False),
    ]

    def __init__(self, engine: LogSource | None, record: RunRecord,
                 max_lines: int = DEFAULT_MAX_LINES, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.engine = engine
        self.record = record
        self.max_lines = max_lines
        self.follow = True
        self.stream = "connecting"
        self.final_state = ""
        self.stream_detail = ""  # why we are reconnecting
        self.new_lines = 0
        self.total_lines = 0
        self._pending: list[str] = []
        self._folder = ProgressFolder()
        self._flush_armed = False
        self._match = ""
        self._needle = ""
        self.match_line: int | None = None  # index in the Log's lines of the current match

    def compose(self) -> ComposeResult:
        yield Static(id="log-status")
        yield SearchLog(max_lines=self.max_lines, id="log-lines")
        yield Static(id="log-bar", classes="hidden")
        yield Input(placeholder="search this log, enter for the next match, esc to close",
                    id="log-search", classes="hidden")

    @property
    def log_widget(self) -> SearchLog:
        return self.query_one("#log-lines", SearchLog)

    def on_mount(self) -> None:
        if not self.children:
            # Textual mounts nothing under a widget being removed: the pane's tab closed,
            # or the app quit, while its children were still mounting (a loaded machine).
            # Nothing to show or follow, and no status line to write to.
            return
        self._render_status()
        self.watch(self.log_widget, "scroll_y", self._scrolled, init=False)
        self.log_widget.keep_at_end = lambda: self.follow
        if self.engine is not None:
            self.run_worker(self._follow(), group=f"log:{self.id}", exclusive=True,
                            exit_on_error=False, description=f"follow {self.record.run_id}")

    async def _follow(self) -> None:
        assert self.engine is not None  # started only with one (on_mount)
        r = self.record
        # Only the pane's window is read: a 200 MiB log opens as fast as a small one.
        follower = LogFollower(self.engine, r.host, r.workdir, r.run_id, max_lines=self.max_lines)
        try:
            async for event in follower.events():
                if isinstance(event, LogLines):
                    self.add_lines(event.lines)
                else:
                    self.stream = event.status
                    self.final_state = event.run_state
                    self.stream_detail = event.detail
                    self._render_status()
        except RemoteError as exc:  # permanent: a changed host key, refused authentication
            self.stream = f"gave up: {safe_line(str(exc))}"[:100]
            self._render_status()
            self.app.notify(safe_line(str(exc)), title=f"Log of {r.run_id}", severity="error")

    # -- lines -----------------------------------------------------------------
    def add_lines(self, lines: list[str]) -> None:
        self._pending.extend(lines)
        if not self._flush_armed:
            self._flush_armed = True
            self.set_timer(FLUSH_SECONDS, self._flush)

    def _flush(self) -> None:
        self._flush_armed = False
        lines, self._pending = self._pending, []
        if not lines:
            return
        lines = self._folder.fold(lines)
        self._show_bar()
        if not lines:
            return  # only the bar moved
        log = self.log_widget
        if self.follow:
            self.new_lines = 0
        else:
            self.new_lines += len(lines)
        before = len(log.lines)
        # Host text: no escape sequence may reach the terminal (retitle, clipboard, 2J).
        # Log renders plain text, so colour (SGR) goes too.
        log.write_lines([safe_line(line) for line in lines], scroll_end=False)
        if self.follow:
            # Not Log's own scroll_end, which scrolls only a view already at the end: a
            # terminal that shrank leaves the view above the end while we still follow.
            log.scroll_end(animate=False, immediate=True, x_axis=False)
        self.total_lines += len(lines)
        dropped = before + len(lines) - len(log.lines)  # the window's oldest lines went
        if dropped and self.match_line is not None:
            self.match_line = self.match_line - dropped if self.match_line >= dropped else None
            log.show_search(self._needle, self.match_line)
        self._render_status()

    def _show_bar(self) -> None:
        """The bar being drawn, on its own line under the log (hidden while there is none)."""
        shown = self.query_one("#log-bar", Static)
        shown.set_class(self._folder.bar is None, "hidden")
        shown.update(Text(safe_line(self._folder.bar or ""), no_wrap=True, overflow="ellipsis"))

    def _scrolled(self, _old: float, new: float) -> None:
        """Scrolling up pauses following at once; scrolling back to the end resumes it."""
        log = self.log_widget
        at_end = new >= log.max_scroll_y
        if self.follow and not at_end:
            self.follow = False
            self._render_status()
        elif not self.follow and at_end and not self._match:
            self.follow = True
            self.new_lines = 0
            self._render_status()

    # -- status line -------------------------------------------------------------
    def _render_status(self) -> None:
        if self.stream == "ended":
            stream = Text.assemble(("■ ended: ", "bold"), run_badge(self.final_state))
        elif self.stream == "reconnecting":
            stream = Text(f"↻ reconnecting… {safe_line(self.stream_detail)}"[:80], style="bold yellow")
        elif self.stream == "live":
            stream = Text("● live", style="bold green")
        else:
            stream = Text(f"○ {self.stream}", style="dim")
        follow = (Text("  follow on (F)", style="dim") if self.follow
                  else Text("  paused (F follows)", style="bold yellow"))
        # What the reader acts on first (a narrow pane cuts the end of the line): the
        # stream, follow/paused, the search's place, new lines; then run and size.
        parts = [stream, follow]
        if self._match:
            parts.append(Text(f"  {self._match}", style="italic"))
        if self.new_lines:
            parts.append(Text(f"  ▼ {plural(self.new_lines, 'new line')}", style="bold reverse"))
        parts += [Text(f"  {self.record.host}/{self.record.run_id}", style="bold"),
                  Text(f"  {plural(self.total_lines, 'line')}", style="dim")]
        if self.total_lines > self.max_lines:
            # the whole log stays on the host: `f` fetches train.log
            parts.append(Text(f" (last {self.max_lines} shown)", style="dim"))
        self.query_one("#log-status", Static).update(Text.assemble(*parts))

    # -- actions -----------------------------------------------------------------
    def action_toggle_follow(self) -> None:
        if self.follow:
            self.follow = False
            self._render_status()
        else:
            self.action_jump_end()

    def action_jump_end(self) -> None:
        self.follow = True
        self.log_widget.scroll_end(animate=False, immediate=True)
        self.new_lines = 0
        self._render_status()

    def on_search_log_end_pressed(self, event: SearchLog.EndPressed) -> None:
        event.stop()
        self.action_jump_end()  # `end` follows again, like G, however following was paused

    def action_scroll_lines(self, delta: int) -> None:
        log = self.log_widget
        log.scroll_to(y=log.scroll_y + delta, animate=False, immediate=True)

    def action_search(self) -> None:
        search = self.query_one("#log-search", Input)
        search.remove_class("hidden")
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.find_next(event.value)

    def find_next(self, needle: str) -> int | None:
        """Go to the match after the current one (wrapping), light it; returns its index.

        Counted from the current match, not from the scroll position: the last matches
        of a log sit below the last full screen, where the view cannot scroll to the top.
        """
        log = self.log_widget
        lines = log.lines
        if not needle or not lines:
            return None
        wanted = needle.lower()
        hits = [i for i, line in enumerate(lines) if wanted in line.lower()]
        if needle != self._needle:
            # a new search starts at the top of what is on screen
            self._needle, self.match_line = needle, None
            after = int(log.scroll_y) - 1
        else:
            after = self.match_line if self.match_line is not None else int(log.scroll_y) - 1
        found = next((i for i in hits if i > after), hits[0] if hits else None)
        self.match_line = found
        log.show_search(needle, found)
        if found is None:
            self._match = f"no match for {needle!r}"
        else:
            self.follow = False
            self._match = f"match {hits.index(found) + 1}/{len(hits)} for {needle!r}"
            # a few lines of context above, unless it is already in view
            if not log.scroll_y <= found < log.scroll_y + log.scrollable_content_region.height:
                log.scroll_to(y=max(0, found - 2), animate=False, immediate=True)
        self._render_status()
        return found

    def on_key(self, event) -> None:  # type: ignore[no-untyped-def]
        if event.key == "escape":
            search = self.query_one("#log-search", Input)
            if not search.has_class("hidden"):
                search.add_class("hidden")
                self._match = ""
                self._needle, self.match_line = "", None
                self.log_widget.show_search("", None)
                self.log_widget.focus()
                self._render_status()
                event.stop()


def plural(count: int, noun: str) -> str:
    """`1 line`, `2 lines`, `0 lines`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
