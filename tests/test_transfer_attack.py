"""Uploads attacked against the real sshd: a store in a state its own code never makes
(a manifest that is a FIFO or a link), a name or workdir of awkward characters, the file
changing while it goes. The contract: nothing wrong is published in `.datasets/`, no
temporary file stays, the error is one clear line, and what is said is the truth."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import transfer_program as tp
from rtrain_tui.core.transfers import delta, transfer
from rtrain_tui.core.transport import openssh_pipe
from rtrain_tui.core.transport.connection import HostConnection
from tests.conftest import Throttled
from tests.sshd import SshHosts
from tests.test_transfer_delta import jsonl, leftovers, sha, ship, write_file
from tests.test_transfer_openssh import host_programs

IN_TIME_S = 25  # under transfer.STALL_TIMEOUT: a hung host program shows as a timeout


def ship_in_time(hosts: SshHosts, local: Path, run_dir: Path) -> delta.Shipped:
    """ship(), failing the test if it takes longer than IN_TIME_S."""
    run_dir.mkdir(parents=True, exist_ok=True)

    async def main() -> delta.Shipped:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            return await asyncio.wait_for(
                transfer.ship_dataset(conn, None, local, str(run_dir)), IN_TIME_S)
        finally:
            await conn.close()
    return asyncio.run(main())


@pytest.fixture
def bulk_ssh(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.subprocess.Process]:
    """Every system `ssh` the transfers start (the real ones; only recorded)."""
    seen: list[asyncio.subprocess.Process] = []
    real = openssh_pipe.start

    async def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        process = await real(*args, **kwargs)
        if process is not None:
            seen.append(process)
        return process

    monkeypatch.setattr(openssh_pipe, "start", recording)
    return seen


def unblock_fifo(path: Path) -> None:
    """Open FIFO `path` for writing and close it, so a reader blocked on it sees its end."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        assert exc.errno in (errno.ENXIO, errno.ENOENT), exc  # no reader: nothing blocked


# (A link to /dev/zero had the host program read it into memory for good: not kept as a
# case, since a regression would eat the test machine's memory, but the same check holds.)
@pytest.mark.parametrize("kind", ["fifo", "link to a fifo"])
def test_a_manifest_that_is_no_regular_file_is_passed_over_and_the_delta_lands(
    hosts: SshHosts, tmp_path: Path, kind: str,
) -> None:
    work = tmp_path / "work"
    one, two = jsonl(2 << 20, 11), jsonl(2 << 20, 12)
    ship(hosts, write_file(tmp_path / "one" / "train.jsonl", one), work / "a")
    ship(hosts, write_file(tmp_path / "two" / "train.jsonl", two), work / "b")
    chunks = work / delta.CHUNKS_DIR
    assert sorted(p.name for p in chunks.iterdir()) == sorted([sha(one), sha(two)])
    # `one`'s manifest replaced (a hand, another tool): `two`'s still counts, so the
    # next upload of an edit of either goes as a delta and reads every manifest.
    bad = chunks / sha(one)
    bad.unlink()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to(fifo)
    new = two + jsonl(100 << 10, 13)
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    try:
        shipped = ship_in_time(hosts, edited, work / "c")
    finally:
        unblock_fifo(bad if kind == "fifo" else fifo)  # else a hung host program stays
    assert shipped.how == "delta" and shipped.digest == sha(new)
    assert (work / ".datasets" / sha(new)).read_bytes() == new
    assert (work / "c" / "train.jsonl").read_bytes() == new
    assert leftovers(work) == []


