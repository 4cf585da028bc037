"""The unit lane keeps to itself: a test here cannot start the sshd hosts or a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.slurm_cluster
import tests.sshd


def test_asking_for_the_sshd_hosts_fails_in_the_unit_lane(request: pytest.FixtureRequest) -> None:
    with pytest.raises(pytest.fail.Exception, match="tests/unit starts no sshd"):
        request.getfixturevalue("hosts")


def test_starting_sshd_or_slurm_directly_fails_in_the_unit_lane(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="starts no sshd or Slurm"):
        tests.sshd.start_hosts(tmp_path)
    with pytest.raises(pytest.fail.Exception, match="starts no sshd or Slurm"):
        tests.slurm_cluster.start_cluster()
