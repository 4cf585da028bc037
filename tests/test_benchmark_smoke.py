"""The benchmarks' harnesses run (small sizes): they make docs/performance.md's tables.

Not timing tests: these machines are shared and noisy. They prove every row is measured
(against its plain tool, in the same run, where it has one) and printed with its figures.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_transfer_benchmark_measures_every_row_against_its_plain_tool() -> None:
    r = subprocess.run([sys.executable, "-m", "tests.benchmarks.transfer", "--smoke",
                        "--repeat", "1"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines()
            if re.fullmatch(r"\| .+ \| \d+\.\d\d s \| \d+\.\d\d s \| .+ \| \d+\.\d\d× \|", line)]
    tools = [row.split(" | ")[3] for row in rows]
    assert tools == ["`scp`", "`scp -r`", "`ssh tar c \\| tar x`", "`scp -r`", "`scp`",
                     "`scp -r` (sends it all again)", "`scp -r` (sends it all again)"], r.stdout
    assert re.search(r"peak RSS \d+ MiB .* longest event-loop stall \d+ ms", r.stdout), r.stdout
    assert re.search(r"Creating the 50 small files alone.*: \d+\.\d\d s\.", r.stdout), r.stdout
    assert r.stdout.count(" ms;") == 6, r.stdout  # a stall for each of the 7 parts


def test_the_wan_benchmark_measures_every_row_of_issue_20_against_its_tool_through_the_proxy() -> None:
    r = subprocess.run([sys.executable, "-m", "tests.benchmarks.wan", "--smoke", "--repeat", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"JSONL: 2 MiB, zstd -3 ratio \d\.\d\d×", r.stdout), r.stdout
    # The edit is at least 1% of the file (whole records), and not the whole file.
    assert re.search(r"1% edit: [\d,]+ bytes of records \([1-4]\.\d%\) rewritten in 10 places",
                     r.stdout), r.stdout
    rows = [line.split(" | ") for line in r.stdout.splitlines() if re.fullmatch(
        r"\| .+ \| .+ \| \d+\.\d\d s \| \d+\.\d\d s \| .+ \| \d+\.\d\d× \| ≤ .+ "
        r"\| (met|\*\*not met\*\*) \| .+ / .+ \| \d+\.\d\d s / \d+\.\d\d s \| \d+ / \d+ MiB \|", line)]
    assert [(row[1], row[4]) for row in rows] == [
        ("100 Mbit/s, 20 ms RTT", "`scp`"), ("100 Mbit/s, 20 ms RTT", "`rsync -z`"),
        ("20 Mbit/s, 20 ms RTT", "`scp`"), ("100 Mbit/s, 20 ms RTT", "`rsync -z`"),
        ("loopback, unthrottled", "`scp`"), ("100 Mbit/s, 20 ms RTT", "`rsync -z -r`"),
        ("loopback, unthrottled", "`scp`"), ("loopback, unthrottled", "`ssh tar c \\| tar x`")], r.stdout
    # Through the proxy, every tool's bytes on the wire are counted (compressed or not).
    for row in rows:
        if row[1] != "loopback, unthrottled" and row[0] != "| 2 MiB JSONL, 1% edited, uploaded again":
            ours, other = (float(x.removesuffix(" MB")) for x in row[8].split(" / "))
            assert ours > 0.1 and other > 0.1, row
    assert "≤ 3% on the wire (" in r.stdout, r.stdout
    assert re.search(r"\d of 8 goals met\. Whole benchmark: \d+ s", r.stdout), r.stdout


def test_the_scale_benchmark_prints_every_goal_of_issue_17_with_a_measurement_and_a_verdict() -> None:
    r = subprocess.run([sys.executable, "-m", "tests.benchmarks.scale", "--quick"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [line.split(" | ") for line in r.stdout.splitlines()
            if re.fullmatch(r"\| .+ \| .*\d.* \| .+ \| .+ \| (met|\*\*not met\*\*) \|", line)]
    labels = [row[0].removeprefix("| ") for row in rows]
    assert labels == [
        "app: key → screen p95 while polling", "app: each host refreshed every 2 s (its period)",
        "app: client CPU while idle-polling", "app: resident memory",
        "app: first frame / full table (new process)", "`runs` / `runs --json` (new process)",
        "`status HOST RUN` (cold process, asks the host)", "`start`'s own index work (new process)",
        "3 concurrent `start`s (real, round robin over the hosts)", "`runs --refresh` (new process)",
        "`runs --discover` of a host with 50 run directories"], r.stdout
    # The anchor (plain ssh per run) is measured in the same run, beside the refresh rows.
    anchors = {row[0].removeprefix("| "): row[3] for row in rows}
    assert re.fullmatch(r"ssh per live run: \d+\.\d\d s \(6 × `ssh HOST cat RUN/status`\)",
                        anchors["`runs --refresh` (new process)"]), r.stdout
    assert re.search(r"\d/3 hosts refreshed in the window; every host's first refresh", r.stdout), r.stdout
    assert re.search(r"found \d+", r.stdout) and "said failed though launched" in r.stdout, r.stdout


def test_the_tui_benchmark_floods_a_pane_and_prints_every_row() -> None:
    # The scale benchmark imports this module's helpers but never starts its flood trainer,
    # so only running it catches a trainer that the template check refuses.
    r = subprocess.run([sys.executable, "-m", "tests.benchmarks.tui", "--rate", "2000",
                        "--seconds", "1", "--max-lines", "500", "--repeat", "1"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| lines written by the trainer | 2,000 |" in r.stdout, r.stdout
    # Lines written before the pane opened beyond its backlog (the cap) count as not
    # received, so at this small size the count depends on the machine's speed.
    assert re.search(r"\| lines received by the pane \| [\d,]+ \((none lost|LOST LINES)\) \|", r.stdout), r.stdout
    assert "| pane window (cap 500) | 500 newest lines, exact and in order |" in r.stdout, r.stdout
    # A flood that ended before the first press (a loaded machine) still gets one press.
    assert re.search(r"\| key → screen, median / p95 \| \d+ ms / \d+ ms \((\d+ presses during|1 press after) "
                     r"the flood", r.stdout), r.stdout
    assert re.search(r"\| `rtrain-tui` start → first frame \| \d+ ms \(a bare Textual app: \d+ ms",
                     r.stdout), r.stdout


def test_the_tui_benchmarks_latency_row_says_no_sample_and_when_its_presses_were() -> None:
    from tests.benchmarks.tui import latency_row

    assert latency_row([], 0) == "no sample"
    assert latency_row([0.020], 0) == "20 ms / 20 ms (1 press after the flood: it ended before the first)"
    assert latency_row([0.030, 0.010, 0.020], 3) == "20 ms / 30 ms (3 presses during the flood)"
