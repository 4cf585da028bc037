"""What sbatch says besides the job id: the test cluster's job_submit.lua prints a notice
on stderr for every job (tests/slurm_cluster.py), as real clusters do."""

from __future__ import annotations

import re
from pathlib import Path

from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm.test_slurm_cli import start, status, wait_for
from tests.slurm_cluster import SUBMIT_NOTICE, SlurmCluster


def test_a_clusters_submit_notice_is_shown_and_never_part_of_the_job_id(
        scli: SlurmCli, tmp_path: Path, workdir: str, slurm: SlurmCluster) -> None:
    r = start(scli, tmp_path, workdir, "noticed", steps=100000, step_seconds=0.2)
    m = re.fullmatch(rf"started noticed on {LOGIN} \(Slurm job (\d+)\)", r.out.splitlines()[0])
    assert m, r.out
    job = m.group(1)
    # The notice reaches the user, on stderr (stdout is for scripts).
    assert f"rtrain-tui: {LOGIN} said: sbatch: {SUBMIT_NOTICE}" in r.err.splitlines(), r.err
    assert (Path(workdir) / "noticed" / "slurm_job_id").read_text() == f"{job}\n"
    assert job in slurm.job_ids()
    got = wait_for(scli, "noticed", workdir, lambda s: s["state"] == "running")
    assert got["slurm_job_id"] == job
    stop = scli("stop", LOGIN, "noticed", "--workdir", workdir, "--grace", "1")
    assert (stop.rc, stop.out.strip()) == (0, f"stopped noticed on {LOGIN}"), stop.err
    assert status(scli, "noticed", workdir)["state"] == "stopped"
    assert job not in slurm.live_job_ids()
