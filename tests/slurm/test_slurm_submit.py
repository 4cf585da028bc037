"""What sbatch says besides the job id: the test cluster's job_submit.lua prints a notice
on stderr for every job (tests/slurm_cluster.py), as real clusters do."""

from __future__ import annotations

import json
import re
import time
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


def test_a_run_whose_sbatch_is_still_submitting_reads_starting_and_no_other_laptop_resumes_it(
        hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path, workdir: str) -> None:
    """R01: a login node whose `sbatch` takes 10 s (a busy controller, a site's wrapper).
    While it submits, the run is `starting`, never `lost`, to another laptop too, and that
    laptop's resume is refused: two jobs would train in one run dir, and a stop would
    cancel only one of them."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text('#!/bin/sh\nsleep 10\nexec /usr/bin/sbatch "$@"\n')
    (bindir / "sbatch").chmod(0o755)
    assert slurm.ssh_config is not None
    entry = hosts.extra_host("slow", sftp="Subsystem sftp internal-sftp\n",
                             extra_env={"SLURM_CONF": str(slurm.conf)}, bin_dir=bindir)
    ssh_config = slurm.ssh_config.with_name("config_slow")
    ssh_config.write_text(slurm.ssh_config.read_text() + entry)
    (tmp_path / "xdg" / "rtrain-tui").mkdir(parents=True)
    (tmp_path / "xdg" / "rtrain-tui" / "config.toml").write_text('[hosts.slow]\nbackend = "slurm"\n')
    laptop = SlurmCli(hosts, tmp_path / "runs.toml", tmp_path / "xdg", ssh_config)
    other = SlurmCli(hosts, tmp_path / "other-runs.toml", tmp_path / "xdg", ssh_config)
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.2)
    run = Path(workdir) / "slowsub"
    before = set(slurm.job_ids())
    launch = laptop.popen("start", "slow", "-c", str(config), "--workdir", workdir, "--run-id",
                         "slowsub", "--no-follow")
    try:
        deadline = time.monotonic() + 60
        while not (run / "launch.lock").exists():  # sbatch is running from here on
            assert time.monotonic() < deadline and launch.poll() is None, launch.communicate()
            time.sleep(0.05)
        seen = other("status", "slow", "slowsub", "--workdir", workdir, "--json")
        assert seen.rc == 0, seen.err
        said = json.loads(seen.out)
        assert (said["state"], said["reason"]) == ("starting", "submitting the job to the scheduler")
        resumed = other("resume", "slow", "slowsub", "--workdir", workdir, "--restart", timeout=60)
        assert resumed.rc == 1
        assert "slowsub is starting on slow: a start or resume of it is under way" in resumed.err, resumed.err
        assert not (run / "slurm_job_id").exists(), "the test's sbatch answered too soon to tell"
        out, err = launch.communicate(timeout=120)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.communicate()
    assert launch.returncode == 0, err
    assert out.startswith("started slowsub on slow (Slurm job ")
    assert len(set(slurm.job_ids()) - before) == 1  # one job, one trainer in the run dir
    assert not (run / ".rtrain" / "attempts" / "2").exists()  # the refused resume claimed nothing
    assert not (run / "submitting").exists()
