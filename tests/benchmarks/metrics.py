"""Benchmark: the metrics parser, the metrics cache and a curve redraw.

    python -m tests.benchmarks.metrics [--lines 1000000] [--repeat 5]

* parse: a transformers-style train.log of --lines lines (tqdm redraws, a loss dict glued
  to every fourth bar, transformers 5 quoted numbers, an eval dict every 500 steps) fed
  in 1 MiB reads, as `sync_metrics` feeds it; lines per second on one core.
* reopen: the same run's metrics from the local cache (what reopening a week-old run
  costs) against parsing its whole log again.
* redraw: the curves view's data step for that run (downsample to the plot width, hand
  three plots their series, build them) — what each poll of a live run costs the UI.

Prints a Markdown table (median and best of --repeat, in CPU time of one core) with the
targets of issue 10.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rtrain_tui.core.metrics import metrics_cache
from rtrain_tui.core.metrics.metrics import MetricsParser
from rtrain_tui.core.metrics.metrics_cache import CachedMetrics

CHUNK = 1 << 20


def make_log(lines: int) -> bytes:
    """A realistic log of about `lines` lines: 4 bar redraws per loss dict."""
    out = ["***** Running training *****", "  Num examples = 1,000,000",
           f"  Total optimization steps = {lines:,}"]
    total = lines
    step = 0
    count = len(out)
    while count < lines:
        step += 1
        count += 1
        out.append(f"\r{step * 100 // total:3d}%|██▏       | {step}/{total} [1:17:44<48:58,  2.53s/it]")
        if step % 4 == 0:
            count += 1  # the dict's own line end
            out[-1] += (f"{{'loss': '{2.5 - step / total:.4f}', 'grad_norm': '0.4123', "
                        f"'learning_rate': '{2e-4 * (1 - step / total):.3e}', 'epoch': '{step / total:.2f}'}}\n")
        if step % 500 == 0:
            count += 1
            out.append(f"{{'eval_loss': {2.6 - step / total:.4f}, 'eval_runtime': 41.2, 'epoch': 0.5}}\n")
    return "".join(out).encode()


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """CPU seconds of this process (median, best): the work is single-threaded, and CPU
    time is what one core spends whatever else shares the machine."""
    times = []
    for _ in range(repeat):
        began = time.process_time()
        fn()
        times.append(time.process_time() - began)
    return statistics.median(times), min(times)


def parse_all(data: bytes) -> MetricsParser:
    parser = MetricsParser()
    for start in range(0, len(data), CHUNK):
        parser.feed(data[start:start + CHUNK])
    return parser


def redraw_cost(parser: MetricsParser, repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """CurvesPane.show + building its three plots, inside a headless app: the first draw
    of the run, then a redraw after a poll brought a few more points (the common case)."""
    from textual.app import App, ComposeResult
    from textual_plotext import PlotextPlot

    from rtrain_tui.core.runs.index import RunRecord
    from rtrain_tui.tui.widgets.curves_pane import CurvesPane

    result: list[tuple[float, float]] = []
    grown = MetricsParser()

    class Bench(App[None]):
        def compose(self) -> ComposeResult:
            yield CurvesPane(None, RunRecord("h", "r", "~/w"))

    async def go() -> None:
        app = Bench()
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause()
            pane = app.query_one(CurvesPane)

            def draw(what: MetricsParser) -> None:
                pane.show(what)
                for plot in pane.query(PlotextPlot):
                    plot.plt.build()  # what rendering it does with the data

            def first() -> None:
                pane._samplers.clear()
                draw(parser)

            def redraw() -> None:
                step = grown.losses[-1][0] + 1
                for series in (grown.losses, grown.learning_rates, grown.grad_norms):
                    series.extend((step + i, 1.0) for i in range(5))
                draw(grown)

            result.append(timed(first, repeat))
            draw(parser)
            grown.losses[:] = parser.losses
            grown.learning_rates[:] = parser.learning_rates
            grown.grad_norms[:] = parser.grad_norms
            grown.eval_losses[:] = parser.eval_losses
            result.append(timed(redraw, repeat))

    asyncio.run(go())
    return result[0], result[1]


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--lines", type=int, default=1_000_000)
    args.add_argument("--repeat", type=int, default=5)
    opts = args.parse_args()
    data = make_log(opts.lines)
    lines = data.count(b"\n") + data.count(b"\r")
    parse_med, parse_best = timed(lambda: parse_all(data), opts.repeat)
    parser = parse_all(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        metrics_cache.save(path, CachedMetrics(len(data), parser))
        size = path.stat().st_size

        def reopen() -> None:
            got = metrics_cache.load(path)
            assert got is not None and len(got.parser.losses) == len(parser.losses)
            got.parser.summary()

        open_med, open_best = timed(reopen, opts.repeat)
    (first_med, first_best), (draw_med, draw_best) = redraw_cost(parser, opts.repeat)
    rows = [
        ("parse a train.log (1 MiB reads)", f"{lines / parse_med:,.0f} lines/s",
         f"{lines / parse_best:,.0f} lines/s", "≥ 300,000 lines/s"),
        (f"reopen from the cache ({size / 1e6:.1f} MB, {len(parser.losses):,} points)",
         f"{open_med * 1000:.0f} ms", f"{open_best * 1000:.0f} ms", "≤ 500 ms"),
        ("reopen by parsing the whole log again", f"{parse_med * 1000:.0f} ms",
         f"{parse_best * 1000:.0f} ms", "(what the cache saves)"),
        ("curves: first draw of the run (3 plots)", f"{first_med * 1000:.1f} ms",
         f"{first_best * 1000:.1f} ms", "(once per open)"),
        ("curves: redraw after a poll (+5 points)", f"{draw_med * 1000:.1f} ms",
         f"{draw_best * 1000:.1f} ms", "≤ 30 ms"),
    ]
    print(f"{lines:,}-line log, {len(data) / 1e6:.0f} MB, {len(parser.losses):,} loss points; "
          f"median and best of {opts.repeat}\n")
    print("| what | median | best | target |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
