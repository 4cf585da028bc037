"""A live log pane: follows a run's train.log, batched, bounded, searchable.

Lines arrive from `LogFollower` in chunks and are written to the `Log` at most every
50 ms in one `write_lines` call (one per line is ~50× slower on a flood). The `Log`
keeps at most `max_lines`; the whole log stays on the host and can be fetched.
When the reader scrolls up, new lines are counted instead of yanking the view down.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Log, Static

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.index import RunRecord
from rtrain_tui.core.sanitize import safe_line
from rtrain_tui.core.logstream import LogFollower, LogLines
from rtrain_tui.tui.badges import run_badge

FLUSH_SECONDS = 0.05
DEFAULT_MAX_LINES = 10_000


class LogPane(Vertical):
    BINDINGS = [
        Binding("F", "toggle_follow", "Follow", tooltip="Follow new lines on/off"),
        Binding("/", "search", "Search", tooltip="Search this log"),
        Binding("G", "jump_end", "End", show=False),
    ]

    def __init__(self, engine: object | None, record: RunRecord,
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
        self._flush_armed = False
        self._match = ""

    def compose(self) -> ComposeResult:
        yield Static(id="log-status")
        yield Log(max_lines=self.max_lines, id="log-lines")
        yield Input(placeholder="search this log, enter for the next match, esc to close",
                    id="log-search", classes="hidden")

    @property
    def log_widget(self) -> Log:
        return self.query_one("#log-lines", Log)

    def on_mount(self) -> None:
        self._render_status()
        if self.engine is not None:
            self.run_worker(self._follow(), group=f"log:{self.id}", exclusive=True,
                            exit_on_error=False, description=f"follow {self.record.run_id}")

    async def _follow(self) -> None:
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
        log = self.log_widget
        at_end = log.is_vertical_scroll_end or log.max_scroll_y == 0
        if self.follow and at_end:
            self.new_lines = 0  # the reader is back at the bottom
        else:
            self.new_lines += len(lines)
        # Host text: no escape sequence may reach the terminal (retitle, clipboard, 2J).
        # Log renders plain text, so colour (SGR) goes too.
        log.write_lines([safe_line(line) for line in lines], scroll_end=self.follow and at_end)
        self.total_lines += len(lines)
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
        parts = [stream, Text(f"  {self.record.host}/{self.record.run_id}", style="bold"),
                 Text(f"  follow {'on' if self.follow else 'off'} (F)", style="dim"),
                 Text(f"  {self.total_lines} lines", style="dim")]
        if self.total_lines > self.max_lines:
            # the whole log stays on the host: `f` fetches train.log
            parts.append(Text(f" (last {self.max_lines} shown)", style="dim"))
        if self.new_lines:
            parts.append(Text(f"  ▼ {self.new_lines} new lines", style="bold reverse"))
        if self._match:
            parts.append(Text(f"  {self._match}", style="italic"))
        self.query_one("#log-status", Static).update(Text.assemble(*parts))

    # -- actions -----------------------------------------------------------------
    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self.action_jump_end()
        self._render_status()

    def action_jump_end(self) -> None:
        self.log_widget.scroll_end(animate=False)
        self.new_lines = 0
        self._render_status()

    def action_search(self) -> None:
        search = self.query_one("#log-search", Input)
        search.remove_class("hidden")
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.find_next(event.value)

    def find_next(self, needle: str) -> int | None:
        """Scroll to the next line containing `needle` (wrapping); returns its index."""
        log = self.log_widget
        lines = log.lines
        if not needle or not lines:
            return None
        start = int(log.scroll_y) + 1
        order = list(range(start, len(lines))) + list(range(0, min(start, len(lines))))
        hits = [i for i, line in enumerate(lines) if needle.lower() in line.lower()]
        found = next((i for i in order if needle.lower() in lines[i].lower()), None)
        if found is None:
            self._match = f"no match for {needle!r}"
        else:
            self.follow = False
            log.scroll_to(y=found, animate=False)
            self._match = f"match {hits.index(found) + 1}/{len(hits)} for {needle!r}"
        self._render_status()
        return found

    def on_key(self, event) -> None:  # type: ignore[no-untyped-def]
        if event.key == "escape":
            search = self.query_one("#log-search", Input)
            if not search.has_class("hidden"):
                search.add_class("hidden")
                self._match = ""
                self.log_widget.focus()
                self._render_status()
                event.stop()
