"""`start --queue`: a run waits on the host for free GPUs, in the host's queue, served in
the order runs were queued; the host gives the GPUs under its own lock and records them
in the run dir, so it holds with no client running and across clients (two indexes).

Against the real sshd. The stand-in nvidia-smi reads the test's GPU file, so a test makes
GPUs busy and frees them by rewriting it; the queue samples every second here (`every` in
the box's GPU state, backends/direct/gpu_box.sh; 5 s by default).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli, write_config
from tests.sshd import TWO_GPUS, SshHosts, gpu_state

BUSY = "0, NVIDIA H200, 70000, 143771, 97\n1, NVIDIA H200, 70000, 143771, 97\n"
ONE_FREE = "0, NVIDIA H200, 70000, 143771, 97\n1, NVIDIA H200, 1024, 143771, 0\n"
IDLE = "0, NVIDIA H200, 1024, 143771, 0\n1, NVIDIA H200, 1024, 143771, 0\n"


@pytest.fixture
def gpus(hosts: SshHosts) -> Iterator[Callable[[str], None]]:
    hosts.apps_file.unlink(missing_ok=True)

    def set_gpus(rows: str) -> None:
        tmp = hosts.gpu_file.with_suffix(".tmp")
        tmp.write_text(rows)
        tmp.replace(hosts.gpu_file)  # never a half-written file for the host to read

    yield set_gpus
    hosts.gpu_file.write_text(TWO_GPUS)


def wait_for(what: str, cond: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def queue_dir(hosts: SshHosts) -> Path:
    """The box's queue (and GPU lock, and records): one per host and user."""
    return gpu_state(hosts.remote_homes["gpu"])


def fast_queue(hosts: SshHosts) -> None:
    queue_dir(hosts).mkdir(parents=True, exist_ok=True)
    (queue_dir(hosts) / "every").write_text("1\n")  # the host's pace: 1 s, not 5


def start_queued(cli: Cli, config: Path, workdir: str, run_id: str, *extra: str) -> None:
    fast_queue(cli.hosts)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id,
            "--queue", "--no-follow", *extra)
    assert r.rc == 0, r.err
    assert f"{run_id} is queued on gpu" in r.err


def status(cli: Cli, workdir: str, run_id: str) -> dict[str, object]:
    r = cli("status", "gpu", run_id, "--workdir", workdir, "--json")
    assert r.rc == 0, r.err
    return json.loads(r.out)  # type: ignore[no-any-return]


