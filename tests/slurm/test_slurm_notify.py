"""A Slurm job tells its own end (issue 19, `[notify] on_host`): the batch script claims
the marker and posts to the receiver with curl before the job ends, no client running."""

from __future__ import annotations

from pathlib import Path

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
