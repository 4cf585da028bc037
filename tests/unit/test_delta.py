"""Delta uploads' pure parts: the client's chunking, list and what-to-send
(core/transfers/delta.py), and the host program's manifests and `delta` mode
(core/host/transfer_program.py) run in process on files in a temp dir.

The end-to-end behaviour (edits, corruption, cancel, concurrency, a full disk) is in
tests/test_transfer_delta.py, against the sshd fixture.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
from pathlib import Path

import pytest

from rtrain_tui.core.host import transfer_program as tp
from rtrain_tui.core.transfers import delta


@pytest.fixture
def out() -> io.BytesIO:
    buf = io.BytesIO()
    tp.out.bind(buf)  # where every part of the program writes (Output)
    return buf


def text(n: int, seed: int) -> bytes:
    """JSONL-like lines of varied words: what datasets look like to the chunker."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyz", k=rnd.randint(2, 9)))
             for _ in range(3000)]
    lines, size = [], 0
    while size < n:
        row = b'{"text": "' + b" ".join(rnd.choices(words, k=rnd.randint(10, 90))) + b'"}\n'
        lines.append(row)
        size += len(row)
    return b"".join(lines)[:n]


def chunks_of(tmp_path: Path, data: bytes, name: str = "f") -> delta.Chunks:
    path = tmp_path / name
    path.write_bytes(data)
    return delta.chunk_file(path)


# -- the client ------------------------------------------------------------------------
def test_chunks_tile_the_file_and_hash_each_piece_and_the_whole(tmp_path: Path) -> None:
    data = text(3 << 20, 1)
    c = chunks_of(tmp_path, data)
    assert c.size == len(data) and c.digest == hashlib.sha256(data).hexdigest()
    assert all(delta.MIN <= n <= delta.MAX for n in c.lengths[:-1])
    pieces = [data[at:at + n] for at, n in zip(c.offsets(), c.lengths)]
    assert b"".join(pieces) == data
    assert [hashlib.sha256(p).digest() for p in pieces] == list(c.digests)


def test_an_upload_outruns_its_cut_only_when_keeping_up_takes_a_share_of_a_core() -> None:
    """A first upload's manifest cut is given up on a link as fast as the CPUs (here a
    cut of 1 GB per CPU second: loopback's 500 MB/s would take half a core), kept on a
    gigabit LAN and anything slower, and kept while the link is not measured yet."""
    speed = 1e9
    assert delta.outran(500e6, speed)
    assert not delta.outran(115e6, speed)  # 1 GbE
    assert not delta.outran(12.5e6, speed)  # 100 Mbit/s
    assert not delta.outran(None, speed)
    assert delta.outran(delta.CUT_SHARE * speed * 1.01, speed)
    assert not delta.outran(delta.CUT_SHARE * speed * 0.99, speed)


def test_a_stopped_cut_ends_early_with_stopped(tmp_path: Path) -> None:
    """chunk_file asks its Cut every SAMPLE bytes and stops at the first no."""
    path = tmp_path / "f"
    path.write_bytes(os.urandom(3 * delta.SAMPLE))
    asked: list[int] = []

    class Once:
        def keep(self, cut: int, took: float) -> bool:
            asked.append(cut)
            return len(asked) < 2

    with pytest.raises(delta.Stopped):
        delta.chunk_file(path, False, Once())  # type: ignore[arg-type]
    assert len(asked) == 2 and 2 * delta.SAMPLE <= asked[1] < 2 * delta.SAMPLE + delta.MAX


@pytest.mark.parametrize("upload", ["faster", "slower"])
def test_a_cut_beside_an_upload_stops_only_when_the_upload_outruns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upload: str,
) -> None:
    """Cut waits for the upload's rate once past its sample, then stops (no manifest)
    or cuts to the end. Faster: the whole file sent within a millisecond of the first
    byte (terabytes a second); slower: two bytes in a tenth of a second."""
    import asyncio

    monkeypatch.setattr(delta, "CUT_ALWAYS", 0)
    data = os.urandom(3 * delta.SAMPLE)
    path = tmp_path / "f"
    path.write_bytes(data)

    async def go() -> delta.Chunks | str:
        cut = delta.Cut(path, len(data))
        cut.sent(1)
        if upload == "faster":
            cut.sent(len(data), done=True)
        else:
            await asyncio.sleep(0.1)
            cut.sent(2, done=True)
        try:
            return await cut.result
        except delta.Stopped:
            return "stopped"

    got = asyncio.run(go())
    if upload == "faster":
        assert got == "stopped"
    else:
        assert isinstance(got, delta.Chunks) and got.size == len(data)
        assert got.digests == chunks_of(tmp_path, data, "again").digests


