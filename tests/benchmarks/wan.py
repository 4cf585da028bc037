"""Benchmark: rtrain-tui's transfers and whole commands on the links users have (issue 20).

    python -m tests.benchmarks.wan [--repeat 3] [--repeat-loopback 5] [--delay-ms 10]
                                   [--rows a,b,...] [--smoke]

Starts the test sshd pair (tests/sshd.py) and a throttling proxy in a child process
(tests/throttle_proxy.py) in front of the `gpu` host, and times rtrain-tui against the
tool a user would reach for, in the same run, every tool through the same link:
  * 256 MiB of realistic JSONL (chat records of Zipf-distributed words, generated from a
    seed; its zstd -3 ratio is printed) at 100 Mbit/s, vs `scp` and vs `rsync -z`;
  * 64 MiB of it at 20 Mbit/s vs `scp`;
  * the 256 MiB file with 1% of its bytes rewritten (ten spread-out runs of records)
    uploaded again, the host holding the original, vs `rsync -z` (its delta);
  * 1 GiB of random bytes, unthrottled (loopback, no proxy), vs `scp`;
  * a fetch of a run directory (200 MB of random "weights" + 2000 small JSON files) at
    100 Mbit/s vs `rsync -z -r`;
  * the whole `rtrain-tui start -d` of a 512 MiB file (random bytes), loopback, as a
    user runs it (a new process: imports, connect, preflight, upload, launch), vs `scp`;
  * the whole `rtrain-tui fetch` of a directory (100 MiB + 1000 small files), loopback,
    vs `ssh HOST tar c … | tar x`.
Throttled links have a one-way delay of --delay-ms each way (default 10 ms: a 20 ms round
trip, a nearby cloud region). Every tool runs as its own process (rtrain-tui's transfer
rows through a small client that calls the transfer functions; the whole-command rows
through the CLI), from a clean state (the previous run's files removed and written back),
the tools taking turns; medians of --repeat (of --repeat-loopback for the unthrottled
rows: seconds long, CPU-bound, and the noisiest on a shared machine). Each row also says the bytes on the wire
(counted by the proxy, both ways), the client's CPU (user + system, with its `ssh`
children) and its peak resident memory (the largest process of its tree). rtrain-tui's
bytecode is compiled first, as a pip install does.
Ratio = rtrain-tui ÷ the other: below 1.0 is faster. `--smoke` uses tiny sizes (for CI:
it proves the harness runs, not the speed).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

from tests.benchmarks.transfer import write_random
from tests.sshd import SshHosts, start_hosts
from tests.throttle_proxy import ProxyProcess, proxied_alias, spawn_proxy

ROOT = Path(__file__).parent.parent.parent
WAN = "wan"  # the ssh alias of the gpu host through the proxy
MIB = 1 << 20


# --- the data --------------------------------------------------------------------------

class Chat:
    """Chat records (JSONL lines) of seeded, Zipf-distributed pseudo-words.

    Real fine-tuning data is text with repeated keys; a word list with Zipf-like
    frequencies gives the same kind of redundancy (zstd -3 shrinks it about 3.6×, real
    chat JSONL 3-5×) without shipping a corpus, and is the same bytes every run.
    """

    SYSTEMS = ("You are a helpful assistant.", "You are a concise tutor. Answer briefly.",
               "You answer questions about cooking.", "You are a careful code reviewer.")

    def __init__(self, seed: int = 20) -> None:
        self.rng = random.Random(seed)
        syllables = [c + v for c in "bcdfghjklmnprstvwz"
                     for v in ("a", "e", "i", "o", "u", "ai", "ou", "ea")]
        words: set[str] = set()
        while len(words) < 12000:
            n = self.rng.choices((1, 2, 3, 4), (3, 5, 3, 1))[0]
            words.add("".join(self.rng.choice(syllables) for _ in range(n))
                      + self.rng.choice(("", "", "", "s", "ed", "ing", "er")))
        self.words = sorted(words)
        self.rng.shuffle(self.words)
        self.cum = list(accumulate(1 / (rank + 2.7) ** 1.07 for rank in range(len(self.words))))

    def line(self, i: int) -> str:
        rng = self.rng
        messages = [{"role": "system", "content": rng.choice(self.SYSTEMS)}]
        for _ in range(rng.randint(1, 3)):
            for role, mu in (("user", 3.3), ("assistant", 4.2)):
                n = max(1, int(rng.lognormvariate(mu, 0.7)))
                text = " ".join(rng.choices(self.words, cum_weights=self.cum, k=n))
                messages.append({"role": role, "content": text.capitalize() + rng.choice("?..!")})
        return json.dumps({"id": f"conv-{i:08d}", "messages": messages}) + "\n"

    def lines(self, size: int) -> Iterator[str]:
        """Lines until `size` bytes (the last one whole)."""
        written = i = 0
        while written < size:
            line = self.line(i)
            written += len(line)
            i += 1
            yield line


def write_jsonl(path: Path, size: int) -> None:
    with path.open("w") as f:
        f.writelines(Chat().lines(size))


def write_edited(original: Path, edited: Path, fraction: float = 0.01, regions: int = 10) -> int:
    """`original` with `fraction` of its bytes rewritten in `regions` spread-out runs of
    records (new text, new lengths: every later byte shifts); returns the bytes rewritten."""
    size = original.stat().st_size
    per_region = size * fraction / regions
    starts = [int(size * (k + 0.5) / regions) for k in range(regions)]
    other = Chat(seed=21)
    edited.parent.mkdir(parents=True, exist_ok=True)
    rewritten = offset = 0
    region = -1  # the region being rewritten, or -1
    region_bytes = 0.0
    with original.open() as src, edited.open("w") as out:
        for i, line in enumerate(src):
            if region < 0 and starts and offset >= starts[0]:
                starts.pop(0)
                region, region_bytes = 1, 0.0
            if region > 0:
                new = other.line(i)
                out.write(new)
                region_bytes += len(line)
                rewritten += len(line)
                if region_bytes >= per_region:
                    region = -1
            else:
                out.write(line)
            offset += len(line)
    return rewritten


def write_run_dir(out: Path, big: int, small: int) -> None:
    """A run's output: one big incompressible file (weights) and many small JSON files."""
    (out / "small").mkdir(parents=True)
    write_random(out / "model.safetensors", big)
    chat = Chat(seed=22)
    for i in range(small):
        state = {"global_step": i * 10, "epoch": i / small, "log_history": [
            {"loss": round(2.5 - i / small, 4), "learning_rate": 2e-5, "step": i * 10}],
            "note": chat.line(i)[: 150 + (i * 37) % 2800]}
        (out / "small" / f"f{i:05d}.json").write_text(json.dumps(state, indent=2))


