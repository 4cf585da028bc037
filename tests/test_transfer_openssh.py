"""Big uploads go through the system's OpenSSH client, and fall back when it cannot log in.

Against the real sshd. The threshold (openssh_pipe.MIN_BYTES, 64 MiB) is lowered so a
few MiB take the same path a real dataset does. The one stand-in is an `ssh` that
cannot log in, as one without the user's key would: it prints OpenSSH's message and
exits 255.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from rtrain_tui.core.transfers import transfer
from rtrain_tui.core.transport import openssh_pipe
from rtrain_tui.core.transport.connection import HostConnection
from tests.sshd import SshHosts


@pytest.fixture
def big_is_small(monkeypatch: pytest.MonkeyPatch, hosts: SshHosts) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setattr(openssh_pipe, "MIN_BYTES", 1 << 20)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.subprocess.Process]:
    """Every `ssh` the transfers start (the real ones; only recorded)."""
    seen: list[asyncio.subprocess.Process] = []
    real = openssh_pipe.start

    async def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        process = await real(*args, **kwargs)
        if process is not None:
            seen.append(process)
        return process

    monkeypatch.setattr(openssh_pipe, "start", recording)
    return seen


def random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def ship(hosts: SshHosts, data: Path, run_dir: Path,
         warnings: list[str] | None = None) -> HostConnection:
    run_dir.mkdir(parents=True, exist_ok=True)

    async def go() -> HostConnection:
        conn = HostConnection("gpu", hosts.ssh_config, on_warning=(warnings or []).append)
        try:
            await transfer.ship_dataset(conn, None, data, str(run_dir))
        finally:
            await conn.close()
        return conn
    return asyncio.run(go())


def test_a_big_upload_goes_through_the_system_ssh_and_lands_verified(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process],
) -> None:
    data = random_file(tmp_path / "d.jsonl", 3 << 20)
    work = tmp_path / "work"
    conn = ship(hosts, data, work / "run")
    assert len(started) == 1 and started[0].returncode == 0
    assert conn.bulk_client_refused is None
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    assert [p.name for p in (work / ".datasets").iterdir()] == [digest]
    assert (work / "run" / "d.jsonl").read_bytes() == data.read_bytes()


def test_a_small_upload_stays_on_the_open_connection(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process],
) -> None:
    data = random_file(tmp_path / "d.jsonl", 100 << 10)
    ship(hosts, data, tmp_path / "work" / "run")
    assert started == []
    assert (tmp_path / "work" / "run" / "d.jsonl").read_bytes() == data.read_bytes()


def test_when_the_system_ssh_cannot_log_in_uploads_go_on_over_asyncssh_saying_so_once(
    hosts: SshHosts, tmp_path: Path, big_is_small: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "ssh"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -V ] && { echo OpenSSH_9.2p1 >&2; exit 0; }\n"
                    f"echo called >> {calls}\n"
                    "echo 'root@127.0.0.1: Permission denied (publickey).' >&2\nexit 255\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    warnings: list[str] = []
    first, second = (random_file(tmp_path / f"{n}.jsonl", 2 << 20) for n in ("a", "b"))
    run_dir = tmp_path / "work" / "run"
    run_dir.mkdir(parents=True)

    async def go() -> HostConnection:
        conn = HostConnection("gpu", hosts.ssh_config, on_warning=warnings.append)
        try:
            for data in (first, second):
                await transfer.ship_dataset(conn, None, data, str(run_dir))
        finally:
            await conn.close()
        return conn

    conn = asyncio.run(go())
    for data in (first, second):
        assert (run_dir / data.name).read_bytes() == data.read_bytes()
    assert calls.read_text().count("called") == 1  # not tried again on this connection
    assert conn.bulk_client_refused == "root@127.0.0.1: Permission denied (publickey)."
    assert warnings == ["gpu: transfers use the built-in SSH client, which is slower: the "
                        "system's ssh cannot log in on its own (root@127.0.0.1: Permission "
                        "denied (publickey).)"]


def test_without_an_ssh_program_uploads_go_over_asyncssh(
    hosts: SshHosts, tmp_path: Path, big_is_small: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # ours only: the host side is sshd's
    data = random_file(tmp_path / "d.jsonl", 2 << 20)
    conn = ship(hosts, data, tmp_path / "work" / "run")
    assert conn.bulk_client_refused == "no `ssh` program on this machine"
    assert (tmp_path / "work" / "run" / "d.jsonl").read_bytes() == data.read_bytes()


def cancel_upload_midway(cfg: Path, data: Path, work: Path) -> None:
    """Start shipping `data` into work/run on `gpu`, cancel it once bytes moved, and wait
    (10 s at most) for the host's store to be empty: nothing partial, nothing published."""
    (work / "run").mkdir(parents=True)

    async def go() -> None:
        conn = HostConnection("gpu", cfg)
        moved: list[int] = []
        try:
            task = asyncio.ensure_future(transfer.ship_dataset(
                conn, None, data, str(work / "run"), lambda _l, done, _t: moved.append(done)))
            deadline = time.monotonic() + 30
            while not any(moved):
                assert not task.done() and time.monotonic() < deadline, "the upload never moved"
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await conn.close()

    asyncio.run(go())
    deadline = time.monotonic() + 10
    while list((work / ".datasets").iterdir()):  # the host program reads EOF, cleans up
        assert time.monotonic() < deadline, list((work / ".datasets").iterdir())
        time.sleep(0.05)


def test_a_cancelled_system_ssh_upload_ends_ssh_and_leaves_no_part(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process],
) -> None:
    data = random_file(tmp_path / "d.jsonl", 256 << 20)
    cancel_upload_midway(hosts.ssh_config, data, tmp_path / "work")
    assert len(started) == 1 and started[0].returncode is not None  # ssh was ended, and reaped
