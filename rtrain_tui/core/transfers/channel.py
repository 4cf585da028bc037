"""The exec channel to the host's transfer program: its stdin and stdout, every wait
bounded by time without progress (Stream), and a big upload's `ssh` started early
(EarlyBulk). What every transfer (transfer.py, fetch.py, listing.py, upload.py, delta.py)
speaks through; it knows nothing of what they say.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.transfers import codec
from rtrain_tui.core.transport import cold_ssh, openssh_pipe
from rtrain_tui.core.transport.bounded import bounded

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection

# progress(label, bytes done, bytes total); the label of an upload or a fetch is a Moving
# (meter.py): a str that also carries the bytes on the wire.
Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]
CHUNK = 1 << 20
SEND_SLICE = 128 << 10  # what one turn of the event loop encrypts and sends
STALL_TIMEOUT = 30.0  # a transfer that moves no byte for this long is abandoned
OPEN_TIMEOUT = 20.0  # opening the exec channel (a login shell runs first)


# -- the exec channel ---------------------------------------------------------------
class Stream:
    """The host program's stdin/stdout, every wait bounded by time without progress.

    The program runs over the open asyncssh connection, or, for transfers big enough
    to pay for a new login, through the system's `ssh` (openssh_pipe.py); both
    processes have the same stdin/stdout/stderr streams. Its first line is a greeting,
    so a login banner or a wrong interpreter is told apart from an answer.
    """

    def __init__(self, conn: HostConnection, process: Any, system: bool = False,
                 stdin_fd: int | None = None) -> None:
        self.conn = conn
        self.process = process
        self.system = system  # the process is a local `ssh`, not an asyncssh channel
        self.stdin_fd = stdin_fd  # system, for an upload: the pipe to its stdin, blocking
        self._buf = bytearray()
        self._greeted = False
        self.codecs = codec.HostCodecs()  # what the host program decodes and encodes
        self.stderr_line = ""  # why the program ended early: its stderr's last line
        # A line the program says while it reads nothing, busy (delta's `p`): heard while
        # a write waits, it counts as progress (write). b"": none.
        self.keepalive = b""

    @classmethod
    async def open(cls, conn: HostConnection, command: str, bulk: int = 0,
                   upload: bool = False, early: EarlyBulk | None = None) -> Stream:
        """Start the program; through the system's `ssh` when `bulk` bytes will move.

        `upload`: a system `ssh` gets its stdin from a plain pipe (`stdin_fd`), which a
        thread fills; an asyncssh channel is written as usual. `early`: that `ssh`, for
        this very command, may have been started already (EarlyBulk).
        """
        if bulk >= openssh_pipe.MIN_BYTES:
            stream = await early.take(command) if early is not None else None
            if stream is None:
                stream = await cls._open_system(conn, command, upload)
            if stream is not None:
                return stream
        import asyncssh

        ssh = await conn.connect()
        try:
            process = await bounded(
                ssh.create_process(command, encoding=None), OPEN_TIMEOUT)
        except TimeoutError:
            raise RemoteError(f"{conn.alias}: the transfer did not start within "
                              f"{OPEN_TIMEOUT:g} s; check the host's load and try again.") from None
        except (asyncssh.Error, OSError) as exc:
            raise RemoteError(f"{conn.alias}: cannot open a channel for the transfer: {exc}") from None
        return cls(conn, process)

    @classmethod
    async def _open_system(cls, conn: HostConnection, command: str, upload: bool,
                           spawned: cold_ssh.Spawned | None = None) -> Stream | None:
        """The program through `ssh`, greeted; None when `ssh` cannot log in (not retried).
        `spawned`: that upload's `ssh`, started before `conn` was made (cold_ssh.py)."""
        write_end: int | None = None
        if spawned is not None:
            spawned.taken = True
            process, write_end = spawned.process, spawned.write_end
        elif upload:  # a cancel meanwhile (an early start no longer needed) leaves no pipe
            started = await openssh_pipe.with_stdin_pipe(
                lambda read_end: openssh_pipe.start(conn, command, read_end))
            if started is None:
                return None
            process, write_end = started
        else:
            found = await openssh_pipe.start(conn, command)
            if found is None:
                return None
            process = found
        stream = cls(conn, process, system=True, stdin_fd=write_end)
        ok = False
        try:
            async with asyncio.timeout(OPEN_TIMEOUT):
                await stream._greet()
            ok = True
            return stream
        except TimeoutError:
            conn.refuse_bulk_client(f"it did not log in within {OPEN_TIMEOUT:g} s")
            return None
        except RemoteError:
            if await openssh_pipe.failed_login(conn, process, stream.stderr_line):
                return None
            raise
        finally:
            if not ok:
                await stream.aclose()

    async def _greet(self) -> None:
        self._greeted = True
        codecs = codec.parse_greeting(await self.line())
        if codecs is None:
            raise RemoteError(f"{self.conn.alias}: the transfer program answered nonsense; "
                              "is the host's python the trainer's?")
        self.codecs = codecs

    async def greeted(self) -> codec.HostCodecs:
        """The host program's codecs, once it greeted."""
        if not self._greeted:
            await self._greet()
        return self.codecs

    async def aclose(self, finished: bool = False) -> None:
        """End the program; `finished`: it gave its last answer, so it may end by itself."""
        if self.system:
            await openssh_pipe.end(self.process, grace=2 if finished else 0)
        else:
            self.process.close()
        self.close_stdin_fd()

    def close_stdin_fd(self) -> None:
        if self.stdin_fd is not None:
            fd, self.stdin_fd = self.stdin_fd, None
            os.close(fd)

    async def _more(self, want: int) -> bytes:
        import asyncssh

        try:
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for swallows a Ctrl-C
            # (a cancel) that lands as the read completes, and a fast fetch then ran on.
            async with asyncio.timeout(STALL_TIMEOUT):
                return await self.process.stdout.read(want)
        except TimeoutError:
            raise RemoteError(f"{self.conn.alias}: the transfer moved no data for "
                              f"{STALL_TIMEOUT:g} s; it was abandoned.") from None
        except (asyncssh.Error, OSError) as exc:
            raise RemoteError(f"{self.conn.alias}: the transfer was cut: {exc}") from None

    async def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            data = await self._more(max(CHUNK, n - len(self._buf)))
            if not data:
                raise RemoteError(await self._died())
            self._buf += data

    async def exactly(self, n: int) -> bytes:
        if not self._greeted:
            await self._greet()
        await self._fill(n)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def line(self) -> bytes:
        if not self._greeted:
            await self._greet()
        while (end := self._buf.find(b"\n")) < 0:
            data = await self._more(CHUNK)
            if not data:
                raise RemoteError(await self._died())
            self._buf += data
        data = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return data

    async def pieces(self, n: int) -> Any:
        """Yield exactly `n` bytes in pieces of at most CHUNK, as they arrive."""
        if not self._greeted:
            await self._greet()
        while n:
            if not self._buf:
                data = await self._more(min(n, CHUNK))
                if not data:
                    raise RemoteError(await self._died())
                self._buf += data
            take = min(n, len(self._buf), CHUNK)
            piece = bytes(self._buf[:take])
            del self._buf[:take]
            n -= take
            yield piece

    async def _died(self) -> str:
        """Why the host program ended early: its stderr's first line, inert."""
        from rtrain_tui.core.safety.sanitize import safe_line

        try:
            err = await bounded(self.process.stderr.read(4096), 2)
        except Exception:  # noqa: BLE001 - the reason is best effort; the failure is not
            err = b""
        text = err.decode("utf-8", "replace").strip().splitlines()
        self.stderr_line = safe_line(text[-1])[:200] if text else ""
        why = self.stderr_line or "the host program ended early"
        if self.system and not self.stderr_line:
            # The local `ssh` killed (a signal: the OOM killer, a `kill`) is not the host
            # program ending: said as the host's would send the user looking there.
            try:
                code = await bounded(self.process.wait(), 2)
            except TimeoutError:
                code = None
            if code is not None and code < 0:
                why = f"the local ssh client carrying it was killed (signal {-code})"
        return f"{self.conn.alias}: the transfer failed: {why}"

    async def write(self, data: bytes | memoryview) -> None:
        self.process.stdin.write(data)
        while True:
            try:
                async with asyncio.timeout(STALL_TIMEOUT):  # not wait_for: see _more
                    await self.process.stdin.drain()
                return
            except TimeoutError:
                # A program that reads nothing while it works (a delta copying stored
                # chunks) says `keepalive` lines: one heard meanwhile restarts the bound.
                if not (self.keepalive and await self._heard_keepalives()):
                    raise RemoteError(f"{self.conn.alias}: the transfer moved no data for "
                                      f"{STALL_TIMEOUT:g} s; it was abandoned.") from None

    async def _heard_keepalives(self) -> bool:
        """Drop the keepalive lines the program has said by now; whether there was one.
        Any other line is its answer: it is kept for `line()`."""
        import asyncssh

        heard = False
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                if bytes(self._buf[:end]) != self.keepalive:
                    return heard
                del self._buf[:end + 1]
                heard = True
                continue
            try:
                async with asyncio.timeout(0.1):  # what is here comes at once
                    data = await self.process.stdout.read(CHUNK)
            except (TimeoutError, asyncssh.Error, OSError):
                return heard
            if not data:
                return heard
            self._buf += data