@pytest.mark.parametrize("edit", ["middle", "append", "truncate", "insert"])
def test_an_edit_changes_only_the_chunks_near_it(tmp_path: Path, edit: str) -> None:
    base = text(4 << 20, 2)
    mid = len(base) // 2
    new = {"middle": base[:mid] + b"X" * 2000 + base[mid + 2000:],
           "append": base + text(100 << 10, 3),
           "truncate": base[:len(base) - (300 << 10)],
           "insert": base[:mid] + b'{"text": "a new line"}\n' + base[mid:]}[edit]
    old, now = chunks_of(tmp_path, base, "old"), chunks_of(tmp_path, new, "new")
    stored = set(old.digests)
    fresh = sum(n for n, d in zip(now.lengths, now.digests) if d not in stored)
    # Content-defined: the cuts move only near the edit, so at most the edited bytes and
    # a few chunks around them are new (the appended text, the rest for the others).
    appended = len(new) - len(base) if edit == "append" else 0
    assert fresh <= appended + 3 * delta.MAX, (edit, fresh)


def test_the_list_is_what_the_host_reads(tmp_path: Path) -> None:
    c = chunks_of(tmp_path, text(2 << 20, 4))
    path = tmp_path / "list"
    path.write_bytes(delta.encode_list(c))
    fd = os.open(path, os.O_RDONLY)
    try:
        got = tp.read_list(fd, c.size)
    finally:
        os.close(fd)
    assert got == (c.digest.encode(), list(zip(c.offsets(), c.lengths, c.digests)))


def test_have_bitmap_reads_low_bit_first_and_checks_its_length() -> None:
    assert delta.parse_have(b"have 0501", 10) == [True, False, True] + [False] * 5 + [True, False]
    with pytest.raises(ValueError):
        delta.parse_have(b"have 05", 10)  # one byte short
    with pytest.raises(ValueError):
        delta.parse_have(b"error=list", 10)


def test_again_names_only_chunks_the_host_said_it_had() -> None:
    had = [True, False, True, True]
    assert delta.parse_again(b"again 0 3", had) == [0, 3]
    for bad in (b"again 1", b"again 3 0", b"again 0 0", b"again 4", b"again", b"ok=x"):
        with pytest.raises(ValueError):
            delta.parse_again(bad, had)


def test_what_to_send_merges_neighbouring_chunks_into_one_range() -> None:
    c = delta.Chunks(100, "", (10, 20, 30, 40), (b"a", b"b", b"c", b"d"))
    assert delta.to_send(c, [1, 2]) == [(10, 50)]
    assert delta.to_send(c, [0, 2, 3]) == [(0, 10), (30, 70)]
    assert delta.to_send(c, []) == []


# -- the host's manifests ----------------------------------------------------------------
def test_a_manifest_parses_to_offsets_and_refuses_what_cannot_describe_the_file() -> None:
    d1, d2 = b"\x01" * 32, b"\x02" * 32
    good = tp.manifest_bytes(30, [(0, 10, d1), (10, 20, d2)])
    assert good == b"rtrain-cdc 1 30 2\n10 " + b"01" * 32 + b"\n20 " + b"02" * 32 + b"\n"
    assert tp.parse_manifest(good, 30) == [(0, 10, d1), (10, 20, d2)]
    assert tp.parse_manifest(good, 31) is None  # the dataset has another size
    assert tp.parse_manifest(good[:-1], 30) is None  # cut short
    assert tp.parse_manifest(good[:-40], 30) is None
    assert tp.parse_manifest(good + b"5 " + b"03" * 32 + b"\n", 30) is None  # a row more
    assert tp.parse_manifest(good.replace(b"\n10 ", b"\n-10 "), 30) is None
    assert tp.parse_manifest(good.replace(b"\n10 ", b"\n0 "), 30) is None
    assert tp.parse_manifest(good.replace(b"01" * 32, b"01" * 31), 30) is None
    assert tp.parse_manifest(good.replace(b"01" * 32, b"zz" * 32), 30) is None
    assert tp.parse_manifest(good.replace(b"\n20 ", b"\n10 "), 30) is None  # 20 of 30
    assert tp.parse_manifest(good.replace(b"cdc 1", b"cdc 2"), 30) is None
    assert tp.parse_manifest(good.replace(b" 30 2", b" x 2"), 30) is None
    assert tp.parse_manifest(b"\xff\n", 30) is None
    assert tp.parse_manifest(b"", 30) is None


