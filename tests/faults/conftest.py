"""Fixtures for the fault suite: a FaultProxy in front of the `gpu` sshd, an ssh config
with the alias `viaproxy` that goes through it, a CLI that uses that config, and the
fault report that `python -m tests.faults` (or any pytest run of this folder) prints.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.faults.proxy import FaultProxy
from tests.faults.report import REPORT, ROWS, FaultRow
from tests.sshd import SshHosts

ALIAS = "viaproxy"


@pytest.fixture
def proxy(hosts: SshHosts) -> Iterator[FaultProxy]:
    """A proxy to the `gpu` sshd, fresh for each test."""
    p = FaultProxy(hosts.ports["gpu"]).start()
    yield p
    p.close()


@pytest.fixture
def proxy_config(hosts: SshHosts, proxy: FaultProxy, tmp_path: Path) -> Path:
    """The test hosts' ssh config plus `Host viaproxy`: the gpu host, through the proxy.

    Its known_hosts file is the test's own (so a test can plant a changed key), and
    keepalives are every second, so a frozen link is noticed in ~3 s, not 45.
    """
    user_line = next(line for line in hosts.ssh_config.read_text().splitlines()
                     if line.strip().startswith("User "))
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {proxy.port}\n{user_line}\n"
        f"  IdentityFile {hosts.home / '.ssh' / 'id_test'}\n"
        f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n"
        "  ConnectTimeout 2\n  ServerAliveInterval 1\n"
        # the rest as the suite's config has it, less its relative Include
        + hosts.ssh_config.read_text().replace("Include extra.conf\n", "")
    )
    return config


@dataclass
class Stream:
    """A CLI subprocess whose stdout and stderr lines are kept with the time they came."""

    proc: subprocess.Popen[str]
    out: list[tuple[float, str]] = field(default_factory=list)
    err: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._readers = [threading.Thread(target=self._read, args=(pipe, into), daemon=True)
                         for pipe, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self._readers:
            r.start()

    @staticmethod
    def _read(pipe, into: list[tuple[float, str]]) -> None:  # type: ignore[no-untyped-def]
        for line in pipe:
            into.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, pred: Callable[[list[str]], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not pred(self.lines):
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the readers catch up before judging
                if pred(self.lines):
                    return
                raise AssertionError(f"exited {self.proc.returncode} first; out={self.lines[-5:]} "
                                     f"err={self.err_lines}")
            assert time.monotonic() < deadline, f"timed out; out={self.lines[-5:]} err={self.err_lines}"
            time.sleep(0.02)

    def steps_seen(self) -> int:
        return sum("'step':" in line for line in self.lines)

    def finish(self, timeout: float = 60) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"did not end in {timeout} s; out={self.lines[-5:]} "
                                 f"err={self.err_lines}") from None
        for r in self._readers:
            r.join(5)
        return rc

    def first_output_after(self, t: float) -> float | None:
        """Seconds from `t` to the first stdout line or `reconnected` notice after it."""
        times = [when for when, _ in self.out if when >= t]
        times += [when for when, line in self.err if when >= t and "reconnected" in line]
        return min(times) - t if times else None

    @property
    def lines(self) -> list[str]:
        return [line for _, line in list(self.out)]

    @property
    def err_lines(self) -> list[str]:
        return [line for _, line in list(self.err)]


@dataclass
class ProxyCli:
    """The CLI with the proxy's ssh config (so `viaproxy` is known) and its own index."""

    hosts: SshHosts
    index: Path
    ssh_config: Path

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rtrain_tui", "--ssh-config", str(self.ssh_config),
                "--index", str(self.index), *args]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), capture_output=True, text=True,
                              timeout=timeout, env=self.hosts.env())

    def stream(self, *args: str) -> Stream:
        return Stream(subprocess.Popen(self.command(*args), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env=self.hosts.env()))


@pytest.fixture
def pcli(hosts: SshHosts, proxy_config: Path, tmp_path: Path) -> ProxyCli:
    return ProxyCli(hosts, tmp_path / "runs.toml", proxy_config)


def lost_and_duplicated(shown: list[str], log: list[str]) -> tuple[int, int]:
    """Lines of the log missing from what was shown, and lines shown too often."""
    want, got = Counter(log), Counter(shown)
    return sum((want - got).values()), sum((got - want).values())


@pytest.fixture
def fault_row(request: pytest.FixtureRequest) -> Callable[[str, str], FaultRow]:
    """Register this test's line in the fault report: `row = fault_row(case, injected)`."""

    def make(case: str, injected: str) -> FaultRow:
        row = FaultRow(case, injected)
        REPORT.append(row)
        ROWS[request.node.nodeid] = row
        return row

    return make
