"""The fixture itself: a real cluster, reachable through the login node's sshd."""

from __future__ import annotations

import subprocess

from tests.slurm.conftest import LOGIN
from tests.slurm_cluster import SlurmCluster
from tests.sshd import SshHosts


def test_cluster_runs_a_gpu_job_submitted_over_ssh(hosts: SshHosts, slurm: SlurmCluster) -> None:
    ssh = ["ssh", "-F", str(slurm.ssh_config), "-o", "BatchMode=yes",
           "-o", "StrictHostKeyChecking=accept-new", LOGIN]
    out = subprocess.run(ssh + ["sinfo -h -o '%P %t %G'"], capture_output=True, text=True,
                         timeout=30, env=hosts.env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["gpu*", "idle", "gpu:2", "multi", "idle", "gpu:1"]
    job = subprocess.run(ssh + ["sbatch --parsable --wait --gpus-per-node=2 "
                                "--wrap 'echo gpus=$CUDA_VISIBLE_DEVICES' -o /dev/null"],
                         capture_output=True, text=True, timeout=60, env=hosts.env())
    assert job.returncode == 0, job.stderr
    state = slurm.client("scontrol", "-o", "show", "job", job.stdout.strip().split(";")[0])
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state
