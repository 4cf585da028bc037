"""Fixtures: a real sshd pair on 127.0.0.1 (see tests/sshd.py) and helpers to drive the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from tests.notify_receiver import receiver  # noqa: F401 (a fixture: the notification services' stand-in)
from tests.sshd import SshHosts, find_sshd, start_hosts
from tests.throttle_proxy import ThrottleProxy, proxied_alias

# The fault suite's report (tests/faults/report.py) is a plugin, not a conftest of its
# folder: under pytest-xdist only the controller prints, and it loads no deeper conftest.
pytest_plugins = ["tests.faults.report"]

# Property tests explore new random inputs on a developer's machine; in CI (CI=1, set by
# .ci/run) they run the same derandomized examples every time, so a landing is never
# decided by chance. What a random run finds is added as an @example with its fix.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _no_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture(scope="session")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    if find_sshd() is None:
        # Fail, never skip: a suite that quietly skips its sshd tests hides half of itself.
        pytest.fail("sshd not found: install openssh-server (apt-get install openssh-server); "
                    "the integration tests need a real sshd", pytrace=False)
    started = start_hosts(tmp_path_factory.mktemp("sshd"))
    yield started
    started.stop()


@dataclass
class CliResult:
    rc: int
    out: str
    err: str


@dataclass
class Cli:
    hosts: SshHosts
    index: Path

    def __call__(self, *args: str, timeout: float = 60, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> CliResult:
        cmd = [sys.executable, "-m", "rtrain_tui", "--ssh-config", str(self.hosts.ssh_config),
               "--index", str(self.index), *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**self.hosts.env(), **(env or {})}, cwd=cwd)
        return CliResult(p.returncode, p.stdout, p.stderr)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "rtrain_tui", "--ssh-config", str(self.hosts.ssh_config),
               "--index", str(self.index), *args]
        # SIGINT back to its default: a test run started in the background (`pytest &`,
        # CI) inherits SIGINT ignored, and Python then never turns Ctrl-C into anything.
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.hosts.env(),
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.fixture
def cli(hosts: SshHosts, tmp_path: Path) -> Cli:
    return Cli(hosts, tmp_path / "runs.toml")


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[str]:
    """A per-test workdir on the 'host' (same machine), absolute.

    Afterwards, any run the test left running is killed by the process group its own
    wrapper recorded: only pids this test started, never by name.
    """
    work = tmp_path / "work"
    yield str(work)
    for pid_file in work.glob("*/train.pid"):
        try:
            group = int(pid_file.read_text())
        except ValueError:
            continue
        if group <= 1:
            continue  # killpg(1) is kill(-1): every process on the machine. Tests write such files.
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # GPUs are the box's (one remote HOME per worker): a start this test claimed GPUs for
    # and never launched (its client killed mid-upload) would hold them for an hour, for
    # every later test on the box. The test is over: its claims end with it.
    for claimed in work.glob("*/gpus.claimed"):
        claimed.unlink(missing_ok=True)
    # Processes of those runs that left the group (torchrun-style workers) carry the
    # run's marker: still only processes these tests started.
    markers = {f"RTRAIN_RUN={t.read_text().strip()}".encode() for t in work.glob("*/train.token")}
    for environ in Path("/proc").glob("[0-9]*/environ") if markers else ():
        try:
            if markers & set(environ.read_bytes().split(b"\0")):
                os.kill(int(environ.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@dataclass
class Throttled:
    """A test host reached through a throttling proxy (tests/throttle_proxy.py)."""

    alias: str  # the ssh config's name for it
    ssh_config: Path  # the test hosts' config plus every alias this test made
    proxy: ThrottleProxy  # its byte counts: `proxy.up`, `proxy.down`


@pytest.fixture
def throttled(hosts: SshHosts, tmp_path: Path) -> Iterator[Callable[..., Throttled]]:
    """Make `throttled("gpu", rate_mbit=20, delay_ms=10)`: a slow, distant link to a host.

    The aliases go into a config of this test's own (asyncssh and the system `ssh` both
    read it), so the session's config, which every TUI test lists, never shows them.
    """
    proxies: list[ThrottleProxy] = []
    config = tmp_path / "ssh_config_throttled"
    config.write_text(hosts.ssh_config.read_text())

    def make(target: str = "gpu", rate_mbit: float | None = None,
             delay_ms: float = 0.0) -> Throttled:
        proxy = ThrottleProxy(hosts.ports[target], rate_mbit, delay_ms).start()
        proxies.append(proxy)
        alias = f"{target}-via-{proxy.port}"
        with config.open("a") as f:
            f.write(proxied_alias(alias, proxy, hosts.home))
        return Throttled(alias, config, proxy)

    yield make
    for proxy in proxies:
        proxy.stop()


def write_config(path: Path, **settings: object) -> Path:
    """A config.yaml for the stand-in trainer (flat key: value)."""
    path.write_text("".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n"
                            for k, v in {"model": "tiny", **settings}.items()))
    return path
