"""Options users keep in their ssh config for interactive use do not break rtrain-tui.

Against the real sshd, with a config that sets them for the host and then includes
the test's own config (OpenSSH and asyncssh take the first value they read).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rtrain_tui.core.transfers import transfer
from rtrain_tui.core.transport import openssh_pipe
from rtrain_tui.core.transport.connection import HostConnection
from tests.sshd import SshHosts
from tests.test_transfer_openssh import cancel_upload_midway


def config_with(hosts: SshHosts, tmp_path: Path, *lines: str) -> Path:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu\n" + "".join(f"  {line}\n" for line in lines)
                   + f"\nInclude {hosts.ssh_config}\n")
    return cfg


def round_trip(hosts: SshHosts, cfg: Path, tmp_path: Path) -> HostConnection:
    """A probe, a dataset upload (through the system ssh) and a fetch, on this config."""
    data = tmp_path / "d.jsonl"
    data.write_bytes(os.urandom(2 << 20) + b"\r\n\x03\x04 line endings and controls\n")
    run_dir = tmp_path / "work" / "run"
    run_dir.mkdir(parents=True)

    async def go() -> HostConnection:
        conn = HostConnection("gpu", cfg)
        try:
            assert (await conn.run("echo probe-ok")).strip() == "probe-ok"
            await transfer.ship_dataset(conn, None, data, str(run_dir))
            got = await transfer.fetch(conn, str(run_dir), data.name, tmp_path / "back")
            assert got.read_bytes() == data.read_bytes()
        finally:
            await conn.close()
        return conn
    return asyncio.run(go())


@pytest.fixture(autouse=True)
def _big_is_small(monkeypatch: pytest.MonkeyPatch, hosts: SshHosts) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setattr(openssh_pipe, "MIN_BYTES", 1 << 20)


def test_request_tty_force_gets_no_terminal_on_any_channel(hosts: SshHosts, tmp_path: Path) -> None:
    """It hung every probe for 30 s: the shell got a pty, which echoed and rewrote bytes."""
    conn = round_trip(hosts, config_with(hosts, tmp_path, "RequestTTY force"), tmp_path)
    assert conn.bulk_client_refused is None


def test_a_control_master_with_persist_and_forwards_is_used_as_configured(
    hosts: SshHosts, tmp_path: Path,
) -> None:
    control = Path(tempfile.mkdtemp(prefix="cm", dir="/tmp"))  # a socket path is short
    cfg = config_with(hosts, tmp_path, "ControlMaster auto", f"ControlPath {control}/%C",
                      "ControlPersist 30", "LocalForward 127.0.0.1:1 127.0.0.1:2")
    try:
        conn = round_trip(hosts, cfg, tmp_path)
        assert conn.bulk_client_refused is None
    finally:  # the master the upload's ssh left behind, stopped through its own socket
        subprocess.run(["ssh", "-F", str(cfg), "-O", "exit", "gpu"], capture_output=True,
                       env=hosts.env(), timeout=30)
        shutil.rmtree(control, ignore_errors=True)


@pytest.mark.parametrize("option", ["StdinNull yes", "SessionType none"])
def test_options_that_would_break_the_pipe_are_overridden_for_the_system_ssh(
    hosts: SshHosts, tmp_path: Path, option: str,
) -> None:
    """Each made every big upload fail: StdinNull with "failed: short", SessionType none
    after 7 s, and neither fell back."""
    conn = round_trip(hosts, config_with(hosts, tmp_path, option), tmp_path)
    assert conn.bulk_client_refused is None


def test_a_cancel_ends_the_upload_even_where_ssh_would_fork_after_login(
    hosts: SshHosts, tmp_path: Path,
) -> None:
    """With ForkAfterAuthentication, the ssh we ended had forked: the bytes kept moving
    and the cancelled dataset was published on the host."""
    cfg = config_with(hosts, tmp_path, "ForkAfterAuthentication yes")
    data = tmp_path / "d.jsonl"
    data.write_bytes(os.urandom(256 << 20))
    cancel_upload_midway(cfg, data, tmp_path / "work")


RELAY = """
import os, socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
with open(sys.argv[3], "a") as log:
    log.write(f"{host} {port}\\n")
if host != "127.0.0.1":  # no name lookup, nothing sent anywhere but this machine
    sys.exit(f"relay: asked for {host}:{port}")
s = socket.create_connection((host, port))
def up():
    while data := os.read(0, 65536):
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := s.recv(65536):
    os.write(1, data)
"""


def test_a_proxy_command_from_a_file_included_first_gets_the_final_host_and_port(
    hosts: SshHosts, tmp_path: Path,
) -> None:
    """`Include` at the top with a `Host *` ProxyCommand, HostName and Port later: OpenSSH
    fills %h %p in with the final values; asyncssh filled in the alias and 22, so every
    connection failed with "Connection lost"."""
    relay, log = tmp_path / "relay.py", tmp_path / "relay.log"
    relay.write_text(RELAY)
    defaults = tmp_path / "defaults.conf"
    defaults.write_text(f"Host *\n  ProxyCommand {sys.executable} {relay} %h %p {log}\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Include {defaults}\nInclude {hosts.ssh_config}\n")
    conn = round_trip(hosts, cfg, tmp_path)  # asyncssh, and the upload's system ssh
    assert conn.bulk_client_refused is None
    asked = log.read_text().splitlines()
    assert len(asked) >= 2 and set(asked) == {f"127.0.0.1 {hosts.ports['gpu']}"}, asked
