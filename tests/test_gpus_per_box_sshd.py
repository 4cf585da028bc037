"""GPUs belong to the box, not to a workdir (R03): the host's GPU lock, its records of
which GPUs our runs hold and the `--queue` order live once per host (per user on it), so
two laptops starting into two workdirs on one box never get the same GPU, and a queue
serves runs of every workdir in order. A run an older version started (its `gpus` file in
its run dir only) still holds its GPU.

Against the real sshd; the stand-in nvidia-smi shows the GPUs idle and no processes, as a
real one does while the trainers are still loading: only the host's records can tell.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.errors import RemoteError
from tests.conftest import Cli, write_config
from tests.sshd import TWO_GPUS, SshHosts, gpu_state

IDLE = "0, NVIDIA H200, 1024, 143771, 0\n1, NVIDIA H200, 1024, 143771, 0\n"
ONE_BUSY = "0, NVIDIA H200, 70000, 143771, 97\n"
ONE_IDLE = "0, NVIDIA H200, 1024, 143771, 0\n"


@pytest.fixture
def gpus(hosts: SshHosts) -> Iterator[Callable[[str], None]]:
    hosts.apps_file.unlink(missing_ok=True)

    def set_gpus(rows: str) -> None:
        tmp = hosts.gpu_file.with_suffix(".tmp")
        tmp.write_text(rows)
        tmp.replace(hosts.gpu_file)  # never a half-written file for the host to read

    yield set_gpus
    hosts.gpu_file.write_text(TWO_GPUS)


@pytest.fixture
def other_workdir(tmp_path: Path) -> Iterator[str]:
    """A second workdir on the same box. Afterwards its runs are killed by the process
    group their wrappers recorded, as conftest's `workdir` does: only pids this test
    started (a run left alive would hold its GPU for the next test on this box)."""
    work = tmp_path / "work2"
    yield str(work)
    for pid_file in work.glob("*/train.pid"):
        group = int(read(pid_file) or 0)
        if group > 1:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def wait_for(what: str, cond: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def laptop(hosts: SshHosts, tmp_path: Path, name: str) -> Engine:
    """One laptop: an engine with an index of its own, knowing nothing of the other's runs."""
    return Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / f"{name}.toml"))


def test_two_laptops_starting_into_two_workdirs_on_one_box_get_different_gpus(
        hosts: SshHosts, tmp_path: Path, workdir: str, other_workdir: str,
        gpus: Callable[[str], None]) -> None:
    gpus(IDLE)
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    one, two = laptop(hosts, tmp_path, "one"), laptop(hosts, tmp_path, "two")

    async def go() -> None:
        try:
            a = await one.start(StartRequest("gpu", config, run_id="a", workdir=workdir))
            b = await two.start(StartRequest("gpu", config, run_id="b", workdir=other_workdir))
            assert {a.record.gpu_ids, b.record.gpu_ids} == {"0", "1"}
            with pytest.raises(RemoteError) as refused:  # a third, from either: none is left
                await one.start(StartRequest("gpu", config, run_id="c", workdir=str(tmp_path / "third")))
            assert f"GPU {a.record.gpu_ids}: 0% busy, 1 GiB, given to our run a" in str(refused.value)
            # A run that ended holds nothing: its GPU goes to the next start, from any workdir.
            await one.stop("gpu", workdir, "a")
            c = await two.start(StartRequest("gpu", config, run_id="c", workdir=other_workdir))
            assert c.record.gpu_ids == a.record.gpu_ids
        finally:
            await one.close()
            await two.close()

    asyncio.run(go())
    # The ended run's record is gone from the box's records (the next claim pruned it).
    held = gpu_state(hosts.remote_homes["gpu"]) / "held"
    assert not [f for f in held.iterdir() if read(f) == str(Path(workdir, "a"))]


def test_a_queue_serves_runs_of_two_workdirs_in_order(
        hosts: SshHosts, tmp_path: Path, workdir: str, other_workdir: str,
        gpus: Callable[[str], None]) -> None:
    """One GPU, busy. Laptop A queues a run in its workdir, then laptop B one in another:
    one queue, A's first. Freed, the GPU goes to A's run; B's waits for it (the GPU looks
    idle in nvidia-smi, only the box's record holds it), and starts once A's run ends."""
    gpus(ONE_BUSY)
    state = gpu_state(hosts.remote_homes["gpu"])
    state.mkdir(parents=True, exist_ok=True)
    (state / "every").write_text("1\n")  # the host's pace: 1 s, not 5
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    alice, bob = Cli(hosts, tmp_path / "a.toml"), Cli(hosts, tmp_path / "b.toml")
    for who, wd, run_id in ((alice, workdir, "first"), (bob, other_workdir, "second")):
        r = who("start", "gpu", "-c", str(config), "--workdir", wd, "--run-id", run_id,
                "--queue", "--no-follow")
        assert r.rc == 0, r.err
        assert f"{run_id} is queued on gpu" in r.err
    first, second = Path(workdir, "first"), Path(other_workdir, "second")
    wait_for("the second to wait behind the first", lambda: read(second / "queued")[:1] == "2")
    assert read(first / "queued")[:1] == "1"

    gpus(ONE_IDLE)
    wait_for("the first run to get GPU 0", lambda: read(first / "gpus") == "0")
    wait_for("the second to see GPU 0 given to the first",
             lambda: "given to our run first" in read(second / "queued"))
    wait_for("the first run's trainer", lambda: "step" in read(first / "train.log"))
    time.sleep(2)  # two of the queue's samples: the idle GPU is still not the second's
    assert not (second / "gpus").exists()

    assert alice("stop", "gpu", "first", "--workdir", workdir, "--grace", "2").rc == 0
    wait_for("the second run to get GPU 0", lambda: read(second / "gpus") == "0")
    wait_for("the second run's trainer", lambda: "step" in read(second / "train.log"))
    assert "CUDA_VISIBLE_DEVICES=0 " in read(second / "train.log")
    assert list(state.glob("q[0-9]*")) == []
    assert not Path(workdir, ".queue").exists() and not Path(other_workdir, ".queue").exists()


def test_a_run_an_older_version_started_still_holds_its_gpu_in_every_workdir(
        hosts: SshHosts, tmp_path: Path, workdir: str, other_workdir: str,
        gpus: Callable[[str], None]) -> None:
    """An older version recorded a run's GPUs only in its run dir (`gpus`): nothing in the
    box's records. A start into that workdir skips its GPU; so does one into another
    workdir, once this version has given GPUs in the old one."""
    gpus(IDLE)
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    old = Path(workdir, "old")
    old.mkdir(parents=True)
    alive = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        start = Path(f"/proc/{alive.pid}/stat").read_text().rpartition(")")[2].split()[19]
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        (old / "gpus").write_text("0\n")
        (old / "train.pid").write_text(f"{alive.pid}\n")
        (old / "train.ident").write_text(f"{start} {boot}\n")
        held = gpu_state(hosts.remote_homes["gpu"]) / "held"
        assert not [f for f in held.glob("*") if read(f) == str(old)]
        one, two = laptop(hosts, tmp_path, "one"), laptop(hosts, tmp_path, "two")

        async def go() -> None:
            try:
                same = await one.start(StartRequest("gpu", config, run_id="same", workdir=workdir))
                assert same.record.gpu_ids == "1"
                await one.stop("gpu", workdir, "same")
                other = await two.start(StartRequest("gpu", config, run_id="other",
                                                     workdir=other_workdir))
                assert other.record.gpu_ids == "1"
            finally:
                await one.close()
                await two.close()

        asyncio.run(go())
    finally:
        alive.kill()
        alive.wait()
