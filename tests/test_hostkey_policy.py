"""Host keys and identities follow the ssh config the way OpenSSH reads it.

Each test writes its own ssh config and known_hosts next to the session's real sshd pair,
so policies never leak between tests. Where it matters, the real `ssh` client checks
what we recorded: a key recorded by rtrain-tui must be one OpenSSH finds.
"""

from __future__ import annotations

import asyncio
import getpass
import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest

from rtrain_tui.core.errors import HostKeyChangedError, ValidationError
from rtrain_tui.core.transport.connection import HostConnection
from tests.sshd import SshHosts


def _config(hosts: SshHosts, tmp_path: Path, body: str) -> tuple[Path, Path]:
    """An ssh config whose `gpu` and `cpu` reach the test sshds, with a known_hosts of its own."""
    known = tmp_path / "known_hosts"
    key = hosts.home / ".ssh" / "id_test"
    text = body.format(gpu=hosts.ports["gpu"], cpu=hosts.ports["cpu"], key=key, known=known,
                       user=getpass.getuser())
    config = tmp_path / "ssh_config"
    config.write_text(text)
    return config, known


def _echo(config: Path, alias: str, warnings: list[str] | None = None) -> str:
    async def go() -> str:
        conn = HostConnection(alias, config,
                              on_warning=None if warnings is None else warnings.append)
        try:
            return (await conn.run("echo reached", timeout=20)).strip()
        finally:
            await conn.close()

    return asyncio.run(go())


def _host_key(hosts: SshHosts, name: str) -> str:
    return (hosts.root / f"host_key_{name}.pub").read_text().split()[:2]  # type: ignore[return-value]


COMMON = "  HostName 127.0.0.1\n  User {user}\n  IdentityFile {key}\n  UserKnownHostsFile {known}\n"


def test_accept_new_records_a_new_key_and_refuses_a_changed_one(hosts: SshHosts, tmp_path: Path) -> None:
    config, known = _config(hosts, tmp_path, "Host gpu\n" + COMMON + "  Port {gpu}\n")
    assert _echo(config, "gpu") == "reached"
    kind, key = _host_key(hosts, "gpu")
    assert known.read_text() == f"[127.0.0.1]:{hosts.ports['gpu']} {kind} {key}\n"
    # OpenSSH itself finds what we recorded: it refuses unknown keys under `yes`.
    ssh = subprocess.run(["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=yes",
                          "-o", "BatchMode=yes", "gpu", "true"], capture_output=True, text=True,
                         timeout=30, env=hosts.env())
    assert ssh.returncode == 0, ssh.stderr
    # The host is reinstalled: another key on record for it is refused, naming the line.
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known.write_text(f"# a comment\n[127.0.0.1]:{hosts.ports['gpu']} {other}")
    with pytest.raises(HostKeyChangedError, match=rf"remove line 2 of {known}"):
        _echo(config, "gpu")


def test_strict_yes_refuses_an_unknown_key_and_records_nothing(hosts: SshHosts, tmp_path: Path) -> None:
    config, known = _config(hosts, tmp_path,
                            "Host gpu\n" + COMMON + "  Port {gpu}\n  StrictHostKeyChecking yes\n")
    with pytest.raises(HostKeyChangedError) as caught:
        _echo(config, "gpu")
    message = str(caught.value)
    assert "StrictHostKeyChecking is yes" in message and "ssh gpu" in message, message
    assert "\n" not in message
    assert not known.exists()
    # Once the key is on record (as `ssh gpu` would put it there), `yes` connects.
    kind, key = _host_key(hosts, "gpu")
    known.write_text(f"[127.0.0.1]:{hosts.ports['gpu']} {kind} {key}\n")
    assert _echo(config, "gpu") == "reached"


@pytest.mark.parametrize("word", ["no", "off"])
def test_strict_no_accepts_new_and_changed_keys_without_recording(
        hosts: SshHosts, tmp_path: Path, word: str) -> None:
    config, known = _config(hosts, tmp_path,
                            "Host gpu\n" + COMMON + "  Port {gpu}\n  StrictHostKeyChecking " + word + "\n")
    assert _echo(config, "gpu") == "reached"
    assert not known.exists()
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known.write_text(f"[127.0.0.1]:{hosts.ports['gpu']} {other}")
    assert _echo(config, "gpu") == "reached"
    assert known.read_text() == f"[127.0.0.1]:{hosts.ports['gpu']} {other}"


def test_host_key_alias_is_used_for_recording_and_lookup(hosts: SshHosts, tmp_path: Path) -> None:
    config, known = _config(hosts, tmp_path,
                            "Host gpu\n" + COMMON + "  Port {gpu}\n  HostKeyAlias trainbox\n")
    assert _echo(config, "gpu") == "reached"
    kind, key = _host_key(hosts, "gpu")
    assert known.read_text() == f"trainbox {kind} {key}\n"
    assert _echo(config, "gpu") == "reached"  # found under the alias, nothing added
    assert known.read_text().count("\n") == 1
    ssh = subprocess.run(["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=yes",
                          "-o", "BatchMode=yes", "gpu", "true"], capture_output=True, text=True,
                         timeout=30, env=hosts.env())
    assert ssh.returncode == 0, ssh.stderr
    # A key recorded under the alias that differs is a changed key.
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known.write_text(f"trainbox {other}")
    with pytest.raises(HostKeyChangedError, match="remove line 1"):
        _echo(config, "gpu")


