"""Aliases the ssh config names are usable even when they are not hostnames."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtrain_tui.core.engine import Engine
from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs.index import RunIndex
from rtrain_tui.core.transport.connection import ConnectionPool


def test_a_configured_alias_that_is_no_hostname_is_accepted_others_refused(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text('Host a..b "rented box"\n  HostName 127.0.0.1\n')
    engine = Engine(ConnectionPool(config), RunIndex(tmp_path / "runs.toml"))
    assert engine.host("a..b").alias == "a..b"
    assert engine.host("rented box").alias == "rented box"
    with pytest.raises(ValidationError):
        engine.host("c..d")


def test_demo_not_served_and_not_configured_is_refused_without_asking_dns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app without --demo probes the demo runs of the index: `demo` went to DNS (and
    would have offered the user's keys to whatever answered there); the CLI refused it
    already. A `demo` alias in the ssh config is a host like any other."""
    import asyncio
    import socket

    from rtrain_tui.core.errors import UnknownHostError, UnreachableError

    looked_up: list[object] = []
    real = socket.getaddrinfo

    def spy(host: object, *args: object, **kwargs: object) -> object:
        looked_up.append(host)
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", spy)
    empty = tmp_path / "config"
    empty.write_text("")

    async def connect(config: Path) -> BaseException:
        pool = ConnectionPool(config)
        try:
            await pool.get("demo").run("true", timeout=10)
        except BaseException as exc:  # noqa: BLE001 - the error is what is checked
            return exc
        finally:
            await pool.close()
        raise AssertionError("connected")

    err = asyncio.run(connect(empty))
    assert isinstance(err, UnknownHostError) and "add --demo" in str(err), err
    assert "demo" not in looked_up

    configured = tmp_path / "configured"
    configured.write_text("Host demo\n  HostName 127.0.0.1\n  Port 1\n")
    err = asyncio.run(connect(configured))
    assert type(err) is UnreachableError and "connection refused" in str(err), err
