"""Benchmark: the local index at a year of runs (issue 17's index goals), in one run.

    python -m tests.benchmarks.index [--runs 10000] [--repeat 5]

Builds an index of RUNS runs over 20 hosts, 100 of them live (the rest completed,
failed or stopped, one every ~50 minutes over the past year), starts the test sshd pair
(tests/sshd.py) and really starts one run on `gpu`, then times, each as a fresh process
(what a user's shell pays, imports included):
  * `rtrain-tui runs` and `rtrain-tui runs --json`;
  * `rtrain-tui status gpu RUN` of a live run and of one that ended (it still asks the
    host, over a new connection), beside plain `ssh gpu true` (OpenSSH's client, the
    same config: a new connection and one command), the floor a new process stands on;
  * one start's own index work, as `Engine.start` does it: check the index, record the
    run `starting`, record it `running` (a new process with a cold cache);
  * 20 processes doing that at once (20 concurrent starts): how many succeed, the slowest.
Medians of --repeat, wall time and (in brackets) CPU time. Prints a Markdown table with the goal beside each row; this machine
is shared and noisy, so it is a table to read, not a timed test.

With --refresh, instead, the refresh and discover rows (issue 17's "final is final"):
  * `rtrain-tui runs --refresh` of the RUNS-run index over 20 aliases (the 18 beyond
    `gpu` and `cpu` are more names for `gpu`'s sshd), whose LIVE newest runs have run
    directories naming a live `sleep` (train.pid/train.ident, found alive without a
    fork), beside the same refresh of an index of the live runs alone and `--refresh
    --all` (every run asked about; on a copy of the index);
  * `rtrain-tui runs --discover many` of a host (its own sshd and home) with --dirs run
    directories as `praisonai train remote` leaves them (on a copy of the index): time,
    and how many it found; then again, with every one of them known.
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rtrain_tui.core import RunIndex, RunRecord
from tests.conftest import write_config
from tests.sshd import start_hosts

HOSTS = ["gpu", "cpu"] + [f"h{i:02d}" for i in range(2, 20)]
LIVE = 100

# One start's index work, as Engine.start does it, in a process of its own.
START_WORK = """
import sys, time
began = time.perf_counter()
from dataclasses import replace
from pathlib import Path
from rtrain_tui.core.runs.index import RunIndex, RunRecord, utc_now
imported = time.perf_counter()
index = RunIndex(Path(sys.argv[1]))
index.check()
rec = RunRecord("h07", sys.argv[2], "~/.praisonai-train", state="starting",
                started_at=utc_now(), updated_at=utc_now(), token="ab" * 16, backend="direct")
