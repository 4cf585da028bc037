"""Benchmark: the host-side cost of runs waiting in the GPU queue (`start --queue`).

    python -m tests.benchmarks.queue [--runs 20] [--seconds 60] [--quick]

The host side is this machine (as in the sshd tests): RUNS wrappers, written exactly as
`start --queue` writes them (`scripts.wrapper(..., queue=(1, ()))`) and launched by the
real launch script, wait for one GPU while the stand-in nvidia-smi (tests/remote/bin)
shows every GPU busy. Over the window it measures:
  * CPU: the user+system time of the waiting wrappers and of every child they waited
    for (sleep, awk, nvidia-smi, the subshells), from /proc/PID/stat, as % of one core;
  * nvidia-smi calls per minute, counted by the stand-in (a line per call).
Goal (issue 18): under 1% of a core for 20 waiting runs; only the head samples, at most
once per 5 s (one sample = two nvidia-smi calls: load and processes).
Prints a Markdown table. Only the processes it started are stopped, by their groups.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from rtrain_tui.core.backends.direct import scripts as direct_sh

STAND_INS = Path(__file__).parent.parent / "remote" / "bin"
BUSY = "0, NVIDIA H200, 70000, 143771, 97\n1, NVIDIA H200, 70000, 143771, 97\n"
CLK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    """utime + stime + cutime + cstime of `pid` (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return sum(int(f) for f in fields[11:15])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="a 15 s window (the smoke test)")
    args = parser.parse_args()
    seconds = 15.0 if args.quick else args.seconds
    root = Path(tempfile.mkdtemp(prefix="rtrain-queue-bench-"))
    work = root / "work"
    gpus = root / "gpus.csv"
    gpus.write_text(BUSY)
    calls = Path(f"{gpus}.calls")
    # A HOME of its own: the queue is the box's, under HOME (backends/direct/gpu_box.sh),
    # and must be neither the user's real one nor another benchmark's.
    env = {**os.environ, "PATH": f"{STAND_INS}:{os.environ['PATH']}", "RTRAIN_FAKE_GPUS": str(gpus),
           "HOME": str(root / "home")}
    pids: list[int] = []
    try:
        for i in range(args.runs):
            rd = work / f"q{i:02d}"
            rd.mkdir(parents=True)
            token = secrets.token_hex(16)
            (rd / "train.token").write_text(token + "\n")
            (rd / "run.sh").write_text(direct_sh.wrapper("sleep 1", {}, queue=(1, ())))
            out = subprocess.run(["sh", "-c", direct_sh.launch(str(rd), token)], env=env,
                                 capture_output=True, text=True, timeout=30).stdout
            pids.append(int(out.strip().removeprefix("pid=")))
        # Settled: every wrapper has queued itself and said its place.
        deadline = time.monotonic() + 60
        while not all((work / f"q{i:02d}" / "queued").exists() for i in range(args.runs)):
            if time.monotonic() > deadline:
                raise SystemExit("the wrappers did not queue within 60 s")
            time.sleep(0.2)
        calls.write_text("")
        before = sum(cpu_ticks(p) for p in pids)
        time.sleep(seconds)
        used = sum(cpu_ticks(p) for p in pids) - before
        n_calls = len(calls.read_text().splitlines())
        alive = sum(1 for p in pids if cpu_ticks(p) or Path(f"/proc/{p}").exists())
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGTERM)  # each wrapper leads its own group (setsid)
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)
    cpu_pct = used / CLK / seconds * 100
    per_min = n_calls / seconds * 60
    print(f"{args.runs} runs waiting for one GPU each, every GPU busy; window {seconds:g} s, "
          f"{alive}/{args.runs} wrappers alive at its end.\n")
    print("| waiting runs | host CPU (% of one core) | nvidia-smi calls / min | samples / min | goal | verdict |")
    print("|---|---|---|---|---|---|")
    met = cpu_pct < 1.0 and per_min / 2 <= 12.5
    print(f"| {args.runs} | {cpu_pct:.2f} % | {per_min:.1f} | {per_min / 2:.1f} | "
          f"< 1 % of a core; ≤ 12 samples / min | {'met' if met else '**not met**'} |")


if __name__ == "__main__":
    main()
