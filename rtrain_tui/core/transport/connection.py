"""SSH connections: one per host, shared by every caller, with a long-lived `sh`.

Why a long-lived shell: every `exec` on an SSH connection starts the user's login shell
(`bash -c`, which may run conda or pyenv init: 100 ms+). One `sh` per host, started once,
reads scripts on stdin and answers with framed output, so a probe costs a fork on the host
and one round trip. Scripts run in a subshell `( ... )` so they can `exit` and `cd`
without harming the shell, with stdin from /dev/null so they can never eat the next
script. Every script has a time bound; a shell that overruns it is discarded.

Log streams share one SFTP channel per host (its "logs" lane), transfers and metrics
reads another, so following 20 runs on one host needs three SSH sessions, not twenty
(OpenSSH's MaxSessions defaults to 10); and a log that hangs in a pane never holds up
the refresh's reads, since the host's sftp-server answers a channel one request at a time.

Every wait is bounded. A script's timeout covers waiting for a free shell too, and where
the host has `timeout` (coreutils, busybox) the script runs under it, so a script that
overruns is killed on the host as well, not left holding a session. Every SFTP call has
a bound (transfers: a bound on time without progress); one that overruns abandons the
channel, so one stuck file (a FIFO, a hung NFS read) never blocks the host's other logs.
A script is re-sent once after a dropped connection: every script that changes the host
is written to be idempotent (see remote_sh.py), so a re-send can never act twice.
"""

from __future__ import annotations

import asyncio
import getpass
import inspect
import math
import os
import secrets
import shlex
import socket
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rtrain_tui.core.errors import (
    AuthError,
    HostKeyChangedError,
    NotRegularFileError,
    PermanentError,
    RemoteError,
    StuckError,
    UnknownHostError,
    UnreachableError,
    ValidationError,
)
from rtrain_tui.core.transport import ssh_import
from rtrain_tui.core.transport.bounded import bounded

if TYPE_CHECKING:
    import asyncssh

# asyncssh (and the cryptography it loads) is imported on first use, not at import time:
# it is a third of the TUI's start-up, and the first frame needs no connection. That
# first use runs no C compiler looking for liboqs (ssh_import.py says why).
ssh_import.install()

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KEEPALIVE = 15
DEFAULT_COMMAND_TIMEOUT = 30.0
# Short enough that a follower notices a host that came back within ~3 s; a refused
# connection costs little, a silent host costs its ConnectTimeout per attempt anyway.
MAX_BACKOFF = 1.5
# A script up to this size (quoted) is one `sh -c` argument; a bigger one goes through
# a pipe. Linux takes at most 128 KiB per argument; the margin is for the quoting's growth.
SCRIPT_ARG_LIMIT = 100 * 1024
MAX_SHELLS = 3  # scripts of one host run side by side, so one slow script blocks none
SFTP_CALL_TIMEOUT = 20.0  # one SFTP request (open, stat, read, readdir, write, …)
LOG_LANE = "logs"  # the SFTP channel log followers share (HostConnection.sftp)
SFTP_STALL_TIMEOUT = 30.0  # a get/put that has moved no byte for this long is abandoned


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


# asyncssh puts chacha20-poly1305 first; its ChaCha20 runs in software while AES-GCM uses
# the CPU's AES instructions: 30-40 % more throughput on uploads and fetches here. The
# server picks the first of ours that it supports, so nothing is lost where it has no GCM.
_GCM_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
              "aes128-ctr", "aes192-ctr", "aes256-ctr")


