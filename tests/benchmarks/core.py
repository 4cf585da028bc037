"""Benchmark: rtrain-tui's engine against the plain OpenSSH way, in one run.

    python -m tests.benchmarks.core [--runs 40] [--repeat 5]

Starts the test sshd pair (tests/sshd.py), creates RUNS runs over the two hosts with the
real engine, then times, side by side:
  * refreshing every run's state: `Engine.refresh` (one probe per host, all hosts at once)
    vs `ssh HOST '<probe>'` once per run, as `praisonai train remote status` does;
  * a cold preflight: `rtrain-tui preflight` as a fresh process vs the seed's three
    separate ssh calls (python, nvidia-smi, df);
  * starting a run whose dataset is already on the host (rtrain-tui links its verified
    copy) vs `scp` of config and dataset plus an `ssh nohup` launch.
Prints a Markdown table (medians of --repeat runs) for docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from tests.conftest import write_config
from tests.sshd import start_hosts


def ssh(config: Path, host: str, command: str) -> None:
    subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", host, command],
                   capture_output=True, check=True)


def median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rtrain-bench-"))
    hosts = start_hosts(root / "sshd")
    try:
        run(hosts, root, args.runs, args.repeat)
    finally:
        hosts.stop()


def run(hosts, root: Path, n_runs: int, repeat: int) -> None:  # type: ignore[no-untyped-def]
    workdir = str(root / "work")
    index = RunIndex(root / "runs.toml")
    config = write_config(root / "c.yaml", steps=1, step_seconds=0)
    env_home = hosts.env()

    async def create() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), index)
        for i in range(n_runs):
            host = "gpu" if i % 2 == 0 else "cpu"
            await engine.start(StartRequest(host, config, run_id=f"b{i}", workdir=workdir, gpus=0))
        await engine.close()

    import os
    os.environ["HOME"] = env_home["HOME"]  # the test client's ~/.ssh
    asyncio.run(create())
    records = index.load()

    def refresh_cold() -> None:
        async def go() -> None:
            engine = Engine(ConnectionPool(hosts.ssh_config), index)
            states = await engine.refresh(records)
            assert set(states.values()) == {"completed"}, states
            await engine.close()
        asyncio.run(go())

    loop = asyncio.new_event_loop()
    warm_engine = Engine(ConnectionPool(hosts.ssh_config), index)
    loop.run_until_complete(warm_engine.refresh(records))

    def refresh_warm() -> None:
        loop.run_until_complete(warm_engine.refresh(records))

    def refresh_ssh_per_run() -> None:
        for r in records:
            rd = f"{r.workdir}/{r.run_id}"
            ssh(hosts.ssh_config, r.host,
                f"cat {rd}/status 2>/dev/null || kill -0 $(cat {rd}/train.pid) 2>/dev/null; true")

    def preflight_cli() -> None:
        subprocess.run([sys.executable, "-m", "rtrain_tui", "--ssh-config", str(hosts.ssh_config),
                        "preflight", "gpu", "--workdir", workdir], capture_output=True, check=True,
                       env=env_home)

    def preflight_three_ssh() -> None:
        ssh(hosts.ssh_config, "gpu", "python3 -c 'import sys; print(sys.version)'")
        ssh(hosts.ssh_config, "gpu", "nvidia-smi --query-gpu=index,name,memory.used,memory.total,"
            "utilization.gpu --format=csv,noheader,nounits")
        ssh(hosts.ssh_config, "gpu", f"df -Pk {workdir}")

    dataset = root / "dataset.jsonl"
    with dataset.open("wb") as f:
        for i in range(1_000_000):
            f.write(b'{"text": "sample %07d for the benchmark, a line of training data"}\n' % i)
    counter = iter(range(10_000))

    def start_with_dataset() -> None:
        async def go() -> None:
            engine = Engine(ConnectionPool(hosts.ssh_config), index)
            await engine.start(StartRequest("gpu", config, dataset, run_id=f"d{next(counter)}",
                                            workdir=workdir, gpus=0))
            await engine.close()
        asyncio.run(go())

    def start_plain_scp() -> None:
        rd = f"{workdir}/p{next(counter)}"
        ssh(hosts.ssh_config, "gpu", f"mkdir -p {rd}")
        subprocess.run(["scp", "-q", "-F", str(hosts.ssh_config), str(config), str(dataset),
                        f"gpu:{rd}/"], check=True, capture_output=True)
        ssh(hosts.ssh_config, "gpu", f"cd {rd} && nohup python3 -m praisonai_train llm "
            f"dataset.jsonl --config c.yaml > train.log 2>&1 < /dev/null &")

    def start_first_time() -> None:
        shutil.rmtree(Path(workdir) / ".datasets", ignore_errors=True)  # the "host" is local
        start_with_dataset()

    start_with_dataset()  # the first start puts the dataset in the host's cache
    mib = dataset.stat().st_size / 2**20
    rows = [
        (f"start with a {mib:.0f} MiB dataset, first time", start_first_time, start_plain_scp),
        (f"start with a {mib:.0f} MiB dataset already on the host", start_with_dataset, start_plain_scp),
        (f"refresh {n_runs} run states (cold: new connections)", refresh_cold, refresh_ssh_per_run),
        (f"refresh {n_runs} run states (warm: app already connected)", refresh_warm, refresh_ssh_per_run),
        ("cold preflight (new process, new connection)", preflight_cli, preflight_three_ssh),
    ]
    print("| operation | rtrain-tui | plain ssh | speed-up |")
    print("|---|---:|---:|---:|")
    for label, ours, theirs in rows:
        a = median_time(ours, repeat)
        b = median_time(theirs, repeat)
        print(f"| {label} | {a * 1000:.0f} ms | {b * 1000:.0f} ms | {b / a:.1f}× |", flush=True)
    loop.run_until_complete(warm_engine.close())
    loop.close()


if __name__ == "__main__":
    main()