def _store(tmp_path: Path) -> tuple[Path, Path]:
    store, chunks = tmp_path / ".datasets", tmp_path / ".dataset-chunks"
    store.mkdir()
    return store, chunks


def _publish_with_manifest(store: Path, chunkdir: Path, c: delta.Chunks, data: bytes) -> Path:
    (store / c.digest).write_bytes(data)
    tp.write_manifest(os.fsencode(chunkdir), c.digest, c.size,
                      list(zip(c.offsets(), c.lengths, c.digests)))
    return store / c.digest


def _run_delta(tmp_path: Path, store: Path, chunkdir: Path, c: delta.Chunks,
               stdin: bytes) -> list[bytes]:
    feed = tmp_path / "stdin"
    feed.write_bytes(stdin)
    fd = os.open(feed, os.O_RDONLY)
    try:
        tp.delta(os.fsencode(store), os.fsencode(chunkdir), c.size, fd)
    finally:
        os.close(fd)
    return tp.out.stream.getvalue().splitlines()


def _fresh(c: delta.Chunks, stored: delta.Chunks) -> list[int]:
    return [i for i, d in enumerate(c.digests) if d not in set(stored.digests)]


def _bytes_of(data: bytes, c: delta.Chunks, picks: list[int]) -> bytes:
    """The chunks `picks` of `data` as the client sends them: raw blocks, one run."""
    offsets = c.offsets()
    return _blocks(b"".join(data[offsets[i]:offsets[i] + c.lengths[i]] for i in picks))


def _blocks(raw: bytes) -> bytes:
    return b"".join(tp.HEAD.pack(tp.RAW, len(raw[at:at + tp.BLOCK]), len(raw[at:at + tp.BLOCK]))
                    + raw[at:at + tp.BLOCK] for at in range(0, len(raw), tp.BLOCK))


def test_delta_builds_the_file_from_stored_chunks_and_the_sent_ones(tmp_path: Path,
                                                                     out: io.BytesIO) -> None:
    store, chunkdir = _store(tmp_path)
    old = text(2 << 20, 5)
    old_c = chunks_of(tmp_path, old, "old")
    _publish_with_manifest(store, chunkdir, old_c, old)
    new = old[:1 << 20] + b'{"text": "fixed"}\n' + old[(1 << 20) + 100:]
    c = chunks_of(tmp_path, new, "new")
    fresh = _fresh(c, old_c)
    answer = _run_delta(tmp_path, store, chunkdir, c,
                        delta.encode_list(c) + _bytes_of(new, c, fresh) + b"E")
    assert answer[-1] == b"ok=" + c.digest.encode()
    had = delta.parse_have(answer[0], len(c.lengths))
    assert [i for i, h in enumerate(had) if not h] == fresh and len(fresh) <= 3
    assert (store / c.digest).read_bytes() == new
    assert sorted(p.name for p in store.iterdir()) == sorted([old_c.digest, c.digest])
    # its own manifest, so the next upload can build on it
    got = tp.parse_manifest((chunkdir / c.digest).read_bytes(), len(new))
    assert got == list(zip(c.offsets(), c.lengths, c.digests))


def test_a_stored_chunk_that_no_longer_hashes_right_is_asked_for_again(
    tmp_path: Path, out: io.BytesIO,
) -> None:
    store, chunkdir = _store(tmp_path)
    old = text(2 << 20, 6)
    old_c = chunks_of(tmp_path, old, "old")
    stored = _publish_with_manifest(store, chunkdir, old_c, old)
    new = old + b'{"text": "appended"}\n'
    c = chunks_of(tmp_path, new, "new")
    fresh = _fresh(c, old_c)
    # Rot one byte of the stored dataset's fourth chunk: its manifest still lists it.
    at = old_c.offsets()[3] + 5
    with stored.open("r+b") as f:
        f.seek(at)
        f.write(bytes([old[at] ^ 1]))
    rotten = [i for i, d in enumerate(c.digests) if d == old_c.digests[3]]
    answer = _run_delta(tmp_path, store, chunkdir, c,
                        delta.encode_list(c) + _bytes_of(new, c, fresh) + b"E"
                        + _bytes_of(new, c, rotten) + b"E")
    assert answer[1:] == [b"again " + b" ".join(b"%d" % i for i in rotten),
                          b"ok=" + c.digest.encode()]
    assert (store / c.digest).read_bytes() == new


