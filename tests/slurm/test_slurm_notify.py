"""A Slurm job tells its own end (issue 19, `[notify] on_host`): the batch script claims
the marker and posts to the receiver with curl before the job ends, no client running."""

from __future__ import annotations

import threading
from pathlib import Path

from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.notify import host_send
from tests.notify_receiver import Receiver
from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm.test_slurm_cli import start
from tests.slurm.test_slurm_retries import STALL
from tests.slurm.test_slurm_retries import start as retries_start
from tests.test_resume_sshd import wait_for


def test_a_failed_job_is_told_by_the_job_itself_once(scli: SlurmCli, tmp_path: Path, workdir: str,
                                                     receiver: Receiver) -> None:
    (scli.config_home / "rtrain-tui" / "config.toml").write_text(
        f'[hosts.{LOGIN}]\nbackend = "slurm"\npartition = "gpu"\n[notify]\nurls = ["{receiver.url()}"]\n')
    start(scli, tmp_path, workdir, "nf", steps=1, exit_code=3)
    wait_for("the job's message", lambda: bool(receiver.messages()), timeout=90)
    got = receiver.messages()
    assert [m["title"] for m in got] == [f"rtrain-tui: nf on {LOGIN} failed (exit 3)"]
    assert f"look: rtrain-tui tail {LOGIN} nf" in str(got[0]["message"])
    run_dir = Path(workdir) / "nf"
    assert (run_dir / "notified" / "a1-failed").is_dir()
    # The receiver records a POST before it answers: the job's line comes after that.
    wait_for("the notify log's line", lambda: (run_dir / "notify.log").exists()
             and (run_dir / "notify.log").read_text().endswith("\n"))
    assert (run_dir / "notify.log").read_text().rstrip().endswith(": sent (curl)")
    r = scli("runs", "--refresh")
    assert r.rc == 0 and "failed (exit 3)" in r.out and "not sent" not in r.err
    assert len(receiver.messages()) == 1


def test_a_silent_job_tells_its_stall_itself(scli: SlurmCli, tmp_path: Path, workdir: str,
                                             receiver: Receiver) -> None:
    (scli.config_home / "rtrain-tui" / "config.toml").write_text(
        f'[hosts.{LOGIN}]\nbackend = "slurm"\npartition = "gpu"\n[notify]\nurls = ["{receiver.url()}"]\n')
    retries_start(scli, tmp_path, workdir, "ns", *STALL, stall_check="0.2", steps=100, hang_at=3)
    try:
        wait_for("the stall's message", lambda: bool(receiver.messages()), timeout=90)
        got = receiver.messages()
        assert len(got) == 1 and str(got[0]["title"]).startswith(f"rtrain-tui: ns on {LOGIN} stalled: no output for ")
        assert (Path(workdir) / "ns" / "notified" / "a1-stalled").is_dir()
    finally:
        assert scli("stop", LOGIN, "ns", "--workdir", workdir, "--grace", "2", timeout=120).rc == 0
    assert len(receiver.messages()) == 1  # a stop is not among the events told


def test_a_hanging_service_holds_a_jobs_end_at_most_the_send_limit_and_the_cut_is_logged(
        scli: SlurmCli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    # Two URLs whose service takes each POST and never answers: tried in full, each held the
    # job (and its GPUs) 31.5 s after its trainer ended.
    receiver.hold = threading.Event()
    (scli.config_home / "rtrain-tui" / "config.toml").write_text(
        f'[hosts.{LOGIN}]\nbackend = "slurm"\npartition = "gpu"\n[notify]\n'
        f'urls = ["{receiver.url("one")}", "{receiver.url("two")}"]\n')
    try:
        start(scli, tmp_path, workdir, "nh", steps=1, exit_code=3)
        run_dir = Path(workdir) / "nh"
        wait_for("the trainer's end", lambda: (run_dir / "status").exists(), timeout=90)
        ended = (run_dir / "status").stat().st_mtime
        wait_for("the notify log's lines", lambda: (run_dir / "notify.log").exists()
                 and len((run_dir / "notify.log").read_text().splitlines()) == 2, timeout=60)
        lines = (run_dir / "notify.log").read_text().splitlines()
        assert (run_dir / "notify.log").stat().st_mtime - ended < remote_sh.FOREGROUND_SEND_S + 3
        assert all(host_send.LIMIT_SAID.format(remote_sh.FOREGROUND_SEND_S) in line for line in lines), lines
        # The first URL was tried again with what was left; the second never began.
        assert {m["path"] for m in receiver.messages()} == {"/one"}
    finally:
        receiver.hold.set()


def test_on_stall_stop_acts_before_the_stall_is_told_to_a_hanging_service(
        scli: SlurmCli, tmp_path: Path, workdir: str, receiver: Receiver) -> None:
    receiver.hold = threading.Event()
    (scli.config_home / "rtrain-tui" / "config.toml").write_text(
        f'[hosts.{LOGIN}]\nbackend = "slurm"\npartition = "gpu"\n[notify]\nurls = ["{receiver.url()}"]\n')
    try:
        retries_start(scli, tmp_path, workdir, "nt", *STALL, "--on-stall", "stop", stall_check="0.2",
                      steps=100, hang_at=3)
        run_dir = Path(workdir) / "nt"
        wait_for("the stall's message", lambda: bool(receiver.messages()), timeout=90)
        # The stop came first: the trainer is gone while the service still holds the POST.
        assert (run_dir / "stop_requested").read_text().strip() == "stall"
        wait_for("the trainer's end", lambda: (run_dir / "status").exists(), timeout=45)
        assert (run_dir / "status").read_text().strip() == "143"
    finally:
        receiver.hold.set()
