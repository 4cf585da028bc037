"""Every wait is bounded and every channel heals (issue 6), against the real sshd.

Also: the scripts that change the host can be sent twice (what a reconnect does) without
acting twice.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.engine import Engine
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunIndex
from rtrain_tui.core.transport import connection
from rtrain_tui.core.transport.connection import ConnectionPool
from tests.sshd import SshHosts

FaultRowMaker = Callable[[str, str], object]  # the `fault_row` fixture (tests/faults/conftest.py)

# One per test process: the parallel lane runs tests side by side on this machine, and a
# wrapper that ends kills every process carrying its run's marker (RTRAIN_RUN=TOKEN).
TOKEN = secrets.token_hex(16)


def make_engine(hosts: SshHosts, tmp_path: Path) -> Engine:
    return Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))


def run(engine: Engine, coro_fn):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        try:
            return await coro_fn()
        finally:
            await engine.close()

    return asyncio.run(go())


def processes_with(arg: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if arg.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_script_that_times_out_is_killed_on_the_host(hosts: SshHosts, tmp_path: Path, fault_row: FaultRowMaker) -> None:
    fault_row('(4) hung script', 'sleep past timeout')
    engine = make_engine(hosts, tmp_path)
    marker = "1234.5"  # a sleep nobody else runs

    async def go() -> None:
        with pytest.raises(RemoteError, match="took longer than 2 s"):
            await engine.host("gpu").run(f"sleep {marker}", timeout=2)

    run(engine, go)
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == [], "the timed-out script still runs on the host"


@pytest.mark.serial
def test_one_stuck_script_does_not_hold_up_the_hosts_other_work(hosts: SshHosts, tmp_path: Path, fault_row: FaultRowMaker) -> None:
    fault_row('(4) stuck script vs probe', 'sleep 6 + probe')
    engine = make_engine(hosts, tmp_path)

    async def go() -> float:
        conn = engine.host("gpu")
        stuck = asyncio.ensure_future(conn.run("sleep 6", timeout=10))
        await asyncio.sleep(0.5)
        began = time.monotonic()
        assert (await conn.run("echo probe", timeout=3)).strip() == "probe"
        took = time.monotonic() - began
        stuck.cancel()
        return took

    assert run(engine, go) < 3


def test_waiting_for_a_free_shell_counts_inside_the_timeout(hosts: SshHosts, tmp_path: Path, fault_row: FaultRowMaker) -> None:
    fault_row('(4) all shells busy', '3 × sleep 5')
    engine = make_engine(hosts, tmp_path)

    async def go() -> None:
        conn = engine.host("gpu")
        busy = [asyncio.ensure_future(conn.run("sleep 5", timeout=10))
                for _ in range(connection.MAX_SHELLS)]
        await asyncio.sleep(1)
        with pytest.raises(RemoteError, match="took longer than 1 s"):
            await conn.run("echo late", timeout=1)
        for b in busy:
            b.cancel()

    run(engine, go)


def test_a_hung_sftp_read_is_abandoned_and_other_reads_go_on(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    fault_row: FaultRowMaker,
) -> None:
    """A FIFO (or a stuck NFS file) blocks the host's sftp-server; the channel is replaced."""
    fault_row('(3) hung SFTP read', 'FIFO in the run dir')
    monkeypatch.setattr(connection, "SFTP_CALL_TIMEOUT", 2.0)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    plain = tmp_path / "plain.txt"
    plain.write_text("fine\n")
    engine = make_engine(hosts, tmp_path)

    async def go() -> None:
        conn = engine.host("gpu")
        sftp = await conn.sftp()
        with pytest.raises(RemoteError, match="no answer within 2 s"):
            async with await sftp.open(str(fifo), "rb") as f:
                await f.read(10)
        fresh = await conn.sftp()
        async with await fresh.open(str(plain), "rb") as f:
            assert await f.read(100) == b"fine\n"

    async def bounded() -> None:
        await asyncio.wait_for(go(), 30)  # today's main waits here forever

    run(engine, bounded)
    # unblock the host's sftp-server if it still waits on the fifo for a writer
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader left: nothing is stuck


def test_a_dead_sftp_channel_on_a_live_connection_is_replaced(hosts: SshHosts, tmp_path: Path, fault_row: FaultRowMaker) -> None:
    fault_row('(3) SFTP channel killed', 'channel closed, link up')
    engine = make_engine(hosts, tmp_path)
    (tmp_path / "f").write_text("x")

    async def go() -> None:
        conn = engine.host("gpu")
        sftp = await conn.sftp()
        assert (await sftp.stat(str(tmp_path / "f"))).size == 1
        sftp.exit()  # the channel dies; the connection stays up
        await sftp.wait_closed()
        assert conn.connected
        again = await conn.sftp()
        assert (await again.stat(str(tmp_path / "f"))).size == 1

    run(engine, go)


