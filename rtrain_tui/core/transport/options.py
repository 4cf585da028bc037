"""An alias's SSH options as asyncssh (and OpenSSH) apply them, and the host keys on
record: StrictHostKeyChecking applied as OpenSSH does, ProxyJump hops read, a host's
key looked up under the name OpenSSH records it by. Read by the connection
(connection.py) and by the system `ssh` paths (cold_ssh.py, openssh_pipe.py).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.transport import ssh_import

if TYPE_CHECKING:
    import asyncssh

# Its host-key client imports asyncssh on first use, maybe before connection.py is: that
# import too runs no compiler and prints no DSA warning (ssh_import.py).
ssh_import.install()

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KEEPALIVE = 15


@dataclass(frozen=True)
class HostOptions:
    """The options of one alias that rtrain-tui itself needs to know about."""

    alias: str
    hostname: str
    port: int
    connect_timeout: float
    keepalive: int
    known_hosts: tuple[Path, ...]
    strict: str = "accept-new"  # StrictHostKeyChecking: "yes", "no" or "accept-new"
    key_alias: str | None = None  # HostKeyAlias: the name keys are looked up and recorded under
    jump: str | None = None  # ProxyJump
    identity_files: tuple[Path, ...] = ()  # IdentityFile entries that exist
    missing_identities: tuple[str, ...] = ()  # IdentityFile entries that do not
    ciphers_set: bool = False  # the config names its own Ciphers: we do not reorder them
    proxy_command: str | None = None  # ProxyCommand, its %h/%p/… filled in as OpenSSH does


# OpenSSH's words for StrictHostKeyChecking. There is no prompt to answer here, so `ask`
# (OpenSSH's default, which rtrain-tui replaces with accept-new) refuses like `yes`.
_STRICT = {"yes": "yes", "ask": "yes", "no": "no", "off": "no", "accept-new": "accept-new"}


def _client_config_class() -> Any:  # a subclass of SSHClientConfig; its values are untyped
    """asyncssh's ssh-config reader, taught the one option it does not read itself, and
    to fill in %h, %p and the other tokens once, with the final values, as OpenSSH does."""
    from asyncssh.config import SSHClientConfig, SSHConfig

    class Config(SSHClientConfig):
        _handlers = {**SSHClientConfig._handlers,
                     "stricthostkeychecking": ("StrictHostKeyChecking", SSHConfig._set_string)}

        def _include(self, option: str, args: list[str]) -> None:
            # asyncssh fills in the tokens of ProxyCommand, IdentityFile, … at the end of
            # every file it reads, an Included one too: a `Host *` ProxyCommand from a
            # file included at the top (the usual place) got the alias and port 22, not
            # the HostName and Port that come after it. Here only the top file's end does.
            depth = self.__dict__.get("_include_depth", 0)
            self._include_depth = depth + 1
            self._percent_expand = set()
            try:
                SSHClientConfig._include(self, option, args)
            finally:
                self._include_depth = depth
                if depth == 0:
                    del self._percent_expand  # the class's set again

    Config._handlers = {**Config._handlers, "include": ("Include", Config._include)}
    return Config


def host_options(alias: str, ssh_config: Path | None) -> HostOptions:
    """Read an alias's options the way asyncssh (and OpenSSH) will apply them."""
    paths = [str(ssh_config)] if ssh_config and ssh_config.exists() else []
    cfg = _client_config_class().load(None, paths, False, False, False, getpass.getuser(), (),
                                      alias, ())
    known = cfg.get("UserKnownHostsFile") or ["~/.ssh/known_hosts"]
    strict_word = str(cfg.get("StrictHostKeyChecking") or "accept-new")
    strict = _STRICT.get(strict_word.lower())
    if strict is None:
        raise ValidationError(
            f"{ssh_config}: StrictHostKeyChecking {strict_word!r} for {alias} is not one of "
            "yes, no, accept-new: fix the ssh config.")
    jump = cfg.get("ProxyJump")
    identities = [Path(os.path.expanduser(str(p))) for p in cfg.get("IdentityFile") or ()]
    return HostOptions(
        alias=alias,
        hostname=str(cfg.get("Hostname") or alias),
        port=int(cfg.get("Port") or 22),
        connect_timeout=float(cfg.get("ConnectTimeout") or DEFAULT_CONNECT_TIMEOUT),
        keepalive=int(cfg.get("ServerAliveInterval") or DEFAULT_KEEPALIVE),
        known_hosts=tuple(Path(os.path.expanduser(p)) for p in known),
        strict=strict,
        key_alias=cfg.get("HostKeyAlias"),
        jump=None if not jump or str(jump).lower() == "none" else str(jump),
        identity_files=tuple(p for p in identities if p.exists()),
        missing_identities=tuple(str(p) for p in identities if not p.exists()),
        ciphers_set=bool(cfg.get("Ciphers")),
        proxy_command=cfg.get("ProxyCommand"),
    )


