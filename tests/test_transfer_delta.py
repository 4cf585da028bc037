"""Delta uploads against the real sshd (core/transfers/delta.py): a dataset close to one
the host stores sends only the chunks that differ, lands byte-identical and verified, and
never publishes anything wrong (issue 20)."""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.transfers import channel, delta, transfer, upload
from rtrain_tui.core.transport.connection import HostConnection
from tests.conftest import Throttled
from tests.small_disk import small_tmpfs
from tests.sshd import SshHosts

T = TypeVar("T")
GIVE_UP_S = 8  # how long a held cut waits for the store before it goes on


def jsonl(n: int, seed: int) -> bytes:
    """Chat-like JSONL lines of varied words, `n` bytes."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyz", k=rnd.randint(2, 9)))
             for _ in range(4000)]
    rows, size = [], 0
    while size < n:
        row = (b'{"messages": [{"role": "user", "content": "'
               + b" ".join(rnd.choices(words, k=rnd.randint(10, 120))) + b'"}]}\n')
        rows.append(row)
        size += len(row)
    return b"".join(rows)[:n]


def run_with(hosts: SshHosts, go: Callable[[HostConnection], Awaitable[T]]) -> T:
    async def main() -> T:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            return await go(conn)
        finally:
            await conn.close()
    return asyncio.run(main())


def ship(hosts: SshHosts, local: Path, run_dir: Path,
         progress: transfer.Progress | None = None) -> delta.Shipped:
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_with(hosts, lambda conn: transfer.ship_dataset(conn, None, local, str(run_dir),
                                                                progress))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_file(path: Path, data: bytes) -> Path:
    """`data` in a new file at `path` (its folder made): a dataset of the test's own."""
    path.parent.mkdir()
    path.write_bytes(data)
    return path


def store_base(hosts: SshHosts, tmp_path: Path, base: bytes) -> Path:
    """The host stores `base` by a first upload (into run dir `a`): its workdir, whose
    store then holds it and its manifest."""
    work = tmp_path / "work"
    ship(hosts, write_file(tmp_path / "base" / "train.jsonl", base), work / "a")
    return work


def leftovers(work: Path) -> list[str]:
    """Temporary files of ours left in the store or beside it."""
    return [p.name for d in (work / ".datasets", work / delta.CHUNKS_DIR) if d.exists()
            for p in d.iterdir() if p.name.endswith(".part")]


@pytest.fixture
def base(tmp_path: Path) -> bytes:
    return jsonl(8 << 20, 1)


@pytest.mark.parametrize("edit", ["middle", "append", "truncate"])
def test_an_edited_dataset_sends_few_bytes_and_lands_identical(
    hosts: SshHosts, tmp_path: Path, base: bytes, edit: str,
) -> None:
    work = tmp_path / "work"
    first = tmp_path / "train.jsonl"
    first.write_bytes(base)
    shipped = ship(hosts, first, work / "a")
    assert shipped.how == "whole"
    # The first upload wrote its manifest, so the next one can be a delta.
    assert [p.name for p in (work / delta.CHUNKS_DIR).iterdir()] == [sha(base)]

    mid = len(base) // 2
    new = {"middle": base[:mid] + b'{"messages": [{"role": "user", "content": "fixed"}]}\n'
                     + base[mid + 4000:],
           "append": base + jsonl(80 << 10, 2),
           "truncate": base[:len(base) - (1 << 20)]}[edit]
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    labels: list[str] = []
    shipped = ship(hosts, edited, work / "b", lambda label, done, total: labels.append(label))
    assert shipped.how == "delta" and shipped.digest == sha(new)
    appended = len(new) - len(base) if edit == "append" else 0
    # The chunks around the edit and the list: well under 3% of the file here.
    assert shipped.wire <= appended + 4 * delta.MAX + len(delta.encode_list(
        delta.chunk_file(edited))), shipped
    assert shipped.wire < 0.03 * len(new) + appended
    assert (work / "b" / "train.jsonl").read_bytes() == new
    assert (work / ".datasets" / sha(new)).read_bytes() == new
    # The label is the file's name; it carries the whole file's size, which the meter
    # words once, after the part sent (meter.describe).
    assert labels[-1] == "train.jsonl" and getattr(labels[-1], "of", 0) == len(new)
    assert sorted(p.name for p in (work / delta.CHUNKS_DIR).iterdir()) == sorted(
        [sha(base), sha(new)])
    assert leftovers(work) == []


