"""A run's curves: loss and eval loss over steps, learning rate and grad norm, progress + ETA.

Drawn with textual-plotext. Metrics come from `sync_metrics`, which reads only the bytes
the log gained since the last look (and a local cache across sessions), so a poll of a
long run is a stat and a small read. It polls only while it is on screen and the run is
not over; each poll re-arms after the previous one finished, so a slow host never stacks
them. Series are downsampled to the plot's width: a 100,000-point curve draws as fast
as a 100-point one. Only a running run shows an ETA and a rate (`for_state`). On a short
pane (an 80×24 terminal) the loss curve takes every row: learning rate and grad norm are
numbers in the summary then, and the summary's coloured words are the legend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logs.logstream import LogSource
from rtrain_tui.core.metrics.metrics import Downsampler, MetricsParser, Summary, format_eta
from rtrain_tui.core.metrics.metrics_format import for_state, summary_line
from rtrain_tui.core.metrics.metrics_sync import sync_metrics
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.probes import is_final
from rtrain_tui.core.safety.sanitize import safe_line

DEFAULT_POLL = 2.0
BAR_WIDTH = 30
SHORT = 16  # rows: below this the pane shows only the loss plot, as tall as it can be
# (plotext's name, rich's name) of each curve's colour: rich has no plain "orange".
LOSS_COLOR, EVAL_COLOR = ("cyan", "cyan"), ("orange", "orange1")
# The summary's words in their curves' colours ("loss", not the one in "eval loss").
LEGEND = ((re.compile(r"(?<!eval )\bloss\b"), LOSS_COLOR[1]),
          (re.compile(r"\beval loss\b"), EVAL_COLOR[1]))


def progress_text(s: Summary) -> Text:
    """`▕██████░░░░▏ 61%  1840/3000 · ETA 48m58s` (or what is known of it)."""
    if s.fraction is None:
        return Text("no progress bar in the log yet", style="dim")
    filled = round(s.fraction * BAR_WIDTH)
    text = Text.assemble(("▕", "dim"), ("█" * filled, "green"), ("░" * (BAR_WIDTH - filled), "dim"),
                         ("▏", "dim"), (f" {s.fraction:.0%}", "bold"), f"  {s.step}/{s.total}")
    if s.finished:
        text.append("  · finished", style="green")
    elif s.eta_seconds is not None:
        text.append(f"  · ETA {format_eta(s.eta_seconds)}", style="bold")
    return text


class CurvesPane(Vertical):
    def __init__(self, engine: LogSource | None, record: RunRecord,
                 state_of: Callable[[], str] | None = None, poll: float = DEFAULT_POLL,
                 autostart: bool = False, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.engine = engine
        self.record = record
        self.state_of = state_of or (lambda: record.state)
        self.poll = poll
        self.parser: MetricsParser | None = None
        self.error = ""
        self._polling = False
        self.autostart = autostart
        # One per series: a redraw costs the new points plus the width, not the series.
        self._samplers: dict[str, Downsampler] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="curves-summary")
        yield Static(id="curves-progress")
        yield PlotextPlot(id="plot-loss")
        with Horizontal(id="curves-lower"):
            yield PlotextPlot(id="plot-lr")
            yield PlotextPlot(id="plot-grad")

    def on_mount(self) -> None:
        if not self.children:
            return  # removed as it mounted (as LogPane.on_mount): nothing to draw or poll
        self._render_text()
        if self.autostart:
            self.start_polling()

    def on_resize(self) -> None:
        short = self.size.height < SHORT
        if short != self.has_class("-short"):
            self.set_class(short, "-short")
            self._draw()  # the legend goes (or comes back) with the room

    # -- polling -----------------------------------------------------------------
    def start_polling(self) -> None:
        """Called when the curves come on screen; harmless when already polling."""
        if self.engine is None or self._polling:
            return
        self._polling = True
        self.run_worker(self._poll_once(), group=f"curves:{self.id}", exclusive=True,
                        exit_on_error=False, description=f"metrics of {self.record.run_id}")

    async def _poll_once(self) -> None:
        assert self.engine is not None  # started only with one (start_polling)
        r = self.record
        ended = is_final(self.state_of())  # read before the sync: its bytes are then all in
        try:
            self.show(await sync_metrics(self.engine, r.host, r.workdir, r.run_id))
            self.error = ""
        except RemoteError as exc:
            self.error = safe_line(str(exc))[:120]
            self._render_text()
        finally:
            self._polling = False
        if not ended and self.display and self.is_mounted:
            self.set_timer(self.poll, self.start_polling)

    # -- drawing -----------------------------------------------------------------
    def show(self, parser: MetricsParser) -> None:
        """Draw these metrics (also how tests and screenshots inject them)."""
        self.parser = parser
        self._render_text()
        self._draw()

    @property
    def summary(self) -> Summary | None:
        """The metrics' summary as the run's state lets it show (no ETA once it ended)."""
        return for_state(self.parser.summary(), self.state_of()) if self.parser else None

    def _render_text(self) -> None:
        head = Text()  # the tab's title already names the run
        s = self.summary
        if self.error:
            head.append(f"⚠ {self.error}", style="bold red")
        elif self.parser is None or s is None:
            head.append("reading metrics…", style="dim")
        else:
            head.append(summary_line(s) or "no metrics in the log yet",
                        style="" if self.parser.losses else "dim")
            for pattern, color in LEGEND:
                head.highlight_regex(pattern, style=color)
        self.query_one("#curves-summary", Static).update(head)
        progress = progress_text(s) if s is not None else Text()
        progress.append("   c: back to the log", style="dim")
        self.query_one("#curves-progress", Static).update(progress)

    def _draw(self) -> None:
        p = self.parser
        if p is None:
            return
        self._plot("#plot-loss", "loss", [("loss", p.losses, LOSS_COLOR[0]),
                                          ("eval loss", p.eval_losses, EVAL_COLOR[0])])
        self._plot("#plot-lr", "learning rate", [("lr", p.learning_rates, "green")])
        self._plot("#plot-grad", "grad norm", [("grad norm", p.grad_norms, "magenta")])

    def _plot(self, selector: str, title: str,
              series: list[tuple[str, list[tuple[int, float]], str]]) -> None:
        widget = self.query_one(selector, PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        plt.clear_figure()
        # No title and no axis label: every row counts in a tab this high, and the
        # legend names each curve (x is always the step).
        # One point per column: plotext's drawing cost grows with the points, and more
        # than one mean per cell adds nothing a reader can see.
        width = max(10, widget.size.width or 80)
        drawn: list[float] = []
        for label, points, color in series:
            if not points:
                continue
            sampler = self._samplers.setdefault(label, Downsampler())
            sampler.update(points)
            small = sampler.points(width)
            values = plotted(v for _, v in small)
            # A legend inside a short plot covers the curve's start: the summary's
            # coloured words say which curve is which there.
            plt.plot([s for s, _ in small], values, label=None if self.has_class("-short") else label,
                     color=color, marker="braille")
            drawn += values
        if not drawn:
            plt.title(f"no {title} in the log")
        elif (limits := flat_limits(drawn)) is not None:
            plt.ylim(*limits)
        widget.refresh()


def plotted(values: Iterable[float]) -> list[float]:
    """Values as a plot should see them: 6 significant digits. A bucket's mean comes from
    running sums, so a constant 1e-4 arrives as 1.0000000000000000454e-4, and plotext
    would scale its axis to that noise and label it in 24 digits."""
    return [float(f"{v:.6g}") for v in values]


def flat_limits(values: list[float]) -> tuple[float, float] | None:
    """Y limits for a flat series (a constant learning rate), which plotext cannot scale:
    the value ±10 % (±1 at 0). None when the values vary."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite or max(finite) - min(finite) > abs(max(finite)) * 1e-6:
        return None
    pad = abs(finite[0]) * 0.1 or 1.0
    return finite[0] - pad, finite[0] + pad
