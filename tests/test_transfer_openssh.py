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
import random
import stat
import subprocess
import time
from pathlib import Path

import pytest

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.transfers import transfer
from rtrain_tui.core.transport import openssh_pipe
from rtrain_tui.core.transport.connection import ConnectionPool, HostConnection
from tests.sshd import SshHosts


@pytest.fixture
def big_is_small(monkeypatch: pytest.MonkeyPatch, hosts: SshHosts) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setattr(openssh_pipe, "MIN_BYTES", 1 << 20)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.subprocess.Process]:
    """Every `ssh` the transfers start (the real ones; only recorded)."""
    seen: list[asyncio.subprocess.Process] = []
    real = openssh_pipe.spawn  # where every one starts, a cold start's too (cold_ssh.py)

    async def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        process = await real(*args, **kwargs)
        seen.append(process)
        return process

    monkeypatch.setattr(openssh_pipe, "spawn", recording)
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


# -- the bulk channel's login beside the store's check (transfer.EarlyBulk) ------------
def host_programs(store: Path) -> list[int]:
    """The transfer programs on the host (this machine, for the test sshd) working in
    `store`: its path is in their command line, hex-encoded."""
    mark = os.fsencode(str(store)).hex().encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:  # it ended meanwhile
            continue
    return pids


def nothing_left(work: Path) -> None:
    """No temporary file in the store, and (within 10 s) no transfer program running there."""
    store = work / ".datasets"
    assert [p.name for p in store.iterdir() if p.name.endswith(".part")] == []
    deadline = time.monotonic() + 10
    while host_programs(store):
        assert time.monotonic() < deadline, f"still running: {host_programs(store)}"
        time.sleep(0.05)


