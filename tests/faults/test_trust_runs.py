"""Status never lies, stop stops everything of the run and nothing else (issue 6).

Real CLI against the real sshd; on the "host" (this machine) the tests look at the run
directory and at /proc directly, the way a user would check with `ps` and `ls`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Cli, write_config

FaultRowMaker = Callable[[str, str], object]  # the `fault_row` fixture (tests/faults/conftest.py)

TORCHRUN = "{python} -m fake_torchrun --workers 2 --term-seconds 2"


def wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """A live, non-zombie process (a zombie still answers kill -0)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def read_pid(path: Path) -> int:
    wait_for(lambda: path.exists() and path.read_text().strip().isdigit(), what=f"{path.name}")
    return int(path.read_text())


def start(cli: Cli, tmp_path: Path, workdir: str, run_id: str, *extra: str, **cfg: object) -> Path:
    config = write_config(tmp_path / f"{run_id}.yaml", **{"steps": 10000, "step_seconds": 0.05, **cfg})
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
            "--no-follow", *extra)
    assert r.rc == 0, r.err
    return Path(workdir) / run_id


def status(cli: Cli, workdir: str, run_id: str) -> str:
    r = cli("status", "gpu", run_id, "--workdir", workdir)
    assert r.rc == 0, r.err
    return r.out.strip()


