"""Benchmark: what GPU sampling adds to the per-host probe (target: +5 ms or less).

    python -m tests.benchmarks.probe [--runs 10] [--repeat 120]

Starts the test sshd pair (tests/sshd.py), makes RUNS finished runs on the `gpu` host,
then times, over one warm connection (the app's steady state), interleaved so that
load on the machine hits both alike:
  * today's probe: `run_states` for the host's runs;
  * the same probe with the GPU report (`run_states(..., gpus=True)`: the last
    background sample, and the next one started), with the GPUs idle and with 4 compute
    processes listed (two of them ours, carrying a run marker);
  * the probe with the refresh's workdir listing in front (the app's discovery of runs
    started elsewhere; nothing new there, the steady state);
  * for comparison, the probe with a sample taken in the script itself (what `start`
    does before choosing GPUs: it waits for nvidia-smi).
The stand-in nvidia-smi is a shell script that answers with builtins only, so the
difference is rtrain-tui's own cost (pipeline, awk, /proc reads, grep). A real
nvidia-smi adds its own time on top (typically 10-50 ms per call with persistence mode
on; more without); that is the driver's, not measured here.
Prints a Markdown table: medians and 90th percentiles in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rtrain_tui.core import ConnectionPool, Engine, RunIndex
from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.metrics.gpus import parse_gpu_sample
from tests.sshd import start_hosts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=120)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rtrain-probe-bench-"))
    hosts = start_hosts(root / "sshd")
    os.environ["HOME"] = hosts.env()["HOME"]  # the test client's ~/.ssh
    procs: list[subprocess.Popen[bytes]] = []
    try:
        workdir = root / "work"
        runs = []
        for i in range(args.runs):
            (workdir / f"r{i}").mkdir(parents=True)
            (workdir / f"r{i}" / "status").write_text("0\n")
            runs.append((str(workdir), f"r{i}"))
        marked = {**os.environ, "RTRAIN_RUN": "0123456789abcdef"}
        procs = [subprocess.Popen(["sleep", "600"], env=marked if i < 2 else None) for i in range(4)]
        busy_apps = "".join(f"GPU-fake-{i % 2}, {p.pid}, 1000\n" for i, p in enumerate(procs))
        asyncio.run(bench(hosts, root, runs, args.repeat, busy_apps))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        hosts.stop()


async def bench(hosts, root: Path, runs, repeat: int, busy_apps: str) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(root / "runs.toml"))
    conn = engine.host("gpu")
    plain = direct_sh.run_states(runs)
    with_gpus = direct_sh.run_states(runs, gpus=True)
    listing = engine.find_script("gpu", runs, remote_sh.FIND_LIMIT)[1]
    for _ in range(5):  # connect, warm the shell and the page cache
        await conn.run(with_gpus)

    async def once(script: str) -> float:
        began = time.perf_counter()
        await conn.run(script)
        return (time.perf_counter() - began) * 1000

    rows: dict[str, list[float]] = {}
    for label, apps in (("idle GPUs", ""), ("4 GPU processes, 2 ours", busy_apps)):
        hosts.apps_file.write_text(apps)
        deadline = time.monotonic() + 20
        while True:  # until the background sample has seen the new processes
            sample = parse_gpu_sample(await conn.run(with_gpus))
            if not sample.pending and len(sample.processes) == (4 if apps else 0):
                break
            assert time.monotonic() < deadline, sample
            await asyncio.sleep(0.2)
        today, sampled, now, listed = [], [], [], []
        for _ in range(repeat):  # interleaved: a load spike costs all columns alike
            today.append(await once(plain))
            sampled.append(await once(with_gpus))
            if not apps:
                listed.append(await once(listing + plain))
            now.append(await once(plain + direct_sh.gpu_sample()))
            await asyncio.sleep(0.05)  # let the background sampler finish, as between refreshes
        rows[f"today's probe ({len(runs)} runs)"] = rows.get(f"today's probe ({len(runs)} runs)", []) + today
        rows[f"probe + GPU report, {label}"] = sampled
        if listed:
            rows["probe + workdir listing (finding runs started elsewhere), nothing new"] = listed
        rows[f"probe + GPU sample taken in the probe (start's), {label}"] = now
    hosts.apps_file.unlink(missing_ok=True)
    await engine.close()

    def p90(xs: list[float]) -> float:
        return sorted(xs)[int(len(xs) * 0.9) - 1]

    base = statistics.median(rows[f"today's probe ({len(runs)} runs)"])
    print("| probe of one host (warm connection) | median | p90 | added |")
    print("|---|---:|---:|---:|")
    for label, xs in rows.items():
        med = statistics.median(xs)
        added = "—" if label.startswith("today") else f"+{med - base:.1f} ms"
        print(f"| {label} | {med:.1f} ms | {p90(xs):.1f} ms | {added} |", flush=True)


if __name__ == "__main__":
    main()
