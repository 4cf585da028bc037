"""A host's long-lived `sh`: one framed script at a time, each under timeout(1) where
the host has it (connection.py says why one shell, and holds up to MAX_SHELLS of them).
"""

from __future__ import annotations

import asyncio
import math
import secrets
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import asyncssh

DEFAULT_COMMAND_TIMEOUT = 30.0
# A script up to this size (quoted) is one `sh -c` argument; a bigger one goes through
# a pipe. Linux takes at most 128 KiB per argument; the margin is for the quoting's growth.
SCRIPT_ARG_LIMIT = 100 * 1024


class Shell:
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
        out = await self.run(under_timeout("echo rt_timeout=1", 10, piped=False)
                             + under_timeout("echo rt_piped=1", 10, piped=True))
        self.host_timeout = {"rt_timeout=1", "rt_piped=1"} <= set(out.splitlines())

    async def run(self, script: str, limit: float | None = None) -> str:
        self._count += 1
        marker = f"__rtrain_{self._nonce}_{self._count}__".encode()
        if limit is not None and self.host_timeout:
            command = under_timeout(script, limit)
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


async def open_shell(conn: asyncssh.SSHClientConnection) -> Shell:
    """A new long-lived shell on `conn`, started; its session is closed if the start fails.

    Bounded on its own: a caller that gave up leaves it running (see `_take_shell`).
    """
    import asyncssh

    # stderr only ever carries the login shell's own chatter (scripts merge theirs into
    # stdout); unread, it could stall the channel.
    process = await conn.create_process("exec sh", encoding=None, stderr=asyncssh.DEVNULL)
    shell = Shell(process)
    try:
        async with asyncio.timeout(DEFAULT_COMMAND_TIMEOUT):
            await shell.start()
    except BaseException:
        shell.close()
        raise
    return shell


T = TypeVar("T")


def close_when_started(starting: asyncio.Future[T], close: Callable[[T], None]) -> None:
    """Close what a start that nobody waits for any more opens, once it has opened it.

    A channel's open cannot be taken back mid-way: asyncssh finishes it after a cancel
    and nobody would ever close it (the host counts it against MaxSessions).
    """
    def started(future: asyncio.Future[T]) -> None:
        if not future.cancelled() and future.exception() is None:
            close(future.result())

    starting.add_done_callback(started)


class Slot:
    """One of a host's MAX_SHELLS places, held by a call, or by a shell still starting
    for a call that was cancelled (until that shell is there and closed)."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self._held = True
        self._handed = False

    def hand_to(self, starting: asyncio.Future[Shell]) -> None:
        """Let a shell start for nobody: close it once started, then free the place."""
        self._handed = True
        close_when_started(starting, Shell.close)
        starting.add_done_callback(lambda _future: self._free())

    def release(self) -> None:
        if not self._handed:
            self._free()

    def _free(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()


def under_timeout(script: str, limit: float, piped: bool | None = None) -> str:
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
    or /dev/fd fails `Shell.start`'s trial of both forms and runs scripts in a plain
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


