"""Compare: the loss curves of the marked runs (`space` marks, `C` opens), overlaid.

Each run's metrics come from `sync_metrics` (its cache, plus what its log gained), in one
worker that polls again while any run is live, re-armed only after the last poll ended
(as the curves pane does), so a live run's curve and row move as the runs table's do. A
run whose host cannot be read is named with why, and the others still draw. Each run has
its own colour (its own marker past eight runs) and is named by host and run id (and
workdir, where two share both); only a running run shows an ETA (`for_state`). With
`price_of` (some host has a price), each run's cost too, and a running run's projection
from its ETA (core/runs/cost.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static
from textual_plotext import PlotextPlot

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logs.logstream import LogSource
from rtrain_tui.core.metrics.metrics import MetricsParser, downsample, format_eta
from rtrain_tui.core.metrics.metrics_format import for_state, number
from rtrain_tui.core.metrics.metrics_sync import sync_metrics
from rtrain_tui.core.runs import cost
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.probes import RUNNING, is_final
from rtrain_tui.core.safety.sanitize import safe_line

DEFAULT_POLL = 2.0
# (plotext's name, rich's name): rich has no plain "orange", and a style it cannot parse
# draws nothing, so the second run's swatch had no colour at all.
COLORS = (("cyan", "cyan"), ("orange", "orange1"), ("green", "green"), ("magenta", "magenta"),
          ("yellow", "yellow"), ("red", "red"), ("blue", "blue"), ("white", "white"))
# Past len(COLORS) runs the colours come round again, with another marker.
MARKERS = (("braille", "■"), ("dot", "•"), ("x", "x"), ("+", "+"))
COLUMNS = ("", "host/run", "step", "loss", "eval loss", "ETA")


def run_names(records: list[RunRecord]) -> list[str]:
    """`host/run-id` for each run; with its workdir where two runs share host and id."""
    short = [f"{r.host}/{r.run_id}" for r in records]
    return [f"{name} ({r.workdir})" if short.count(name) > 1 else name
            for name, r in zip(short, records)]


def look(i: int) -> tuple[str, str, str, str]:
    """The i-th run's (plotext colour, rich colour, plotext marker, table swatch)."""
    (pcolor, rcolor), (marker, swatch) = COLORS[i % len(COLORS)], MARKERS[i // len(COLORS) % len(MARKERS)]
    return pcolor, rcolor, marker, swatch


class CompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,C", "close", "Close")]

    def __init__(self, engine: LogSource | None, records: list[RunRecord],
                 state_of: Callable[[RunRecord], str] | None = None,
                 poll: float = DEFAULT_POLL,
                 price_of: Callable[[str], Price | None] | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self.price_of = price_of
        self.clock = clock or (lambda: datetime.now(UTC))
        self.engine = engine
        self.records = records
        # The run's state as the app's refresh last saw it: a run that ends while the
        # view is open stops counting down, and stops being polled.
        self.state_of = state_of or (lambda r: r.state)
        self.poll = poll
        self.metrics: dict[tuple[str, str, str], MetricsParser] = {}
        self.errors: dict[tuple[str, str, str], str] = {}
        self._done: set[tuple[str, str, str]] = set()  # ended runs read once after their end
        self.polls = 0
        self.table: Table | None = None  # the rows as last drawn

    def compose(self) -> ComposeResult:
        with Vertical(id="compare"):
            count = len(self.records)
            yield Static(Text(f"Loss of {count} run{'' if count == 1 else 's'}  (esc: close)",
                              style="bold"), id="compare-title")
            yield PlotextPlot(id="compare-plot")
            yield Static(id="compare-table")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        if self.engine is not None:
            self._poll()

    def _poll(self) -> None:
        if self.is_attached:
            self.run_worker(self._load(), group="compare", exclusive=True, exit_on_error=False,
                            description="metrics of the marked runs")

    async def _load(self) -> None:
        assert self.engine is not None  # started only with one (on_mount)
        for r in self.records:
            if r.key in self._done:
                continue
            ended = is_final(self.state_of(r))  # read before the sync: its bytes are then all in
            try:
                self.metrics[r.key] = await sync_metrics(self.engine, r.host, r.workdir, r.run_id)
                self.errors.pop(r.key, None)
                if ended:
                    self._done.add(r.key)
            except RemoteError as exc:
                self.errors[r.key] = safe_line(str(exc))[:100]
        self.polls += 1
        self.draw()
        if any(r.key not in self._done for r in self.records):
            self.set_timer(self.poll, self._poll)

    def show(self, metrics: dict[tuple[str, str, str], MetricsParser]) -> None:
        """Draw these metrics (also how tests and screenshots inject them)."""
        self.metrics = dict(metrics)
        self.draw()

    def draw(self) -> None:
        widget = self.query_one("#compare-plot", PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        plt.clear_figure()
        width = max(10, widget.size.width or 80)
        table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold dim")
        columns = (*COLUMNS, "cost") if self.price_of is not None else COLUMNS
        for column in columns:
            table.add_column(column, no_wrap=True, overflow="ellipsis")
        for i, (r, name) in enumerate(zip(self.records, run_names(self.records))):
            pcolor, rcolor, marker, swatch = look(i)
            parser = self.metrics.get(r.key)
            if parser is None:
                why = self.errors.get(r.key, "reading…")
                table.add_row(Text(swatch, style=rcolor), Text(name), Text(why, style="red"), "", "", "",
                              *self._cost(r, state_of=self.state_of(r), eta=None))
                continue
            if parser.losses:
                small = downsample(parser.losses, width)
                plt.plot([s for s, _ in small], [v for _, v in small], label=name,
                         color=pcolor, marker=marker)
            state = self.state_of(r)
            s = for_state(parser.summary(), state)
            step = f"{s.step}/{s.total}" if s.step is not None and s.total else str(s.step or "")
            if s.finished:
                eta = Text("finished", style="green")
            elif state == RUNNING:
                eta = Text(format_eta(s.eta_seconds))
            else:  # why it has no ETA: stopped, failed (exit 1), queued…
                eta = Text(state, style="dim")
            table.add_row(Text(swatch, style=rcolor), Text(name), step, number(s.loss),
                          number(s.eval_loss), eta, *self._cost(r, state, s.eta_seconds))
        widget.refresh()
        self.table = table
        self.query_one("#compare-table", Static).update(table)

    def _cost(self, r: RunRecord, state_of: str, eta: float | None) -> tuple[Text, ...]:
        """The run's cost cell (`$12.40 → ~$18.10` running with an ETA), when priced."""
        if self.price_of is None:
            return ()
        spent = cost.run_cost(r, self.price_of(r.host), self.clock(), state=state_of, eta_s=eta)
        return (Text(spent.text() if spent is not None else "-"),)

    def action_close(self) -> None:
        self.dismiss(None)
