"""The fast lane: `pytest tests/unit`, the developer's run, under a minute.

Tests here start nothing: no sshd, no Slurm, no tmux, no app against a host. Local
`/bin/sh`, `dash` and `shellcheck` runs of host scripts are fine (they are how a script
is unit-tested). A test here that asks for a host fails at once, saying where it belongs,
so the lane stays fast and runs on a machine without sshd.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sshd import SshHosts


@pytest.fixture(scope="session")
def hosts() -> Iterator[SshHosts]:
    pytest.fail("tests/unit starts no sshd: a test that needs `hosts` (or `cli`) belongs in "
                "tests/, beside the other integration tests", pytrace=False)
    yield  # never reached: a generator, like the fixture it replaces


@pytest.fixture(autouse=True)
def _no_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting an sshd or a Slurm cluster directly (not through `hosts`) fails too."""
    import tests.slurm_cluster
    import tests.sshd

    def refuse(*_args: object, **_kwargs: object) -> None:
        pytest.fail("tests/unit starts no sshd or Slurm: this test belongs in tests/",
                    pytrace=False)

    monkeypatch.setattr(tests.sshd, "start_hosts", refuse)
    monkeypatch.setattr(tests.slurm_cluster, "start_cluster", refuse)
