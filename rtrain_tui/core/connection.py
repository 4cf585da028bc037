"""SSH connections: one per host, shared by every caller, with a long-lived `sh`.

Why a long-lived shell: every `exec` on an SSH connection starts the user's login shell
(`bash -c`, which may run conda or pyenv init: 100 ms+). One `sh` per host, started once,
reads scripts on stdin and answers with framed output, so a probe costs a fork on the host
and one round trip. Scripts run in a subshell `( ... )` so they can `exit` and `cd`
without harming the shell, with stdin from /dev/null so they can never eat the next
script. Every script has a time bound; a shell that overruns it is discarded.

Log streams and transfers use one SFTP channel per host, so following 20 runs on one
host needs two SSH sessions, not twenty (OpenSSH's MaxSessions defaults to 10).
"""

from __future__ import annotations

import asyncio
import getpass
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui.core.errors import HostKeyChangedError, RemoteError, UnreachableError

if TYPE_CHECKING:
    import asyncssh

# asyncssh (and the cryptography it loads) is imported on first use, not at import time:
# it is a third of the TUI's start-up, and the first frame needs no connection.

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KEEPALIVE = 15
DEFAULT_COMMAND_TIMEOUT = 30.0
MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class HostOptions:
    """The options of one alias that rtrain-tui itself needs to know about."""

    alias: str
    hostname: str
    port: int
    connect_timeout: float
    keepalive: int
    known_hosts: tuple[Path, ...]


def host_options(alias: str, ssh_config: Path | None) -> HostOptions:
    """Read an alias's options the way asyncssh (and OpenSSH) will apply them."""
    from asyncssh.config import SSHClientConfig

    paths = [str(ssh_config)] if ssh_config and ssh_config.exists() else []
    cfg = SSHClientConfig.load(None, paths, False, False, False, getpass.getuser(), (), alias, ())
    known = cfg.get("UserKnownHostsFile") or ["~/.ssh/known_hosts"]
    return HostOptions(
        alias=alias,
        hostname=str(cfg.get("Hostname") or alias),
        port=int(cfg.get("Port") or 22),
        connect_timeout=float(cfg.get("ConnectTimeout") or DEFAULT_CONNECT_TIMEOUT),
        keepalive=int(cfg.get("ServerAliveInterval") or DEFAULT_KEEPALIVE),
        known_hosts=tuple(Path(os.path.expanduser(p)) for p in known),
    )


def known_hosts_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


def _accept_new_client(opts: HostOptions) -> Any:
    """An asyncssh client with host-key policy `accept-new`.

    asyncssh calls `validate_host_public_key` only for a key not on record. A host with
    no key on record gets its key recorded; a host whose recorded key differs is
    refused, and `changed` names the file and line to fix.
    """
    import asyncssh

    class AcceptNewClient(asyncssh.SSHClient):
        changed: tuple[Path, int] | None = None

        def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
            for path in opts.known_hosts:
                line_no = _known_line(path, host, addr, port)
                if line_no:
                    self.changed = (path, line_no)
                    return False
            target = opts.known_hosts[0]
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            entry = known_hosts_name(opts.hostname, opts.port)
            with target.open("a") as f:
                f.write(f"{entry} {key.export_public_key().decode().strip()}\n")
            return True

    return AcceptNewClient()


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


def _known_line(path: Path, host: str, addr: str, port: int) -> int:
    """Line number of the first known_hosts entry for this host, 0 when none."""
    import asyncssh

    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            trusted = asyncssh.import_known_hosts(line + "\n").match(host, addr, port)
        except (ValueError, asyncssh.KeyImportError):
            continue
        if trusted[0]:
            return no
    return 0


