"""The transfer benchmark's harness runs (small sizes): it makes docs/performance.md's table.

Not a timing test: these machines are shared and noisy. It proves every row is measured
against its plain tool in the same run and printed with a ratio.
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