def test_a_host_without_sftp_says_so(hosts: SshHosts, tmp_path: Path, fault_row: FaultRowMaker) -> None:
    fault_row('(3) no SFTP subsystem', 'sshd without Subsystem')
    cfg = tmp_path / "config"
    nosftp = hosts.extra_host("nosftp", "Subsystem sftp /nonexistent/sftp-server-that-is-not-there\n")
    cfg.write_text(hosts.ssh_config.read_text() + nosftp)
    engine = Engine(ConnectionPool(cfg), RunIndex(tmp_path / "runs.toml"))

    async def go() -> None:
        with pytest.raises(RemoteError) as err:
            sftp = await engine.host("nosftp").sftp()
            await sftp.stat("/")
        assert "SFTP" in str(err.value) and "cannot reach" not in str(err.value)

    run(engine, go)


# -- scripts that change the host are idempotent ----------------------------------------
def sh(script: str, cwd: Path | None = None) -> str:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                          cwd=cwd, timeout=30).stdout


def test_make_run_dir_sent_twice_answers_the_same_and_keeps_others_out(tmp_path: Path) -> None:
    first = sh(remote_sh.make_run_dir(str(tmp_path), "r", TOKEN))
    assert first.strip() == f"dir={tmp_path}/r"
    assert sh(remote_sh.make_run_dir(str(tmp_path), "r", TOKEN)) == first  # the re-send
    assert sh(remote_sh.make_run_dir(str(tmp_path), "r", "f" * 32)).strip() == "exists"


def test_launch_sent_twice_starts_one_wrapper_and_reports_it_both_times(tmp_path: Path) -> None:
    run_dir = Path(sh(remote_sh.make_run_dir(str(tmp_path), "r", TOKEN)).strip().removeprefix("dir="))
    (run_dir / "run.sh").write_text(direct_sh.wrapper("sleep 0.3", {}))
    first = dict(probes.parse_key_values(sh(direct_sh.launch(str(run_dir), TOKEN))))
    again = dict(probes.parse_key_values(sh(direct_sh.launch(str(run_dir), TOKEN))))
    assert first["pid"].isdigit() and again == first
    deadline = time.monotonic() + 10
    while not (run_dir / "status").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # a second wrapper, had one started, would rewrite the log now
    assert (run_dir / "status").read_text() == "0\n"
    # a run dir that is not this start's is never launched
    other = dict(probes.parse_key_values(sh(direct_sh.launch(str(run_dir), "f" * 32))))
    assert "error" in other


def test_a_start_that_never_launched_is_removed_and_a_launched_one_never(tmp_path: Path) -> None:
    run_dir = Path(sh(remote_sh.make_run_dir(str(tmp_path), "r", TOKEN)).strip().removeprefix("dir="))
    assert sh(remote_sh.remove_unlaunched(str(tmp_path), "r", "f" * 32)).strip() == "removed=0"
    assert sh(remote_sh.remove_unlaunched(str(tmp_path), "r", TOKEN)).strip() == "removed=1"
    assert not run_dir.exists()
    run_dir = Path(sh(remote_sh.make_run_dir(str(tmp_path), "r", TOKEN)).strip().removeprefix("dir="))
    (run_dir / "launch.lock").mkdir()
    assert sh(remote_sh.remove_unlaunched(str(tmp_path), "r", TOKEN)).strip() == "removed=0"
    assert run_dir.exists()


def test_hosts_without_proc_read_running_runs_as_running(tmp_path: Path) -> None:
    """The `ps` path: before, the identity written as ' none' never matched after read -r."""
    env = dict(os.environ, RT_PROC="/nonexistent-proc")
    run_dir = Path(sh(remote_sh.make_run_dir(str(tmp_path), "r", TOKEN)).strip().removeprefix("dir="))
    (run_dir / "run.sh").write_text(direct_sh.wrapper("sleep 3", {}))
    subprocess.run(["/bin/sh", "-c", direct_sh.launch(str(run_dir), TOKEN)], env=env, check=True,
                   capture_output=True, timeout=30)
    out = subprocess.run(["/bin/sh", "-c", direct_sh.run_states([(str(tmp_path), "r")])],
                         env=env, capture_output=True, text=True, timeout=30).stdout
    assert probes.parse_run_states(out, 1)[0].state == "running"
    os.killpg(int((run_dir / "train.pid").read_text()), 9)