def test_stop_reaches_torchrun_workers_in_their_own_sessions(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    """torchrun starts each worker with start_new_session=True: the wrapper's group misses them."""
    fault_row('(5) stop of torchrun-style workers', 'workers in own sessions, slow save on TERM')
    run_dir = start(cli, tmp_path, workdir, "ddp", "--trainer", TORCHRUN)
    workers = [read_pid(run_dir / f"worker-{i}.pid") for i in range(2)]
    assert all(alive(w) for w in workers)
    assert all(os.getsid(w) != os.getsid(read_pid(run_dir / "train.pid")) for w in workers)

    r = cli("stop", "gpu", "ddp", "--workdir", workdir, "--grace", "5")
    assert r.rc == 0, r.err
    assert r.out.strip() == "stopped ddp on gpu"
    assert not any(alive(w) for w in workers), "a worker trains on after 'stopped'"
    written = sorted((run_dir / "ckpt").iterdir())
    time.sleep(0.5)
    assert sorted((run_dir / "ckpt").iterdir()) == written, "checkpoints appeared after 'stopped'"
    assert status(cli, workdir, "ddp") == "stopped"
    # as the seed's wrapper would: praisonai's own tail of this run ends and agrees
    assert (run_dir / "status").read_text().strip() in ("143", "137")


def test_killed_launcher_takes_its_escaped_workers_with_it(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    """torchrun SIGKILLed: the run must not read failed while both workers train on."""
    fault_row('(6) launcher SIGKILLed', 'kill -9 torchrun, workers escaped')
    run_dir = start(cli, tmp_path, workdir, "ddpk", "--trainer", TORCHRUN)
    workers = [read_pid(run_dir / f"worker-{i}.pid") for i in range(2)]
    os.kill(read_pid(run_dir / "launcher.pid"), signal.SIGKILL)
    wait_for(lambda: (run_dir / "status").exists(), what="status written")
    assert not any(alive(w) for w in workers), "workers outlived a run that reads ended"
    assert status(cli, workdir, "ddpk") == "failed (exit 137)"
    r = cli("stop", "gpu", "ddpk", "--workdir", workdir)
    assert r.out.strip() == "ddpk was not running on gpu"


def test_trainer_children_are_ended_before_the_exit_code_is_recorded(
    cli: Cli, tmp_path: Path, workdir: str,
    fault_row: FaultRowMaker,
) -> None:
    fault_row('(6) trainer SIGKILLed', 'kill -9 trainer, children live')
    run_dir = start(cli, tmp_path, workdir, "kids", children=2)
    wait_for(lambda: "children=" in (run_dir / "train.log").read_text(), what="children started")
    kids = [int(p) for p in (run_dir / "train.log").read_text().split("children=")[1].split()[0].split(",")]
    # The trainer: the group's Python process that is neither a child it made nor the
    # wrapper (whose stall watchdog, a forked `sh ./run.sh` with a `sleep`, is there too).
    trainer = next(p for p in _group(read_pid(run_dir / "train.pid"))
                   if p not in kids and p != read_pid(run_dir / "train.pid")
                   and b"python" in _cmdline(p))
    os.kill(trainer, signal.SIGKILL)  # the kernel's OOM killer does the same
    wait_for(lambda: (run_dir / "status").exists(), what="status written")
    assert not any(alive(k) for k in kids), "dataloader-like children outlived the run"
    assert status(cli, workdir, "kids") == "failed (exit 137)"


def test_killed_wrapper_with_a_live_trainer_reads_running_and_stop_stops_it(
    cli: Cli, tmp_path: Path, workdir: str,
    fault_row: FaultRowMaker,
) -> None:
    fault_row('(6) wrapper SIGKILLed', 'kill -9 wrapper, trainer lives')
    run_dir = start(cli, tmp_path, workdir, "orphan", children=1)
    wait_for(lambda: "children=" in (run_dir / "train.log").read_text(), what="children started")
    wrapper = read_pid(run_dir / "train.pid")
    members = _group(wrapper)
    os.kill(wrapper, signal.SIGKILL)  # only the wrapper
    wait_for(lambda: not alive(wrapper), what="wrapper gone")
    assert status(cli, workdir, "orphan") == "running"
    r = cli("stop", "gpu", "orphan", "--workdir", workdir, "--grace", "2")
    assert r.out.strip() == "stopped orphan on gpu", r.err
    assert not any(alive(p) for p in members)
    assert status(cli, workdir, "orphan") == "stopped"
    # the wrapper died before it could record anything: our stop wrote what it would have
    assert (run_dir / "status").read_text().strip() == "143"


def test_kill_after_grace_records_137(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    fault_row('(5) trainer ignores SIGTERM', 'SIGTERM ignored')
    run_dir = start(cli, tmp_path, workdir, "stubborn", ignore_term="true")
    read_pid(run_dir / "train.pid")
    wait_for(lambda: "loss" in (run_dir / "train.log").read_text(), what="training")
    r = cli("stop", "gpu", "stubborn", "--workdir", workdir, "--grace", "1")
    assert r.out.strip() == "stopped stubborn on gpu", r.err
    assert (run_dir / "status").read_text().strip() == "137"
    assert status(cli, workdir, "stubborn") == "stopped"


def _unrelated_process(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A process that is not a run: its own session, working elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.Popen(["sleep", "60"], cwd=elsewhere, start_new_session=True)


def test_recycled_pid_of_a_seed_run_is_neither_running_nor_killed(
    cli: Cli, tmp_path: Path, workdir: str,
    fault_row: FaultRowMaker,
) -> None:
    """A run started by `praisonai train remote` (no train.ident, no token) whose pid was reused."""
    fault_row('(7) recycled pid, no train.ident', 'train.pid → unrelated process')
    run_dir = Path(workdir) / "seedrun"
    run_dir.mkdir(parents=True)
    other = _unrelated_process(tmp_path)
    try:
        (run_dir / "train.pid").write_text(f"{other.pid}\n")
        assert status(cli, workdir, "seedrun") == "lost"
        r = cli("stop", "gpu", "seedrun", "--workdir", workdir, "--grace", "1")
        assert r.out.strip() == "seedrun was not running on gpu", r.err
        assert alive(other.pid), "stop killed an unrelated process"
    finally:
        other.kill()
        other.wait()


def test_a_live_seed_run_working_in_its_directory_is_running_and_stoppable(
    cli: Cli, tmp_path: Path, workdir: str,
) -> None:
    run_dir = Path(workdir) / "seedlive"
    run_dir.mkdir(parents=True)
    trainer = subprocess.Popen(["sleep", "60"], cwd=run_dir, start_new_session=True)
    try:
        (run_dir / "train.pid").write_text(f"{trainer.pid}\n")
        assert status(cli, workdir, "seedlive") == "running"
        r = cli("stop", "gpu", "seedlive", "--workdir", workdir, "--grace", "1")
        assert r.out.strip() == "stopped seedlive on gpu", r.err
        trainer.wait(5)
    finally:
        trainer.kill()
        trainer.wait()


def test_pid_file_naming_pid_1_is_never_a_run(cli: Cli, workdir: str, fault_row: FaultRowMaker) -> None:
    fault_row('(7) train.pid = 1', 'pid file says 1')
    run_dir = Path(workdir) / "one"
    run_dir.mkdir(parents=True)
    (run_dir / "train.pid").write_text("1\n")
    assert status(cli, workdir, "one") == "lost"
    r = cli("stop", "gpu", "one", "--workdir", workdir)
    assert r.out.strip() == "one was not running on gpu", r.err


def test_a_run_that_ends_after_an_interrupted_stop_reads_stopped(
    cli: Cli, tmp_path: Path, workdir: str,
    fault_row: FaultRowMaker,
) -> None:
    """A stop we asked for is `stopped`, whatever the trainer exits with (docs/design.md's
    one state rule): the host cannot tell a trainer that finished before the stop's signal
    from one that answered it with exit 0 (a save-and-exit handler), and the word must
    never say `completed` of training that was cut short. Never `running` or `lost`."""
    fault_row('(6) stop interrupted', 'stop_requested, run ends')
    run_dir = start(cli, tmp_path, workdir, "late", steps=10, step_seconds=0.1)
    # a stop that recorded its request and then lost its client before any signal
    (run_dir / "stop_requested").write_text(f"{read_pid(run_dir / 'train.pid')}\n")
    wait_for(lambda: (run_dir / "status").exists(), what="run ended")
    assert (run_dir / "status").read_text().strip() == "0"
    assert status(cli, workdir, "late") == "stopped"


def test_a_refresh_that_began_before_a_stop_does_not_overwrite_its_verdict(
    cli: Cli, tmp_path: Path, workdir: str,
    fault_row: FaultRowMaker,
) -> None:
    fault_row('(6) refresh racing a stop', 'probe lands after stop')
    import asyncio

    from rtrain_tui.core.engine import Engine
    from rtrain_tui.core.runs.index import RunIndex
    from rtrain_tui.core.transport.connection import ConnectionPool

    start(cli, tmp_path, workdir, "race")
    engine = Engine(ConnectionPool(cli.hosts.ssh_config), RunIndex(cli.index))

    async def go() -> None:
        try:
            records = engine.index.load()
            # the refresh's probe answers "running", but its result lands after the stop
            real_probe_many = engine.probe_many

            async def slow_probe(host, runs, need_end=()):  # type: ignore[no-untyped-def]
                found = await real_probe_many(host, runs, need_end)
                await engine.stop("gpu", workdir, "race", grace=2)
                return found

            engine.probe_many = slow_probe  # type: ignore[method-assign]
            await engine.refresh(records)
        finally:
            await engine.close()

    asyncio.run(go())
    assert [r.state for r in RunIndex(cli.index).load()] == ["stopped"]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _group(pgid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, IndexError, ProcessLookupError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out
