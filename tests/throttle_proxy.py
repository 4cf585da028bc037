"""A throttling TCP proxy on 127.0.0.1: a slow, distant link for tests and benchmarks.

Users ship datasets over home and office links of 20-200 Mbit/s with tens of ms of
round trip; this machine's loopback moves GB/s in microseconds. The proxy stands
between an ssh client and the test sshd (tests/sshd.py) and gives each direction:
  * a token bucket: `rate_mbit` Mbit/s, a burst of BURST_S of that rate (a few ms: a
    link's queue, not a free megabyte at the start), None = unthrottled;
  * a one-way delay (`delay_ms`; 10 ms each way is a 20 ms round trip), applied after
    the bucket, in order, as a link's propagation delay is;
  * a count of the bytes it moved (`up`: client → server, `down`: server → client), so a
    test or a benchmark can tell bytes on the wire, whatever the tool.

`ThrottleProxy` runs in a thread of the test's process (its counters are plain
attributes); `spawn_proxy` runs the same proxy in a child process with the same methods,
for benchmarks, where a proxy sharing the client's GIL would slow the client it measures.
`proxied_alias` is an ssh config `Host` block that reaches a test host through a proxy
(the `throttled` fixture in tests/conftest.py makes one):
asyncssh and the system `ssh` both read that config, so both paths go through it.

    python -m tests.throttle_proxy TARGET_PORT [--rate MBIT] [--delay MS]

runs one on its own (it prints its port, then answers the control lines of
`spawn_proxy`: `counts`, `reset`, `link RATE|none DELAY`, `stop`).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

BURST_S = 0.005  # the bucket holds 5 ms of the rate: 62.5 KB at 100 Mbit/s
CHUNK = 256 << 10  # the most read at once when unthrottled
MIN_CHUNK = 4096  # the least read at once: a slow link's bucket still holds a few packets


@dataclass
class Link:
    """One direction's shape; both directions of a proxy share one."""

    rate_mbit: float | None = None  # None: no limit
    delay_ms: float = 0.0

    @property
    def bytes_per_s(self) -> float | None:
        return None if self.rate_mbit is None else self.rate_mbit * 1e6 / 8

    @property
    def burst(self) -> int:
        rate = self.bytes_per_s
        return CHUNK if rate is None else max(MIN_CHUNK, int(rate * BURST_S))


