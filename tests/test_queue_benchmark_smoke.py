"""The queue benchmark's harness runs (a short window) and prints its table row: 20
waiting runs, their host CPU and nvidia-smi calls per minute, measured, with a verdict.

Not a timing test (shared, noisy machines); the one hard figure is the sampling cap,
which the queue keeps by design: at most one sample (two calls) per 5 s per queue.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_queue_benchmark_measures_20_waiting_runs_and_samples_at_most_every_5_s() -> None:
    r = subprocess.run([sys.executable, "-m", "tests.benchmarks.queue", "--quick"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "20/20 wrappers alive at its end" in r.stdout, r.stdout
    row = re.search(r"^\| 20 \| (\d+\.\d\d) % \| (\d+\.\d) \| (\d+\.\d) \| .+ \| (met|\*\*not met\*\*) \|$",
                    r.stdout, re.M)
    assert row, r.stdout
    assert 0 < float(row.group(2)) <= 2 * 12 * 1.1, r.stdout  # sampled, and not more than the cap
