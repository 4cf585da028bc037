"""Compare: the loss curves of the marked runs (`space` marks, `C` opens), overlaid.

Each run's metrics come from `sync_metrics` (its cache, plus what its log gained), in one
worker; a run whose host cannot be read is named with why, and the others still draw.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static
from textual_plotext import PlotextPlot

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.index import RunRecord
from rtrain_tui.core.metrics import MetricsParser, downsample, format_eta
from rtrain_tui.core.metrics_format import number
from rtrain_tui.core.metrics_sync import sync_metrics
from rtrain_tui.core.sanitize import safe_line

COLORS = ("cyan", "orange", "green", "magenta", "yellow", "red", "blue", "white")


class CompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,C", "close", "Close")]

    def __init__(self, engine: object | None, records: list[RunRecord]) -> None:
        super().__init__()
        self.engine = engine
        self.records = records
        self.metrics: dict[tuple[str, str, str], MetricsParser] = {}
        self.errors: dict[tuple[str, str, str], str] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="compare"):
            yield Static(Text(f"Loss of {len(self.records)} runs  (esc: close)", style="bold"),
                         id="compare-title")
            yield PlotextPlot(id="compare-plot")
            yield Static(id="compare-table")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        if self.engine is not None:
            self.run_worker(self._load(), group="compare", exclusive=True, exit_on_error=False,
                            description="metrics of the marked runs")

    async def _load(self) -> None:
        for r in self.records:
            try:
                self.metrics[r.key] = await sync_metrics(self.engine, r.host, r.workdir, r.run_id)
            except RemoteError as exc:
                self.errors[r.key] = safe_line(str(exc))[:100]
        self.draw()

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
        table = Table.grid(padding=(0, 2))
        for column in ("", "run", "step", "loss", "eval loss", "ETA"):
            table.add_column(column)
        for i, r in enumerate(self.records):
            color = COLORS[i % len(COLORS)]
            name = f"{r.host}/{r.run_id}"  # shown as plain text: never markup
            parser = self.metrics.get(r.key)
            if parser is None:
                why = self.errors.get(r.key, "reading…")
                table.add_row(Text("■", style=color), Text(name), Text(why, style="red"), "", "", "")
                continue
            if parser.losses:
                small = downsample(parser.losses, width)
                plt.plot([s for s, _ in small], [v for _, v in small], label=name,
                         color=color, marker="braille")
            s = parser.summary()
            step = f"{s.step}/{s.total}" if s.step is not None and s.total else str(s.step or "")
            eta = "finished" if s.finished else format_eta(s.eta_seconds)
            table.add_row(Text("■", style=color), Text(name), step, number(s.loss),
                          number(s.eval_loss), eta)
        widget.refresh()
        self.query_one("#compare-table", Static).update(table)

    def action_close(self) -> None:
        self.dismiss(None)