class _Bucket:
    """A token bucket read by one direction's reader: it waits until `n` bytes may pass."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.tokens = float(link.burst)
        self.stamp = time.monotonic()

    async def take(self, n: int) -> None:
        rate = self.link.bytes_per_s
        if rate is None:
            return
        now = time.monotonic()
        self.tokens = min(float(self.link.burst), self.tokens + (now - self.stamp) * rate)
        self.stamp = now
        self.tokens -= n
        if self.tokens < 0:
            # Debt is paid by waiting; a late wake-up is credited at the next take, so an
            # event loop's coarse timers cost no rate (only a little smoothness).
            await asyncio.sleep(-self.tokens / rate)


class Proxy(Protocol):
    """What tests and benchmarks use of a proxy, in a thread or in a child process."""

    port: int

    def counts(self) -> tuple[int, int]: ...
    def reset(self) -> None: ...
    def set_link(self, rate_mbit: float | None, delay_ms: float = 0.0) -> None: ...
    def stop(self) -> None: ...


class ThrottleProxy:
    """The proxy, on an event loop in a thread of its own: `start()`, use `port`, `stop()`."""

    def __init__(self, target_port: int, rate_mbit: float | None = None,
                 delay_ms: float = 0.0, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.link = Link(rate_mbit, delay_ms)
        self.port = 0
        self.up = 0  # bytes client → server
        self.down = 0  # bytes server → client
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()  # both ends of every connection
        self._stopping = False
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"throttle-proxy-{target_port}")

    def start(self) -> ThrottleProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def counts(self) -> tuple[int, int]:
        return self.up, self.down

    def reset(self) -> None:
        self.up = self.down = 0

    def set_link(self, rate_mbit: float | None, delay_ms: float = 0.0) -> None:
        """A new shape for connections made from now on (open ones keep theirs)."""
        self.link = Link(rate_mbit, delay_ms)

    def stop(self) -> None:
        """Close the listener and every connection through it; end the thread."""
        async def close() -> None:
            self._stopping = True
            # A connection accepted just now takes several turns of the loop (an accepting
            # task, its transport, a serving task not yet stepped) before its writer is
            # known. Every task on this loop is the proxy's: settled means each one left
            # is a serving or piping one (named "proxy-"), whose writers are known.
            me = asyncio.current_task()

            async def settled() -> None:
                while any(t is not me and not t.get_name().startswith("proxy-")
                          for t in asyncio.all_tasks()):
                    await asyncio.sleep(0)

            # Accepts under way finish before the listener closes: on Python 3.11 a
            # socket accepted after Server.close() gets no transport (Server._attach
            # asserts) and is never closed, so its client hung (seen under load).
            await settled()
            if self._server is not None:
                self._server.close()
            await settled()
            writers = list(self._writers)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            for writer in writers:
                writer.transport.abort()  # not close(): that would wait to flush its buffer
            # A socket is closed in a callback on a later turn; the loop must not stop
            # before it ran (wait_closed ends when it has).
            await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> ThrottleProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.set_name("proxy-serve")
        if self._stopping:  # accepted as the proxy stopped: stop() closes it
            self._writers.add(c_writer)
            return
        self._tasks.add(task)
        self._writers.add(c_writer)
        link = self.link
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.target)
        except OSError:
            c_writer.close()
            self._writers.discard(c_writer)
            self._tasks.discard(task)
            return
        self._writers.add(s_writer)
        pipes = [asyncio.ensure_future(self._pipe(c_reader, s_writer, link, "up")),
                 asyncio.ensure_future(self._pipe(s_reader, c_writer, link, "down"))]
        for pipe in pipes:
            pipe.set_name("proxy-pipe")
        try:
            await asyncio.gather(*pipes)
        except OSError:
            pass  # one side reset: the other is closed below, as a link that dropped
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for w in (c_writer, s_writer):
                w.close()
                self._writers.discard(w)
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    link: Link, direction: str) -> None:
        """Bucket, then delay, then write, in order; EOF is passed on after the last byte."""
        bucket = _Bucket(link)
        # Bytes in flight are bounded (twice the bandwidth-delay product, at least a few
        # chunks), so a receiver that stops reading pushes back on the sender, as TCP does.
        rate = link.bytes_per_s
        in_flight = max(8, int((rate or 1e9) * link.delay_ms / 1000 * 2 / link.burst) + 8)
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(in_flight)
        delay = link.delay_ms / 1000

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                if direction == "up":
                    self.up += len(data)
                else:
                    self.down += len(data)

        sender = asyncio.ensure_future(deliver())
        sender.set_name("proxy-deliver")
        try:
            while True:
                data = await reader.read(link.burst)
                if data:
                    await bucket.take(len(data))
                await queue.put((time.monotonic() + delay, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()


class ProxyProcess:
    """A `ThrottleProxy` in a child process (`spawn_proxy`), driven by control lines."""

    def __init__(self, target_port: int, rate_mbit: float | None, delay_ms: float) -> None:
        argv = [sys.executable, "-m", "tests.throttle_proxy", str(target_port),
                "--delay", str(delay_ms)]
        if rate_mbit is not None:
            argv += ["--rate", str(rate_mbit)]
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, cwd=Path(__file__).parent.parent)
        self.port = int(self._ask(None))

    def _ask(self, line: str | None) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if line is not None:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        answer = self._proc.stdout.readline()
        if not answer:
            raise RuntimeError("the throttle proxy process exited")
        return answer.strip()

    def counts(self) -> tuple[int, int]:
        up, down = self._ask("counts").split()
        return int(up), int(down)

    def reset(self) -> None:
        self._ask("reset")

    def set_link(self, rate_mbit: float | None, delay_ms: float = 0.0) -> None:
        self._ask(f"link {'none' if rate_mbit is None else rate_mbit} {delay_ms}")

    def stop(self) -> None:
        if self._proc.poll() is None:
            try:
                self._ask("stop")
            except (RuntimeError, BrokenPipeError):
                pass
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()  # our own child, by its pid
                self._proc.wait()


def spawn_proxy(target_port: int, rate_mbit: float | None = None,
                delay_ms: float = 0.0) -> ProxyProcess:
    """A proxy in a child process: the client being measured keeps its GIL to itself."""
    return ProxyProcess(target_port, rate_mbit, delay_ms)


def proxied_alias(name: str, proxy: Proxy, client_home: Path, user: str | None = None) -> str:
    """An ssh config `Host name` block that reaches the proxy's target through it.

    `client_home` is the test client's HOME (its `.ssh/id_test` and `.ssh/known_hosts`).
    The alias keeps its host key under its own name (HostKeyAlias): the proxy's port is
    new each time, and the first connection records the key (accept-new) for the system
    `ssh`, which transfers then insist is on record.
    """
    ssh = client_home / ".ssh"
    return (f"Host {name}\n  HostName 127.0.0.1\n  Port {proxy.port}\n"
            f"  User {user or getpass.getuser()}\n  IdentityFile {ssh / 'id_test'}\n"
            f"  UserKnownHostsFile {ssh / 'known_hosts'}\n"
            f"  HostKeyAlias {name}\n  StrictHostKeyChecking accept-new\n")


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target_port", type=int)
    parser.add_argument("--rate", type=float, default=None, help="Mbit/s each way")
    parser.add_argument("--delay", type=float, default=0.0, help="one-way delay, ms")
    args = parser.parse_args()
    proxy = ThrottleProxy(args.target_port, args.rate, args.delay).start()
    print(proxy.port, flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "stop":
                break
            if words[0] == "counts":
                print(*proxy.counts(), flush=True)
            elif words[0] == "reset":
                proxy.reset()
                print("ok", flush=True)
            elif words[0] == "link":
                proxy.set_link(None if words[1] == "none" else float(words[1]), float(words[2]))
                print("ok", flush=True)
    finally:
        proxy.stop()


if __name__ == "__main__":
    _main()