@pytest.mark.parametrize("cut", ["list", "data", "trailer", "again"])
def test_delta_cut_short_publishes_nothing_and_leaves_no_part(tmp_path: Path, out: io.BytesIO,
                                                              cut: str) -> None:
    store, chunkdir = _store(tmp_path)
    old = text(2 << 20, 7)
    old_c = chunks_of(tmp_path, old, "old")
    stored = _publish_with_manifest(store, chunkdir, old_c, old)
    new = b'{"text": "first"}\n' + old
    c = chunks_of(tmp_path, new, "new")
    listing, data = delta.encode_list(c), _bytes_of(new, c, _fresh(c, old_c))
    if cut == "again":
        stored.write_bytes(b"\0" * len(old))  # every stored chunk rots: all asked again
    feed = {"list": listing[:-7], "data": listing + data[:-1], "trailer": listing + data,
            "again": listing + data + b"E"}[cut]
    answer = _run_delta(tmp_path, store, chunkdir, c, feed)
    assert answer[-1] == (b"error=list" if cut == "list" else b"error=short")
    assert sorted(p.name for p in store.iterdir()) == [old_c.digest]
    assert sorted(p.name for p in chunkdir.iterdir()) == [old_c.digest]


def test_delta_refuses_bytes_that_are_not_the_chunk_listed(tmp_path: Path,
                                                           out: io.BytesIO) -> None:
    store, chunkdir = _store(tmp_path)
    new = text(2 << 20, 8)
    c = chunks_of(tmp_path, new, "new")
    wrong = bytearray(new)
    wrong[100] ^= 1
    answer = _run_delta(tmp_path, store, chunkdir, c,
                        delta.encode_list(c) + _blocks(bytes(wrong)) + b"E")
    assert answer[-1] == b"error=changed"
    assert list(store.iterdir()) == []


def test_manifests_of_datasets_gone_or_resized_are_not_used(tmp_path: Path) -> None:
    store, chunkdir = _store(tmp_path)
    a, b = text(1 << 20, 9), text(1 << 20, 10)
    ca, cb = chunks_of(tmp_path, a, "a"), chunks_of(tmp_path, b, "b")
    _publish_with_manifest(store, chunkdir, ca, a)
    _publish_with_manifest(store, chunkdir, cb, b)
    (store / ca.digest).unlink()
    (store / cb.digest).write_bytes(b[:-1])
    wanted = set(ca.digests) | set(cb.digests)
    assert tp.known_chunks(os.fsencode(store), os.fsencode(chunkdir), wanted) == {}


def test_a_manifest_written_through_the_shell_is_what_the_host_program_reads(
    tmp_path: Path,
) -> None:
    import subprocess

    from rtrain_tui.core.host import remote_sh

    data = text(2 << 20, 11)
    c = chunks_of(tmp_path, data)
    rows = list(zip(c.offsets(), c.lengths, c.digests))
    body = tp.manifest_bytes(c.size, rows).decode()
    where = tmp_path / "it's chunks"
    script = remote_sh.write_manifest(str(where), c.digest, body)
    for _ in range(2):  # written again (a retry): replaced, the same
        r = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
        assert r.stdout == "written=1\n", r.stderr
    assert tp.parse_manifest((where / c.digest).read_bytes(), len(data)) == rows
    assert [p.name for p in where.iterdir()] == [c.digest]  # no temporary file left
    assert where.stat().st_mode & 0o777 == 0o700
    # Only a manifest's text goes into the here-document, only a digest names the file.
    for bad_body in (body + "RTRAIN_MANIFEST_END\n", body + "$(reboot)\n", body[:-1]):
        with pytest.raises(ValueError):
            remote_sh.write_manifest(str(where), c.digest, bad_body)
    for bad_digest in ("../" + "a" * 61, c.digest.upper(), c.digest[:-1]):
        with pytest.raises(ValueError):
            remote_sh.write_manifest(str(where), bad_digest, body)
