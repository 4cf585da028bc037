"""The throttling proxy (tests/throttle_proxy.py) is a slow link that loses nothing.

Timing is asserted only as a lower bound (N bytes at R cannot arrive sooner than N/R,
less the bucket's burst): a loaded machine makes everything slower, never faster.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from rtrain_tui.core.transfers import transfer
from rtrain_tui.core.transport.connection import HostConnection
from tests.conftest import Throttled
from tests.sshd import SshHosts
from tests.throttle_proxy import Link, ThrottleProxy, spawn_proxy


@asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 that sends back what it reads, then closes on EOF."""
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def round_trip(port: int, payload: bytes) -> bytes:
    """Send `payload` to `port`, half-close, and read everything that comes back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        writer.write(payload)
        await writer.drain()
        writer.write_eof()

    sending = asyncio.ensure_future(send())
    back = await reader.read(-1)
    await sending
    writer.close()
    return back


def test_the_proxy_moves_bytes_intact_both_ways_and_counts_them() -> None:
    payload = os.urandom(3 << 20)

    async def go() -> tuple[bytes, tuple[int, int]]:
        async with echo_server() as port:
            with ThrottleProxy(port) as proxy:
                back = await asyncio.to_thread(lambda: asyncio.run(round_trip(proxy.port, payload)))
                return back, proxy.counts()

    back, counts = asyncio.run(go())
    assert back == payload
    assert counts == (len(payload), len(payload))


def test_a_transfer_of_n_bytes_at_rate_r_takes_at_least_n_over_r() -> None:
    payload = os.urandom(1 << 20)
    link = Link(rate_mbit=8)  # 1 MB/s

    async def go() -> float:
        async with echo_server() as port:
            with ThrottleProxy(port, link.rate_mbit) as proxy:
                began = time.perf_counter()
                back = await asyncio.to_thread(lambda: asyncio.run(round_trip(proxy.port, payload)))
                took = time.perf_counter() - began
                assert back == payload
                return took

    took = asyncio.run(go())
    assert link.bytes_per_s is not None
    # Each direction has its own bucket and the two overlap; one direction's bound holds.
    assert took >= (len(payload) - link.burst) / link.bytes_per_s, took


def test_the_one_way_delay_makes_each_round_trip_at_least_twice_as_long() -> None:
    async def go() -> float:
        async with echo_server() as port:
            with ThrottleProxy(port, None, delay_ms=15) as proxy:
                def ping_pong() -> float:
                    with socket.create_connection(("127.0.0.1", proxy.port)) as s:
                        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        began = time.perf_counter()
                        for _ in range(5):
                            s.sendall(b"x")
                            assert s.recv(1) == b"x"
                        return time.perf_counter() - began
                return await asyncio.to_thread(ping_pong)

    assert asyncio.run(go()) >= 5 * 0.030


def test_a_stopped_proxy_refuses_connections_and_ends_its_thread() -> None:
    async def go() -> None:
        async with echo_server() as port:
            proxy = ThrottleProxy(port).start()
            open_one = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", proxy.port))
            await asyncio.to_thread(proxy.stop)
            assert not proxy._thread.is_alive()
            # The connection that was open is closed by the stop, not left hanging.
            open_one.settimeout(5)
            assert open_one.recv(1) == b""
            open_one.close()
            try:
                socket.create_connection(("127.0.0.1", proxy.port), 1).close()
            except ConnectionRefusedError:
                return
            raise AssertionError("the stopped proxy still accepts connections")

    asyncio.run(go())


def test_connections_made_just_before_a_stop_are_all_closed_by_it() -> None:
    # A connection the proxy accepted as it stopped (its serving task not yet started)
    # was left open: its client waited forever for an end.
    async def go() -> None:
        async with echo_server() as port:
            for _ in range(20):
                proxy = ThrottleProxy(port).start()
                address = ("127.0.0.1", proxy.port)
                socks = await asyncio.to_thread(
                    lambda: [socket.create_connection(address) for _ in range(8)])  # noqa: B023
                await asyncio.to_thread(proxy.stop)
                for s in socks:
                    s.settimeout(10)
                    assert s.recv(1) == b""
                    s.close()

    asyncio.run(go())


def test_a_proxy_in_a_child_process_counts_and_reshapes_its_link() -> None:
    payload = os.urandom(1 << 20)

    async def go() -> None:
        async with echo_server() as port:
            proxy = await asyncio.to_thread(spawn_proxy, port, None, 0.0)
            try:
                back = await asyncio.to_thread(lambda: asyncio.run(round_trip(proxy.port, payload)))
                assert back == payload
                assert await asyncio.to_thread(proxy.counts) == (len(payload), len(payload))
                await asyncio.to_thread(proxy.reset)
                await asyncio.to_thread(proxy.set_link, 8, 0.0)
                began = time.perf_counter()
                back = await asyncio.to_thread(lambda: asyncio.run(round_trip(proxy.port, payload)))
                took = time.perf_counter() - began
                assert back == payload
                assert await asyncio.to_thread(proxy.counts) == (len(payload), len(payload))
                assert took >= (len(payload) - Link(8).burst) / Link(8).bytes_per_s  # type: ignore[operator]
            finally:
                await asyncio.to_thread(proxy.stop)

    asyncio.run(go())


def test_both_ssh_paths_reach_the_test_host_through_a_throttled_alias(
        hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path) -> None:
    """The system `ssh` (the bulk path) and asyncssh (the app's) both cross the proxy."""
    link = throttled("gpu", rate_mbit=40, delay_ms=5)
    rate = Link(40).bytes_per_s
    assert rate is not None
    data = os.urandom(2 << 20)
    target = tmp_path / "landed.bin"
    began = time.perf_counter()
    subprocess.run(["ssh", "-F", str(link.ssh_config), link.alias, f"cat > {target}"],
                   input=data, check=True, env=hosts.env(), timeout=60, capture_output=True)
    took = time.perf_counter() - began
    assert target.read_bytes() == data
    up, _ = link.proxy.counts()
    assert up >= len(data)  # and the handshake's bytes besides
    assert took >= (len(data) - Link(40).burst) / rate, took

    dataset = tmp_path / "train.jsonl"
    dataset.write_bytes(data[: 1 << 20])
    run_dir = tmp_path / "work" / "run"
    run_dir.mkdir(parents=True)
    link.proxy.reset()

    async def ship() -> None:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            await transfer.ship_dataset(conn, None, dataset, str(run_dir))
        finally:
            await conn.close()

    asyncio.run(ship())
    assert hashlib.sha256((run_dir / dataset.name).read_bytes()).digest() == \
        hashlib.sha256(dataset.read_bytes()).digest()
    up, down = link.proxy.counts()
    assert up >= dataset.stat().st_size and down > 0