def zstd_ratio(path: Path) -> float | None:
    """What `zstd -3` (rsync -z's level) makes of the file: size ÷ compressed size."""
    if shutil.which("zstd") is None:
        return None
    p = subprocess.run(["zstd", "-3", "-c", str(path)], stdout=subprocess.PIPE, check=True)
    return path.stat().st_size / len(p.stdout)


# --- measuring -------------------------------------------------------------------------

def _gnu_time() -> str | None:
    """GNU time's path, where installed (Debian's `time` package), else None."""
    path = shutil.which("time", path="/usr/bin:/bin")
    if path is None:
        return None
    p = subprocess.run([path, "--version"], capture_output=True, text=True)
    return path if "GNU" in p.stdout + p.stderr else None


GNU_TIME = _gnu_time()


@dataclass
class Sample:
    seconds: float
    cpu: float  # client CPU seconds: user + system, the process and its waited children
    rss_mib: float  # peak resident memory of the largest process in its tree
    wire: int | None  # bytes through the proxy, both ways; None when not proxied


@dataclass
class Tool:
    name: str  # as the table shows it
    command: list[str] | str  # argv, or a shell pipeline
    before: Callable[[], None] = lambda: None  # a clean state for this tool
    samples: list[Sample] = field(default_factory=list)

    def median(self, what: str) -> float:
        return statistics.median(getattr(s, what) for s in self.samples)

    def wire(self) -> int | None:
        w = [s.wire for s in self.samples if s.wire is not None]
        return int(statistics.median(w)) if w else None