@pytest.mark.parametrize("how", ["whole", "delta"])
@pytest.mark.parametrize("squatter", ["link to other bytes", "dangling link", "fifo"])
def test_a_store_entry_that_is_no_regular_file_is_replaced_by_the_verified_upload(
    hosts: SshHosts, tmp_path: Path, how: str, squatter: str,
) -> None:
    work = tmp_path / "work"
    base = jsonl(2 << 20, 21)
    new = base + jsonl(64 << 10, 22)
    if how == "delta":
        ship(hosts, write_file(tmp_path / "base" / "train.jsonl", base), work / "a")
    else:
        new = new[:300 << 10]  # below delta.DELTA_FROM: it goes whole
    # The new dataset's name in the store is taken by something that is not it, put
    # there by hand or another tool (the store's check counts only regular files).
    store = work / ".datasets"
    store.mkdir(parents=True, exist_ok=True)
    entry = store / sha(new)
    other = tmp_path / "other"
    other.write_bytes(b"x" * len(new))  # the same size: it must not pass for the dataset
    if squatter == "fifo":
        os.mkfifo(entry)
    else:
        entry.symlink_to(other if squatter == "link to other bytes" else tmp_path / "gone")
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    shipped = ship_in_time(hosts, edited, work / "c")
    assert shipped.how == how and shipped.digest == sha(new)
    assert entry.is_file() and not entry.is_symlink() and entry.read_bytes() == new
    placed = work / "c" / "train.jsonl"
    assert not placed.is_symlink() and placed.read_bytes() == new
    assert other.read_bytes() == b"x" * len(new)
    assert leftovers(work) == []


def change(path: Path, how: str) -> None:
    """Change the dataset at `path` under an upload that has sent some of it."""
    if how == "append":
        with path.open("ab") as f:
            f.write(b'{"messages": [{"role": "user", "content": "late"}]}\n')
    else:  # rewritten in place, the same size: its first and last bytes
        with path.open("r+b") as f:
            f.write(b"[")
            f.seek(-1, os.SEEK_END)
            f.write(b"]")


@pytest.mark.parametrize("how", ["rewritten the same size", "append"])
@pytest.mark.parametrize("way", ["asyncssh", "system ssh", "delta"])
def test_a_dataset_changed_while_it_uploads_is_refused_and_nothing_is_published(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, way: str, how: str,
) -> None:
    """Bytes sent before the change and after it make a file that never was: it must not
    be stored (nor placed) as the dataset, whatever way it goes."""
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setattr(openssh_pipe, "MIN_BYTES", 1 << 20 if way == "system ssh" else 1 << 40)
    work = tmp_path / "work"
    # Random: no compression hurries it past the change. 8 MiB: the system ssh's thread
    # says its digest once the last bytes are in ssh's buffers (megabytes), and the
    # change, made at the first progress report (polled), must come before that.
    base = os.urandom(8 << 20)
    stored = []
    if way == "delta":
        ship(hosts, write_file(tmp_path / "base" / "train.jsonl", base), work / "a")
        stored = [sha(base)]
        data = base[:1 << 20] + os.urandom(7 << 20)  # megabytes to send
    else:
        data = base
    local = write_file(tmp_path / "new" / "train.jsonl", data)
    (work / "b").mkdir(parents=True)
    link = throttled("gpu", rate_mbit=40)
    changed: list[int] = []

    def progress(label: str, done: int, total: int) -> None:
        if 0 < done < total and not changed:
            change(local, how)
            changed.append(done)

    async def go() -> str:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            await transfer.ship_dataset(conn, None, local, str(work / "b"), progress)
            return "shipped"
        except RemoteError as exc:
            return str(exc)
        finally:
            await conn.close()

    said = asyncio.run(go())
    assert changed, "the upload ended before the file could be changed"
    assert said == f"{local} changed while it was uploaded; start again."
    deadline = time.monotonic() + 20
    while leftovers(work):  # the host program sees its input end, through the slow link
        assert time.monotonic() < deadline, leftovers(work)
        time.sleep(0.05)
    assert sorted(p.name for p in (work / ".datasets").iterdir()) == stored
    assert not (work / "b" / "train.jsonl").exists()
    assert leftovers(work) == []


@pytest.mark.parametrize("victim,way", [
    ("bulk ssh", "system ssh"), ("host program", "system ssh"), ("host program", "asyncssh"),
    ("host program", "delta")])
