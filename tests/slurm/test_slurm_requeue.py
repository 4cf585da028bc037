"""A requeued job (`scontrol requeue`, as preemption or a node failure do) against the real
cluster: its first attempt's exit code is not the run's end."""

from __future__ import annotations

import json
import time
from decimal import Decimal
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


def test_a_requeued_jobs_earlier_running_time_is_billed_and_its_wait_is_not(
        scli: SlurmCli, tmp_path: Path, workdir: str, slurm: SlurmCluster) -> None:
    """R04: a requeued job was billed only from its last start (its batch script's new
    `launched` replaced the first one). Each run of the job is billed, the time Slurm held
    it queued between them is not, and `status`, `runs` and `costs` say one figure."""
    config = scli.config_home / "rtrain-tui" / "config.toml"
    config.write_text(config.read_text() + "price_per_hour = 3600\n")  # a dollar a second
    start(scli, tmp_path, workdir, "billed", steps=100000, step_seconds=0.2)
    wait_for(scli, "billed", workdir, lambda s: s["state"] == "running")
    run_dir = Path(workdir) / "billed"
    job = (run_dir / "slurm_job_id").read_text().strip()
    time.sleep(4)  # its first run: 4 s and more
    slurm.client("scontrol", "requeue", job)
    deadline = time.monotonic() + 30
    while not (run_dir / "status").exists():
        assert time.monotonic() < deadline, "the first run wrote no status"
        time.sleep(0.2)
    first_end = int((run_dir / "status").stat().st_mtime)
    wait_for(scli, "billed", workdir, lambda s: s["state"] == "running"
             and (run_dir / ".rtrain" / "attempts.jsonl").read_text().count('"launched"') == 2, timeout=150)
    time.sleep(2)
    assert scli("stop", LOGIN, "billed", "--workdir", workdir, "--grace", "1").rc == 0
    got = status(scli, "billed", workdir)
    assert got["state"] == "stopped"

    launches = [json.loads(x) for x in (run_dir / ".rtrain" / "attempts.jsonl").read_text().splitlines()
                if '"launched"' in x]
    assert len(launches) == 2
    end = int((run_dir / "status").stat().st_mtime)
    first, second = first_end - launches[0]["launched"], end - launches[1]["launched"]
    waited = launches[1]["launched"] - first_end
    assert first >= 4 and second >= 2 and waited >= 0
    # Both runs' seconds (the first as its script counted them: within a second of its
    # `status` file's), and not the wait between.
    assert abs(Decimal(str(got["cost"])) - (first + second)) <= 1, (got["cost"], first, second, waited)
    listed = [r["cost"] for r in json.loads(scli("runs", "--json").out) if r["run_id"] == "billed"]
    by_host = json.loads(scli("costs", "--json").out)["rows"]
    assert listed == [got["cost"]] and [r["cost"] for r in by_host] == [got["cost"]]