def test_two_queued_runs_from_two_clients_are_served_in_order_with_no_client_running(
        hosts: SshHosts, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    gpus(BUSY)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    alice, bob = Cli(hosts, tmp_path / "a.toml"), Cli(hosts, tmp_path / "b.toml")
    start_queued(alice, config, workdir, "first")
    start_queued(bob, config, workdir, "second")
    # Both clients have exited: from here on only the host decides.
    wait_for("both runs to say their place", lambda: read(Path(workdir, "second", "queued"))[:1] == "2")
    first = status(alice, workdir, "first")
    assert (first["state"], first["queue_position"]) == ("queued", 1)
    assert "waiting for 1 free GPU(s): GPU 0: 97% busy, 68 GiB" in str(first["reason"])
    assert status(bob, workdir, "second")["queue_position"] == 2
    assert alice("status", "gpu", "first", "--workdir", workdir).out == "queued\n"

    gpus(ONE_FREE)  # one GPU frees up: the head of the queue gets it, the other waits on
    wait_for("the first run to get GPU 1", lambda: read(Path(workdir, "first", "gpus")) == "1")
    wait_for("the second run to see GPU 1 given to the first", lambda: "given to our run first"
             in read(Path(workdir, "second", "queued")))
    assert not Path(workdir, "second", "gpus").exists()
    wait_for("the first run's trainer", lambda: "step" in read(Path(workdir, "first", "train.log")))
    assert "CUDA_VISIBLE_DEVICES" not in read(Path(workdir, "first", "config.yaml"))

    gpus(IDLE)  # the other frees up too; GPU 1 stays the first run's, though idle in nvidia-smi
    wait_for("the second run to get GPU 0", lambda: read(Path(workdir, "second", "gpus")) == "0")
    assert bob("status", "gpu", "second", "--workdir", workdir).out == "running\n"
    assert list(queue_dir(hosts).glob("q[0-9]*")) == []


def test_a_queued_run_stopped_leaves_the_queue_and_its_trainer_never_ran(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    gpus(BUSY)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    start_queued(cli, config, workdir, "waiting")
    wait_for("its place in the queue", lambda: Path(workdir, "waiting", "queued").exists())
    r = cli("stop", "gpu", "waiting", "--workdir", workdir)
    assert r.rc == 0, r.err
    assert "stopped waiting on gpu" in r.out + r.err
    assert cli("status", "gpu", "waiting", "--workdir", workdir).out == "stopped\n"
    assert not Path(workdir, "waiting", "train.log").exists()  # the trainer never started
    assert not Path(workdir, "waiting", "gpus").exists()
    assert list(queue_dir(cli.hosts).glob("q[0-9]*")) == []
    gpus(IDLE)  # GPUs free later give it nothing: it is gone from the queue
    assert cli("status", "gpu", "waiting", "--workdir", workdir).out == "stopped\n"


def test_a_queue_whose_lock_cannot_be_written_gives_up_and_says_why(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    """The box's queue turns read-only under a waiting run (a home remounted read-only):
    its wrapper can no longer take the host's GPU lock. It gives up, and the probe says
    why, instead of spinning on the lock for ever."""
    gpus(BUSY)
    config = write_config(tmp_path / "c.yaml", steps=3, step_seconds=0.05)
    start_queued(cli, config, workdir, "stuck")
    wait_for("its place in the queue", lambda: Path(workdir, "stuck", "queued").exists())
    queue = queue_dir(cli.hosts)
    mounted = subprocess.run(["mount", "--bind", str(queue), str(queue)], capture_output=True, text=True)
    assert mounted.returncode == 0, f"this test needs root to bind-mount: {mounted.stderr}"
    try:
        ro = subprocess.run(["mount", "-o", "remount,ro,bind", str(queue)], capture_output=True, text=True)
        assert ro.returncode == 0, ro.stderr
        wait_for("the wrapper to give up", lambda: Path(workdir, "stuck", "status").exists())
        got = status(cli, workdir, "stuck")
    finally:
        subprocess.run(["umount", "-l", str(queue)], check=False)
    assert got["state"] == "failed (exit 1)"
    assert got["reason"] == (f"cannot take the host's GPU lock (~/{queue.relative_to(cli.hosts.remote_homes['gpu'])}): "
                             "Read-only file system")
    assert not Path(workdir, "stuck", "gpus").exists()  # its trainer never ran


def test_gpus_0_never_queues(cli: Cli, tmp_path: Path, workdir: str,
                             gpus: Callable[[str], None]) -> None:
    gpus(BUSY)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "cpu",
            "--gpus", "0", "--queue", "--no-follow")
    assert r.rc == 0, r.err
    assert "queued" not in r.err
    assert cli("status", "gpu", "cpu", "--workdir", workdir).out == "running\n"
    assert not Path(workdir, ".queue").exists()


def test_queue_with_gpu_ids_waits_for_those_and_a_plain_start_elsewhere_honours_them(
        hosts: SshHosts, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    gpus("0, NVIDIA H200, 1024, 143771, 0\n1, NVIDIA H200, 70000, 143771, 97\n")
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    alice, bob = Cli(hosts, tmp_path / "a.toml"), Cli(hosts, tmp_path / "b.toml")
    start_queued(alice, config, workdir, "wants1", "--gpu-ids", "1")
    wait_for("it to wait for GPU 1", lambda: "waiting for GPU(s) 1: GPU 1: 97% busy"
             in read(Path(workdir, "wants1", "queued")))
    assert not Path(workdir, "wants1", "gpus").exists()  # GPU 0 is free, but not the one asked for
    gpus("0, NVIDIA H200, 70000, 143771, 97\n1, NVIDIA H200, 1024, 143771, 0\n")
    wait_for("it to get GPU 1", lambda: read(Path(workdir, "wants1", "gpus")) == "1")
    # Another laptop, whose index knows nothing of that run: nvidia-smi shows GPU 1 idle
    # (the trainer is still loading), but the host's record says it is taken.
    r = bob("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "other",
            "--no-follow")
    assert r.rc != 0
    assert "GPU 1: 0% busy, 1 GiB, given to our run wants1" in r.err
    assert "Pass --queue to wait for them" in r.err


def test_start_queue_follows_the_run_through_its_wait_to_its_end(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    gpus(BUSY)
    fast_queue(cli.hosts)
    config = write_config(tmp_path / "c.yaml", steps=3, step_seconds=0.05)
    p = cli.popen("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "followed",
                  "--queue")
    # The start follows the run and says why it waits once its own look at the host
    # sees the reason: free the GPUs only after that (CI freed them before that look).
    said: list[str] = []
    printed: list[str] = []
    readers = [threading.Thread(target=lambda: said.extend(p.stderr or ()), daemon=True),
               threading.Thread(target=lambda: printed.extend(p.stdout or ()), daemon=True)]
    for reader in readers:
        reader.start()
    wait_for("it to wait", lambda: Path(workdir, "followed", "queued").exists())
    listed = json.loads(cli("runs", "--refresh", "--json").out)
    assert [r["state"] for r in listed if r["run_id"] == "followed"] == ["queued"]
    assert "queued" in cli("runs").out
    wait_for("the start to say why it waits", lambda: any("97% busy" in line for line in said))
    gpus(IDLE)
    p.wait(timeout=60)
    for reader in readers:
        reader.join(timeout=10)
    out, err = "".join(printed), "".join(said)
    assert p.returncode == 0, err
    assert "followed is queued on gpu (waiting for 1 free GPU(s): GPU 0: 97% busy" in err
    assert "followed left the queue on gpu" in err
    assert "followed on gpu: completed" in out
    assert "CUDA_VISIBLE_DEVICES=0 " in read(Path(workdir, "followed", "train.log"))


def test_a_head_whose_wrapper_was_killed_is_taken_out_by_the_next_in_line(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    gpus(BUSY)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    start_queued(cli, config, workdir, "dies")
    start_queued(cli, config, workdir, "next")
    wait_for("both to wait", lambda: read(Path(workdir, "next", "queued"))[:1] == "2")
    # The reboot stand-in: the head's wrapper is SIGKILLed, it leaves its entry behind.
    os.killpg(int(read(Path(workdir, "dies", "train.pid"))), signal.SIGKILL)
    wait_for("the next run to be the head", lambda: read(Path(workdir, "next", "queued"))[:1] == "1")
    gpus(ONE_FREE)
    wait_for("the next run to get GPU 1", lambda: read(Path(workdir, "next", "gpus")) == "1")
    assert cli("status", "gpu", "dies", "--workdir", workdir).out == "lost\n"


def test_queue_with_gpu_ids_the_host_lacks_is_refused_before_anything_is_made(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    gpus(BUSY)
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "nope",
            "--queue", "--gpu-ids", "5", "--no-follow")
    assert r.rc == 1
    assert "GPU 5 does not exist on gpu (its GPUs: 0, 1)" in r.err
    assert not Path(workdir, "nope").exists()


def test_resume_queue_waits_on_the_host_for_the_new_attempts_gpus(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    gpus(IDLE)
    fast_queue(cli.hosts)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "again",
            "--no-follow")
    assert r.rc == 0, r.err
    assert cli("stop", "gpu", "again", "--workdir", workdir, "--grace", "2").rc == 0
    gpus(BUSY)
    refused = cli("resume", "gpu", "again", "--workdir", workdir, "--restart")
    assert refused.rc == 1 and "Pass --queue to wait for them" in refused.err
    r = cli("resume", "gpu", "again", "--workdir", workdir, "--restart", "--queue")
    assert r.rc == 0, r.err
    assert "again is queued on gpu" in r.err
    wait_for("attempt 2 to wait", lambda: Path(workdir, "again", "queued").exists())
    assert cli("status", "gpu", "again", "--workdir", workdir).out == "queued\n"
    gpus(ONE_FREE)
    wait_for("attempt 2 to get GPU 1", lambda: read(Path(workdir, "again", "gpus")) == "1")
    assert read(Path(workdir, "again", ".rtrain", "attempts", "1", "gpus")) == "0"  # attempt 1's, kept apart
    wait_for("attempt 2 running", lambda: cli("status", "gpu", "again", "--workdir", workdir).out
             == "running\n")


def test_two_laptops_starting_at_once_never_get_the_same_gpu(
        hosts: SshHosts, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    """Each laptop's own lock cannot see the other; the host's lock and records can: one
    start gets the free GPU, the other is refused (seen as given, or just claimed)."""
    gpus(ONE_FREE)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    laptops = [Cli(hosts, tmp_path / f"{name}.toml") for name in ("a", "b")]
    procs = [c.popen("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", name,
                     "--no-follow") for c, name in zip(laptops, ("a", "b"))]
    results = [(p.wait(timeout=60), *p.communicate()) for p in procs]
    assert sorted(rc for rc, _, _ in results) == [0, 1], results
    err = next(e for rc, _, e in results if rc == 1)
    assert ("given to our run" in err and "Pass --queue" in err) or "was just given" in err, err
    winner = next(name for (rc, _, _), name in zip(results, ("a", "b")) if rc == 0)
    assert read(Path(workdir, winner, "gpus")) == "1"
    # Nothing else: the host's GPU lock and records are the box's, never in the workdir.
    assert sorted(p.name for p in Path(workdir).iterdir()) == [winner]


def test_allow_busy_shares_a_gpu_our_live_run_was_given(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:
    """--allow-busy asks to share: the host's claim records the GPU, never refuses it for
    being our own run's (20 concurrent --allow-busy starts all chose GPU 0 and 19 were
    told it 'was just given to our run')."""
    gpus(ONE_FREE)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "first", "--no-follow")
    assert r.rc == 0, r.err
    assert read(Path(workdir, "first", "gpus")) == "1"
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "sharer",
            "--allow-busy", "--no-follow")
    assert r.rc == 0, r.err
    assert read(Path(workdir, "sharer", "gpus")) == "1"  # the least busy, ours or not
    assert status(cli, workdir, "sharer")["state"] == "running"