def test_an_upload_whose_ssh_or_host_program_is_killed_says_so_and_the_next_one_leaves_nothing(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, bulk_ssh: list[asyncio.subprocess.Process],
    victim: str, way: str,
) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setattr(openssh_pipe, "MIN_BYTES", 1 << 20 if way == "system ssh" else 1 << 40)
    work = tmp_path / "work"
    base = os.urandom(8 << 20)  # as in the test above: the kill comes well before the end
    stored = []
    if way == "delta":
        ship(hosts, write_file(tmp_path / "base" / "train.jsonl", base), work / "a")
        stored = [sha(base)]
        data = base[:1 << 20] + os.urandom(7 << 20)
    else:
        data = base
    local = write_file(tmp_path / "new" / "train.jsonl", data)
    (work / "b").mkdir(parents=True)
    link = throttled("gpu", rate_mbit=40)
    store = work / ".datasets"
    killed: list[int] = []

    def progress(label: str, done: int, total: int) -> None:
        if 0 < done < total and not killed:
            if victim == "bulk ssh":
                pids = [p.pid for p in bulk_ssh]
            else:
                # The Python itself, not a login shell waiting for it.
                pids = [pid for pid in host_programs(store)
                        if Path(f"/proc/{pid}/comm").read_text().startswith("python")]
            assert len(pids) == 1, pids
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    async def go(path: Path, run: str, report: transfer.Progress | None) -> str:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            await transfer.ship_dataset(conn, None, path, str(work / run), report)
            return "shipped"
        except RemoteError as exc:
            return str(exc)
        finally:
            await conn.close()

    said = asyncio.run(go(local, "b", progress))
    assert killed, "the upload ended before anything could be killed"
    assert "\n" not in said and said.startswith(f"{link.alias}: ") and said.count(link.alias) == 1
    if victim == "bulk ssh":
        assert "ssh client" in said and "host program" not in said, said
    else:
        assert said.endswith("the host program ended early"), said
    assert sorted(p.name for p in store.iterdir() if not p.name.endswith(".part")) == stored
    assert not (work / "b" / "train.jsonl").exists()
    # A killed host program removes nothing; its part, once older than a live upload's
    # can be, is the next upload's to remove (one of a live upload, locked, is not).
    deadline = time.monotonic() + 20
    while host_programs(store):
        assert time.monotonic() < deadline, host_programs(store)
        time.sleep(0.05)
    long_ago = time.time() - tp.DEAD_AFTER - 1
    for part in store.glob(".up-*.part"):
        os.utime(part, (long_ago, long_ago))
    # The next upload of the same data lands, and no temporary file is left by either.
    (work / "c").mkdir()
    assert asyncio.run(go(local, "c", None)) == "shipped"
    assert (work / "c" / "train.jsonl").read_bytes() == data
    deadline = time.monotonic() + 20
    while leftovers(work):
        assert time.monotonic() < deadline, leftovers(work)
        time.sleep(0.05)