@pytest.fixture
def checked_at(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each answer of the store's check (upload_prepare) came back."""
    times: list[float] = []
    real = HostConnection.run

    async def recording(self: HostConnection, script: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = await real(self, script, *args, **kwargs)
        if "manifests=" in script:
            times.append(time.monotonic())
        return out

    monkeypatch.setattr(HostConnection, "run", recording)
    return times


def test_a_big_upload_logs_in_its_ssh_beside_the_store_check_and_sends_through_it(
    hosts: SshHosts, tmp_path: Path, big_is_small: None, checked_at: list[float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts: list[float] = []
    real = openssh_pipe.start

    async def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        starts.append(time.monotonic())
        return await real(*args, **kwargs)

    monkeypatch.setattr(openssh_pipe, "start", recording)
    data = random_file(tmp_path / "d.jsonl", 3 << 20)
    work = tmp_path / "work"
    ship(hosts, data, work / "run")
    assert len(starts) == 1 and len(checked_at) == 1
    assert starts[0] < checked_at[0]  # its login went on while the check ran
    assert (work / "run" / "d.jsonl").read_bytes() == data.read_bytes()
    nothing_left(work)


def test_an_early_ssh_not_needed_for_a_stored_dataset_is_ended_leaving_nothing(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process],
) -> None:
    data = random_file(tmp_path / "d.jsonl", 3 << 20)
    work = tmp_path / "work"
    ship(hosts, data, work / "a")
    ship(hosts, data, work / "b")  # stored already: linked, no byte sent
    assert (work / "b" / "d.jsonl").read_bytes() == data.read_bytes()
    assert len(started) == 2 and all(p.returncode is not None for p in started)  # reaped
    assert [p.name for p in (work / ".datasets").iterdir()] == [
        hashlib.sha256(data.read_bytes()).hexdigest()]
    nothing_left(work)


def test_an_early_ssh_not_needed_for_a_delta_is_ended_leaving_nothing(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process],
) -> None:
    rnd = random.Random(1)
    words = [bytes(rnd.choices(b"abcdefghij", k=rnd.randint(2, 9))) for _ in range(4000)]
    base = b"".join(b'{"messages": "' + b" ".join(rnd.choices(words, k=100)) + b'"}\n'
                    for _ in range(16000))
    first = tmp_path / "a" / "train.jsonl"
    first.parent.mkdir()
    first.write_bytes(base)
    work = tmp_path / "work"
    ship(hosts, first, work / "a")
    edited = tmp_path / "b" / "train.jsonl"
    edited.parent.mkdir()
    new = base[:len(base) // 2] + b'{"messages": []}\n' + base[len(base) // 2:]
    edited.write_bytes(new)
    shipped: list[object] = []

    async def go() -> None:
        (work / "b").mkdir()
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            shipped.append(await transfer.ship_dataset(conn, None, edited, str(work / "b")))
        finally:
            await conn.close()

    asyncio.run(go())
    assert getattr(shipped[0], "how", None) == "delta"
    assert (work / "b" / "train.jsonl").read_bytes() == new
    assert len(started) == 2 and started[1].returncode is not None
    nothing_left(work)


def test_a_failing_store_check_still_says_why_and_leaves_no_program_behind(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process],
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the workdir's parent should be\n")
    data = random_file(tmp_path / "d.jsonl", 3 << 20)

    async def go() -> None:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            await transfer.store_dataset(conn, data, str(blocker / "work"))
        finally:
            await conn.close()

    with pytest.raises(RemoteError, match="Not a directory"):
        asyncio.run(go())
    assert started and all(p.returncode is not None for p in started)
    deadline = time.monotonic() + 10
    while host_programs(blocker / "work" / ".datasets"):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("when", ["logging in", "greeted"])
def test_a_start_cancelled_while_its_early_ssh_logs_in_leaves_nothing_here_or_there(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process], monkeypatch: pytest.MonkeyPatch, when: str,
) -> None:
    """Ctrl-C during the store's check, while the early `ssh` logs in (or once it has
    greeted): that `ssh` is ended and reaped, no pipe end stays open here, and on the host
    no program and no temporary file is left."""
    made: list[transfer.EarlyBulk] = []
    real_start = transfer.EarlyBulk.start

    async def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(await real_start(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(transfer.EarlyBulk, "start", recording)
    real_run = HostConnection.run

    async def slow_check(self: HostConnection, script: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "manifests=" in script:
            await asyncio.Event().wait()  # the check never answers: only a cancel ends it
        return await real_run(self, script, *args, **kwargs)

    monkeypatch.setattr(HostConnection, "run", slow_check)
    data = random_file(tmp_path / "d.jsonl", 3 << 20)
    work = tmp_path / "work"
    (work / "run").mkdir(parents=True)

    async def go() -> None:
        conn = HostConnection("gpu", hosts.ssh_config)
        await conn.connect()
        before = open_fds()
        try:
            task = asyncio.ensure_future(transfer.ship_dataset(conn, None, data, str(work / "run")))
            deadline = time.monotonic() + 30
            while not (started if when == "logging in"
                       else made and made[0]._opening and made[0]._opening.done()):
                assert not task.done() and time.monotonic() < deadline
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert open_fds() - before == set()
        finally:
            await conn.close()

    asyncio.run(go())
    assert len(started) == 1 and started[0].returncode is not None  # ended and reaped
    (work / ".datasets").mkdir(exist_ok=True)
    nothing_left(work)


def test_a_changed_host_key_fails_a_big_upload_as_itself_with_no_word_about_the_bulk_client(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process],
) -> None:
    """The host was reinstalled: another key is on record for it. The early `ssh` may
    try (a key is on record) and be refused, but the upload fails saying the key
    changed, and no warning says the system's ssh cannot log in on its own."""
    import asyncssh

    from rtrain_tui.core.errors import HostKeyChangedError

    known = tmp_path / "known_hosts"
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known.write_text(f"[127.0.0.1]:{hosts.ports['gpu']} {other}")
    config = tmp_path / "ssh_config"
    config.write_text(hosts.ssh_config.read_text().replace(
        str(hosts.home / ".ssh" / "known_hosts"), str(known)).replace(
        "Include extra.conf\n", ""))
    data = random_file(tmp_path / "d.jsonl", 3 << 20)
    warnings: list[str] = []

    async def go() -> None:
        conn = HostConnection("gpu", config, on_warning=warnings.append)
        try:
            await transfer.store_dataset(conn, data, str(tmp_path / "work"))
        finally:
            await conn.close()

    with pytest.raises(HostKeyChangedError):
        asyncio.run(go())
    assert warnings == []
    assert all(p.returncode is not None for p in started)


def record_host_key(hosts: SshHosts) -> None:
    """The gpu host's key on record, as after any earlier login (accept-new)."""
    subprocess.run(["ssh", "-F", str(hosts.ssh_config), "-o", "StrictHostKeyChecking=accept-new",
                    "gpu", "true"], env=hosts.env(), check=True, capture_output=True, timeout=30)


@pytest.mark.parametrize("process", ["new", "warm"])
def test_a_start_into_a_home_workdir_logs_in_its_ssh_before_the_workdir_is_resolved(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process], monkeypatch: pytest.MonkeyPatch, process: str,
) -> None:
    """The default workdir is `~/.praisonai-train`: resolving it is a round trip over the
    asyncssh connection (after its whole login). The dataset's own `ssh` logs in first,
    the host program expanding `~` itself, and that very `ssh` carries the upload.

    A new process (no connection to the host yet, its key on record) starts that `ssh`
    before the connection is even made (cold_ssh.py); one that has the connection
    (the TUI) starts it beside the store's check (EarlyBulk)."""
    from rtrain_tui.core.engine import Engine, StartRequest
    from rtrain_tui.core.runs.index import RunIndex
    from tests.conftest import write_config

    record_host_key(hosts)
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
    spawned: list[tuple[float, bool]] = []  # when, and whether the pool had the host then
    real_spawn = openssh_pipe.spawn

    async def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        spawned.append((time.monotonic(), engine.pool.knows("gpu")))
        return await real_spawn(*args, **kwargs)

    monkeypatch.setattr(openssh_pipe, "spawn", recording)
    resolved: list[float] = []
    real_run = HostConnection.run

    async def run(self: HostConnection, script: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = await real_run(self, script, *args, **kwargs)
        if "wd=$(pwd)/$wd" in script:  # resolve_workdir.sh
            resolved.append(time.monotonic())
        return out

    monkeypatch.setattr(HostConnection, "run", run)
    data = random_file(tmp_path / "d.jsonl", 3 << 20)
    name = f"w-{os.urandom(6).hex()}"  # unique across workers: it names host programs
    work = hosts.remote_homes["gpu"] / name

    async def go() -> None:
        try:
            if process == "warm":
                await engine.host("gpu").connect()
            await engine.start(StartRequest("gpu", write_config(tmp_path / "c.yaml", steps=1),
                                            dataset=data, run_id="home", workdir=f"~/{name}",
                                            gpus=0))
        finally:
            await engine.close()

    try:
        asyncio.run(go())
        assert len(spawned) == 1 and len(resolved) == 1 and spawned[0][0] < resolved[0]
        assert spawned[0][1] is (process == "warm")
        assert len(started) == 1 and started[0].returncode == 0  # it carried the upload
        digest = hashlib.sha256(data.read_bytes()).hexdigest()
        assert [p.name for p in (work / ".datasets").iterdir()] == [digest]
        assert (work / "home" / "d.jsonl").read_bytes() == data.read_bytes()
        nothing_left(work)
        deadline = time.monotonic() + 10  # and as its command names it, with a `~`
        while host_programs(Path(f"~/{name}/.datasets")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def test_a_new_process_starts_no_early_ssh_where_it_cannot_be_sure_of_the_key(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
) -> None:
    """cold_ssh only takes the plain case: a host behind a ProxyJump, or whose key is not
    on record (a first contact), gets no `ssh` before its connection is made."""
    from rtrain_tui.core.transport import cold_ssh

    record_host_key(hosts)
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(hosts.ssh_config.read_text()
                      + "\nHost jumpy\n  HostName 127.0.0.1\n  ProxyJump gpu\n"
                      + f"\nHost newbox\n  HostName 127.0.0.1\n  Port {hosts.ports['gpu']}\n"
                      + f"  UserKnownHostsFile {empty}\n")

    async def go() -> list[object]:
        return [await cold_ssh.spawn(config, alias, "true") for alias in ("jumpy", "newbox")]

    assert asyncio.run(go()) == [None, None]


def test_a_start_cancelled_as_its_early_ssh_starts_leaves_nothing_here_or_there(
    hosts: SshHosts, tmp_path: Path, big_is_small: None,
    started: list[asyncio.subprocess.Process], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C just as a new process's early `ssh` began to log in: it is ended and reaped,
    no pipe end stays open, and the host has no program and no file of it."""
    from rtrain_tui.core.engine import Engine, StartRequest
    from rtrain_tui.core.runs.index import RunIndex
    from tests.conftest import write_config

    record_host_key(hosts)
    began = asyncio.Event()
    real_spawn = openssh_pipe.spawn

    async def spawning(*args, **kwargs):  # type: ignore[no-untyped-def]
        process = await real_spawn(*args, **kwargs)
        began.set()
        return process

    monkeypatch.setattr(openssh_pipe, "spawn", spawning)
    data = random_file(tmp_path / "d.jsonl", 3 << 20)
    work = tmp_path / "work"

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        before = open_fds()
        try:
            task = asyncio.ensure_future(engine.start(StartRequest(
                "gpu", write_config(tmp_path / "c.yaml", steps=1), dataset=data,
                run_id="cut", workdir=str(work), gpus=0)))
            await asyncio.wait_for(began.wait(), 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await engine.close()
        assert open_fds() - before == set()

    asyncio.run(go())
    assert started and all(p.returncode is not None for p in started)
    deadline = time.monotonic() + 10
    while host_programs(work / ".datasets"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not (work / ".datasets").exists() or [
        p.name for p in (work / ".datasets").iterdir()] == []


def test_an_early_ssh_no_upload_took_is_ended_and_one_taken_is_left_to_its_upload(
    hosts: SshHosts, big_is_small: None,
) -> None:
    """The engine's safety net (Spawned.discard): a start that ends before its upload
    adopted the `ssh` ends it, closing the pipe; once adopted, the upload owns it."""
    from rtrain_tui.core.transport import cold_ssh

    record_host_key(hosts)

    async def go() -> None:
        left = await cold_ssh.spawn(hosts.ssh_config, "gpu", "cat")
        taken = await cold_ssh.spawn(hosts.ssh_config, "gpu", "cat")
        assert left is not None and taken is not None
        taken.taken = True  # as EarlyBulk.adopt marks it
        await left.discard()
        assert left.process.returncode is not None
        await left.discard()  # twice: nothing more happens
        await taken.discard()
        assert taken.process.returncode is None
        os.close(taken.write_end)  # the end of its input ends `cat`, and with it `ssh`
        assert await asyncio.wait_for(taken.process.wait(), 30) == 0

    asyncio.run(go())