index.add(rec)
index.add(replace(rec, state="running", updated_at=utc_now()))
print(f"{time.perf_counter() - imported:.6f}")
"""


def synthetic(n: int, hosts: Sequence[str] = HOSTS, live: int = LIVE) -> list[RunRecord]:
    """`n` runs over `hosts`, the last `live` of them running, one every ~50 minutes."""
    rng = random.Random(17)
    first = datetime.now(UTC) - timedelta(minutes=52 * n)
    records = []
    for i in range(n):
        began = first + timedelta(minutes=52 * i)
        is_live = i >= n - live
        state = "running" if is_live else rng.choice(["completed", "completed", "failed (exit 1)", "stopped"])
        when = began.isoformat(timespec="microseconds")
        records.append(RunRecord(
            host=hosts[i % len(hosts)], run_id=f"run-{i:05d}", workdir="~/.praisonai-train",
            state=state, started_at=when, updated_at=when,
            ended_at="" if is_live else (began + timedelta(hours=3)).isoformat(timespec="microseconds"),
            config="/home/me/configs/qwen-lora.yaml", dataset="/home/me/data/train.jsonl",
            token=f"{rng.getrandbits(128):032x}", gpu_ids="0", backend="direct"))
    return records


def timed_env(hosts, root: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The CLI's environment, timed as an installed program runs: with its bytecode
    cached (pip compiles it on install; PYTHONDONTWRITEBYTECODE, which the shell these
    ran in sets, timed the compiler too: ~0.1 s a process). The first run writes it."""
    env = hosts.env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    return env


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall time of `fn` (that runs new processes) and its children's median CPU
    time: on a shared machine the CPU time is the steadier of the two."""
    walls, cpus = [], []
    for _ in range(repeat):
        began, cpu = time.perf_counter(), child_cpu()
        fn()
        walls.append(time.perf_counter() - began)
        cpus.append(child_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def cold(fn, repeat: int) -> str:  # type: ignore[no-untyped-def]
    """`timed`, said: wall time and, in brackets, CPU time."""
    wall, cpu = timed(fn, repeat)
    return f"{wall:.2f} s ({cpu:.2f} s CPU)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--refresh", action="store_true",
                        help="the refresh and discover rows instead (see the docstring)")
    parser.add_argument("--dirs", type=int, default=5000, help="with --refresh: run dirs to discover")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rtrain-bench-index-"))
    hosts = start_hosts(root / "sshd")
    try:
        if args.refresh:
            refresh_rows(hosts, root, args.runs, args.dirs, args.repeat)
        else:
            run(hosts, root, args.runs, args.repeat)
    finally:
        hosts.stop()
        shutil.rmtree(root, ignore_errors=True)  # a 10,000-run index and two sshd homes


def _proc_ident(pid: int) -> str:
    """`train.ident` for a process: its start time and the boot id (see liveness.sh)."""
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return f"{rest[19]} {Path('/proc/sys/kernel/random/boot_id').read_text().strip()}"


def _seed_found(workdir: Path, n: int) -> None:
    """`n` run directories as `praisonai train remote` leaves them (ended, exit 0)."""
    for i in range(n):
        run_dir = workdir / f"theirs-{i:05d}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text("model: tiny\n")
        (run_dir / "train.pid").write_text("999999999\n")
        (run_dir / "train.log").write_text("{'loss': 1.0}\n")
        (run_dir / "status").write_text("0\n")


def refresh_rows(hosts, root: Path, n_runs: int, n_dirs: int, repeat: int) -> None:  # type: ignore[no-untyped-def]
    """`runs --refresh` and `runs --discover` at scale (see the module docstring)."""
    import getpass
    import shutil

    user = getpass.getuser()

    def stanza(name: str, port: int) -> str:
        return (f"Host {name}\n  HostName 127.0.0.1\n  User {user}\n"
                f"  IdentityFile {hosts.home / '.ssh' / 'id_test'}\n"
                f"  UserKnownHostsFile {hosts.home / '.ssh' / 'known_hosts'}\n  Port {port}\n")

    many = hosts.extra_host("many")
    config = root / "ssh_config"
    config.write_text(hosts.ssh_config.read_text() + many
                      + "".join(stanza(h, hosts.ports["gpu"]) for h in HOSTS[2:]))
    records = synthetic(n_runs)
    live = [r for r in records if r.state == "running"]
    sleepers = []
    try:
        for r in live:
            home = hosts.remote_homes["cpu" if r.host == "cpu" else "gpu"]
            run_dir = home / ".praisonai-train" / r.run_id
            run_dir.mkdir(parents=True)
            (run_dir / "train.log").write_text("{'loss': 1.0}\n")
            sleeper = subprocess.Popen(["sleep", "86400"], cwd=run_dir, start_new_session=True)
            sleepers.append(sleeper)
            (run_dir / "train.pid").write_text(f"{sleeper.pid}\n")
            (run_dir / "train.ident").write_text(_proc_ident(sleeper.pid) + "\n")
        _seed_found(hosts.root / "remote_home_many" / ".praisonai-train", n_dirs)
        indexes = {}
        for name, recs in (("all", records), ("live", live)):
            path = root / f"index-{name}" / "runs.toml"
            path.parent.mkdir()
            RunIndex(path).add_new(recs)
            indexes[name] = path
        env = timed_env(hosts, root)

        def cli(index: Path, *words: str) -> str:
            return subprocess.run(
                [sys.executable, "-m", "rtrain_tui", "--ssh-config", str(config), "--index",
                 str(index), *words], env=env, check=True, capture_output=True, text=True,
                timeout=600).stderr

        def on_copy(words: Sequence[str], found: list[int]) -> Callable[[], None]:
            def once() -> None:
                copy = root / f"copy-{len(found)}"
                shutil.copytree(indexes["all"].parent, copy)
                err = cli(copy / "runs.toml", *words)
                found.append(sum(int(n) for n in re.findall(r"many: found (\d+) run", err)))
                shutil.rmtree(copy)
            return once

        for path in indexes.values():
            cli(path, "runs", "--refresh")  # every host's key recorded, live runs running
        states = {r.state for r in RunIndex(indexes["live"]).load()}
        assert states == {"running"}, states
        found: list[int] = []
        rows = [
            (f"`runs --refresh` ({n_runs:,} runs, {len(live)} live, {len(HOSTS)} hosts)",
             cold(lambda: cli(indexes["all"], "runs", "--refresh"), repeat), "≤ 1.5 s"),
            (f"`runs --refresh` (an index of the {len(live)} live runs alone)",
             cold(lambda: cli(indexes["live"], "runs", "--refresh"), repeat), "—"),
            ("`runs --refresh --all` (every run asked about; a copy of the index)",
             cold(on_copy(["runs", "--refresh", "--all"], []), repeat), "—"),
            (f"`runs --discover many` ({n_dirs:,} run dirs; a copy of the index)",
             cold(on_copy(["runs", "--discover", "many"], found), repeat), "≤ 3 s, all found"),
        ]
        rows.append(("… of which found", f"{min(found):,} of {n_dirs:,}", f"{n_dirs:,}"))
        known = root / "index-known"
        shutil.copytree(indexes["all"].parent, known)
        cli(known / "runs.toml", "runs", "--discover", "many")
        rows.append((f"`runs --discover many`, again (all {n_dirs:,} known)",
                     cold(lambda: cli(known / "runs.toml", "runs", "--discover", "many"), repeat), "—"))
        print("| with the index at this size | measured | goal |")
        print("|---|---:|---|")
        for label, value, goal in rows:
            print(f"| {label} | {value} | {goal} |", flush=True)
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def run(hosts, root: Path, n_runs: int, repeat: int) -> None:  # type: ignore[no-untyped-def]
    index_path = root / "index" / "runs.toml"
    index_path.parent.mkdir()
    began = time.perf_counter()
    RunIndex(index_path).add_new(synthetic(n_runs - 1))
    print(f"built a {n_runs - 1}-run index in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    env = timed_env(hosts, root)  # the start below writes the bytecode cache
    workdir = str(root / "work")
    cli = [sys.executable, "-m", "rtrain_tui", "--ssh-config", str(hosts.ssh_config),
           "--index", str(index_path)]
    config = write_config(root / "c.yaml", steps=100000, step_seconds=0.05)
    began = time.perf_counter()
    subprocess.run(cli + ["start", "gpu", "-c", str(config), "--workdir", workdir, "--gpus", "0",
                          "--run-id", "live-one", "--no-follow"], env=env, check=True,
                   capture_output=True)
    start_wall = time.perf_counter() - began
    done = write_config(root / "done.yaml", steps=1)
    subprocess.run(cli + ["start", "gpu", "-c", str(done), "--workdir", workdir, "--gpus", "0",
                          "--run-id", "ended-one"], env=env, check=True, capture_output=True)

    def cli_run(*words: str) -> None:
        subprocess.run(cli + list(words), env=env, check=True, capture_output=True)

    counter = iter(range(1_000_000))

    def start_work() -> float:
        out = subprocess.run([sys.executable, "-c", START_WORK, str(index_path),
                              f"bench-{next(counter)}"], env=env, check=True,
                             capture_output=True, text=True).stdout
        return float(out)

    def concurrent_starts() -> tuple[int, float]:
        began = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", START_WORK, str(index_path),
                                   f"many-{next(counter)}"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in range(20)]
        ok = sum(p.wait(timeout=300) == 0 for p in procs)
        for p in procs:
            p.communicate()
        return ok, time.perf_counter() - began

    start_work()  # the first write may migrate an older index: not what a start pays
    rows = [
        (f"`runs` ({n_runs:,} runs, new process)", cold(lambda: cli_run('runs'), repeat), "≤ 0.3 s"),
        ("`runs --json` (new process)", cold(lambda: cli_run('runs', '--json'), repeat), "≤ 0.3 s"),
        ("`status gpu RUN` (new process, asks the host)",
         cold(lambda: cli_run('status', 'gpu', 'live-one', '--workdir', workdir), repeat),
         "≤ 0.5 s"),
        ("`status gpu RUN` of a run that ended",
         cold(lambda: cli_run('status', 'gpu', 'ended-one', '--workdir', workdir), repeat), "≤ 0.5 s"),
        ("anchor: `ssh gpu true` (OpenSSH, new connection)",
         cold(lambda: subprocess.run(["ssh", "-F", str(hosts.ssh_config), "gpu", "true"], env=env,
                                     check=True, capture_output=True), repeat), "—"),
        ("one `start`'s own index work (new process)",
         f"{statistics.median(start_work() for _ in range(repeat)) * 1000:.0f} ms", "≤ 50 ms"),
    ]
    ok, slowest = concurrent_starts()
    rows.append(("20 concurrent starts' index work", f"{ok}/20 succeed, all done in {slowest:.1f} s",
                 "20/20"))
    rows.append(("one whole `start` (new process, real sshd, for scale)", f"{start_wall:.2f} s", "—"))
    print("| with the index at this size | measured | goal |")
    print("|---|---:|---|")
    for label, value, goal in rows:
        print(f"| {label} | {value} | {goal} |", flush=True)
    cli_run("stop", "gpu", "live-one", "--workdir", workdir, "--grace", "1")


if __name__ == "__main__":
    main()