def _aes_is_fast() -> bool:
    """Whether this CPU has AES instructions (x86 AES-NI, the ARMv8 crypto extension)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith(("flags", "Features")) and " aes" in line for line in f)
    except OSError:
        return platform.machine().lower() in ("arm64", "x86_64", "amd64")  # macOS: all have it


def known_hosts_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


def _host_key_client(opts: HostOptions) -> Any:
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


def _read_known_hosts(paths: tuple[Path, ...]) -> asyncssh.SSHKnownHosts:
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


class _Shell:
    """A long-lived `sh` on the host that runs one framed script at a time."""

    def __init__(self, process: asyncssh.SSHClientProcess) -> None:
        self._process = process
        self._buffer = b""
        self._count = 0
        self._nonce = secrets.token_hex(8)
        self.host_timeout = False  # the host has `timeout`: scripts are killed there too

    @property
    def closed(self) -> bool:
        return self._process.channel.is_closing() or self._process.exit_status is not None

    async def start(self) -> None:
        """Swallow the login shell's chatter and learn what the host offers.

        Whatever the login shell printed before `exec sh` (a motd, a conda banner) comes
        before this first answer, so it never precedes a real one. `RT_SHELL` lets
        scripts recognise this shell's own process group (never a run's).
        """
        # At the shell's top level, not in a framed script's subshell, so it stays set.
        self._process.stdin.write(b"RT_SHELL=$$; export RT_SHELL\n")
        # The very forms `run` uses under timeout(1), tried once: on a host without
        # timeout(1) or /dev/fd, scripts run in a plain subshell instead.
        out = await self.run(_under_timeout("echo rt_timeout=1", 10, piped=False)
                             + _under_timeout("echo rt_piped=1", 10, piped=True))
        self.host_timeout = {"rt_timeout=1", "rt_piped=1"} <= set(out.splitlines())

    async def run(self, script: str, limit: float | None = None) -> str:
        self._count += 1
        marker = f"__rtrain_{self._nonce}_{self._count}__".encode()
        if limit is not None and self.host_timeout:
            command = _under_timeout(script, limit)
        else:
            command = f"(\n{script}\n) </dev/null 2>&1\n"
        self._process.stdin.write(f"{command}printf '\\n%s\\n' '{marker.decode()}'\n".encode())
        end = b"\n" + marker + b"\n"
        while end not in self._buffer:
            chunk = await self._process.stdout.read(65536)
            if not chunk:
                raise ConnectionResetError("the remote shell ended")
            self._buffer += chunk
        out, _, self._buffer = self._buffer.partition(end)
        return out.decode("utf-8", errors="replace")

    def close(self) -> None:
        self._process.close()


async def _open_shell(conn: asyncssh.SSHClientConnection) -> _Shell:
    """A new long-lived shell on `conn`, started; its session is closed if the start fails.

    Bounded on its own: a caller that gave up leaves it running (see `_take_shell`).
    """
    import asyncssh

    # stderr only ever carries the login shell's own chatter (scripts merge theirs into
    # stdout); unread, it could stall the channel.
    process = await conn.create_process("exec sh", encoding=None, stderr=asyncssh.DEVNULL)
    shell = _Shell(process)
    try:
        async with asyncio.timeout(DEFAULT_COMMAND_TIMEOUT):
            await shell.start()
    except BaseException:
        shell.close()
        raise
    return shell


T = TypeVar("T")


def _close_when_started(starting: asyncio.Future[T], close: Callable[[T], None]) -> None:
    """Close what a start that nobody waits for any more opens, once it has opened it.

    A channel's open cannot be taken back mid-way: asyncssh finishes it after a cancel
    and nobody would ever close it (the host counts it against MaxSessions).
    """
    def started(future: asyncio.Future[T]) -> None:
        if not future.cancelled() and future.exception() is None:
            close(future.result())

    starting.add_done_callback(started)


class _Slot:
    """One of a host's MAX_SHELLS places, held by a call, or by a shell still starting
    for a call that was cancelled (until that shell is there and closed)."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = True
        self._handed = False

    def hand_to(self, starting: asyncio.Future[_Shell]) -> None:
        """Let a shell start for nobody: close it once started, then free the place."""
        self._handed = True
        _close_when_started(starting, _Shell.close)
        starting.add_done_callback(lambda _future: self._free())

    def release(self) -> None:
        if not self._handed:
            self._free()

    def _free(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()


def _under_timeout(script: str, limit: float, piped: bool | None = None) -> str:
    """A command line that runs `script` in a child `sh` under timeout(1).

    timeout(1) leads a process group of its own and KILLs all of it: the script and
    anything it started (a wedged nvidia-smi) die on the host. Nothing on the way needs
    the host's disk: a here-document would (bash, the /bin/sh of RHEL, Fedora and Arch,
    writes one bigger than a pipe holds to a file in $TMPDIR, every one before 5.1), so
    a full /tmp made every probe fail. A script that fits `SCRIPT_ARG_LIMIT` quoted is
    the argument of `sh -c`: no fork more. Linux refuses any one argument over 128 KiB
    (MAX_ARG_STRLEN), and the probe of 2,000 runs in a long workdir is larger: such a
    script (or any, with `piped`) is written by the shell's builtin printf (no argument
    limit) into a pipe that the child reads as the file /dev/fd/3, closing fd 3 first,
    so nothing the script starts (a detached run, the background GPU sampler) holds
    the pipe. Either way the script's stdin is `</dev/null`. A host without timeout(1)
    or /dev/fd fails `_Shell.start`'s trial of both forms and runs scripts in a plain
    subshell.
    """
    # The script is quoted whole: its `$` are for the child sh to expand.
    lint = "# shellcheck disable=SC2016  # the script, expanded by the child sh\n"
    head = f"timeout -s KILL {math.ceil(limit)} sh"
    quoted = shlex.quote(script)
    if piped is None:
        piped = len(quoted.encode()) > SCRIPT_ARG_LIMIT
    if not piped:
        return f"{lint}{head} -c {quoted} </dev/null 2>&1\n"
    body = shlex.quote(f"exec 3<&-\n{script.rstrip(chr(10))}")
    return f"{lint}printf '%s\\n' {body} | {head} /dev/fd/3 3<&0 </dev/null 2>&1\n"


@dataclass(frozen=True)
class DirectTarget:
    """A host reached without ~/.ssh/config: the built-in demo host.

    Its host key is known in advance (the app generated it), so it is pinned exactly.
    """

    host: str
    port: int
    username: str
    client_key: asyncssh.SSHKey
    server_key: asyncssh.SSHKey


class HostConnection:
    """The shared connection to one host alias: opened lazily, reopened after a drop."""

    def __init__(self, alias: str, ssh_config: Path | None, direct: DirectTarget | None = None,
                 on_warning: Callable[[str], None] | None = None) -> None:
        self.alias = alias
        self.options = host_options(alias, ssh_config if direct is None else None)
        self.direct = direct
        self._ssh_config = ssh_config
        self._conn: asyncssh.SSHClientConnection | None = None
        self._idle_shells: list[_Shell] = []
        self._shell_slots = asyncio.Semaphore(MAX_SHELLS)
        # One SFTP channel per lane: "" for everything, "logs" for the log panes' followers.
        # The host's sftp-server answers a channel's requests one at a time, so a read
        # stuck in one lane (a hung NFS file) must not hold up the refresh's reads.
        self._sftps: dict[str, asyncssh.SFTPClient] = {}
        self._connect_lock = asyncio.Lock()
        # Reconnect backoff: after a failed connect, callers within the window get the
        # same error at once instead of each waiting out a ConnectTimeout.
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._last_error: UnreachableError | None = None
        self._sftp_lock = asyncio.Lock()
        self._jumps: list[asyncssh.SSHClientConnection] = []  # ProxyJump hops of _conn
        self._warned: set[str] = set()
        self._warn = on_warning or (lambda message: None)
        # Why the system's `ssh` cannot carry this host's bulk transfers (openssh_pipe.py);
        # None while it can, or has not been tried.
        self.bulk_client_refused: str | None = None

    @property
    def ssh_config(self) -> Path | None:
        return self._ssh_config

    def refuse_bulk_client(self, why: str) -> None:
        """Stop using the system's `ssh` for this host's transfers; say so once."""
        self.bulk_client_refused = why
        self._warn(f"{self.alias}: transfers use the built-in SSH client, which is slower: "
                   f"the system's ssh cannot log in on its own ({why})")

    def host_key_on_record(self) -> bool:
        """Whether the host's key is in its known_hosts files already, under the name
        OpenSSH looks it up by (HostKeyAlias, else `[host]:port`), and so is every
        ProxyJump hop's: the system's `ssh`, which insists on each (openssh_pipe.py), can
        then log in before this connection has checked the keys itself."""
        if self.direct is not None:
            return False
        try:
            return _key_on_record(self.options) and (
                not self.options.jump or self._hops_on_record(self.options.jump))
        except ValidationError:  # a bad hop: connecting says so
            return False

    def _hops_on_record(self, spec: str, depth: int = 0) -> bool:
        """host_key_on_record for the hops of a ProxyJump, walked as _open_jumps walks them."""
        for i, hop in enumerate(spec.split(",")):
            _, name, port = _parse_hop(hop.strip())
            opts = host_options(name, self._ssh_config)
            if i == 0 and opts.jump and depth < 4 and not self._hops_on_record(opts.jump,
                                                                               depth + 1):
                return False
            if not _key_on_record(opts, port):
                return False
        return True

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def connect(self) -> asyncssh.SSHClientConnection:
        async with self._connect_lock:
            if self.connected:
                assert self._conn is not None
                return self._conn
            self._drop()
            wait = self._next_attempt - time.monotonic()
            if wait > 0 and self._last_error is not None:
                if isinstance(self._last_error, PermanentError):
                    raise self._last_error
                raise UnreachableError(f"{self._last_error} (next try in {wait:.1f} s)")
            try:
                self._conn = await self._open()
            except UnreachableError as exc:
                self._backoff = min(max(1.0, self._backoff * 2), MAX_BACKOFF)
                self._next_attempt = time.monotonic() + self._backoff
                self._last_error = exc
                raise
            self._backoff = self._next_attempt = 0.0
            self._last_error = None
            return self._conn

    def retry_now(self) -> None:
        """Forget the backoff: the user asked for this host explicitly."""
        self._next_attempt = 0.0

    async def _open(self) -> asyncssh.SSHClientConnection:
        """One connection attempt (through its jump hosts, if any), bounded by ConnectTimeout."""

        if self.direct is not None:
            d = self.direct
            return await self._bounded_connect(
                self.alias, self.options.connect_timeout, self.options.keepalive, None,
                host=d.host, port=d.port, username=d.username, config=[],
                client_keys=[d.client_key], known_hosts=([d.server_key.convert_to_public()], [], []))
        jumps = await self._open_jumps(self.options.jump) if self.options.jump else []
        try:
            conn = await self._connect_host(self.alias, self.options, jumps[-1] if jumps else None)
        except BaseException:
            _abort_all(jumps)
            raise
        self._jumps = jumps
        return conn

    async def _open_jumps(self, spec: str, depth: int = 0) -> list[asyncssh.SSHClientConnection]:
        """Connections to the ProxyJump hops, in order, each through the one before.

        Each hop follows its own ssh config (keys, known hosts, StrictHostKeyChecking);
        the first hop's own ProxyJump is followed too, as `ssh -J` does.
        """
        opened: list[asyncssh.SSHClientConnection] = []
        try:
            for i, hop in enumerate(spec.split(",")):
                user, name, port = _parse_hop(hop.strip())
                opts = host_options(name, self._ssh_config)
                if i == 0 and opts.jump and depth < 4:
                    opened += await self._open_jumps(opts.jump, depth + 1)
                opened.append(await self._connect_host(name, opts, opened[-1] if opened else None,
                                                       username=user, port=port))
        except BaseException:
            _abort_all(opened)
            raise
        return opened

    async def _connect_host(self, name: str, opts: HostOptions,
                            tunnel: asyncssh.SSHClientConnection | None,
                            **overrides: Any) -> asyncssh.SSHClientConnection:
        """Connect to `name` (this host or one of its jump hosts) under its own key policy."""
        from rtrain_tui.core.transport.sshconfig import DEMO_ALIAS, not_configured_message

        if name == DEMO_ALIAS == self.alias and not self._alias_is_configured():
            # The demo host not served (no --demo) and no alias of that name: asking DNS
            # for `demo` could reach a real machine and offer it the user's keys. The app
            # probes the index's demo runs, so this is refused here, not only by the CLI.
            raise UnknownHostError(not_configured_message(name, self._ssh_config))
        for path in opts.missing_identities:
            if path not in self._warned:
                # OpenSSH skips a missing IdentityFile with a warning, and so do we.
                self._warned.add(path)
                self._warn(f"{name}: IdentityFile {path} does not exist; skipped")
        extra: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        if opts.identity_files or opts.missing_identities:
            extra["client_keys"] = [str(p) for p in opts.identity_files]
        if not opts.ciphers_set and _aes_is_fast():
            extra["encryption_algs"] = _GCM_FIRST
        if opts.proxy_command:  # ours, filled in right (asyncssh's own reading is not)
            extra["proxy_command"] = opts.proxy_command
        client = _host_key_client(opts)
        config = [str(self._ssh_config)] if self._ssh_config and self._ssh_config.exists() else []
        jump = None if name == self.alias else name
        try:
            return await self._bounded_connect(
                name, opts.connect_timeout, opts.keepalive, jump, host=name, config=config,
                client_factory=lambda: client, known_hosts=_read_known_hosts(opts.known_hosts),
                tunnel=tunnel, **extra)
        except UnreachableError:
            whose = "its" if jump is None else f"jump host {jump}'s"
            if client.changed:
                path, line = client.changed
                raise HostKeyChangedError(
                    f"cannot reach {self.alias}: {whose} host key changed. If "
                    f"{'the host' if jump is None else jump} was reinstalled, remove line "
                    f"{line} of {path} and try again."
                ) from None
            if client.unknown:
                raise HostKeyChangedError(
                    f"cannot reach {self.alias}: {whose} host key is not on record and "
                    f"StrictHostKeyChecking is yes for {name}: run `ssh {name}` once to "
                    "check the key and record it."
                ) from None
            raise

    async def _bounded_connect(self, name: str, timeout: float, keepalive: int,
                               jump: str | None, **kwargs: Any) -> asyncssh.SSHClientConnection:
        import asyncssh

        try:
            return await bounded(
                # No pty, whatever RequestTTY says: a terminal on the shell or a transfer
                # channel echoes and rewrites bytes (CR/LF), and they hung.
                asyncssh.connect(connect_timeout=timeout, keepalive_interval=keepalive,
                                 keepalive_count_max=3, request_pty=False, **kwargs),
                timeout + 1,
            )
        except (TimeoutError, OSError, asyncssh.Error, UnicodeError) as exc:
            label = self.alias if jump is None else f"{self.alias} (via jump host {jump})"
            configured = jump is not None or self._alias_is_configured()
            raise _classify(label, exc, timeout, configured, self._ssh_config) from None

    def _alias_is_configured(self) -> bool:
        """True when the name is an alias the ssh config knows (or the demo host)."""
        if self.direct is not None or self.options.hostname != self.alias:
            return True
        from rtrain_tui.core.transport.sshconfig import list_hosts

        return self._ssh_config is not None and self.alias in list_hosts(self._ssh_config)

    async def run(self, script: str, timeout: float = DEFAULT_COMMAND_TIMEOUT) -> str:
        """Run a script in one of the host's long-lived shells and return its output.

        `timeout` bounds everything: waiting for a free shell, (re)connecting, the script.
        After a dropped connection the script is sent once more on a new connection;
        every script that changes the host is idempotent, so that is always safe.
        """
        import asyncssh

        deadline = time.monotonic() + timeout
        try:
            async with asyncio.timeout(timeout):
                await self._shell_slots.acquire()
                slot = _Slot(self._shell_slots)
                try:
                    for attempt in (1, 2):
                        shell = await self._take_shell(slot)
                        try:
                            out = await shell.run(script, max(1.0, deadline - time.monotonic()))
                        except (ConnectionError, asyncssh.Error, BrokenPipeError) as exc:
                            # A dead shell on a live connection is replaced alone; a
                            # dead connection is dropped and reopened.
                            shell.close()
                            if not self.connected:
                                self._drop()
                            if attempt == 2:
                                raise UnreachableError(
                                    f"cannot reach {self.alias}: {_describe(exc, 0)}") from None
                            continue
                        except BaseException:
                            # Timed out or cancelled mid-script (a closed pane, a quitting
                            # app): its output would land in front of the next script's.
                            shell.close()
                            raise
                        self._idle_shells.append(shell)
                        return out
                finally:
                    slot.release()  # no-op once a shell still starting holds it
        except TimeoutError:
            raise RemoteError(
                f"{self.alias}: a remote command took longer than {timeout:g} s; "
                "check the host's load and try again."
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _take_shell(self, slot: _Slot) -> _Shell:
        import asyncssh

        while self._idle_shells:
            shell = self._idle_shells.pop()
            if not shell.closed and self.connected:
                return shell
            shell.close()
        for attempt in (1, 2):
            conn = await self.connect()
            starting = asyncio.ensure_future(_open_shell(conn))
            try:
                return await asyncio.shield(starting)
            except asyncio.CancelledError:
                # Cancelled (a closed pane, a timeout) while the shell starts: its SSH
                # session is open on the host, or will be, and nobody would close it;
                # ten such and the host refuses every session (MaxSessions). The start
                # goes on and its shell is closed when it is there; the slot stays
                # taken until then, so cancellations never pile up sessions.
                slot.hand_to(starting)
                raise
            except (asyncssh.Error, OSError) as exc:
                if self.connected:  # e.g. MaxSessions reached: the connection itself is fine
                    raise RemoteError(f"{self.alias}: cannot open a session: {_describe(exc, 0)}") from None
                # A connection that died a moment ago can still look open to us until
                # this call finds out: forget it and open a new one, once.
                self._drop()
                if attempt == 2:
                    raise UnreachableError(f"cannot reach {self.alias}: {_describe(exc, 0)}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def sftp(self, lane: str = "") -> BoundedSFTP:
        """The host's shared SFTP channel (logs, uploads, fetches), every call bounded.

        `lane` names a channel of its own (LOG_LANE: the log panes' followers), so a
        request stuck there never delays the others. A channel that died on a live
        connection (the sftp-server was killed, a stuck call abandoned it) is replaced
        here, so logs and fetches on the host heal.
        """
        import asyncssh

        async with self._sftp_lock:
            sftp = self._sftps.get(lane)
            if sftp is None or not self.connected or not _sftp_alive(sftp):
                self._sftps.pop(lane, None)
                conn = await self.connect()
                starting = asyncio.ensure_future(conn.start_sftp_client())
                try:
                    try:
                        sftp = await bounded(asyncio.shield(starting), SFTP_CALL_TIMEOUT)
                    except BaseException:
                        # Timed out or cancelled (a closed pane) while the subsystem
                        # starts: its channel is open on the host, or will be; close it
                        # once it is, or such channels pile up to MaxSessions.
                        _close_when_started(starting, lambda started: started.exit())
                        raise
                except TimeoutError:
                    raise RemoteError(
                        f"{self.alias}: the SFTP subsystem did not start within "
                        f"{SFTP_CALL_TIMEOUT:g} s; check the host's load and try again."
                    ) from None
                except (asyncssh.Error, OSError) as exc:
                    # OpenSSH refuses the subsystem request itself when sshd_config has
                    # no `Subsystem sftp`: the connection stays up.
                    if self.connected and "Session request failed" in str(exc):
                        raise RemoteError(
                            f"{self.alias} has no SFTP subsystem ({_describe(exc, 0)}); logs, "
                            "uploads and fetches need it: ask the host's admin to enable "
                            "`Subsystem sftp` in sshd_config."
                        ) from None
                    if self.connected:
                        raise RemoteError(f"{self.alias}: cannot open an SFTP channel: "
                                          f"{_describe(exc, 0)}") from None
                    self._drop()
                    raise UnreachableError(f"cannot reach {self.alias}: {_describe(exc, 0)}") from None
                self._sftps[lane] = sftp
            return BoundedSFTP(self, sftp)

    def abandon_sftp(self, sftp: asyncssh.SFTPClient) -> None:
        """Give up a channel with a stuck call; the next `sftp()` opens a fresh one."""
        self._sftps = {lane: s for lane, s in self._sftps.items() if s is not sftp}
        try:
            sftp.exit()
        except Exception:  # noqa: BLE001 - it is being thrown away either way
            pass

    def _drop(self) -> None:
        """Forget a connection that failed, so the next call reconnects."""
        if self._conn is not None:
            self._conn.abort()
        self._conn = None
        _abort_all(self._jumps)
        self._jumps = []
        self._close_shells()
        self._sftps = {}

    def _close_shells(self) -> None:
        for shell in self._idle_shells:
            shell.close()
        self._idle_shells.clear()

    async def close(self) -> None:
        import asyncssh

        if self._conn is not None:
            self._conn.close()
            try:
                await bounded(self._conn.wait_closed(), 2)
            except (TimeoutError, OSError, asyncssh.Error):
                pass
        self._conn = None
        _abort_all(self._jumps)
        self._jumps = []
        self._close_shells()
        self._sftps = {}


def _abort_all(connections: list[asyncssh.SSHClientConnection]) -> None:
    for conn in reversed(connections):
        conn.abort()


def _key_on_record(opts: HostOptions, port: int | None = None) -> bool:
    """Whether a known_hosts file of `opts` holds a key for the host (on `port`, when a
    ProxyJump hop names one), under the name OpenSSH looks it up by."""
    name = opts.key_alias or known_hosts_name(opts.hostname, port or opts.port)
    return any(_known_line(path, name, "", None)[0] for path in opts.known_hosts)


def _parse_hop(hop: str) -> tuple[str | None, str, int | None]:
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


def _describe(exc: BaseException, timeout: float) -> str:
    import asyncssh

    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer within {timeout:g} s (ConnectTimeout)"
    if isinstance(exc, asyncssh.PermissionDenied):
        return "permission denied: check User and IdentityFile in ~/.ssh/config"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return f"host key not verifiable: {exc.reason}"
    text = str(exc) or exc.__class__.__name__
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused ({text}): is sshd running on the host and the Port right?"
    return text.splitlines()[0]


def _classify(alias: str, exc: BaseException, timeout: float, configured: bool,
              ssh_config: Path | None = None) -> UnreachableError:
    """The error for a failed connect: permanent ones are never worth retrying."""
    import asyncssh

    if isinstance(exc, asyncssh.PermissionDenied):
        return AuthError(f"cannot reach {alias}: {_describe(exc, timeout)}")
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return HostKeyChangedError(f"cannot reach {alias}: {_describe(exc, timeout)}")
    if isinstance(exc, UnicodeError) or (isinstance(exc, socket.gaierror) and not configured):
        # Not an alias and not a name the resolver knows: a typo, not an outage. (A
        # configured alias whose HostName does not resolve may be a laptop offline.)
        from rtrain_tui.core.transport.sshconfig import not_configured_message

        return UnknownHostError(not_configured_message(alias, ssh_config))
    return UnreachableError(f"cannot reach {alias}: {_describe(exc, timeout)}")


def _sftp_alive(sftp: asyncssh.SFTPClient) -> bool:
    # asyncssh has no public "is this SFTP session still open?"; its handler's writer
    # is dropped (or its channel closing) once the session ended.
    writer = getattr(getattr(sftp, "_handler", None), "_writer", None)
    return writer is not None and not writer.channel.is_closing()


_TRANSFERS = {"get", "put", "copy", "mget", "mput", "mcopy"}


class BoundedSFTP:
    """The host's SFTP client, with a time bound on every call.

    A call that overruns abandons the channel (the host's sftp-server answers requests
    one at a time, so a read stuck on a FIFO or a hung NFS file blocks every request
    behind it) and raises RemoteError; the next `HostConnection.sftp()` opens a new
    channel. Transfers are bounded by time without progress, not by their length.
    """

    def __init__(self, conn: HostConnection, sftp: asyncssh.SFTPClient,
                 call_timeout: float | None = None, stall_timeout: float | None = None) -> None:
        self._conn = conn
        self._sftp = sftp
        self.call_timeout = call_timeout or SFTP_CALL_TIMEOUT
        self.stall_timeout = stall_timeout or SFTP_STALL_TIMEOUT

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._sftp, name)
        if name in _TRANSFERS:
            return lambda *a, **kw: self._watched(name, attr, *a, **kw)
        if name == "open":
            # asyncssh's open is a plain function returning an awaitable context manager
            return lambda *a, **kw: _AwaitOrEnter(self._open(*a, **kw))
        if not inspect.iscoroutinefunction(attr):
            return attr
        return lambda *a, **kw: self.bounded(name, attr(*a, **kw))

    async def bounded(self, what: str, call: Awaitable[Any]) -> Any:
        try:
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for can swallow a cancel
            # (Ctrl-C, a closed pane) that lands as the call completes.
            async with asyncio.timeout(self.call_timeout):
                return await call
        except TimeoutError:
            self._conn.abandon_sftp(self._sftp)
            raise StuckError(
                f"{self._conn.alias}: an SFTP {what} got no answer within "
                f"{self.call_timeout:g} s (a stuck file or an overloaded host); it was "
                "abandoned and other work on the host goes on."
            ) from None

    async def open_regular(self, path: str) -> BoundedFile:
        """`path` opened for reading once a stat says it is a regular file (following
        links); anything else raises NotRegularFileError unopened. A missing file raises
        asyncssh's SFTPNoSuchFile, as `open` does."""
        attrs = await self.bounded("stat", self._sftp.stat(path))
        if attrs.permissions is not None and not stat.S_ISREG(attrs.permissions):
            kind = "a FIFO" if stat.S_ISFIFO(attrs.permissions) else "not a regular file"
            raise NotRegularFileError(
                f"{self._conn.alias}: {path.rpartition('/')[2]} is {kind}, not read (opening "
                f"it would block the host's SFTP server): {path}"
            )
        return await self._open(path, "rb")

    async def _open(self, *args: Any, **kwargs: Any) -> BoundedFile:
        return BoundedFile(self, await self.bounded("open", self._sftp.open(*args, **kwargs)))

    async def _watched(self, name: str, method: Callable[..., Awaitable[Any]],
                       *args: Any, **kwargs: Any) -> Any:
        last = time.monotonic()
        user_handler = kwargs.get("progress_handler")

        def handler(*progress: Any) -> None:
            nonlocal last
            last = time.monotonic()
            if user_handler:
                user_handler(*progress)

        kwargs["progress_handler"] = handler
        task = asyncio.ensure_future(method(*args, **kwargs))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=max(0.1, last + self.stall_timeout - time.monotonic()))
                if done:
                    return task.result()
                if time.monotonic() - last >= self.stall_timeout:
                    task.cancel()
                    self._conn.abandon_sftp(self._sftp)
                    raise RemoteError(
                        f"{self._conn.alias}: the SFTP {name} moved no data for "
                        f"{self.stall_timeout:g} s; it was abandoned."
                    )
        finally:
            if not task.done():
                task.cancel()


class _AwaitOrEnter:
    """`await x` or `async with x`, as asyncssh's own open allows both."""

    def __init__(self, call: Awaitable[BoundedFile]) -> None:
        self._call = call
        self._file: BoundedFile | None = None

    def __await__(self):  # type: ignore[no-untyped-def]
        return self._call.__await__()

    async def __aenter__(self) -> BoundedFile:
        self._file = await self._call
        return self._file

    async def __aexit__(self, *exc: object) -> None:
        if self._file is not None:
            await self._file.close()


class BoundedFile:
    """An open remote file whose every call is bounded like BoundedSFTP's."""

    def __init__(self, owner: BoundedSFTP, handle: Any) -> None:
        self._owner = owner
        self._handle = handle

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._handle, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        return lambda *a, **kw: self._owner.bounded(name, attr(*a, **kw))

    async def close(self) -> None:
        try:
            await self._owner.bounded("close", self._handle.close())
        except Exception:  # noqa: BLE001 - a handle on a dead channel is gone anyway
            pass

    async def __aenter__(self) -> BoundedFile:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ConnectionPool:
    """All hosts' connections, keyed by alias: the one place connections are opened."""

    def __init__(self, ssh_config: Path | None,
                 on_warning: Callable[[str], None] | None = None) -> None:
        self.ssh_config = ssh_config
        self._hosts: dict[str, HostConnection] = {}
        # What OpenSSH would print as a warning (a missing IdentityFile): the CLI prints
        # it on stderr, the TUI shows a toast. Set it before the first connection.
        self.on_warning = on_warning

    def get(self, alias: str) -> HostConnection:
        if alias not in self._hosts:
            self._hosts[alias] = HostConnection(alias, self.ssh_config,
                                                on_warning=lambda m: self.on_warning and self.on_warning(m))
        return self._hosts[alias]

    def knows(self, alias: str) -> bool:
        """Whether `alias` has a connection here already (made or being made)."""
        return alias in self._hosts

    def add(self, connection: HostConnection) -> None:
        """Register a prepared connection (the demo host) under its alias."""
        self._hosts[connection.alias] = connection

    async def close(self) -> None:
        await asyncio.gather(*(h.close() for h in self._hosts.values()))