JUMP = ("Host viajump\n" + COMMON + "  Port {gpu}\n  ProxyJump bastion\n"
        "Host bastion\n" + COMMON + "  Port {cpu}\n")


def test_proxy_jump_follows_each_hosts_policy_and_records_both(hosts: SshHosts, tmp_path: Path) -> None:
    config, known = _config(hosts, tmp_path, JUMP)

    async def go() -> tuple[str, int]:
        conn = HostConnection("viajump", config)
        try:
            out = (await conn.run("echo reached", timeout=20)).strip()
            return out, len(conn._jumps)
        finally:
            await conn.close()

    assert asyncio.run(go()) == ("reached", 1)
    names = [line.split()[0] for line in known.read_text().splitlines()]
    assert names == [f"[127.0.0.1]:{hosts.ports['cpu']}", f"[127.0.0.1]:{hosts.ports['gpu']}"]


def test_an_unknown_jump_host_key_is_refused_by_name(hosts: SshHosts, tmp_path: Path) -> None:
    config, known = _config(hosts, tmp_path, JUMP + "  StrictHostKeyChecking yes\n")
    with pytest.raises(HostKeyChangedError) as caught:
        _echo(config, "viajump")
    message = str(caught.value)
    assert message.startswith("cannot reach viajump: jump host bastion's host key is not on record")
    assert "ssh bastion" in message
    assert not known.exists()  # the target was never reached, nothing recorded


def test_a_changed_jump_host_key_names_the_jump_host(hosts: SshHosts, tmp_path: Path) -> None:
    config, known = _config(hosts, tmp_path, JUMP)
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known.write_text(f"[127.0.0.1]:{hosts.ports['cpu']} {other}")
    with pytest.raises(HostKeyChangedError,
                       match=rf"viajump: jump host bastion's host key changed. If bastion was "
                             rf"reinstalled, remove line 1 of {known}"):
        _echo(config, "viajump")


def test_a_missing_identity_file_is_skipped_with_one_warning(hosts: SshHosts, tmp_path: Path) -> None:
    missing = tmp_path / "no_such_key"
    config, _ = _config(hosts, tmp_path,
                        "Host gpu\n  IdentityFile " + str(missing) + "\n" + COMMON + "  Port {gpu}\n")
    warnings: list[str] = []
    assert _echo(config, "gpu", warnings) == "reached"
    assert warnings == [f"gpu: IdentityFile {missing} does not exist; skipped"]
    # The CLI says it on stderr, and still works.
    index = tmp_path / "runs.toml"
    p = subprocess.run([sys.executable, "-m", "rtrain_tui", "--ssh-config", str(config),
                        "--index", str(index), "preflight", "gpu"], capture_output=True,
                       text=True, timeout=60, env=hosts.env())
    assert p.returncode == 0, p.stderr
    assert f"rtrain-tui: warning: gpu: IdentityFile {missing} does not exist; skipped\n" in p.stderr


def test_a_bad_strict_host_key_checking_value_is_one_line_before_connecting(
        hosts: SshHosts, tmp_path: Path) -> None:
    config, known = _config(hosts, tmp_path,
                            "Host gpu\n" + COMMON + "  Port {gpu}\n  StrictHostKeyChecking maybe\n")
    p = subprocess.run([sys.executable, "-m", "rtrain_tui", "--ssh-config", str(config),
                        "--index", str(tmp_path / "runs.toml"), "preflight", "gpu"],
                       capture_output=True, text=True, timeout=60, env=hosts.env())
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1
    assert "StrictHostKeyChecking 'maybe' for gpu is not one of yes, no, accept-new" in p.stderr
    assert not known.exists()
    with pytest.raises(ValidationError):
        _echo(config, "gpu")


def test_a_key_is_on_record_for_the_system_ssh_exactly_when_it_logs_in_on_its_own(
        hosts: SshHosts, tmp_path: Path) -> None:
    """A big upload starts the system `ssh` before its own connection is made when
    host_key_on_record says so (transfer.EarlyBulk): it must agree with OpenSSH, which
    insists on every key on the way (StrictHostKeyChecking=yes), a ProxyJump host's too."""
    config, known = _config(hosts, tmp_path, "Host gpu\n" + COMMON + "  Port {gpu}\n" + JUMP)

    def on_record(alias: str) -> bool:
        return HostConnection(alias, config).host_key_on_record()

    def ssh_logs_in(alias: str) -> bool:
        return subprocess.run(["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=yes",
                               "-o", "BatchMode=yes", alias, "true"], capture_output=True,
                              timeout=30, env=hosts.env()).returncode == 0

    def agreed() -> dict[str, bool]:
        says = {alias: on_record(alias) for alias in ("gpu", "viajump")}
        assert says == {alias: ssh_logs_in(alias) for alias in says}
        return says

    assert agreed() == {"gpu": False, "viajump": False}
    _echo(config, "gpu")  # the target's key is recorded; the jump host's is not
    assert agreed() == {"gpu": True, "viajump": False}
    _echo(config, "viajump")  # the jump host's too (accept-new)
    assert agreed() == {"gpu": True, "viajump": True}
