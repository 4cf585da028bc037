"""What sbatch says besides the job id: the test cluster's job_submit.lua prints a notice
on stderr for every job (tests/slurm_cluster.py), as real clusters do."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import CliResult, write_config
from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm.test_slurm_cli import start, status, wait_for
from tests.slurm_cluster import SUBMIT_NOTICE, SlurmCluster
from tests.sshd import SshHosts


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


def test_a_site_wrapper_banner_before_the_job_id_is_not_the_job_id(
        hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path, workdir: str) -> None:
    """A login node whose `sbatch` is a site's wrapper printing a banner on stdout before
    the real sbatch's id: the start used to say the run did not launch while its job was
    queued. And a wrapper that swallows the id: the start says the job may be queued."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(
        "#!/bin/sh\necho 'Welcome to the cluster. Be nice.'\n"
        f'if [ -e {bindir}/swallow ]; then /usr/bin/sbatch "$@" >/dev/null; else exec /usr/bin/sbatch "$@"; fi\n')
    (bindir / "sbatch").chmod(0o755)
    assert slurm.ssh_config is not None
    entry = hosts.extra_host("wrapped", sftp="Subsystem sftp internal-sftp\n",
                             extra_env={"SLURM_CONF": str(slurm.conf)}, bin_dir=bindir)
    ssh_config = slurm.ssh_config.with_name("config_wrapped")
    ssh_config.write_text(slurm.ssh_config.read_text() + entry)
    (tmp_path / "xdg" / "rtrain-tui").mkdir(parents=True)
    (tmp_path / "xdg" / "rtrain-tui" / "config.toml").write_text('[hosts.wrapped]\nbackend = "slurm"\n')
    cli = SlurmCli(hosts, tmp_path / "runs.toml", tmp_path / "xdg", ssh_config)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.2)

    def start(run_id: str) -> CliResult:
        return cli("start", "wrapped", "-c", str(config), "--workdir", workdir, "--run-id",
                   run_id, "--no-follow", timeout=180)

    r = start("banner")
    assert r.rc == 0, r.err
    m = re.fullmatch(r"started banner on wrapped \(Slurm job (\d+)\)", r.out.splitlines()[0])
    assert m, r.out
    assert m.group(1) in slurm.job_ids()
    (bindir / "swallow").touch()
    before = set(slurm.job_ids())
    r = start("swallowed")
    assert r.rc == 1
    assert ("wrapped: sbatch took swallowed but printed no job id (it printed: Welcome to the "
            "cluster. Be nice.); the job may be queued: check with squeue on wrapped.") in r.err, r.err
    assert "did not launch" not in r.err
    assert len(set(slurm.job_ids()) - before) == 1  # it was queued indeed
