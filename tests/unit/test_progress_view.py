"""The CLI's transfer progress line (progress_view.py): the bar, then core's words for
it (meter.py), as a terminal shows them while a dataset uploads."""

from __future__ import annotations

import io

from rich.console import Console

from rtrain_tui.core.transfers.meter import Moving
from rtrain_tui.progress_view import TerminalProgress


def test_the_cli_line_says_bytes_of_total_and_the_compression_ratio() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120, color_system=None)
    with TerminalProgress(console) as progress:
        progress.update(Moving("train.jsonl", 0), 0, 1_000_000_000)
        progress.update(Moving("train.jsonl", 108_000_000), 412_000_000, 1_000_000_000)
        console.file.flush()
        progress._progress.refresh()  # type: ignore[union-attr]
    drawn = screen.getvalue()
    assert "train.jsonl" in drawn
    assert "412 MB of 1.0 GB · 3.8× compressed" in drawn, drawn