def test_an_old_temporary_file_is_swept_only_when_no_live_upload_holds_it(tmp_path: Path) -> None:
    import fcntl

    part = tmp_path / ".up-0123456789abcdef.part"
    part.write_bytes(b"half")
    long_ago = time.time() - tp.DEAD_AFTER - 1
    os.utime(part, (long_ago, long_ago))
    fresh = tmp_path / ".up-fedcba9876543210.part"
    fresh.write_bytes(b"just made")
    theirs = tmp_path / "notes.part"  # not ours: never touched
    theirs.write_bytes(b"x")
    os.utime(theirs, (long_ago, long_ago))
    fd = os.open(part, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a live upload, slow (nothing written for long)
        tp.sweep(os.fsencode(tmp_path))
        assert part.exists()
    finally:
        os.close(fd)
    tp.sweep(os.fsencode(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name, theirs.name]


def test_a_host_file_rewritten_in_place_while_it_is_fetched_lands_whole_not_torn(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path,
) -> None:
    """An adapter saved again over itself (the same size) while it is fetched: the bytes
    read before the save and after it are no file the host ever held. Read again, it lands
    as it is now; a growing log is still fetched as a prefix (test_transfer_fetch)."""
    run = tmp_path / "run"
    run.mkdir()
    held = run / "adapter.bin"
    held.write_bytes(os.urandom(4 << 20))
    link = throttled("gpu", rate_mbit=40)
    out = tmp_path / "out"
    rewritten: list[int] = []

    def progress(label: str, done: int, total: int) -> None:
        if 0 < done < total and not rewritten:
            change(held, "rewritten the same size")
            rewritten.append(done)

    async def go() -> Path:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            return await transfer.fetch(conn, str(run), "adapter.bin", out, progress)
        finally:
            await conn.close()

    landed = asyncio.run(go())
    assert rewritten, "the fetch ended before the file could be rewritten"
    assert landed.read_bytes() == held.read_bytes()
    assert [p.name for p in out.iterdir()] == ["adapter.bin"]


BASE = jsonl(2 << 20, 51)


def overlong(extra: int) -> Callable[..., object]:
    """An encoder_for whose encoders send every block as a zstd frame, the last of a run
    decoding to `extra` bytes more than it says."""
    import zstandard

    from rtrain_tui.core.transfers import codec

    real = codec.encoder_for

    def making(*args, **kwargs):  # type: ignore[no-untyped-def]
        enc = real(*args, **kwargs)

        def encode(block: bytes, last: bool = False) -> tuple[int, bytes]:
            tail = b"x" * extra if last else b""
            return tp.ZSTD, zstandard.ZstdCompressor().compress(bytes(block) + tail)
        enc.encode = encode
        return enc
    return making


def store_base_jsonl(hosts: SshHosts, tmp_path: Path) -> Path:
    """The host stores BASE (and its manifest): its workdir."""
    work = tmp_path / "work"
    ship(hosts, write_file(tmp_path / "base" / "train.jsonl", BASE), work / "a")
    return work


def test_a_delta_block_decoding_past_its_run_is_refused_not_hung(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last block of a delta's run decodes to more bytes than it says (a client's bug,
    a bit flipped before encryption). The host's python3 has no zstd module, so the `zstd`
    program decodes it (ZstdPipe), whose thread assembles the chunks: the surplus must be
    refused, never end that thread and leave the program waiting on `zstd` for good."""
    from rtrain_tui.core.transfers import codec

    work = store_base_jsonl(hosts, tmp_path)
    monkeypatch.setattr(codec, "encoder_for", overlong(256 << 10))
    new = BASE + jsonl(200 << 10, 52)
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    with pytest.raises(RemoteError) as refused:
        ship_in_time(hosts, edited, work / "b")
    assert str(refused.value) == f"gpu: upload of {edited} arrived corrupted; start again."
    assert sorted(p.name for p in (work / ".datasets").iterdir()) == [sha(BASE)]
    deadline = time.monotonic() + 10
    while leftovers(work):
        assert time.monotonic() < deadline, leftovers(work)
        time.sleep(0.05)



def test_a_block_decoding_far_past_its_length_never_fills_the_hosts_disk(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A whole upload's last block, decoded by the `zstd` program (the host's python3 has
    no zstd module), makes 64 MiB more than it says: a few KiB on the wire. Written out
    before the count was checked, it filled the disk (a running trainer's checkpoint
    would fail meanwhile) and read as `no space left`; it is a corrupt block."""
    from rtrain_tui.core.transfers import codec
    from tests.small_disk import small_tmpfs

    work = tmp_path / "work"
    work.mkdir()
    data = jsonl(512 << 10, 71)
    local = write_file(tmp_path / "d" / "train.jsonl", data)
    monkeypatch.setattr(codec, "encoder_for", overlong(64 << 20))
    with small_tmpfs(work, "16m"):
        (work / "a").mkdir()
        with pytest.raises(RemoteError) as refused:
            ship_in_time(hosts, local, work / "a")
        assert str(refused.value) == f"gpu: upload of {local} arrived corrupted; start again."
        assert [p.name for p in (work / ".datasets").iterdir()] == []