def test_a_corrupted_stored_chunk_is_sent_again_and_the_result_is_right(
    hosts: SshHosts, tmp_path: Path, base: bytes,
) -> None:
    work = store_base(hosts, tmp_path, base)
    # Rot bytes of the stored dataset all through (a bad disk, a hand edit): its manifest
    # still lists the chunks there. The run dir's link is the same file.
    stored = work / ".datasets" / sha(base)
    with stored.open("r+b") as f:
        for at in range(1000, len(base), 1 << 20):
            f.seek(at)
            f.write(b"#")
    new = base + b'{"messages": [{"role": "user", "content": "one more"}]}\n'
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    shipped = ship(hosts, edited, work / "b")
    assert shipped.how == "delta"
    assert (work / "b" / "train.jsonl").read_bytes() == new
    # The rotten chunks (eight of about a hundred) were sent again, no more.
    assert 8 * delta.MIN <= shipped.wire <= 8 * delta.MAX + 4 * delta.MAX + len(new) // 100
    assert leftovers(work) == []


def test_a_cancel_mid_delta_publishes_nothing_and_leaves_no_temporary_file(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path, base: bytes,
) -> None:
    work = store_base(hosts, tmp_path, base)
    # Half the file new: a delta with megabytes to send, cancelled once some have gone.
    new = base[:len(base) // 2] + jsonl(len(base) // 2, 3)
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    (work / "b").mkdir()
    # A slow link: compressed, the new half is ~2 MB on the wire, which loopback sent
    # whole before the test could cancel it (seen in CI); at 8 Mbit/s it takes seconds.
    link = throttled("gpu", rate_mbit=8)

    async def go(conn: HostConnection) -> str:
        moving = asyncio.Event()

        def progress(label: str, done: int, total: int) -> None:
            if getattr(label, "of", 0) and done > 0:  # a delta's label: the whole file's size
                moving.set()

        task = asyncio.ensure_future(transfer.ship_dataset(conn, None, edited, str(work / "b"),
                                                           progress))
        waiting = asyncio.ensure_future(moving.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        assert not task.done(), "the delta ended before it could be cancelled"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "not cancelled"

    async def main() -> str:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            return await go(conn)
        finally:
            await conn.close()

    assert asyncio.run(main()) == "cancelled"
    deadline = time.monotonic() + 20
    while leftovers(work):  # the host program sees the channel close
        assert time.monotonic() < deadline, leftovers(work)
        time.sleep(0.05)
    assert [p.name for p in (work / ".datasets").iterdir()] == [sha(base)]
    assert [p.name for p in (work / delta.CHUNKS_DIR).iterdir()] == [sha(base)]
    assert not (work / "b" / "train.jsonl").exists()


def test_two_deltas_sharing_chunks_at_once_both_land(hosts: SshHosts, tmp_path: Path,
                                                      base: bytes) -> None:
    work = store_base(hosts, tmp_path, base)
    news = [base + jsonl(200 << 10, 4), base[:1 << 20] + b"\n" + base[1 << 20:]]
    paths = []
    for i, data in enumerate(news):
        path = write_file(tmp_path / f"e{i}" / "train.jsonl", data)
        paths.append(path)
        (work / f"b{i}").mkdir()

    async def go(conn: HostConnection) -> list[delta.Shipped]:
        return list(await asyncio.gather(*(
            transfer.ship_dataset(conn, None, p, str(work / f"b{i}")) for i, p in enumerate(paths))))

    shipped = run_with(hosts, go)
    assert [s.how for s in shipped] == ["delta", "delta"]
    for i, data in enumerate(news):
        assert (work / f"b{i}" / "train.jsonl").read_bytes() == data
    assert sorted(p.name for p in (work / ".datasets").iterdir()) == sorted(
        [sha(base)] + [sha(d) for d in news])
    assert leftovers(work) == []


def test_a_disk_full_during_assembly_is_named_and_publishes_nothing(
    hosts: SshHosts, tmp_path: Path,
) -> None:
    base = jsonl(1536 << 10, 5)
    work = tmp_path / "work"
    work.mkdir()
    with small_tmpfs(work, "4m"):
        first = tmp_path / "train.jsonl"
        first.write_bytes(base)
        ship(hosts, first, work / "a")
        # The disk fills meanwhile: about 700 KiB left, half the new file.
        (work / "filler").write_bytes(b"\0" * ((4 << 20) - len(base) - (700 << 10)))
        new = base + jsonl(10 << 10, 6)
        edited = write_file(tmp_path / "edited" / "train.jsonl", new)
        store = str(work / ".datasets")

        async def go(conn: HostConnection) -> str:
            try:
                await delta._delta(conn, edited, store, str(work / delta.CHUNKS_DIR), len(new),
                                   asyncio.to_thread(delta.chunk_file, edited), None,
                                   "python3", str(work))
            except RemoteError as exc:
                return str(exc)
            return "no error"

        assert run_with(hosts, go).startswith(f"no space left on gpu ({work})")
        assert [p.name for p in (work / ".datasets").iterdir()] == [sha(base)]
        assert leftovers(work) == []


def test_a_dataset_sharing_nothing_goes_whole_and_gets_its_manifest(
    hosts: SshHosts, tmp_path: Path, base: bytes,
) -> None:
    work = store_base(hosts, tmp_path, base)
    other = write_file(tmp_path / "other" / "train.jsonl", jsonl(2 << 20, 7))
    shipped = ship(hosts, other, work / "b")
    assert shipped.how == "whole"
    assert (work / "b" / "train.jsonl").read_bytes() == other.read_bytes()
    assert sorted(p.name for p in (work / delta.CHUNKS_DIR).iterdir()) == sorted(
        [sha(base), sha(other.read_bytes())])
    assert leftovers(work) == []


def test_a_manifest_never_outlives_its_dataset(hosts: SshHosts, tmp_path: Path,
                                              base: bytes) -> None:
    work = store_base(hosts, tmp_path, base)
    (work / ".datasets" / sha(base)).unlink()  # removed by hand: nothing of ours removes one
    small = write_file(tmp_path / "small" / "s.jsonl", b'{"text": "x"}\n')
    ship(hosts, small, work / "b")  # any later upload
    assert list((work / delta.CHUNKS_DIR).iterdir()) == []


def test_without_the_chunker_installed_uploads_go_whole_as_before(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An environment installed before pyfastcdc was a dependency: no delta, no failure."""
    monkeypatch.setitem(sys.modules, "pyfastcdc", None)  # what a missing package imports as
    work = tmp_path / "work"
    first = tmp_path / "train.jsonl"
    first.write_bytes(base)
    assert ship(hosts, first, work / "a").how == "whole"
    edited = write_file(tmp_path / "edited" / "train.jsonl", base + b"\n")
    assert ship(hosts, edited, work / "b").how == "whole"
    assert (work / "b" / "train.jsonl").read_bytes() == base + b"\n"
    assert not (work / delta.CHUNKS_DIR).exists()


def test_keepalives_while_the_host_copies_are_passed_over(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host slow to copy says `p` every few seconds, so the client's stall bound does
    not end a delta that is busy; here it says it after every chunk it copies."""
    from rtrain_tui.core.host import remote_sh

    assert "\nKEEPALIVE = 2.0" in remote_sh.TRANSFER_PY
    monkeypatch.setattr(remote_sh, "TRANSFER_PY", remote_sh.TRANSFER_PY.replace(
        "\nKEEPALIVE = 2.0", "\nKEEPALIVE = -1.0"))
    work = store_base(hosts, tmp_path, base)
    new = b'{"messages": []}\n' + base
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    shipped = ship(hosts, edited, work / "b")
    assert shipped.how == "delta"
    assert (work / "b" / "train.jsonl").read_bytes() == new


def test_a_host_slow_to_copy_before_the_sent_chunks_is_not_taken_for_a_stall(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An edit near the end and new data after it: the host copies every stored chunk
    before the edited one while the client still has megabytes to send (more than the
    channel's window). Its keepalives say it is busy, so the client's stall bound must not
    end the delta while the host copies (a slow disk, a network file system)."""
    from rtrain_tui.core.host import remote_sh

    program = remote_sh.TRANSFER_PY
    for old, new in (("\nKEEPALIVE = 2.0", "\nKEEPALIVE = 0.05"),
                     ('    path, off, length = where\n',
                      '    path, off, length = where\n    time.sleep(0.03)\n')):
        assert old in program
        program = program.replace(old, new)
    work = store_base(hosts, tmp_path, base)
    # About a hundred stored chunks to copy (3 s here), then 6 MiB that are new.
    new = base[:len(base) - 1000] + b'{"messages": []}\n' + jsonl(6 << 20, 8)
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    monkeypatch.setattr(remote_sh, "TRANSFER_PY", program)
    monkeypatch.setattr(channel, "STALL_TIMEOUT", 1.0)
    shipped = ship(hosts, edited, work / "b")
    assert shipped.how == "delta"
    assert (work / "b" / "train.jsonl").read_bytes() == new


def test_a_host_slow_to_hash_the_file_again_after_a_resend_is_not_taken_for_a_stall(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stored chunk that no longer hashes right is sent again, and the host then hashes
    the whole file once more: a big file on a slow disk takes longer than the client's
    stall bound, and the host says it is busy meanwhile."""
    from rtrain_tui.core.host import remote_sh

    program = remote_sh.TRANSFER_PY
    for old, new in (("\nKEEPALIVE = 2.0", "\nKEEPALIVE = 0.05"),
                     ("            while off < size:\n",
                      "            while off < size:\n                time.sleep(0.3)\n")):
        assert program.count(old) == 1, old
        program = program.replace(old, new)
    work = store_base(hosts, tmp_path, base)
    with (work / ".datasets" / sha(base)).open("r+b") as f:  # one stored chunk rots
        f.seek(1 << 20)
        f.write(b"#")
    new = base + b'{"messages": [{"role": "user", "content": "one more"}]}\n'
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    monkeypatch.setattr(remote_sh, "TRANSFER_PY", program)
    monkeypatch.setattr(channel, "STALL_TIMEOUT", 1.0)
    shipped = ship(hosts, edited, work / "b")
    assert shipped.how == "delta"
    assert (work / "b" / "train.jsonl").read_bytes() == new


def test_the_missing_chunks_go_compressed_over_a_slow_link(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path, base: bytes,
) -> None:
    """The chunks travel as the transfer's blocks: JSONL shrinks on a 50 Mbit/s link."""
    work = store_base(hosts, tmp_path, base)
    new = base + jsonl(1 << 20, 8)
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    link = throttled("gpu", rate_mbit=50)
    totals: list[int] = []

    (work / "b").mkdir()

    async def main() -> delta.Shipped:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            return await transfer.ship_dataset(conn, None, edited, str(work / "b"),
                                               lambda label, done, total: totals.append(total))
        finally:
            await conn.close()

    shipped = asyncio.run(main())
    assert shipped.how == "delta" and (work / "b" / "train.jsonl").read_bytes() == new
    sending = totals[-1]  # the raw bytes of the chunks sent
    assert sending >= 1 << 20
    up, _ = link.proxy.counts()  # everything this connection sent, SSH's framing too
    assert shipped.wire < sending * 0.6 and up < sending * 0.6, (shipped.wire, up, sending)


def test_a_dataset_of_more_chunks_than_a_list_may_hold_goes_whole(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host program takes at most MAX_CHUNKS chunks in a list (hundreds of GiB at
    the usual chunk size): a bigger dataset is sent whole, never refused, and gets no
    manifest that a later delta could not use either."""
    from rtrain_tui.core.host import remote_sh, transfer_program

    work = store_base(hosts, tmp_path, base)
    # Here the limit is 50 chunks, the file about a hundred.
    assert "\nMAX_CHUNKS = 1 << 22 " in remote_sh.TRANSFER_PY
    monkeypatch.setattr(remote_sh, "TRANSFER_PY", remote_sh.TRANSFER_PY.replace(
        "\nMAX_CHUNKS = 1 << 22 ", "\nMAX_CHUNKS = 50 "))
    monkeypatch.setattr(transfer_program, "MAX_CHUNKS", 50)
    new = base + b'{"messages": [{"role": "user", "content": "one more"}]}\n'
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    assert len(delta.chunk_file(edited).lengths) > 50
    shipped = ship(hosts, edited, work / "b")
    assert shipped.how == "whole"
    assert (work / "b" / "train.jsonl").read_bytes() == new
    assert [p.name for p in (work / delta.CHUNKS_DIR).iterdir()] == [sha(base)]
    assert leftovers(work) == []


def test_a_file_unreadable_while_it_is_cut_is_one_clear_error_or_no_manifest(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading the local file fails in the cutting thread (a removed USB disk, EIO). A
    whole upload has its bytes already: it lands, without a manifest. A delta cannot be
    built: a RemoteError naming the file, never an OSError's traceback."""
    real = delta.chunk_file

    def failing(path: Path, whole: bool = True, cut: delta.Cut | None = None) -> delta.Chunks:
        real(path, whole, cut)
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setattr(delta, "chunk_file", failing)
    work = tmp_path / "work"
    first = tmp_path / "train.jsonl"
    first.write_bytes(base)
    assert ship(hosts, first, work / "a").how == "whole"
    assert (work / "a" / "train.jsonl").read_bytes() == base
    assert not (work / delta.CHUNKS_DIR).exists()

    monkeypatch.setattr(delta, "chunk_file", real)
    second = write_file(tmp_path / "second" / "train.jsonl", jsonl(2 << 20, 9))
    ship(hosts, second, work / "c")  # a whole upload that writes its manifest
    monkeypatch.setattr(delta, "chunk_file", failing)
    edited = write_file(tmp_path / "edited" / "train.jsonl", base + b"\n")
    with pytest.raises(RemoteError) as caught:
        ship(hosts, edited, work / "b")
    assert str(caught.value) == f"cannot read {edited}: Input/output error"
    assert leftovers(work) == []


def test_a_first_upload_is_stored_before_its_chunking_ends(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chunking beside a first upload only feeds its manifest: the dataset is in the
    store (and a start goes on) without waiting for it. Here the cut is held until the
    store has returned; it ends then, and its manifest is written before the shipping
    is settled."""
    import threading

    real = delta.chunk_file
    stored = threading.Event()
    held: list[bool] = []

    def slow(path: Path, whole: bool = True, cut: delta.Cut | None = None) -> delta.Chunks:
        held.append(stored.wait(GIVE_UP_S))  # False: the store waited for the cut
        return real(path, whole, cut)

    monkeypatch.setattr(delta, "chunk_file", slow)
    work = tmp_path / "work"
    first = tmp_path / "train.jsonl"
    first.write_bytes(base)

    async def go(conn: HostConnection) -> str:
        later: list[asyncio.Future[None]] = []
        digest = (await transfer.store_dataset(conn, first, str(work), later=later)).digest
        stored.set()
        for writing in later:
            await delta.settle(writing)
        return digest

    assert run_with(hosts, go) == sha(base)
    assert held == [True]
    assert (work / ".datasets" / sha(base)).read_bytes() == base
    assert [p.name for p in (work / delta.CHUNKS_DIR).iterdir()] == [sha(base)]


def test_a_host_slow_to_read_its_manifests_is_not_taken_for_a_stall(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every delta reads every stored dataset's manifest before it answers `have` (35 ms
    a stored GiB here: a store of many big datasets, or a slow disk, takes longer than
    the client's stall bound); the host says it is busy meanwhile."""
    from rtrain_tui.core.host import remote_sh

    work = tmp_path / "work"
    for i, data in enumerate([base, jsonl(2 << 20, 9), jsonl(2 << 20, 10)]):
        path = write_file(tmp_path / f"d{i}" / "train.jsonl", data)
        ship(hosts, path, work / f"a{i}")
    assert len(list((work / delta.CHUNKS_DIR).iterdir())) == 3
    program = remote_sh.TRANSFER_PY
    for old, new in (("\nKEEPALIVE = 2.0", "\nKEEPALIVE = 0.05"),
                     ("        path = os.path.join(store, name)\n",
                      "        path = os.path.join(store, name)\n        time.sleep(0.5)\n")):
        assert program.count(old) == 1, old
        program = program.replace(old, new)
    monkeypatch.setattr(remote_sh, "TRANSFER_PY", program)
    monkeypatch.setattr(channel, "STALL_TIMEOUT", 1.0)
    new = base + b'{"messages": [{"role": "user", "content": "one more"}]}\n'
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    shipped = ship(hosts, edited, work / "b")
    assert shipped.how == "delta"
    assert (work / "b" / "train.jsonl").read_bytes() == new


def upload_via(link: Throttled, local: Path, run_dir: Path) -> delta.Shipped:
    """ship_dataset through `link` (a connection of its own), settled."""
    run_dir.mkdir(parents=True, exist_ok=True)

    async def main() -> delta.Shipped:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            return await transfer.ship_dataset(conn, None, local, str(run_dir))
        finally:
            await conn.close()
    return asyncio.run(main())


def test_a_first_upload_faster_than_its_cut_writes_no_manifest_and_leaves_no_thread(
    hosts: SshHosts, tmp_path: Path, base: bytes, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a link as fast as this machine's CPUs the manifest's cut would take the
    upload's CPU: it is given up. Here every measured link counts as that fast (the
    share of a core the cut may take is 0), and the rule applies from 1 MiB. The
    dataset lands verified; no manifest, so the next upload of an edit goes whole."""
    import threading

    monkeypatch.setattr(delta, "CUT_ALWAYS", 1 << 20)
    monkeypatch.setattr(delta, "SAMPLE", 1 << 20)
    monkeypatch.setattr(delta, "CUT_SHARE", 0.0)
    work = tmp_path / "work"
    first = write_file(tmp_path / "base" / "train.jsonl", base)
    shipped = ship(hosts, first, work / "a")
    assert shipped.how == "whole" and (work / "a" / "train.jsonl").read_bytes() == base
    assert not (work / delta.CHUNKS_DIR).exists()
    assert [t for t in threading.enumerate() if t.name == "rtrain-cut"] == []
    edited = write_file(tmp_path / "edited" / "train.jsonl", base + b"\n")
    assert ship(hosts, edited, work / "b").how == "whole"
    assert (work / "b" / "train.jsonl").read_bytes() == base + b"\n"


def test_a_first_upload_over_a_slow_link_is_cut_so_an_edit_later_goes_as_a_delta(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path, base: bytes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cut that a fast link gives up keeps up with a slow one (5 Mbit/s: a small
    share of a core even when a loaded machine makes the cut's 1 MiB sample slow; at
    20 Mbit/s a CI run once timed it under 60 MB/s), so the edit goes as a delta over it."""
    monkeypatch.setattr(delta, "CUT_ALWAYS", 1 << 20)  # the rule applies to this file
    monkeypatch.setattr(delta, "SAMPLE", 1 << 20)
    link = throttled("gpu", rate_mbit=5)
    work = tmp_path / "work"
    first = write_file(tmp_path / "base" / "train.jsonl", base)
    assert upload_via(link, first, work / "a").how == "whole"
    assert [p.name for p in (work / delta.CHUNKS_DIR).iterdir()] == [sha(base)]
    new = base[:len(base) // 2] + b'{"messages": []}\n' + base[len(base) // 2:]
    edited = write_file(tmp_path / "edited" / "train.jsonl", new)
    shipped = upload_via(link, edited, work / "b")
    assert shipped.how == "delta" and shipped.wire < 0.03 * len(new)
    assert (work / "b" / "train.jsonl").read_bytes() == new


def test_a_first_upload_writes_its_manifest_while_its_last_bytes_drain(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path, base: bytes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over a slow link the host's verdict comes a buffer's drain after the last byte
    left (most of a second at 20 Mbit/s): the manifest's write goes meanwhile."""
    link = throttled("gpu", rate_mbit=20)
    events: list[tuple[float, str]] = []
    real_write, real_upload = delta._write_manifest, upload.stream_upload

    async def writing(*args, **kwargs):  # type: ignore[no-untyped-def]
        events.append((time.monotonic(), "manifest written"))
        return await real_write(*args, **kwargs)

    async def uploading(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return await real_upload(*args, **kwargs)
        finally:
            events.append((time.monotonic(), "the host's verdict"))

    monkeypatch.setattr(delta, "_write_manifest", writing)
    monkeypatch.setattr(upload, "stream_upload", uploading)
    work = tmp_path / "work"
    first = write_file(tmp_path / "base" / "train.jsonl", base)
    assert upload_via(link, first, work / "a").how == "whole"
    assert [what for _, what in sorted(events)] == ["manifest written", "the host's verdict"]
    assert [p.name for p in (work / delta.CHUNKS_DIR).iterdir()] == [sha(base)]
    assert leftovers(work) == []


def test_a_cancel_while_the_first_upload_is_cut_leaves_no_unretrieved_error(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path, base: bytes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C during a first upload, its last bytes sent, stops its cut (Stopped) and the
    manifest's write waiting for it: that is the cancel's own end, not an error to
    report. It was left in a future nobody read, and Python printed "Future exception
    was never retrieved … Stopped" under the CLI's one-line cancel message."""
    import gc

    monkeypatch.setattr(delta, "CUT_ALWAYS", 1 << 20)
    monkeypatch.setattr(delta, "SAMPLE", 1 << 20)
    monkeypatch.setattr(delta, "RATE_AFTER", 60.0)  # the cut waits for the upload's end
    link = throttled("gpu", rate_mbit=20)
    local = write_file(tmp_path / "base" / "train.jsonl", base)
    run_dir = tmp_path / "work" / "a"
    run_dir.mkdir(parents=True)
    reported: list[dict[str, object]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        conn = HostConnection(link.alias, link.ssh_config)
        moving = asyncio.Event()
        try:
            upload = asyncio.ensure_future(transfer.ship_dataset(
                conn, None, local, str(run_dir), lambda _label, done, total: done == total and moving.set()))
            await asyncio.wait_for(moving.wait(), 30)
            upload.cancel()
            await asyncio.wait({upload})
            assert upload.cancelled()
            del upload  # with it, the frames that held the cut
            gc.collect()  # an unread future reports itself when it is collected
        finally:
            await conn.close()

    asyncio.run(main())
    assert [str(ctx.get("message")) for ctx in reported] == []
    assert not (run_dir / "train.jsonl").exists()
