"""The host's SFTP client with a time bound on every call, and on a transfer's time
without progress; one that overruns abandons its channel (connection.py opens the next).
"""

from __future__ import annotations

import asyncio
import inspect
import stat
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from rtrain_tui.core.errors import NotRegularFileError, RemoteError, StuckError

if TYPE_CHECKING:
    import asyncssh


class SftpOwner(Protocol):
    """What a BoundedSFTP needs of its connection (connection.HostConnection)."""

    alias: str

    def abandon_sftp(self, sftp: asyncssh.SFTPClient) -> None: ...


def sftp_alive(sftp: asyncssh.SFTPClient) -> bool:
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

    def __init__(self, conn: SftpOwner, sftp: asyncssh.SFTPClient,
                 call_timeout: float, stall_timeout: float) -> None:
        self._conn = conn
        self._sftp = sftp
        # The connection's SFTP_CALL_TIMEOUT and SFTP_STALL_TIMEOUT, read as it opens us.
        self.call_timeout = call_timeout
        self.stall_timeout = stall_timeout

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

