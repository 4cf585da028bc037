"""A start is launched once and never lost, whatever happens to the client (issue 6)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest, StartTrace
from rtrain_tui.core.host import remote_sh
from tests.benchmarks.index import synthetic
from tests.conftest import Cli, write_config

FaultRowMaker = Callable[[str, str], object]  # the `fault_row` fixture (tests/faults/conftest.py)


def runs(cli: Cli) -> list[dict[str, object]]:
    r = cli("runs", "--json")
    assert r.rc == 0, r.err
    return json.loads(r.out)


def big_dataset(tmp_path: Path, mib: int = 48) -> Path:
    data = tmp_path / "big.jsonl"
    with data.open("wb") as f:
        f.write(os.urandom(mib << 20))
    return data


def wait_created(proc: subprocess.Popen[str]) -> str:
    """Read the client's stderr up to the line that names the new run; return its id."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if " created on " in line:
            return line.split("run ", 1)[1].split(" ", 1)[0]
    raise AssertionError(f"no 'created' line; exit {proc.wait()}")


def test_start_refuses_a_corrupt_index_before_touching_the_host(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    fault_row('(8) corrupt index', 'invalid TOML')
    cli.index.write_text("[[runs]\nhost = ")
    before = cli.index.read_bytes()
    config = write_config(tmp_path / "c.yaml")
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "x", "--no-follow")
    assert r.rc == 1 and len(r.err.strip().splitlines()) == 1, r.err
    assert "run index" in r.err and "Traceback" not in r.err
    assert not Path(workdir).exists(), "the host was touched"
    assert cli.index.read_bytes() == before


def test_client_killed_mid_upload_leaves_nothing_once_refreshed(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    fault_row('(2) client SIGKILLed mid-upload', 'kill -9 client')
    config = write_config(tmp_path / "c.yaml")
    proc = cli.popen("start", "gpu", "-c", str(config), "-d", str(big_dataset(tmp_path)),
                     "--workdir", workdir, "--run-id", "cut", "--no-follow")
    assert wait_created(proc) == "cut"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [(r["run_id"], r["state"]) for r in runs(cli)] == [("cut", "starting")]
    assert (Path(workdir) / "cut").is_dir()
    r = cli("runs", "--refresh")
    assert r.rc == 0, r.err
    assert runs(cli) == []
    assert not (Path(workdir) / "cut").exists()
    # the same id can be used again
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "cut", "--no-follow")
    assert r.rc == 0, r.err