class _Shell:
    """A long-lived `sh` on the host that runs one framed script at a time."""

    def __init__(self, process: asyncssh.SSHClientProcess) -> None:
        self._process = process
        self._buffer = b""
        self._count = 0
        self._nonce = secrets.token_hex(8)

    @property
    def closed(self) -> bool:
        return self._process.channel.is_closing() or self._process.exit_status is not None

    async def run(self, script: str) -> str:
        self._count += 1
        marker = f"__rtrain_{self._nonce}_{self._count}__".encode()
        self._process.stdin.write(
            f"(\n{script}\n) </dev/null 2>&1\nprintf '\\n%s\\n' '{marker.decode()}'\n".encode()
        )
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

    def __init__(self, alias: str, ssh_config: Path | None, direct: DirectTarget | None = None) -> None:
        self.alias = alias
        self.options = host_options(alias, ssh_config if direct is None else None)
        self.direct = direct
        self._ssh_config = ssh_config
        self._conn: asyncssh.SSHClientConnection | None = None
        self._shell: _Shell | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._connect_lock = asyncio.Lock()
        self._shell_lock = asyncio.Lock()
        # Reconnect backoff: after a failed connect, callers within the window get the
        # same error at once instead of each waiting out a ConnectTimeout.
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._last_error: UnreachableError | None = None
        self._sftp_lock = asyncio.Lock()

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
                raise UnreachableError(f"{self._last_error} (next try in {wait:.0f} s)")
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
        """One connection attempt, bounded by ConnectTimeout."""
        import asyncssh

        client = _accept_new_client(self.options)
        config = [str(self._ssh_config)] if self._ssh_config and self._ssh_config.exists() else []
        timeout = self.options.connect_timeout
        if self.direct is not None:
            d = self.direct
            target = dict(host=d.host, port=d.port, username=d.username, config=[],
                          client_keys=[d.client_key], known_hosts=([d.server_key.convert_to_public()], [], []))
        else:
            target = dict(host=self.alias, config=config, client_factory=lambda: client,
                          known_hosts=_read_known_hosts(self.options.known_hosts))
        try:
            return await asyncio.wait_for(
                asyncssh.connect(
                    **target,  # type: ignore[arg-type]
                    connect_timeout=timeout,
                    keepalive_interval=self.options.keepalive,
                    keepalive_count_max=3,
                ),
                timeout + 1,
            )
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            if client.changed:
                path, line = client.changed
                raise HostKeyChangedError(
                    f"cannot reach {self.alias}: its host key changed. If the host was "
                    f"reinstalled, remove line {line} of {path} and try again."
                ) from None
            raise UnreachableError(f"cannot reach {self.alias}: {_describe(exc, timeout)}") from None

    async def run(self, script: str, timeout: float = DEFAULT_COMMAND_TIMEOUT) -> str:
        """Run a script in the host's long-lived shell and return its output."""
        import asyncssh

        async with self._shell_lock:
            for attempt in (1, 2):
                shell = await self._get_shell()
                try:
                    return await asyncio.wait_for(shell.run(script), timeout)
                except asyncio.CancelledError:
                    # Cancelled mid-script (a closed pane, a quitting app): the script's
                    # output would land in front of the next one's, so drop this shell.
                    shell.close()
                    self._shell = None
                    raise
                except asyncio.TimeoutError:
                    # The script is wedged (an nvidia-smi that never answers): this
                    # shell cannot be trusted with the next script's framing any more.
                    shell.close()
                    self._shell = None
                    raise RemoteError(
                        f"{self.alias}: a remote command took longer than {timeout:g} s; "
                        "check the host's load and try again."
                    ) from None
                except (ConnectionError, asyncssh.Error, BrokenPipeError) as exc:
                    self._shell = None
                    self._drop()
                    if attempt == 2:
                        raise UnreachableError(f"cannot reach {self.alias}: {_describe(exc, 0)}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get_shell(self) -> _Shell:
        import asyncssh

        if self._shell is None or self._shell.closed:
            conn = await self.connect()
            try:
                # stderr only ever carries the login shell's own chatter (scripts merge
                # theirs into stdout); unread, it could stall the channel.
                process = await conn.create_process("exec sh", encoding=None,
                                                    stderr=asyncssh.DEVNULL)
                shell = _Shell(process)
                # A first empty script swallows whatever the login shell printed before
                # `exec sh` (a motd, a conda banner), so it never precedes a real answer.
                await asyncio.wait_for(shell.run(":"), DEFAULT_COMMAND_TIMEOUT)
            except (asyncssh.Error, OSError, asyncio.TimeoutError) as exc:
                self._drop()
                raise UnreachableError(f"cannot reach {self.alias}: {_describe(exc, 0)}") from None
            self._shell = shell
        return self._shell

    async def sftp(self) -> asyncssh.SFTPClient:
        """The host's shared SFTP channel (logs, uploads, fetches all use it)."""
        import asyncssh

        async with self._sftp_lock:
            if self._sftp is None or not self.connected:
                conn = await self.connect()
                try:
                    self._sftp = await conn.start_sftp_client()
                except (asyncssh.Error, OSError) as exc:
                    self._drop()
                    raise UnreachableError(f"cannot reach {self.alias}: {_describe(exc, 0)}") from None
            return self._sftp

    def _drop(self) -> None:
        """Forget a connection that failed, so the next call reconnects."""
        if self._conn is not None:
            self._conn.abort()
        self._conn = None
        self._shell = None
        self._sftp = None

    async def close(self) -> None:
        import asyncssh

        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 2)
            except (asyncio.TimeoutError, OSError, asyncssh.Error):
                pass
        self._conn = None
        self._shell = None
        self._sftp = None


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


class ConnectionPool:
    """All hosts' connections, keyed by alias: the one place connections are opened."""

    def __init__(self, ssh_config: Path | None) -> None:
        self.ssh_config = ssh_config
        self._hosts: dict[str, HostConnection] = {}

    def get(self, alias: str) -> HostConnection:
        if alias not in self._hosts:
            self._hosts[alias] = HostConnection(alias, self.ssh_config)
        return self._hosts[alias]

    def add(self, connection: HostConnection) -> None:
        """Register a prepared connection (the demo host) under its alias."""
        self._hosts[connection.alias] = connection

    async def close(self) -> None:
        await asyncio.gather(*(h.close() for h in self._hosts.values()))
