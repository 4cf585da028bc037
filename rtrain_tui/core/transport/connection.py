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

Beside it: options.py (an alias's options and host keys on record), shell.py (the
long-lived `sh`), bounded_sftp.py (SFTP with its bounds) and ciphers.py (the cipher order
both SSH clients use). Callers import the public names from here.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui.core.errors import (
    AuthError,
    HostKeyChangedError,
    PermanentError,
    RemoteError,
    UnknownHostError,
    UnreachableError,
    ValidationError,
)
from rtrain_tui.core.transport import ssh_import
from rtrain_tui.core.transport.bounded import bounded
from rtrain_tui.core.transport.bounded_sftp import BoundedSFTP, sftp_alive
from rtrain_tui.core.transport.ciphers import GCM_FIRST, aes_is_fast
from rtrain_tui.core.transport.options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_KEEPALIVE,
    HostOptions,
    host_key_client,
    host_options,
    key_on_record,
    known_hosts_name,
    parse_hop,
    read_known_hosts,
)
from rtrain_tui.core.transport.shell import (
    DEFAULT_COMMAND_TIMEOUT,
    SCRIPT_ARG_LIMIT,
    Shell,
    Slot,
    close_when_started,
    open_shell,
)

if TYPE_CHECKING:
    import asyncssh

# asyncssh (and the cryptography it loads) is imported on first use, not at import time:
# it is a third of the TUI's start-up, and the first frame needs no connection. That
# first use runs no C compiler looking for liboqs (ssh_import.py says why).
ssh_import.install()

# Callers import these from here (the engine, the logs, the tests), wherever each lives.
__all__ = [
    "DEFAULT_COMMAND_TIMEOUT", "DEFAULT_CONNECT_TIMEOUT", "DEFAULT_KEEPALIVE", "LOG_LANE",
    "MAX_BACKOFF", "MAX_SHELLS", "SCRIPT_ARG_LIMIT", "SFTP_CALL_TIMEOUT", "SFTP_STALL_TIMEOUT",
    "BoundedSFTP", "ConnectionPool", "DirectTarget", "HostConnection", "HostOptions",
    "host_options", "known_hosts_name",
]

# Short enough that a follower notices a host that came back within ~3 s; a refused
# connection costs little, a silent host costs its ConnectTimeout per attempt anyway.
MAX_BACKOFF = 1.5
MAX_SHELLS = 3  # scripts of one host run side by side, so one slow script blocks none
SFTP_CALL_TIMEOUT = 20.0  # one SFTP request (open, stat, read, readdir, write, …)
LOG_LANE = "logs"  # the SFTP channel log followers share (HostConnection.sftp)
SFTP_STALL_TIMEOUT = 30.0  # a get/put that has moved no byte for this long is abandoned


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
        self._idle_shells: list[Shell] = []
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
            return key_on_record(self.options) and (
                not self.options.jump or self._hops_on_record(self.options.jump))
        except ValidationError:  # a bad hop: connecting says so
            return False

    def _hops_on_record(self, spec: str, depth: int = 0) -> bool:
        """host_key_on_record for the hops of a ProxyJump, walked as _open_jumps walks them."""
        for i, hop in enumerate(spec.split(",")):
            _, name, port = parse_hop(hop.strip())
            opts = host_options(name, self._ssh_config)
            if i == 0 and opts.jump and depth < 4 and not self._hops_on_record(opts.jump,
                                                                               depth + 1):
                return False
            if not key_on_record(opts, port):
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
                user, name, port = parse_hop(hop.strip())
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
        if not opts.ciphers_set and aes_is_fast():
            extra["encryption_algs"] = GCM_FIRST
        if opts.proxy_command:  # ours, filled in right (asyncssh's own reading is not)
            extra["proxy_command"] = opts.proxy_command
        client = host_key_client(opts)
        config = [str(self._ssh_config)] if self._ssh_config and self._ssh_config.exists() else []
        jump = None if name == self.alias else name
        try:
            return await self._bounded_connect(
                name, opts.connect_timeout, opts.keepalive, jump, host=name, config=config,
                client_factory=lambda: client, known_hosts=read_known_hosts(opts.known_hosts),
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
                slot = Slot(self._shell_slots)
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

    async def _take_shell(self, slot: Slot) -> Shell:
        import asyncssh

        while self._idle_shells:
            shell = self._idle_shells.pop()
            if not shell.closed and self.connected:
                return shell
            shell.close()
        for attempt in (1, 2):
            conn = await self.connect()
            starting = asyncio.ensure_future(open_shell(conn))
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
            if sftp is None or not self.connected or not sftp_alive(sftp):
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
                        close_when_started(starting, lambda started: started.exit())
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
            return BoundedSFTP(self, sftp, SFTP_CALL_TIMEOUT, SFTP_STALL_TIMEOUT)

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
