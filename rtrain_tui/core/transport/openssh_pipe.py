"""Bulk bytes through the system's OpenSSH client, where it can log in on its own.

Why: asyncssh frames, encrypts and sends each 32 KiB packet in Python (and an
SSH_MSG_IGNORE before each one): about 4 s of client CPU per GiB here, against 2 s for
OpenSSH's `ssh` with AES-GCM. Where the client, sshd and the host's program share two
cores, that was the whole gap to `scp` (tests/benchmarks/transfer.py). Tools that move
bulk data over SSH (rsync, git, Ansible's default connection) use the system client for
the same reason.

It is only a faster pipe for the same validated transfer program: the host key must
already be on record (StrictHostKeyChecking=yes; asyncssh's own connection checked and
recorded it first, or every key on the way was there before: channel.EarlyBulk,
connection.host_key_on_record), it never prompts (BatchMode), forwards nothing, and runs no command
of the config's (RemoteCommand, LocalCommand). No shell runs here: the argv goes to
`ssh` as a list. When it cannot log in (no `ssh`, a password login, a key that only
asyncssh was given), the caller carries on over asyncssh, and the connection remembers,
with one warning, so it is not tried again.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rtrain_tui.core.transport.bounded import bounded
from rtrain_tui.core.transport.ciphers import GCM_FIRST, aes_is_fast

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection

# Below this many bytes a new `ssh` (a process, a handshake, a login: ~0.1-0.3 s) costs
# more than it saves (~2 s per GiB); such transfers stay on the open asyncssh connection.
MIN_BYTES = 64 << 20
LOGIN_FAILED = 255  # ssh's own exit status: it could not connect or log in


# Options of OpenSSH 8.7 and later that would break the pipe if a config set them: no
# stdin (StdinNull), no session at all (SessionType none), or ssh forking into the
# background (ForkAfterAuthentication, after which the pid we end is not the one
# moving the bytes). Older clients reject them on the command line, and cannot have
# them in a config either, so they are only passed to clients that know them.
_NEWER_OPTIONS = ["-o", "StdinNull=no", "-o", "SessionType=default",
                  "-o", "ForkAfterAuthentication=no"]
_versions: dict[str, tuple[int, int] | None] = {}


async def version(ssh: str) -> tuple[int, int] | None:
    """OpenSSH's version of the `ssh` at this path, from `ssh -V` (asked once)."""
    if ssh not in _versions:
        found = None
        try:
            process = await asyncio.create_subprocess_exec(
                ssh, "-V", stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            out, _ = await bounded(process.communicate(), 5)
            match = re.search(rb"OpenSSH_(\d+)\.(\d+)", out)
            found = (int(match[1]), int(match[2])) if match else None
        except (OSError, TimeoutError):
            pass
        _versions[ssh] = found
    return _versions[ssh]


async def argv(conn: HostConnection, command: str) -> list[str] | None:
    """The `ssh` command line that runs `command` on the host, or None where not usable."""
    if conn.direct is not None or conn.bulk_client_refused is not None:
        return None
    ssh = shutil.which("ssh")
    if ssh is None:
        conn.refuse_bulk_client("no `ssh` program on this machine")
        return None
    config = str(conn.ssh_config) if conn.ssh_config and conn.ssh_config.exists() else "none"
    return await command_line(ssh, config, conn.options.connect_timeout,
                              conn.options.ciphers_set, conn.alias, command)


async def command_line(ssh: str, config: str, connect_timeout: float, ciphers_set: bool,
                       alias: str, command: str) -> list[str]:
    """`ssh` (at this path) with our options, reading `config` ("none": no file), to run
    `command` on `alias`. `ciphers_set`: the config names the host's Ciphers itself."""
    words = [ssh, "-F", config, "-T", "-x", "-a", "-e", "none",
             "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
             "-o", "ClearAllForwardings=yes", "-o", "PermitLocalCommand=no",
             "-o", "RemoteCommand=none", "-o", "LogLevel=ERROR"]
    if (await version(ssh) or (0, 0)) >= (8, 7):
        words += _NEWER_OPTIONS
    if not ciphers_set and aes_is_fast():
        words += ["-c", ",".join(GCM_FIRST)]  # as the asyncssh connection does
    return [*words, "--", alias, command]


async def start(conn: HostConnection, command: str,
                stdin: int = asyncio.subprocess.PIPE) -> asyncio.subprocess.Process | None:
    """Start `ssh … command`, or None where the system client is not usable.

    stdout and stderr are pipes; stdin too, unless `stdin` is a file descriptor (the
    read end of a pipe that a thread fills, for an upload). Its own session: a Ctrl-C
    at the terminal reaches us, and we end it (`end`), never it alone.
    """
    words = await argv(conn, command)
    if words is None:
        return None
    try:
        return await spawn(words, stdin)
    except OSError as exc:
        conn.refuse_bulk_client(f"cannot run ssh: {exc.strerror}")
        return None


async def with_stdin_pipe(
    starting: Callable[[int], Awaitable[asyncio.subprocess.Process | None]],
) -> tuple[asyncio.subprocess.Process, int] | None:
    """An upload's `ssh`, started by `starting(read_end)` with its stdin the read end of a
    new pipe: (the process, the write end that a thread fills), or None where it did not
    start. Either way, and on a cancel, no other pipe end is left open here."""
    read_end, write_end = os.pipe()
    try:
        process = await starting(read_end)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)  # ssh has its copy
    if process is None:
        os.close(write_end)
        return None
    return process, write_end


async def spawn(words: list[str],
                stdin: int = asyncio.subprocess.PIPE) -> asyncio.subprocess.Process:
    """Run `words` (an `ssh` command line) as `start` says; OSError where it cannot."""
    return await asyncio.create_subprocess_exec(
        *words, stdin=stdin, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True)


async def failed_login(conn: HostConnection, process: asyncio.subprocess.Process,
                       why: str) -> bool:
    """After the host program said nothing: was it ssh that could not log in?

    If so, the connection stops trying the system client (with one warning saying why:
    `why`, ssh's last line on stderr) and the caller goes on over asyncssh.
    """
    try:
        code = await bounded(process.wait(), 5)
    except TimeoutError:
        return False
    if code != LOGIN_FAILED:
        return False
    conn.refuse_bulk_client(why or f"ssh exited {code}")
    return True


async def end(process: asyncio.subprocess.Process, grace: float = 0) -> None:
    """Stop `ssh` (the host program then reads EOF and removes its temporary file).

    `grace`: the transfer is over, so let it first end on its own for that long. A
    cancel (Ctrl-C) meanwhile still kills it, and is passed on, never swallowed.
    """
    try:
        if grace and process.returncode is None:
            try:
                await bounded(process.wait(), grace)
            except TimeoutError:
                pass
    finally:
        if process.returncode is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass
    try:
        await bounded(process.wait(), 5)  # reaped, so no zombie outlives the transfer
    except TimeoutError:
        pass