def run_once(tool: Tool, env: dict[str, str], proxy: ProxyProcess | None, scratch: Path) -> Sample:
    """One timed run of the tool, as its own process, from a clean, written-back state."""
    tool.before()
    os.sync()
    if proxy is not None:
        proxy.reset()
    err, timed = scratch / "stderr", scratch / "time"
    argv = ["sh", "-c", tool.command] if isinstance(tool.command, str) else tool.command
    if GNU_TIME:
        # A process forked from this one starts with this one's peak RSS as its own (Linux
        # carries the old memory's high-water mark across exec): `time` is small, so what
        # it reports of its child is the tool's own.
        argv = [GNU_TIME, "-f", "%U %S %M", "-o", str(timed), *argv]
    with err.open("wb") as stderr:
        began = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
        took = time.perf_counter() - began
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{tool.name} failed ({p.returncode}): {tool.command}\n"
                           f"{err.read_text()[-2000:]}")
    wire = sum(proxy.counts()) if proxy is not None else None
    if GNU_TIME:
        user, system, rss_kib = timed.read_text().split()[-3:]
        return Sample(took, float(user) + float(system), int(rss_kib) / 1024, wire)
    return Sample(took, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, wire)


@dataclass
class Row:
    label: str
    link: str
    rate_mbit: float | None  # None: loopback, no proxy
    ours: Tool
    others: list[tuple[Tool, str, float]]  # (tool, what the goal is against, the goal ratio)
    wire_goal: float | None = None  # the most of `wire_of` bytes rtrain-tui may send
    wire_of: int = 0


def measure(row: Row, repeat: int, delay_ms: float, env: dict[str, str],
            proxy: ProxyProcess, scratch: Path) -> None:
    """The tools take turns, so a slow minute of this shared machine falls on all of them."""
    on_proxy = row.rate_mbit is not None
    if on_proxy:
        proxy.set_link(row.rate_mbit, delay_ms)
    tools = [row.ours, *(t for t, _, _ in row.others)]
    for _ in range(repeat):
        for tool in tools:
            tool.samples.append(run_once(tool, env, proxy if on_proxy else None, scratch))


def _mb(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e6:.1f} MB"


def print_row(row: Row) -> list[bool]:
    """The row's lines in the table (one per tool it is compared with); the verdicts."""
    verdicts = []
    ours = row.ours
    for tool, _, goal in row.others:
        ratio = ours.median("seconds") / tool.median("seconds")
        met = ratio <= goal
        goal_text = f"≤ {goal:.2f}×"
        wire_ours = ours.wire()
        if row.wire_goal is not None and wire_ours is not None:
            share = wire_ours / row.wire_of
            goal_text += f", ≤ {row.wire_goal:.0%} on the wire ({share:.1%})"
            met = met and share <= row.wire_goal
        verdicts.append(met)
        print(f"| {row.label} | {row.link} | {ours.median('seconds'):.2f} s "
              f"| {tool.median('seconds'):.2f} s | {tool.name} | {ratio:.2f}× | {goal_text} "
              f"| {'met' if met else '**not met**'} "
              f"| {_mb(wire_ours)} / {_mb(tool.wire())} "
              f"| {ours.median('cpu'):.2f} s / {tool.median('cpu'):.2f} s "
              f"| {max(s.rss_mib for s in ours.samples):.0f} / "
              f"{max(s.rss_mib for s in tool.samples):.0f} MiB |", flush=True)
    return verdicts


# --- rtrain-tui's side: a client process per transfer ------------------------------------

def client(argv: list[str]) -> None:
    """`client upload CONFIG ALIAS FILE RUN_DIR` / `client fetch CONFIG ALIAS RUN_DIR REL OUT`:
    one transfer over a new connection, as a command would make it."""
    from rtrain_tui.core.transfers import transfer
    from rtrain_tui.core.transport.connection import HostConnection

    kind, config, alias, *rest = argv

    async def go() -> None:
        conn = HostConnection(alias, Path(config))
        try:
            if kind == "upload":
                await transfer.ship_dataset(conn, None, Path(rest[0]), rest[1])
            else:
                await transfer.fetch(conn, rest[0], rest[1], Path(rest[2]))
        finally:
            await conn.close()

    asyncio.run(go())


