"""Fixtures for the Slurm backend: a real cluster (tests/slurm_cluster.py) behind a login node.

The login node is one more sshd of the `hosts` fixture, alias `cluster`, whose sessions
get the cluster's SLURM_CONF; it has no nvidia-smi (a login node has no GPU). Its entry
goes into an ssh config of its own (the session's shared one is left as other tests
expect it). The CLI fixture `scli` sees `cluster` as a Slurm host through its
config.toml; `pcli` has no config.toml.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.slurm_cluster import PACKAGES, SlurmCluster, missing_binaries, start_cluster
from tests.sshd import SshHosts

LOGIN = "cluster"
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `pytest -n N --dist loadgroup` (CI), every Slurm test goes to one worker:
    each worker would otherwise start a cluster of its own (three slurmd and a munged),
    which two shared cores cannot carry beside the other workers."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("slurm"))


@pytest.fixture(scope="session")
def slurm(hosts: SshHosts) -> Iterator[SlurmCluster]:
    if missing_binaries():
        # Fail, never skip: a suite that quietly skips its cluster tests hides them.
        pytest.fail(f"Slurm is not installed: apt-get install -y --no-install-recommends "
                    f"{PACKAGES} (the Slurm tests need a real cluster)", pytrace=False)
    cluster = start_cluster()
    try:
        entry = hosts.extra_host(LOGIN, sftp="Subsystem sftp internal-sftp\n",
                                 extra_env={"SLURM_CONF": str(cluster.conf)})
        # Beside the shared config, so its relative `Include` still resolves.
        cluster.ssh_config = hosts.ssh_config.with_name("config_slurm")
        cluster.ssh_config.write_text(hosts.ssh_config.read_text() + entry)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(autouse=True)
def _no_jobs_left(slurm: SlurmCluster) -> Iterator[None]:
    """Every test starts and ends with an empty queue: nothing of one test waits on another."""
    slurm.cancel_all()
    yield
    slurm.cancel_all()


@dataclass
class SlurmCli:
    """The CLI as a user with the login node in ~/.ssh/config (and maybe a config.toml)."""

    hosts: SshHosts
    index: Path
    config_home: Path
    ssh_config: Path

    def _cmd(self, args: tuple[str, ...],
             env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        cmd = [sys.executable, "-m", "rtrain_tui", "--ssh-config", str(self.ssh_config),
               "--index", str(self.index), *args]
        return cmd, {**self.hosts.env(), "XDG_CONFIG_HOME": str(self.config_home), **(env or {})}

    def __call__(self, *args: str, timeout: float = 60, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> CliResult:
        cmd, env = self._cmd(args, env)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
        return CliResult(p.returncode, p.stdout, p.stderr)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        cmd, env = self._cmd(args)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture
def scli(hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path) -> SlurmCli:
    """The CLI with `cluster` marked as a Slurm login node in its config.toml."""
    conf = tmp_path / "xdg_config" / "rtrain-tui"
    conf.mkdir(parents=True)
    (conf / "config.toml").write_text(f'[hosts.{LOGIN}]\nbackend = "slurm"\npartition = "gpu"\n')
    assert slurm.ssh_config is not None
    return SlurmCli(hosts, tmp_path / "runs.toml", tmp_path / "xdg_config", slurm.ssh_config)


@pytest.fixture
def pcli(hosts: SshHosts, slurm: SlurmCluster, tmp_path: Path) -> SlurmCli:
    """The CLI with no config.toml: every host is `direct` unless --backend says otherwise."""
    assert slurm.ssh_config is not None
    return SlurmCli(hosts, tmp_path / "runs.toml", tmp_path / "no_config", slurm.ssh_config)
