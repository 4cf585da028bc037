"""A requeued job (`scontrol requeue`, as preemption or a node failure do) against the real
cluster: its first attempt's exit code is not the run's end."""

from __future__ import annotations

import time
from pathlib import Path

from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm.test_slurm_cli import start, status, wait_for
from tests.slurm_cluster import SlurmCluster


def test_a_requeued_job_is_queued_or_running_again_never_failed_143(
        scli: SlurmCli, tmp_path: Path, workdir: str, slurm: SlurmCluster) -> None:
    start(scli, tmp_path, workdir, "again", steps=100000, step_seconds=0.2)
    wait_for(scli, "again", workdir, lambda s: s["state"] == "running")
    run_dir = Path(workdir) / "again"
    job = (run_dir / "slurm_job_id").read_text().strip()
    slurm.client("scontrol", "requeue", job)
    # The first attempt's batch script records the requeue's SIGTERM as its exit...
    deadline = time.monotonic() + 30
    while not (run_dir / "status").exists():
        assert time.monotonic() < deadline, "the first attempt wrote no status"
        time.sleep(0.2)
    assert (run_dir / "status").read_text() == "143\n"
    # ...yet the run waits or runs again: every look until the second attempt runs says so.
    seen = []
    deadline = time.monotonic() + 150
    while True:
        got = status(scli, "again", workdir)
        seen.append(got["state"])
        assert got["state"] in ("queued", "running"), (seen, got)
        if got["state"] == "running" and "Restarts=1" in slurm.client(
                "scontrol", "-o", "show", "job", job) and "JobState=RUNNING" in slurm.client(
                "scontrol", "-o", "show", "job", job):
            break
        assert time.monotonic() < deadline, seen
        time.sleep(0.5)
    stop = scli("stop", LOGIN, "again", "--workdir", workdir, "--grace", "1")
    assert stop.rc == 0, stop.err
    assert status(scli, "again", workdir)["state"] == "stopped"
