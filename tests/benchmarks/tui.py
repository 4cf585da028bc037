"""Benchmark: the TUI under a log flood, key latency, memory, and time to first frame.

    python -m tests.benchmarks.tui [--rate 20000] [--seconds 5] [--max-lines 10000] [--repeat 7]

Runs the app headless (Textual's Pilot) with the built-in demo host, starts a "trainer"
that writes --rate numbered lines per second for --seconds into train.log, opens its
log pane, and measures:
  * lines shown vs written, and that the pane's kept window is exactly the newest
    --max-lines lines, in order, none missing;
  * key-press to screen-updated latency while the flood runs: from posting a cursor
    key to the runs table repainting with the cursor moved, median and p95;
  * the process's resident memory while the flood runs (flat once the cap is reached);
  * the time from starting `rtrain-tui` to its first frame, as a fresh process.
Prints a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# One line, as the trainer-template check requires (a newline would end the wrapper's
# command line): Python's own "\n" escapes inside exec('...') make the loop's lines.
FLOOD = (
    r'''{python} -c "exec('import sys,time\nrate,secs=%d,%d\nN=rate*secs;t0=time.monotonic();n=0\n'''
    r'''while n<N: due=min(N,int((time.monotonic()-t0)*rate)+200); '''
    r'''sys.stdout.write(\"\".join(\"flood line %%07d step %%d loss 0.%%04d\"%%(i,i,i%%9999)+chr(10) '''
    r'''for i in range(n,due))); n=max(n,due); sys.stdout.flush(); time.sleep(0.005)')"'''
)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def trace_paints(table: Any) -> list[tuple[float, int]]:
    """Timestamp every paint of `table` with the cursor row it drew: "the screen updated"
    after a cursor key is the first paint that shows the moved cursor (a paint that a
    refresh caused just before the key was handled does not count)."""
    painted: list[tuple[float, int]] = []
    original = table.render_lines

    def traced(crop):  # type: ignore[no-untyped-def]
        painted.append((time.perf_counter(), table.cursor_row))
        return original(crop)

    table.render_lines = traced
    return painted


async def press_cursor_key(app: Any, table: Any, painted: list[tuple[float, int]],
                           bound: float = 5.0) -> float:
    """Post a cursor key that moves the table's cursor (down from the top row, else up)
    and return the seconds until a paint shows it moved (at most `bound`)."""
    key = "k" if table.cursor_row else "j"
    target = table.cursor_row - 1 if key == "k" else table.cursor_row + 1
    t0 = time.perf_counter()
    app.simulate_key(key)
    while time.perf_counter() - t0 < bound:
        for when, row in reversed(painted):
            if when <= t0:
                break
            if row == target:
                return when - t0
        await asyncio.sleep(0.001)
    return time.perf_counter() - t0


async def flood(rate: int, seconds: int, max_lines: int) -> dict[str, str]:
    from rtrain_tui.core import RunIndex, StartRequest
    from rtrain_tui.demo.server import SAMPLES
    from rtrain_tui.tui.app import make_app
    from rtrain_tui.tui.widgets.log_pane import LogPane

    root = Path(tempfile.mkdtemp(prefix="rtrain-tui-bench-"))
    os.environ["XDG_DATA_HOME"] = str(root / "xdg")
    (root / "ssh_config").write_text("")
    app = make_app(root / "ssh_config", RunIndex(root / "runs.toml"), demo=True, poll_runs=True)
    total = rate * seconds
    latencies: list[float] = []
    memory: list[float] = []
    async with app.run_test(size=(140, 40)) as pilot:
        while "demo" not in app.reports:
            await pilot.pause(0.05)
        request = StartRequest("demo", SAMPLES / "config.yaml", gpus=0, run_id="flood",
                               trainer=FLOOD % (rate, seconds))
        started = await app.engine.start(request)
        # a second run, so the runs table has a row for the cursor to move to
        await app.engine.start(StartRequest("demo", SAMPLES / "config.yaml", gpus=0, run_id="idle",
                                            trainer="sleep 600"))
        app.load_runs()
        pane: LogPane = app.open_log(started.record)
        pane.max_lines = max_lines
        await pilot.pause()
        pane.log_widget.max_lines = max_lines
        table = app.runs_table
        table.focus()
        painted = trace_paints(table)
        began = time.monotonic()
        while pane.stream != "ended":
            latencies.append(await press_cursor_key(app, table, painted))
            memory.append(rss_mib())
            await asyncio.sleep(0.1)
            if time.monotonic() - began > seconds * 6 + 30:
                break
        # On a loaded machine a short flood can end before the first press: one press
        # after it still proves the measurement works, and the row says it came after.
        during = len(latencies)
        if not latencies:
            latencies.append(await press_cursor_key(app, table, painted))
            memory.append(rss_mib())
        await pilot.pause(0.2)
        shown = list(pane.log_widget.lines)
        written = pane.total_lines
        print(await app.engine.stop("demo", "~/.praisonai-train", "idle", grace=1), file=sys.stderr)
    expected = [f"flood line {n:07d} step {n} loss 0.{n % 9999:04d}" for n in range(total - len(shown), total)]
    window_ok = shown == expected
    quarter = max(1, len(memory) // 4)
    return {
        "lines written by the trainer": f"{total:,}",
        "lines received by the pane": f"{written:,} ({'none lost' if written == total else 'LOST LINES'})",
        f"pane window (cap {max_lines:,})": f"{len(shown):,} newest lines, "
                                            f"{'exact and in order' if window_ok else 'MISMATCH'}",
        "key → screen, median / p95": latency_row(latencies, during),
        "resident memory, by quarter of the flood": " → ".join(
            f"{statistics.mean(memory[i:i + quarter]):.0f}" for i in range(0, len(memory), quarter)
        ) + " MiB",
        "peak resident memory": f"{max(memory):.0f} MiB",
    }


def latency_row(latencies: list[float], during: int) -> str:
    """Median and p95 of the key → screen latencies, and how many were taken during the
    flood; "no sample" when none was taken (never an IndexError)."""
    if not latencies:
        return "no sample"
    lat = sorted(latencies)
    p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
    when = (f"{during} presses during the flood" if during
            else f"{len(lat)} press after the flood: it ended before the first")
    return f"{statistics.median(lat) * 1000:.0f} ms / {p95 * 1000:.0f} ms ({when})"


FIRST_FRAME = """
import time, sys, tempfile, pathlib
from rtrain_tui.core import RunIndex
from rtrain_tui.tui.app import make_app
root = pathlib.Path(tempfile.mkdtemp())
(root / "c").write_text("Host a\\nHost b\\n")
app = make_app(root / "c", RunIndex(root / "runs.toml"), poll_runs=False)
app.call_after_refresh(app.exit)
app.run(headless=True)
"""


BARE_TEXTUAL = """
from textual.app import App
from textual.widgets import DataTable, Footer, Header, Log, OptionList, TabbedContent
app = App()
app.call_after_refresh(app.exit)
app.run(headless=True)
"""


def _median_run(code: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def first_frame(repeat: int = 7) -> str:
    """Whole process to first frame, beside the floor: a bare Textual app's first frame."""
    ours = _median_run(FIRST_FRAME, repeat)
    floor = _median_run(BARE_TEXTUAL, repeat)
    return (f"{ours * 1000:.0f} ms (a bare Textual app: {floor * 1000:.0f} ms; "
            f"medians of {repeat}, whole process)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--max-lines", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7, help="first-frame runs to take the median of")
    args = parser.parse_args()
    rows = asyncio.run(flood(args.rate, args.seconds, args.max_lines))
    rows["`rtrain-tui` start → first frame"] = first_frame(args.repeat)
    print(f"| {args.rate:,} lines/s for {args.seconds} s into one open pane | result |")
    print("|---|---|")
    for k, v in rows.items():
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