def known_hosts_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


def host_key_client(opts: HostOptions) -> Any:
    """An asyncssh client that applies the alias's StrictHostKeyChecking, as OpenSSH does.

    asyncssh calls `validate_host_public_key` only for a key not on record (under
    HostKeyAlias when one is set). `accept-new` records a new host's key in the first
    UserKnownHostsFile and refuses a changed one; `yes` refuses both; `no` accepts both
    and records nothing. `changed` names the file and line to fix; `unknown` says the
    key was refused only for being new.
    """
    import asyncssh

    class HostKeyClient(asyncssh.SSHClient):
        changed: tuple[Path, int] | None = None
        unknown = False

        def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
            for path in opts.known_hosts:
                line_no, same = _known_line(path, host, addr, port, key)
                if same:
                    # Recorded since this connection began (by us, on first contact):
                    # asyncssh asks again on every re-key, after each GiB moved.
                    return True
                if line_no:
                    self.changed = (path, line_no)
                    return opts.strict == "no"
            if opts.strict == "yes":
                self.unknown = True
                return False
            if opts.strict == "no":
                return True
            target = opts.known_hosts[0]
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            entry = opts.key_alias or known_hosts_name(opts.hostname, opts.port)
            with target.open("a") as f:
                f.write(f"{entry} {key.export_public_key().decode().strip()}\n")
            return True

    return HostKeyClient()


def read_known_hosts(paths: tuple[Path, ...]) -> asyncssh.SSHKnownHosts:
    """All recorded host keys; missing files count as empty (accept-new records there)."""
    import asyncssh

    text = ""
    for path in paths:
        try:
            text += path.read_text() + "\n"
        except OSError:
            continue
    return asyncssh.import_known_hosts(text)


def _known_line(path: Path, host: str, addr: str, port: int | None,
                key: Any = None) -> tuple[int, bool]:
    """(line of the first known_hosts entry for this host or 0, whether one holds `key`)."""
    import asyncssh

    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0, False
    first = 0
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            trusted = asyncssh.import_known_hosts(line + "\n").match(host, addr, port)[0]
        except (ValueError, asyncssh.KeyImportError):
            continue
        if trusted:
            if key is not None and any(k.public_data == key.public_data for k in trusted):
                return no, True
            first = first or no
    return first, False


def key_on_record(opts: HostOptions, port: int | None = None) -> bool:
    """Whether a known_hosts file of `opts` holds a key for the host (on `port`, when a
    ProxyJump hop names one), under the name OpenSSH looks it up by."""
    name = opts.key_alias or known_hosts_name(opts.hostname, port or opts.port)
    return any(_known_line(path, name, "", None)[0] for path in opts.known_hosts)


def parse_hop(hop: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]` of one ProxyJump hop (an ssh:// URI's form included)."""
    hop = hop.removeprefix("ssh://")
    user, _, rest = hop.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):  # [v6]:port
        host, _, tail = rest[1:].partition("]")
        port = tail.removeprefix(":") or None
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    try:
        return user or None, host, int(port) if port else None
    except ValueError:
        raise ValidationError(f"ProxyJump hop {hop!r} has a bad port: fix the ssh config.") from None