class EarlyBulk:
    """A big upload's `ssh … recv`, started beside the store's check instead of after it.

    The system `ssh` is a second login (0.4-0.6 s here, the largest fixed cost of a big
    upload on a far link), and its command is known before the check (upload_prepare)
    says whether the bytes must go at all. It is started only where it can log in on
    its own: the host's key, and every ProxyJump hop's, already on record
    (HostConnection.host_key_on_record), or this connection made (which records them).
    The host program creates nothing before the first block arrives, so one that is not
    needed (the dataset is stored already, or goes as a delta) is simply ended (`close`):
    its program reads the end of its input and exits, leaving nothing behind.
    """

    def __init__(self, command: str) -> None:
        self.command = command
        # The same command with the store's path resolved (`stands_for`): a store under
        # `~` is named as given, for the host program to expand, so that its login need
        # not wait for the round trip that resolves the workdir here.
        self._same: set[str] = {command}
        self._opening: asyncio.Future[Stream | None] | None = None

    @classmethod
    async def start(cls, conn: HostConnection, command: str, size: int) -> EarlyBulk:
        """Start `command` through the system `ssh` when `size` bytes would go that way."""
        early = cls(command)
        if size >= openssh_pipe.MIN_BYTES and conn.direct is None \
                and conn.bulk_client_refused is None:
            if not conn.connected and not conn.host_key_on_record():
                await conn.connect()  # it records the key (accept-new), as before
            early._opening = asyncio.ensure_future(Stream._open_system(conn, command, True))
        return early

    def stands_for(self, command: str, size: int) -> None:
        """`command` does what this one's does: the same program, on the same store, named
        with its path resolved (store_dataset's caller started it before it knew), for
        the same `size` (a file that changed size since is not what it waits for)."""
        if self.command.endswith(f" {size}"):  # transfer_command: the size comes last
            self._same.add(command)

    @classmethod
    def adopt(cls, conn: HostConnection, spawned: cold_ssh.Spawned) -> EarlyBulk:
        """One whose `ssh` a new process started before it had `conn` (cold_ssh.py)."""
        early = cls(spawned.command)
        early._opening = asyncio.ensure_future(
            Stream._open_system(conn, spawned.command, True, spawned))
        return early

    async def take(self, command: str) -> Stream | None:
        """The greeted stream, if it runs `command`; None when `ssh` could not log in (the
        connection then knows not to try it again) or there is none."""
        opening, self._opening = self._opening, None
        if opening is None:
            return None
        if command not in self._same:
            await self._end(opening)
            return None
        return await opening

    async def close(self) -> None:
        """End it unless an upload took it: a no-op then."""
        opening, self._opening = self._opening, None
        if opening is not None:
            await self._end(opening)

    @staticmethod
    async def _end(opening: asyncio.Future[Stream | None]) -> None:
        opening.cancel()  # still logging in or greeting: _open_system ends its ssh
        stream = (await asyncio.gather(opening, return_exceptions=True))[0]
        if isinstance(stream, Stream):
            # Greeted: the end of its input ends the host program (no file made yet),
            # and with it ssh; a round trip, bounded.
            stream.close_stdin_fd()
            await openssh_pipe.end(stream.process, grace=2)

