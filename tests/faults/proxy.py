"""A loopback TCP proxy that breaks on command: the network between client and sshd.

`FaultProxy(target_port).start()` listens on 127.0.0.1 (a free port, `.port`) and
forwards every connection to 127.0.0.1:`target_port`. From the test's thread:

- `cut()`: abort every open connection (a dead link, a killed session, a sshd restart);
- `stall()` / `resume()`: stop moving bytes, both ways, on old and new connections,
  then go on (a host frozen by SIGSTOP: TCP stays up, nothing answers);
- `refuse(seconds=None)`: cut, and refuse new connections until `allow()` or until
  `seconds` have passed (sshd down: connection refused);
- `throttle(bytes_per_second)` / `throttle(None)`: a slow link.

It runs its own asyncio loop in a daemon thread, so the test thread stays free to drive
a CLI subprocess; each control call returns once it has taken effect. `log` keeps
what was injected and when (monotonic seconds), for the fault report.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any

CHUNK = 65536


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.accepted = 0  # connections accepted over the proxy's life
        self.log: list[tuple[float, str]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="fault-proxy")
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._rate: float | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._reopen: asyncio.TimerHandle | None = None

    # -- life ------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def live(self) -> int:
        """Connections open now."""
        return len(self._links)

    # -- faults ----------------------------------------------------------------------
    def cut(self) -> None:
        self._note("cut")
        self._call(self._cut())

    def stall(self) -> None:
        self._note("stall")
        self._call(self._set_flowing(False))

    def resume(self) -> None:
        self._note("resume")
        self._call(self._set_flowing(True))

    def refuse(self, seconds: float | None = None) -> None:
        self._note(f"refuse {seconds:g} s" if seconds is not None else "refuse")
        self._call(self._refuse(seconds))

    def allow(self) -> None:
        self._note("allow")
        self._call(self._allow())

    def throttle(self, bytes_per_second: float | None) -> None:
        self._note(f"throttle {bytes_per_second}")
        self._rate = bytes_per_second

    # -- inside the proxy's loop -------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _note(self, what: str) -> None:
        self.log.append((time.monotonic(), what))

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        await self._listen()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._reopen is not None:
            self._reopen.cancel()
        if self._server is not None:
            self._server.close()
            self._server = None
        await self._cut()

    async def _cut(self) -> None:
        for client, upstream in list(self._links):
            client.transport.abort()
            upstream.transport.abort()
        self._links.clear()

    async def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _refuse(self, seconds: float | None) -> None:
        if self._reopen is not None:
            self._reopen.cancel()
            self._reopen = None
        if self._server is not None:
            self._server.close()
            self._server = None
        await self._cut()
        if seconds is not None:
            self._reopen = self._loop.call_later(
                seconds, lambda: asyncio.ensure_future(self._allow(noted=True)))

    async def _allow(self, noted: bool = False) -> None:
        if noted:
            self._note("allow")
        if self._reopen is not None:
            self._reopen.cancel()
            self._reopen = None
        if self._server is None:
            await self._listen()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        link = (writer, up_writer)
        self._links.add(link)
        pumps = [asyncio.ensure_future(self._pump(reader, up_writer)),
                 asyncio.ensure_future(self._pump(up_reader, writer))]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pumps:
                p.cancel()
            writer.transport.abort()
            up_writer.transport.abort()
            self._links.discard(link)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        while True:
            await self._flowing.wait()  # a stalled host reads nothing: TCP backs up
            try:
                data = await reader.read(CHUNK)
            except OSError:
                return
            if not data:
                return
            await self._flowing.wait()
            if self._rate:
                await asyncio.sleep(len(data) / self._rate)
            writer.write(data)
            try:
                await writer.drain()
            except OSError:
                return
