"""Benchmark: rtrain-tui's transfers against scp and `ssh … tar`, in one run.

    python -m tests.benchmarks.transfer [--repeat 3] [--upload-mib 1024] [--big-mb 200]
                                        [--small 2000] [--smoke]

Starts the test sshd pair (tests/sshd.py) and times, side by side, each on a fresh
connection (the SSH handshake counts for both sides):
  * shipping a new dataset (`ship_dataset`: sent, hashed on both ends in the same pass,
    verified, published in the host's store) vs `scp` of the file;
  * fetching a directory of one big file + many small ones vs `scp -r` and vs
    `ssh HOST tar c … | tar x`; the small files alone; the big file alone vs `scp`;
  * re-fetching the directory when everything is already here, unchanged.
Prints a Markdown table (medians of --repeat runs, the two tools taking turns, each
from a clean start with nothing left to write back); ratio = rtrain-tui ÷ the other,
so below 1.0 is faster. `--smoke` uses small sizes (for CI: it proves the harness runs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rtrain_tui.core.transfers import transfer
from rtrain_tui.core.transport.connection import HostConnection
from tests.sshd import SshHosts, start_hosts


def median_time(fn: Callable[[], None], repeat: int, before: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(repeat):
        if before:
            before()
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def side_by_side(mine: Callable[[], None], theirs: Callable[[], None], repeat: int,
                 before: Callable[[], None]) -> tuple[float, float]:
    """Medians of both, taken in turns, each from a clean start.

    Turns, so a slow minute of this shared machine falls on both; before each, the
    previous run's files are removed and written back (sync): otherwise the kernel's
    writeback of one tool's gigabyte throttles the next tool's writes.
    """
    a, b = [], []
    for _ in range(repeat):
        for fn, times in ((mine, a), (theirs, b)):
            before()
            os.sync()
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
    return statistics.median(a), statistics.median(b)


def write_random(path: Path, size: int) -> None:
    with path.open("wb") as f:
        while size:
            n = min(size, 1 << 24)
            f.write(os.urandom(n))
            size -= n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--upload-mib", type=int, default=1024)
    parser.add_argument("--big-mb", type=int, default=200)
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true", help="small sizes, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.upload_mib, args.big_mb, args.small = 8, 8, 50
    root = Path(tempfile.mkdtemp(prefix="rtrain-bench-transfer-"))
    hosts = start_hosts(root / "sshd")
    try:
        run(hosts, root, args)
    finally:
        hosts.stop()
        shutil.rmtree(root, ignore_errors=True)


def run(hosts: SshHosts, root: Path, args: argparse.Namespace) -> None:
    env = hosts.env()
    os.environ["HOME"] = env["HOME"]  # the test client's ~/.ssh
    cfg = str(hosts.ssh_config)
    work = root / "work"  # the "host" side (same machine)
    run_dir = work / "run"
    src = run_dir / "out"
    (src / "small").mkdir(parents=True)
    write_random(src / "model.safetensors", args.big_mb * 10**6)
    for i in range(args.small):
        (src / "small" / f"f{i:05d}.json").write_bytes(os.urandom(200 + (i * 37) % 3000))
    dataset = root / "dataset.jsonl"
    write_random(dataset, args.upload_mib << 20)
    local = root / "local"

    def fresh_local() -> None:
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir()

    def shell(cmd: str) -> None:
        subprocess.run(cmd, shell=True, check=True, env=env, capture_output=True)

    worst_turn = [0.0]  # the longest the event loop went without a turn, over every run
    stalls: dict[str, float] = {}  # the same, by row
    row = ["first connection"]

    async def watch_loop() -> None:
        """What a TUI would feel: how late a 10 ms timer fires while a transfer runs."""
        while True:
            began = time.perf_counter()
            await asyncio.sleep(0.01)
            late = time.perf_counter() - began - 0.01
            worst_turn[0] = max(worst_turn[0], late)
            stalls[row[0]] = max(stalls.get(row[0], 0.0), late)

    def ours(coro_fn: Callable[[HostConnection], object]) -> Callable[[], None]:
        def go() -> None:
            async def inner() -> None:
                conn = HostConnection("gpu", hosts.ssh_config)
                watcher = asyncio.ensure_future(watch_loop())
                try:
                    await coro_fn(conn)  # type: ignore[misc]
                finally:
                    watcher.cancel()
                    await conn.close()
            asyncio.run(inner())
        return go

    def fetch(rel: str) -> Callable[[], None]:
        return ours(lambda conn: transfer.fetch(conn, str(run_dir), rel, local))

    def ship(conn: HostConnection):  # type: ignore[no-untyped-def]
        shutil.rmtree(work / ".datasets", ignore_errors=True)  # a first-time upload each time
        (run_dir / dataset.name).unlink(missing_ok=True)
        return transfer.ship_dataset(conn, None, dataset, str(run_dir))

    def clear_upload() -> None:
        shutil.rmtree(work / ".datasets", ignore_errors=True)
        (run_dir / dataset.name).unlink(missing_ok=True)
        (work / "scp_target").unlink(missing_ok=True)

    # Record the host key first: a connection that recorded it itself (accept-new) fails
    # its rekey after 1 GiB (connection.py's validate_host_public_key refuses the key it
    # just wrote), which is a bug of its own, not a transfer cost.
    ours(lambda conn: conn.connect())()
    scp = f"scp -q -F {cfg}"
    rows = [
        (f"upload a {args.upload_mib} MiB dataset, verified", "`scp`", ours(ship),
         lambda: shell(f"{scp} {dataset} gpu:{work}/scp_target"), clear_upload),
        (f"fetch dir: 1 × {args.big_mb} MB + {args.small} small files", "`scp -r`", fetch("out"),
         lambda: shell(f"{scp} -r gpu:{src} {local}/"), fresh_local),
        (f"fetch dir: 1 × {args.big_mb} MB + {args.small} small files", "`ssh tar c \\| tar x`",
         fetch("out"),
         lambda: shell(f"ssh -F {cfg} gpu tar cf - -C {run_dir} out | tar xf - -C {local}"),
         fresh_local),
        (f"the {args.small} small files alone", "`scp -r`", fetch("out/small"),
         lambda: shell(f"{scp} -r gpu:{src / 'small'} {local}/"), fresh_local),
        (f"the {args.big_mb} MB file alone", "`scp`", fetch("out/model.safetensors"),
         lambda: shell(f"{scp} gpu:{src / 'model.safetensors'} {local}/"), fresh_local),
    ]
    print("| operation | rtrain-tui | other | other tool | ratio |")
    print("|---|---:|---:|---|---:|")
    for label, tool, mine, theirs, before in rows:
        row[0] = f"{label} (vs {tool.strip('`').replace(chr(92), '')})"
        a, b = side_by_side(mine, theirs, args.repeat, before)
        print(f"| {label} | {a:.2f} s | {b:.2f} s | {tool} | {a / b:.2f}× |", flush=True)
    fresh_local()
    row[0] = "re-fetch"
    fetch("out")()
    again = median_time(fetch("out"), args.repeat)
    b = median_time(lambda: shell(f"{scp} -r gpu:{src} {local}/"), args.repeat)
    print(f"| re-fetch the same dir, all here and unchanged (new connection) | {again:.2f} s "
          f"| {b:.2f} s | `scp -r` (sends it all again) | {again / b:.2f}× |", flush=True)
    warm = warm_refetch(hosts, str(run_dir), local, args.repeat)
    print(f"| re-fetch the same dir, warm connection (the app's case) | {warm:.2f} s "
          f"| {b:.2f} s | `scp -r` (sends it all again) | {warm / b:.2f}× |", flush=True)
    floor = median_time(lambda: create_empty_files(local / "floor", args.small), args.repeat,
                        before=lambda: (fresh_local(), os.sync()))
    print(f"\nCreating the {args.small} small files alone, empty, in a fresh local directory "
          f"(what both tools must do, nothing sent): {floor:.2f} s.", flush=True)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(f"Client during all of the above: peak RSS {peak_mib:.0f} MiB (target ≤ 100 MiB); "
          f"longest event-loop stall {worst_turn[0] * 1000:.0f} ms (target ≤ 50 ms).")
    print("Longest stall by row: " + "; ".join(
        f"{label} {late * 1000:.0f} ms" for label, late in stalls.items()) + ".")


def create_empty_files(directory: Path, n: int) -> None:
    """The kernel's share of a fetch of n small files: on this VM it swings 0.05-1 ms each."""
    directory.mkdir()
    for i in range(n):
        os.close(os.open(directory / f"f{i:05d}.json", os.O_WRONLY | os.O_CREAT, 0o644))


def warm_refetch(hosts: SshHosts, run_dir: str, local: Path, repeat: int) -> float:
    """The median re-fetch of `out` over one connection that is already up (the app's)."""
    async def inner() -> float:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            await transfer.fetch(conn, run_dir, "out", local)  # connect, warm both ends
            times = []
            for _ in range(max(repeat, 3)):
                began = time.perf_counter()
                await transfer.fetch(conn, run_dir, "out", local)
                times.append(time.perf_counter() - began)
            return statistics.median(times)
        finally:
            await conn.close()
    return asyncio.run(inner())


if __name__ == "__main__":
    main()
