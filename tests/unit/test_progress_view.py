"""The CLI's transfer progress line (progress_view.py): the bar, then core's words for
it (meter.py), as a terminal shows them while a dataset uploads."""

from __future__ import annotations

import io

from rich.console import Console

from rtrain_tui.core.transfers.meter import Meter, Moving
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


def test_the_cli_line_of_a_delta_names_the_file_once_and_says_delta_once() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=160, color_system=None)
    with TerminalProgress(console) as progress:
        progress.update(Moving("train.jsonl", 0, 1_000_000_000), 0, 2_100_000)
        progress.update(Moving("train.jsonl", 320_000, 1_000_000_000), 1_000_000, 2_100_000)
        progress._progress.refresh()  # type: ignore[union-attr]
    drawn = screen.getvalue()
    assert "delta · 1.0 MB of 2.1 MB to send (of 1.0 GB) · 3.1× compressed" in drawn, drawn
    last = [row for row in drawn.splitlines() if "to send" in row][-1]
    assert last.count("train.jsonl") == 1 and last.count("delta") == 1, last


def test_at_80_columns_a_long_file_name_gives_way_to_the_rate_and_time_left() -> None:
    """A 50-character dataset name took the line: on 80 columns the bar was gone and the
    words were cut to `102 MB of 105 MB · 5.5× compres…`, the rate and time left unseen."""
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=80, color_system=None)
    name = "a_rather_long_dataset_file_name_for_wrapping.jsonl"
    times = iter([0.0, 0.0, 3.3])  # config.yaml, then the dataset's start and 3.3 s later
    with TerminalProgress(console) as progress:
        progress._meter = Meter(clock=lambda: next(times))
        progress.update("config.yaml", 189, 189)
        progress.update(Moving(name, 0), 0, 105_000_000)
        progress.update(Moving(name, 18_000_000), 102_000_000, 105_000_000)
        progress._progress.refresh()  # type: ignore[union-attr]
    last = [row for row in screen.getvalue().replace("\r", "\n").splitlines() if "of 105 MB" in row][-1]
    assert last.startswith("a_rather_long_dataset_f…"), last
    assert last.rstrip().endswith("· 5.7× compressed · 31 MB/s · 0 s left"), last
