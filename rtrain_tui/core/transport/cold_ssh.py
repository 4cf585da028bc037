"""A new process's big upload: its `ssh` started before asyncssh is even imported.

A cold `rtrain-tui start -d BIG` spends 0.1-0.15 s importing asyncssh and reading the ssh
config with it before it could start the dataset's own `ssh` (openssh_pipe.py), whose
login then only begins. Nothing that `ssh` needs takes asyncssh: OpenSSH says how it
reads the config for this host (`ssh -G`), and whether the host's key is on record is a
look at the known_hosts files it names (plain and hashed names). So that `ssh` logs in
while the rest of the start gets ready.

Only the plain case is taken: no ProxyJump or ProxyCommand, the key under its exact name
(no wildcard or negated pattern, no @cert-authority), no @revoked line, no `%` token
left in a file's name. Anything else returns None and the upload goes the usual way
(channel.EarlyBulk), which knows those cases: this is a head start, never a second
judgement of what may log in.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rtrain_tui.core.transport import openssh_pipe
from rtrain_tui.core.transport.bounded import bounded

SETTINGS_TIMEOUT = 5.0  # `ssh -G` reads files only (a `Match exec` runs a command)


@dataclass
class Spawned:
    """An `ssh … command` logging in; its stdin is the pipe `write_end` (an upload's)."""

    command: str
    process: asyncio.subprocess.Process
    write_end: int
    taken: bool = False

    async def discard(self) -> None:
        """End it unless an upload took it (channel.EarlyBulk.adopt): a no-op then."""
        if self.taken:
            return
        self.taken = True
        os.close(self.write_end)  # the host program, if it started, reads its end
        await openssh_pipe.end(self.process)


async def spawn(ssh_config: Path | None, alias: str, command: str) -> Spawned | None:
    """Start `ssh … command` for an upload, where the plain case holds; else None."""
    ssh = shutil.which("ssh")
    if ssh is None or ssh_config is None or not ssh_config.exists():
        return None
    try:
        words = await _command_line(ssh, str(ssh_config), alias, command)
    except (OSError, TimeoutError, ValueError):
        return None
    if words is None:
        return None
    async def starting(read_end: int) -> asyncio.subprocess.Process | None:
        try:
            return await openssh_pipe.spawn(words, read_end)
        except OSError:
            return None

    started = await openssh_pipe.with_stdin_pipe(starting)
    return Spawned(command, *started) if started is not None else None


async def _command_line(ssh: str, config: str, alias: str, command: str) -> list[str] | None:
    from rtrain_tui.core.transport.options import DEFAULT_CONNECT_TIMEOUT, known_hosts_name

    # `ssh -V` too (command_line asks it once per process): the three side by side.
    # return_exceptions: one failing (OSError) never leaves the others unreaped.
    given, default, _ = await asyncio.gather(_settings(ssh, config, alias),
                                             _settings(ssh, "none", alias),
                                             openssh_pipe.version(ssh), return_exceptions=True)
    if not isinstance(given, dict) or not isinstance(default, dict):
        return None
    if given.get("proxyjump", "none") != "none" or given.get("proxycommand", "none") != "none":
        return None
    files = given.get("userknownhostsfile", "").split()
    name = given.get("hostkeyalias") or known_hosts_name(given["hostname"], int(given["port"]))
    if not files or any("%" in f for f in files) or not key_on_record(files, name):
        return None
    timeout = given.get("connecttimeout", "none")
    return await openssh_pipe.command_line(
        ssh, config, DEFAULT_CONNECT_TIMEOUT if timeout == "none" else float(timeout),
        given.get("ciphers") != default.get("ciphers"), alias, command)


async def _settings(ssh: str, config: str, alias: str) -> dict[str, str] | None:
    """`ssh -G`'s settings for `alias` (lower-case names), or None where it fails."""
    process = await asyncio.create_subprocess_exec(
        ssh, "-G", "-F", config, "--", alias, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        out, _ = await bounded(process.communicate(), SETTINGS_TIMEOUT)
    except BaseException:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    if process.returncode != 0:
        return None
    settings: dict[str, str] = {}
    for row in out.decode("utf-8", "replace").splitlines():
        key, _, value = row.partition(" ")
        settings.setdefault(key.lower(), value.strip())
    return settings if "hostname" in settings and settings.get("port", "").isdigit() else None


def key_on_record(files: list[str], name: str) -> bool:
    """Whether a known_hosts file holds a key for `name` (`host` or `[host]:port`) as a
    plain or hashed entry of its own. False where unsure: a @revoked line anywhere, or
    the name only under a pattern."""
    found = False
    for path in files:
        try:
            text = Path(path).read_text("utf-8", "replace")
        except FileNotFoundError:
            continue
        except OSError:
            return False
        for line in text.splitlines():
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            if fields[0].startswith("@"):
                if fields[0] == "@revoked":
                    return False  # ssh's own judgement, not this one's
                continue
            if len(fields) >= 3 and _names(fields[0], name):
                found = True
    return found


def _names(hosts: str, name: str) -> bool:
    """Whether a known_hosts line's host field names exactly `name`."""
    if hosts.startswith("|1|"):
        try:
            _, _, salt, digest = hosts.split("|")
            key, want = base64.b64decode(salt), base64.b64decode(digest)
        except (ValueError, binascii.Error):
            return False
        return hmac.compare_digest(hmac.new(key, name.encode(), hashlib.sha1).digest(), want)
    patterns = hosts.split(",")
    if any(p.startswith("!") for p in patterns):
        return False  # a negation: only a full matcher may say
    return any(p.lower() == name.lower() for p in patterns)
