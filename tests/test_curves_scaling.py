"""A flat series (a constant learning rate) plots as a flat line with readable labels."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App, ComposeResult

from rtrain_tui.core.metrics.metrics import MetricsParser
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.tui.widgets.curves_pane import CurvesPane, flat_limits, plotted
from tests.test_tui import screen_text


def test_plotted_values_drop_the_noise_of_running_sums() -> None:
    noisy = [1.0000000000000000454e-4, 0.99999999999999999e-4, 2.5, float("nan")]
    assert plotted(noisy)[:3] == [1e-4, 1e-4, 2.5]


def test_flat_limits() -> None:
    assert flat_limits([1e-4, 1e-4]) == (0.9e-4, 1.1e-4)
    assert flat_limits([0.0, 0.0]) == (-1.0, 1.0)
    assert flat_limits([1.0, 2.0]) is None
    assert flat_limits([float("nan")]) is None


def test_a_constant_learning_rate_draws_with_short_axis_labels(tmp_path: Path) -> None:
    """Found in a new-user trial: a metrics.jsonl with learning_rate 1e-4 on every line
    drew axis labels like 0.0001000000000000000454, squeezing the plot to 15 columns."""
    parser = MetricsParser()
    parser.feed("".join(f'{{"step": {s}, "loss": {3 - s / 100}, "learning_rate": 0.0001}}\n'
                        for s in range(1, 200)).encode())

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield CurvesPane(None, RunRecord("h", "r", "/w", state="running"))

    async def go() -> None:
        app = One()
        async with app.run_test(size=(120, 40)) as pilot:
            app.query_one(CurvesPane).show(parser)
            await pilot.pause()
            text = screen_text(app)  # type: ignore[arg-type]
            assert "00000000" not in text
            assert "0.0001" in text  # the value itself is labelled

    asyncio.run(go())