def test_client_killed_right_after_launch_keeps_the_run_in_the_index(
    cli: Cli, tmp_path: Path, workdir: str,
    fault_row: FaultRowMaker,
) -> None:
    fault_row('(2) client SIGKILLed after launch', 'kill -9 client')
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    proc = cli.popen("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "now")
    wait_created(proc)
    pid_file = Path(workdir) / "now" / "train.pid"
    deadline = time.monotonic() + 20
    while not pid_file.exists():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    cli("runs", "--refresh")
    assert [(r["run_id"], r["state"]) for r in runs(cli)] == [("now", "running")]
    assert cli("stop", "gpu", "now").out.strip() == "stopped now on gpu"


def test_ctrl_c_during_upload_removes_the_run_and_its_entry(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    fault_row('(2) Ctrl-C mid-upload', 'SIGINT client')
    config = write_config(tmp_path / "c.yaml")
    proc = cli.popen("start", "gpu", "-c", str(config), "-d", str(big_dataset(tmp_path)),
                     "--workdir", workdir, "--run-id", "intr", "--no-follow")
    wait_created(proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    # It says what the cancel left: nothing (it used to say "the run keeps going").
    assert err.splitlines()[-1] == ("rtrain-tui: interrupted (Ctrl-C): start cancelled; run intr "
                                    "was removed from gpu, nothing is left of it."), err
    assert runs(cli) == []
    assert not (Path(workdir) / "intr").exists()


def test_a_start_that_fails_before_launch_removes_its_run_dir(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    fault_row('(2) start fails before launch', 'dataset store unwritable')
    Path(workdir).mkdir(parents=True)
    (Path(workdir) / ".datasets").write_text("a file where the dataset store should be")
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
            "--run-id", "again", "--no-follow")
    assert r.rc == 1 and "Traceback" not in r.err
    assert not (Path(workdir) / "again").exists()
    assert runs(cli) == []
    (Path(workdir) / ".datasets").unlink()
    r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
            "--run-id", "again", "--no-follow")
    assert r.rc == 0, r.err


def test_twenty_concurrent_starts_all_land_in_the_index(cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    fault_row('(8) 20 concurrent starts', '20 CLI processes')
    config = write_config(tmp_path / "c.yaml", steps=1)
    # --allow-busy: 20 runs share the host's GPUs on purpose, so all 20 pass through the
    # host's GPU-choice lock (one at a time) and none is refused for want of a free GPU.
    procs = [cli.popen("start", "gpu", "-c", str(config), "--workdir", workdir, "--allow-busy",
                       "--run-id", f"c{i:02d}", "--no-follow") for i in range(20)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert sorted(r["run_id"] for r in runs(cli)) == [f"c{i:02d}" for i in range(20)]
    assert len(list(Path(workdir).glob("c*/train.pid"))) == 20


def test_twenty_concurrent_starts_with_a_year_of_runs_all_land_in_the_index(
        cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    """The same 20 starts with 10,000 runs already in the index (issue 17): each write
    rewrote the whole file under the lock (~2 s), so 17 of 20 gave up after the lock's
    10 s, four of them while their runs trained. Now a start writes the live file alone."""
    fault_row('(8) 20 concurrent starts, 10,000 runs indexed', '20 CLI processes')
    RunIndex(cli.index).add_new(synthetic(10_000))
    config = write_config(tmp_path / "c.yaml", steps=1)
    procs = [cli.popen("start", "gpu", "-c", str(config), "--workdir", workdir, "--allow-busy",
                       "--run-id", f"y{i:02d}", "--no-follow") for i in range(20)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    index = RunIndex(cli.index).load()
    assert len(index) == 10_020
    assert sorted(r.run_id for r in index if r.run_id.startswith("y")) == [f"y{i:02d}" for i in range(20)]
    assert len(list(Path(workdir).glob("y*/train.pid"))) == 20


def test_a_start_cancelled_while_its_run_dir_is_made_leaves_the_id_usable(
        cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut off after the host made the directory and wrote train.token, before the answer
    came back: nothing named the directory, so it stayed, and `--run-id held` was refused
    ("already exists") for good. The host here answers 1 s late, and the cancel lands
    once the token is on disk."""
    fault_row("(2) cancel while the run dir is made", "answer 1 s late + cancel")
    real = remote_sh.make_run_dir
    monkeypatch.setattr(remote_sh, "make_run_dir", lambda *a: real(*a) + "sleep 1\n")
    config = write_config(tmp_path / "c.yaml", steps=1)
    index = RunIndex(cli.index)
    request = StartRequest("gpu", config, run_id="held", workdir=workdir, gpus=0)
    token = Path(workdir) / "held" / "train.token"

    async def go() -> tuple[str, str]:
        engine = Engine(ConnectionPool(cli.hosts.ssh_config), index)
        trace = StartTrace()
        try:
            task = asyncio.create_task(engine.start(request, trace=trace))
            deadline = time.monotonic() + 20
            while not token.exists():
                assert not task.done() and time.monotonic() < deadline, "no run dir made"
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return trace.run_id, trace.stage
        finally:
            await engine.close()

    assert asyncio.run(go()) == ("held", "removed")
    assert not (Path(workdir) / "held").exists() and index.load() == []
    monkeypatch.setattr(remote_sh, "make_run_dir", real)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "held",
            "--gpus", "0", "--no-follow")
    assert r.rc == 0, r.err


def test_a_launched_run_the_index_cannot_take_is_said_running_and_recorded_later(
        cli: Cli, tmp_path: Path, workdir: str, fault_row: FaultRowMaker) -> None:
    """The index lock is held by another process from just after the `starting` entry was
    written: the launch goes on, and the state write after it waits out its 10 s. The
    start used to end there with "nothing was written. Try again" (exit 1) while the
    trainer ran; now it says where the run is, exits 0, and a refresh records it."""
    fault_row("(8) index locked after the launch", "flock held 10 s+")
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    proc = cli.popen("start", "gpu", "-c", str(config), "-d", str(big_dataset(tmp_path, 8)),
                     "--workdir", workdir, "--run-id", "busy", "--gpus", "0", "--no-follow")
    lock = os.open(f"{cli.index}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert wait_created(proc) == "busy"  # the `starting` entry is in the index now
        fcntl.flock(lock, fcntl.LOCK_EX)
        out, err = proc.communicate(timeout=60)
        assert (Path(workdir) / "busy" / "train.pid").exists()
    finally:
        os.close(lock)
    assert proc.returncode == 0, err
    assert out.splitlines()[0] == "started busy on gpu"
    assert "warning: busy is running on gpu, but the run index could not record it" in err
    assert "runs --refresh" in err and "Try again" not in err and "Traceback" not in err
    assert [(r["run_id"], r["state"]) for r in runs(cli)] == [("busy", "starting")]
    assert cli("runs", "--refresh").rc == 0
    assert [(r["run_id"], r["state"]) for r in runs(cli)] == [("busy", "running")]