def ours_command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "tests.benchmarks.wan", "client", *map(str, args)]


def kill_runs(workdir: Path) -> None:
    """End the stand-in trainers that `start` rows launched: by the process group each
    one's wrapper recorded, only ours (as tests/conftest.py's workdir fixture does)."""
    for pid_file in workdir.glob("*/train.pid"):
        try:
            group = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
        if group > 1:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# --- the run -----------------------------------------------------------------------------

@dataclass
class Sizes:
    jsonl: int = 256 * MIB
    jsonl_slow: int = 64 * MIB
    random: int = 1024 * MIB
    fetch_big: int = 200 * 10**6
    fetch_small: int = 2000
    start: int = 512 * MIB
    cmd_fetch_big: int = 100 * MIB
    cmd_fetch_small: int = 1000


SMOKE = Sizes(2 * MIB, 1 * MIB, 4 * MIB, 2 * 10**6, 20, 4 * MIB, 2 * MIB, 20)
ROWS = ("jsonl", "slow", "edit", "random", "fetch", "start", "cmdfetch")


def main() -> None:
    if sys.argv[1:2] == ["client"]:
        client(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3, help="runs of each throttled row")
    parser.add_argument("--repeat-loopback", type=int, default=5,
                        help="runs of each unthrottled row (default: %(default)s; --smoke: --repeat)")
    parser.add_argument("--delay-ms", type=float, default=10.0,
                        help="one-way delay of the throttled links (default: %(default)s)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"which rows, comma-separated (default: all: {','.join(ROWS)})")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    rows = args.rows.split(",")
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    sizes = SMOKE if args.smoke else Sizes()
    # A pip-installed rtrain-tui has its bytecode compiled at install. A checkout may not
    # (an editable install, PYTHONDONTWRITEBYTECODE set, as on this machine), and then
    # every new process compiles the sources it imports first: 0.1-0.3 s of CPU a command
    # here, which no user pays.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "rtrain_tui", "tests"], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    root = Path(tempfile.mkdtemp(prefix="rtrain-bench-wan-"))
    hosts = start_hosts(root / "sshd")
    proxy = spawn_proxy(hosts.ports["gpu"])
    try:
        run(hosts, proxy, root, sizes, rows, args)
    finally:
        proxy.stop()
        hosts.stop()
        shutil.rmtree(root, ignore_errors=True)


def run(hosts: SshHosts, proxy: ProxyProcess, root: Path, sizes: Sizes, wanted: list[str],
        args: argparse.Namespace) -> None:
    began = time.monotonic()
    env = hosts.env()
    base = str(hosts.ssh_config)
    cfg = root / "ssh_config"  # the test hosts plus `wan`, the gpu host through the proxy
    cfg.write_text(hosts.ssh_config.read_text() + proxied_alias(WAN, proxy, hosts.home))
    for alias, config in (("gpu", base), (WAN, str(cfg))):
        # Record the host keys first: rtrain-tui's system-ssh path insists they are on record.
        subprocess.run(["ssh", "-F", config, "-o", "StrictHostKeyChecking=accept-new", alias, "true"],
                       env=env, check=True, capture_output=True, timeout=30)
    work = root / "work"  # the "host" side (same machine)
    work.mkdir()
    local = root / "local"
    scratch = root / "scratch"
    scratch.mkdir()
    data = root / "data"
    data.mkdir()

    def fresh_local() -> None:
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir()

    def clear_uploads() -> None:
        kill_runs(work / "start")
        for name in (".datasets", "run", "seed", "start"):
            shutil.rmtree(work / name, ignore_errors=True)
        for target in work.glob("target*"):
            target.unlink()
        for name in ("run", "seed"):  # run directories, as `start` makes them before it ships
            (work / name).mkdir()
        (root / "runs.toml").unlink(missing_ok=True)

    rsync_e = f"-e {shlex.quote(f'ssh -F {cfg}')}"
    scp = f"scp -q -F {cfg}"
    jsonl = data / "train.jsonl"
    setup: list[str] = []
    made = time.monotonic()
    if {"jsonl", "edit"} & set(wanted):
        write_jsonl(jsonl, sizes.jsonl)
        ratio = zstd_ratio(jsonl)
        setup.append(f"JSONL: {jsonl.stat().st_size / MIB:.0f} MiB, zstd -3 ratio "
                     f"{ratio:.2f}×" if ratio else "zstd not installed")
    rows: list[Row] = []
    if "jsonl" in wanted:
        mib = sizes.jsonl // MIB
        rows.append(Row(
            f"{mib} MiB JSONL upload", f"100 Mbit/s, {2 * args.delay_ms:.0f} ms RTT", 100,
            Tool("rtrain-tui", ours_command("upload", cfg, WAN, jsonl, work / "run"), clear_uploads),
            [(Tool("`scp`", f"{scp} {jsonl} {WAN}:{work}/target", clear_uploads), "scp", 0.30),
             (Tool("`rsync -z`", f"rsync -z {rsync_e} {jsonl} {WAN}:{work}/target", clear_uploads),
              "rsync", 1.0)]))
    if "slow" in wanted:
        slow = data / "slow" / "train.jsonl"
        slow.parent.mkdir()
        write_jsonl(slow, sizes.jsonl_slow)
        rows.append(Row(
            f"{sizes.jsonl_slow // MIB} MiB JSONL upload", f"20 Mbit/s, {2 * args.delay_ms:.0f} ms RTT",
            20, Tool("rtrain-tui", ours_command("upload", cfg, WAN, slow, work / "run"), clear_uploads),
            [(Tool("`scp`", f"{scp} {slow} {WAN}:{work}/target", clear_uploads), "scp", 0.30)]))
    if "edit" in wanted:
        edited = data / "edited" / "train.jsonl"  # the same name: the user's fixed file
        rewritten = write_edited(jsonl, edited)
        setup.append(f"1% edit: {rewritten:,} bytes of records "
                     f"({rewritten / jsonl.stat().st_size:.1%}) rewritten in 10 places.")

        seeded = root / "seeded"  # the host's store after the original's upload, kept

        def host_has_original_ours() -> None:
            clear_uploads()
            # The original, uploaded by rtrain-tui itself (untimed) over the same link as
            # the edit: whatever it keeps on the host for a later delta (its store, its
            # chunks) is there. (Over loopback it keeps no chunks: delta.Cut.) Uploaded
            # once; later runs get its store back as hard links.
            from rtrain_tui.core.transfers.delta import CHUNKS_DIR

            kept = (".datasets", CHUNKS_DIR)
            if not seeded.exists():
                subprocess.run(ours_command("upload", cfg, WAN, jsonl, work / "seed"),
                               env=env, check=True, capture_output=True, cwd=ROOT)
                for name in kept:
                    shutil.copytree(work / name, seeded / name, copy_function=os.link)
                return
            for name in kept:
                shutil.rmtree(work / name, ignore_errors=True)
                shutil.copytree(seeded / name, work / name, copy_function=os.link)

        def host_has_original_rsync() -> None:
            clear_uploads()
            shutil.copyfile(jsonl, work / "target")

        rows.append(Row(
            f"{sizes.jsonl // MIB} MiB JSONL, 1% edited, uploaded again",
            f"100 Mbit/s, {2 * args.delay_ms:.0f} ms RTT", 100,
            Tool("rtrain-tui", ours_command("upload", cfg, WAN, edited, work / "run"),
                 host_has_original_ours),
            [(Tool("`rsync -z`", f"rsync -z {rsync_e} {edited} {WAN}:{work}/target",
                   host_has_original_rsync), "rsync", 2.5)],
            wire_goal=0.03, wire_of=edited.stat().st_size))
    if "random" in wanted:
        rand = data / "random.bin"
        write_random(rand, sizes.random)
        rows.append(Row(
            f"{sizes.random // MIB} MiB random upload", "loopback, unthrottled", None,
            Tool("rtrain-tui", ours_command("upload", base, "gpu", rand, work / "run"), clear_uploads),
            [(Tool("`scp`", f"scp -q -F {base} {rand} gpu:{work}/target", clear_uploads), "scp", 1.10)]))
    if "fetch" in wanted:
        src_run = work / "fetchrun"
        write_run_dir(src_run / "out", sizes.fetch_big, sizes.fetch_small)
        rows.append(Row(
            f"fetch run dir: {sizes.fetch_big / 1e6:.0f} MB weights + {sizes.fetch_small} small JSON",
            f"100 Mbit/s, {2 * args.delay_ms:.0f} ms RTT", 100,
            Tool("rtrain-tui", ours_command("fetch", cfg, WAN, src_run, "out", local), fresh_local),
            [(Tool("`rsync -z -r`", f"rsync -z -r {rsync_e} {WAN}:{src_run}/out {local}/", fresh_local),
              "rsync", 1.0)]))
    if "start" in wanted:
        big = data / "start" / "train.jsonl"
        big.parent.mkdir()
        write_random(big, sizes.start)
        config = data / "config.yaml"
        config.write_text("model: tiny\nsteps: 1\n")
        index = root / "runs.toml"
        rows.append(Row(
            f"whole `start -d` of {sizes.start // MIB} MiB (random), new process",
            "loopback, unthrottled", None,
            Tool("rtrain-tui", [sys.executable, "-m", "rtrain_tui", "--ssh-config", base,
                                "--index", str(index), "start", "gpu", "-c", str(config),
                                "-d", str(big), "--workdir", str(work / "start"), "--no-follow"],
                 clear_uploads),
            [(Tool("`scp`", f"scp -q -F {base} {big} gpu:{work}/target", clear_uploads),
              "scp", 1.15)]))
    if "cmdfetch" in wanted:
        cmd_run = work / "cmdfetch"
        write_run_dir(cmd_run / "out", sizes.cmd_fetch_big, sizes.cmd_fetch_small)
        rows.append(Row(
            f"whole `fetch` of {sizes.cmd_fetch_big // MIB} MiB + {sizes.cmd_fetch_small} small, "
            "new process", "loopback, unthrottled", None,
            Tool("rtrain-tui", [sys.executable, "-m", "rtrain_tui", "--ssh-config", base,
                                "--index", str(root / "runs.toml"), "fetch", "gpu", "cmdfetch",
                                "out", "--out", str(local), "--workdir", str(work)], fresh_local),
            [(Tool("`ssh tar c \\| tar x`",
                   f"ssh -F {base} gpu tar cf - -C {cmd_run} out | tar xf - -C {local}",
                   fresh_local), "tar", 1.0)]))
    setup.append(f"Test data written in {time.monotonic() - made:.0f} s.")

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "?"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    loopback_repeat = args.repeat if args.smoke else args.repeat_loopback
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC · commit {commit} "
          f"· load {load} · {os.cpu_count()} CPUs · medians of {args.repeat} "
          f"(unthrottled rows: {loopback_repeat})"
          f"{' · SMOKE sizes' if args.smoke else ''}", flush=True)
    for line in setup:
        print(line)
    if not GNU_TIME:
        print("(no GNU time: each tool's peak RSS includes this benchmark's own, ~30 MiB)")
    print()
    print("| row | link | rtrain-tui | other | other tool | ratio | goal | verdict "
          "| wire: rtrain-tui / other | client CPU: rtrain-tui / other | peak RSS: rtrain-tui / other |")
    print("|---|---|---:|---:|---|---:|---|---|---:|---:|---:|")
    verdicts: list[bool] = []
    for row in rows:
        measure(row, args.repeat if row.rate_mbit else loopback_repeat, args.delay_ms, env,
                proxy, scratch)
        verdicts += print_row(row)
    clear_uploads()
    print(f"\n{sum(verdicts)} of {len(verdicts)} goals met. Whole benchmark: "
          f"{time.monotonic() - began:.0f} s; load after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.")


if __name__ == "__main__":
    main()
