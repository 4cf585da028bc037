"""Delta uploads: a dataset that differs a little from one the host holds sends what changed.

The file is cut into content-defined chunks (FastCDC, `pyfastcdc`): an edit moves the
cuts only near itself, so an edited, appended or truncated dataset shares almost all its
chunks with the one before. Each dataset the host stores (`<workdir>/.datasets/<sha256>`)
gets a manifest beside it (`<workdir>/.dataset-chunks/<sha256>`: where each chunk is, and
its SHA-256). A new dataset's upload sends its chunk list (36 bytes a chunk: 0.05% of the
file) to the host program's `delta` mode (host/transfer_program.py), which answers in one
round trip which chunks it can copy from stored datasets; only the others are sent. The
host assembles the file under a temporary name, hashing every chunk it copies (one that
no longer hashes right is asked for again) and the whole file before it is published,
exactly as a whole-file upload is.

When the host has no manifest at all (its first upload, or a store from before delta
uploads), the file goes whole, as before (upload.stream_upload, through the system
`ssh` when big), and is chunked meanwhile in a thread so its manifest is written once
the last byte has left, while it drains to the host, not after the host's verdict: the
next upload can be a delta (the write goes through the host's long-lived shell: a channel
of its own cost 0.15-0.3 s). So is a dataset that shares no chunk with the host's. On a
link as fast as this machine's CPUs that cut is given up (Cut): it took the upload's CPU,
and there a delta would save little. The end of that chunking and the write are left
under way when the upload returns (`Shipped.manifest`): placing the dataset and the
launch go on beside them (the write took 0.12-0.13 s of a start's critical path), and
whoever shipped waits for them before it is done.

Average chunk 64 KiB (80 KiB with FastCDC's minimum): a 1% edit of a 256 MiB JSONL in
one place costs the edited bytes plus about two chunks around it and the list; smaller
chunks mean a longer list for every upload (16 KiB: 0.2% of the file), bigger ones more
resent around each edit. pyfastcdc over `fastcdc`: 0.09 s against 0.12-0.15 s to cut
256 MiB here, and it cuts a stream in bounded memory (`fastcdc` wants the whole file as
one buffer or mmap).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import posixpath
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh, transfer_program
from rtrain_tui.core.transfers import channel, codec, upload
from rtrain_tui.core.transfers.meter import Moving

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection

AVG = 64 << 10
MIN = 16 << 10
MAX = 256 << 10
# Smaller datasets go whole and get no manifest: their delta would save little, and
# chunking them first would cost a start more than it saves.
DELTA_FROM = 1 << 20
# A first upload's cut (Cut): below CUT_ALWAYS bytes it always runs (~30 ms of CPU
# here); above, it stops when keeping up with the upload would take more than CUT_SHARE
# of a core (the upload's rate known after RATE_AFTER seconds; the cut's own speed
# measured on its first SAMPLE bytes; its stop asked for every SAMPLE bytes).
CUT_ALWAYS = 32 << 20
CUT_SHARE = 0.15
RATE_AFTER = 0.25
SAMPLE = 8 << 20
CHUNKS_DIR = ".dataset-chunks"  # beside `.datasets/` in the workdir
_REC = transfer_program.REC  # one chunk in a delta's list: >I length, then its SHA-256
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunks:
    """A file's content-defined chunks: their lengths and SHA-256s, in order."""

    size: int
    digest: str  # the whole file's SHA-256 (hex), "" when not computed
    lengths: tuple[int, ...]
    digests: tuple[bytes, ...]

    def offsets(self) -> list[int]:
        out, at = [], 0
        for length in self.lengths:
            out.append(at)
            at += length
        return out


class Stopped(Exception):
    """A cut given up before its end (`Cut.stop`)."""


class Cut:
    """A first upload's cut for its manifest, in a thread beside the upload, given up
    when the upload is as fast as this machine's CPUs.

    The manifest pays for itself only on a link slower than the cut: there a later
    upload of an edited file goes as a delta, and the cut runs on CPU the upload leaves
    idle. On a link as fast as the CPUs (loopback, a 10 GbE LAN) cutting and hashing
    every chunk took a second of CPU per GiB from the upload (the 1 GiB loopback upload:
    1.19× `scp` with it, 1.10× without, on 2 cores), and a delta would save that link
    little: the host hashes every chunk it copies, as it hashes the bytes it receives.
    So, past CUT_ALWAYS bytes, the cut measures its own speed on the first SAMPLE bytes
    and waits until the upload's rate is known (`sent`, RATE_AFTER seconds of it, or its
    end); if keeping up would take more than CUT_SHARE of a core, it stops (Stopped: no
    manifest), else it goes on to the end. Its speed is by the clock, not its CPU time:
    on a machine busy with other work it gets less of a core, and the same upload is
    then more of a load. A nice'd thread was tried: it still found idle CPU to take, and
    the upload still paid (1.17× `scp`).

    `sent(n)`: the upload's bytes so far (from the event loop); `stop()`: give up."""

    def __init__(self, path: Path, size: int) -> None:
        self.size = size
        self.stopped = False
        self._decided = False  # once: it goes on to the end
        self._first: tuple[float, int] | None = None  # (when, bytes) of the first sent
        self._last: tuple[float, int] | None = None
        self._known = threading.Event()  # the upload's rate is known, or the cut stopped
        loop = asyncio.get_running_loop()
        self.result: asyncio.Future[Chunks] = loop.create_future()
        threading.Thread(target=self._run, args=(path, loop), name="rtrain-cut",
                         daemon=True).start()

    def sent(self, n: int, done: bool = False) -> None:
        """The upload has sent `n` bytes (`done`: all it will)."""
        now = time.monotonic()
        if self._first is None:
            if n:
                self._first = (now, n)
        else:
            self._last = (now, n)
        if done or (self._first is not None and now - self._first[0] >= RATE_AFTER):
            self._known.set()

    def stop(self) -> None:
        self.stopped = True
        self._known.set()

    def rate(self) -> float | None:
        """The upload's bytes per second, once measured."""
        if self._first is None or self._last is None or self._last[0] <= self._first[0]:
            return None
        return (self._last[1] - self._first[1]) / (self._last[0] - self._first[0])

    def keep(self, cut: int, took: float) -> bool:
        """Whether to cut on, `cut` bytes having taken `took` seconds (asked by the
        cutting thread; the first time past SAMPLE bytes, it waits for the rate)."""
        if self.stopped:
            return False
        if self.size < CUT_ALWAYS or cut < SAMPLE or self._decided:
            return True
        speed = cut / max(took, 1e-6)
        self._known.wait()
        self._decided = True
        return not self.stopped and not outran(self.rate(), speed)

    def _run(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        try:
            outcome: Chunks | BaseException = chunk_file(path, False, self)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
            outcome = exc
        try:
            loop.call_soon_threadsafe(self._settle, outcome)
        except RuntimeError:  # the loop is closed: nobody waits for it any more
            pass

    def _settle(self, outcome: Chunks | BaseException) -> None:
        if self.result.done():
            return
        if isinstance(outcome, BaseException):
            self.result.set_exception(outcome)
            # Read here: a cut given up (Stopped) or unreadable costs only the manifest,
            # and a failing or cancelled start may never get to await it (its manifest's
            # write cancelled before it began); unread, Python would print it at exit.
            self.result.exception()
        else:
            self.result.set_result(outcome)


def outran(upload_rate: float | None, cut_speed: float) -> bool:
    """Whether an upload of `upload_rate` bytes/s outruns a cut of `cut_speed` bytes/s:
    keeping up would take more than CUT_SHARE of a core. Unknown: no."""
    return upload_rate is not None and upload_rate > CUT_SHARE * cut_speed


def chunk_file(path: Path, whole: bool = True, cut: Cut | None = None) -> Chunks:
    """Cut `path` into chunks, hashing each (and the whole file unless `whole` is False),
    in one pass and bounded memory. Runs in a thread: cutting and hashing release the GIL.
    `cut`: asked now and then whether to go on (Cut.keep), else Stopped."""
    from pyfastcdc import FastCDC

    lengths: list[int] = []
    digests: list[bytes] = []
    h = hashlib.sha256()
    done, ask, began = 0, SAMPLE, time.monotonic()
    with path.open("rb") as f:
        for chunk in FastCDC(AVG, min_size=MIN, max_size=MAX).cut_stream(f):
            lengths.append(chunk.length)
            digests.append(hashlib.sha256(chunk.data).digest())
            if whole:
                h.update(chunk.data)
            done += chunk.length
            if cut is not None and done >= ask:
                if not cut.keep(done, time.monotonic() - began):
                    raise Stopped
                ask = done + SAMPLE
    return Chunks(sum(lengths), h.hexdigest() if whole else "", tuple(lengths), tuple(digests))


def _chunker() -> bool:
    """pyfastcdc can be imported. A declared dependency, but an environment installed
    before it was added lacks it: its uploads go whole, as before, rather than fail."""
    import importlib.util

    return importlib.util.find_spec("pyfastcdc") is not None


def _listable(chunks: Chunks) -> bool:
    """Whether the host program takes a list of this many chunks (MAX_CHUNKS: a dataset
    of hundreds of GiB at the usual chunk size has more)."""
    return len(chunks.lengths) <= transfer_program.MAX_CHUNKS


def encode_list(chunks: Chunks) -> bytes:
    """The chunk list as the host program reads it (its LIST): the whole file's digest too."""
    return struct.pack(">I32s", len(chunks.lengths), bytes.fromhex(chunks.digest)) + b"".join(
        _REC.pack(length, digest) for length, digest in zip(chunks.lengths, chunks.digests))


def parse_have(row: bytes, count: int) -> list[bool]:
    """The host's `have HEX` bitmap for `count` chunks: which it will copy itself."""
    word, _, marks = row.partition(b" ")
    if word != b"have":
        raise ValueError(row[:200])
    bits = bytes.fromhex(marks.decode()) if marks != b"-" else b""
    if len(bits) != (count + 7) // 8:
        raise ValueError("bitmap of the wrong length")
    return [bool(bits[i >> 3] >> (i & 7) & 1) for i in range(count)]


def parse_again(row: bytes, had: list[bool]) -> list[int]:
    """The host's `again I J ...`: chunks it meant to copy whose bytes no longer hashed right.

    Only chunks it said it had, each once, in order: anything else is not an answer.
    """
    words = row.split(b" ")
    if words[0] != b"again" or len(words) < 2:
        raise ValueError(row[:200])
    picks = [int(w) for w in words[1:]]
    if picks != sorted(set(picks)) or not all(0 <= i < len(had) and had[i] for i in picks):
        raise ValueError("again names chunks it was not to copy")
    return picks


def to_send(chunks: Chunks, picks: list[int]) -> list[tuple[int, int]]:
    """The byte ranges (offset, length) of the chunks `picks`, neighbours merged: what to
    read and send, in order."""
    offsets = chunks.offsets()
    ranges: list[tuple[int, int]] = []
    for i in picks:
        at, length = offsets[i], chunks.lengths[i]
        if ranges and sum(ranges[-1]) == at:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + length)
        else:
            ranges.append((at, length))
    return ranges


def _pieces(ranges: list[tuple[int, int]], most: int) -> Iterator[tuple[int, int]]:
    for at, length in ranges:
        for start in range(at, at + length, most):
            yield start, min(most, at + length - start)


@dataclass(frozen=True)
class Shipped:
    """How a dataset went: `delta` or `whole` (`linked`: the store had it, nothing sent),
    and the bytes written to the channel (data and the list: what the link carried beside
    SSH's own framing; a manifest written after a whole upload is not counted)."""

    digest: str
    how: str
    wire: int
    # The manifest's write, still under way (best effort: it never raises). Whoever
    # shipped awaits it (or cancels it) before its command ends.
    manifest: asyncio.Future[None] | None = field(default=None, compare=False, repr=False)
    size: int = 0  # the file's bytes as the upload read its size (transfer._store)


async def ship_new(conn: HostConnection, local: Path, store: str, size: int,
                   progress: channel.Progress | None, python: str, workdir: str,
                   manifests: int, early: channel.EarlyBulk | None = None) -> Shipped:
    """Send a dataset the host does not have: as a delta when the host has manifests to
    build it from, else whole (and its manifest written for the next upload). `early`:
    the whole upload's channel, maybe started already (channel.EarlyBulk)."""
    chunks_dir = posixpath.join(posixpath.dirname(store), CHUNKS_DIR)
    if size < DELTA_FROM or not _chunker():
        digest, wire = await upload.stream_upload(conn, local, store, size, progress, python,
                                                     workdir, early)
        return Shipped(digest, "whole", wire)
    if manifests:
        if early is not None:
            await early.close()  # a delta goes over this connection's own channel
        # Cut while the host program starts (a login, a Python: round trips on a far link).
        before = local.stat()  # the file as cut: it must be so when the last byte is sent
        cutting: asyncio.Future[Chunks] = asyncio.ensure_future(
            asyncio.to_thread(chunk_file, local))
        try:
            delta_wire = await _delta(conn, local, store, chunks_dir, size, cutting, progress,
                                      python, workdir, before)
        except OSError as exc:  # reading the local file, in the cutting thread
            raise RemoteError(f"cannot read {local}: {exc.strerror}") from None
        finally:
            await _reap(cutting)
        chunks = cutting.result()
        if delta_wire is not None:
            return Shipped(chunks.digest, "delta", delta_wire)
        digest, wire = await upload.stream_upload(conn, local, store, size, progress, python,
                                                     workdir)
        stop: Callable[[], None] | None = None
    else:
        # Cut while the bytes go (Cut: unless the link is as fast as this machine).
        cut = Cut(local, size)
        early_writes: list[asyncio.Future[None]] = []

        def counted(label: str, done: int, total: int) -> None:
            cut.sent(done)
            if progress:
                progress(label, done, total)

        def all_sent(sent_digest: str) -> None:
            # The manifest goes while the last bytes drain to the host, not after its
            # verdict (its write took 0.12 s of a 256 MiB upload at 100 Mbit/s). Should
            # the verdict be no, nothing is misled: a manifest only says where chunks
            # were (every chunk copied from one is hashed again), and the next upload's
            # check removes one whose dataset is not stored.
            early_writes.append(asyncio.ensure_future(_manifest_when_cut(
                conn, chunks_dir, cut.result, size, sent_digest, cut.stop)))
        try:
            digest, wire = await upload.stream_upload(conn, local, store, size, counted,
                                                         python, workdir, early, all_sent)
        except BaseException:
            cut.stop()
            for writing in early_writes:
                writing.cancel()
            await asyncio.gather(*early_writes, return_exceptions=True)
            await _reap(cut.result)  # never leave the thread reading behind a failure
            raise
        cut.sent(size, done=True)
        if early_writes:
            return Shipped(digest, "whole", wire, early_writes[0])
        cutting, stop = cut.result, cut.stop
    # The bytes are there, verified: the cut's end (on a fast link it can trail the
    # upload) and the manifest's write are left under way, beside what the start does next.
    writing = asyncio.ensure_future(_manifest_when_cut(conn, chunks_dir, cutting, size, digest,
                                                       stop))
    return Shipped(digest, "whole", wire, writing)


async def _manifest_when_cut(conn: HostConnection, chunks_dir: str,
                             cutting: asyncio.Future[Chunks], size: int, digest: str,
                             stop: Callable[[], None] | None = None) -> None:
    """Once `cutting` has the file's chunks, write their manifest (best effort, as
    _write_manifest). Cancelled, it stops the cut (`stop`) and still waits for the
    cutting thread, so none is left reading the file behind a command that is ending."""
    try:
        chunks = await asyncio.shield(cutting)
    except asyncio.CancelledError:
        if stop is not None:
            stop()
        await _reap(cutting)
        raise
    except Stopped:  # given up: the upload outran it
        log.debug("%s: no manifest of %s: the upload outran its cut", conn.alias, digest)
        return
    except OSError as exc:  # only the manifest is lost
        log.debug("%s: manifest of %s not cut: %s", conn.alias, digest, exc)
        return
    # Not when the file changed (refused above, or stale), nor for more chunks than a
    # delta's list may hold: no delta could be built from it.
    if chunks.size != size or not _listable(chunks):
        return
    body = transfer_program.manifest_bytes(chunks.size, list(zip(
        chunks.offsets(), chunks.lengths, chunks.digests))).decode("ascii")
    await _write_manifest(conn, chunks_dir, body, digest)


async def _reap(cutting: asyncio.Future[Chunks]) -> None:
    """Wait for a cut's end, its outcome read: on a failure or a cancel, the cut's own
    Stopped (or an error reading the file) is no news, and a future ending in an
    exception nobody reads is printed as "Future exception was never retrieved"."""
    await asyncio.wait({cutting})
    if not cutting.cancelled():
        cutting.exception()


async def _write_manifest(conn: HostConnection, chunks_dir: str, body: str,
                          digest: str) -> None:
    """Store the manifest `body` of the dataset just published, through the host's shell.
    Best effort: without it the next upload goes whole, so a failure must not fail the
    start; it is logged (debug), never raised."""
    try:
        out = await conn.run(remote_sh.write_manifest(chunks_dir, digest, body))
    except (RemoteError, TimeoutError) as exc:
        log.debug("%s: manifest of %s not written: %s", conn.alias, digest, exc)
        return
    if out.strip() != "written=1":
        log.debug("%s: manifest of %s not written: %s", conn.alias, digest, out.strip()[:200])


async def settle(writing: asyncio.Future[None] | None, abandon: bool = False) -> None:
    """Wait for a manifest's write left under way (`Shipped.manifest`), or cancel it when
    `abandon` (the command is failing or cancelled: without the manifest the next upload
    of that data simply goes whole)."""
    if writing is None:
        return
    if abandon:
        writing.cancel()
    await asyncio.gather(writing, return_exceptions=True)


async def _delta(conn: HostConnection, local: Path, store: str, chunks_dir: str, size: int,
                 chunking: Awaitable[Chunks], progress: channel.Progress | None, python: str,
                 workdir: str, before: os.stat_result | None = None) -> int | None:
    """Send `local` (`size` bytes, cut by `chunking`) as a delta; the bytes written, or
    None when the host has none of its chunks, or the list has more than it takes (nothing
    was published; the caller sends it whole). `before`: the file's stat before its cut
    began; changed by the last byte sent (the chunks the host copies are the cut's, the
    ones sent are read now), the delta is refused, its `E` unsaid."""
    import asyncssh

    stream = await channel.Stream.open(conn, remote_sh.transfer_command(
        python, "delta", os.fsencode(store), os.fsencode(chunks_dir), size))
    answer = b""
    try:
        await stream.greeted()
        chunks = await chunking
        if chunks.size != size:
            raise upload.changed_error(local)
        if not _listable(chunks):
            return None  # the host program would refuse the list: the file goes whole
        listing = encode_list(chunks)
        wire = len(listing)
        await stream.write(listing)
        row = await stream.line()
        while row == b"p":  # the host reads its stored datasets' manifests: a keepalive
            row = await stream.line()
        try:
            had = parse_have(row, len(chunks.lengths))
        except ValueError:
            answer = row  # an error= line
            had = []
        if had and not any(had):
            return None  # closing the channel ends the host program: it keeps nothing
        missing = [i for i, has in enumerate(had) if not has]
        sending = sum(chunks.lengths[i] for i in missing)
        enc = codec.encoder_for(await stream.greeted(), local.name)
        base = wire

        def report(n: int) -> None:
            if progress:
                progress(Moving(local.name, enc.wire, chunks.size), n, sending)
        try:
            if had:
                # Copying stored chunks, the host reads none of ours: its `p` lines say
                # it is busy, not stalled, while the channel is full.
                stream.keepalive = b"p"
                report(0)
                with local.open("rb", buffering=0) as f:
                    await _send_ranges(stream, f.fileno(), to_send(chunks, missing), enc, report)
                    _still(f.fileno(), before, local)
                    await stream.write(b"E")
                    while not answer:
                        row = await stream.line()
                        if row == b"p":  # the host is copying: a keepalive
                            continue
                        if not row.startswith(b"again"):
                            answer = row
                            break
                        try:
                            again = parse_again(row, had)
                        except ValueError:
                            answer = b"error=" + row[:200]
                            break
                        await _send_ranges(stream, f.fileno(), to_send(chunks, again), enc,
                                           lambda n: None)
                        _still(f.fileno(), before, local)
                        await stream.write(b"E")
        except (asyncssh.Error, OSError, ConnectionError):
            pass  # the host program ended early: its answer says why
        wire = base + enc.wire
        if not answer:
            answer = await stream.line()
    finally:
        await stream.aclose(finished=bool(answer))
    if answer == b"ok=" + chunks.digest.encode():
        if progress:
            progress(Moving(local.name, enc.wire, chunks.size), sending, sending)
        return wire
    _refuse(conn, local, answer.decode("utf-8", "replace"), workdir)
    return None  # not reached: _refuse raises


def _still(fd: int, before: os.stat_result | None, local: Path) -> None:
    """Raise the one-line RemoteError unless the file `fd` is as `before` (if given)."""
    if before is None:
        return
    try:
        upload.as_before(fd, before)
    except upload.Changed:
        raise upload.changed_error(local) from None


def _refuse(conn: HostConnection, local: Path, answer: str, workdir: str) -> None:
    """The RemoteError for the host program's `error=` answer to a delta."""
    from rtrain_tui.core.safety.sanitize import safe_line

    if answer == "error=nospace":
        raise upload.no_space(conn, workdir)
    if answer == "error=changed":  # a chunk sent is not the one the list named
        raise upload.changed_error(local)
    if answer == "error=corrupt":  # a block that did not decode to its length
        raise RemoteError(f"{conn.alias}: upload of {local} arrived corrupted; start again.")
    raise RemoteError(f"{conn.alias}: upload of {local} failed: "
                      f"{safe_line(answer.removeprefix('error='))[:200]}")


async def _send_ranges(stream: channel.Stream, fd: int, ranges: list[tuple[int, int]],
                       enc: Any, report: Callable[[int], object]) -> None:
    """Send the bytes of `ranges` of the file `fd` in order as blocks through `enc` (raw
    or compressed, transfer_program's rule), the next read and encoded in a thread while
    this one goes; bounded by the channel's flow control."""

    def prepare(at: int, n: int, last: bool) -> tuple[int, int, bytes]:
        try:
            block = os.pread(fd, n, at)
        except OSError as exc:  # this machine's disk, not the channel
            raise RemoteError(f"cannot read the dataset: {exc.strerror}") from None
        if len(block) != n:
            raise RemoteError("the dataset changed while it was uploaded; start again.")
        kind, payload = enc.encode(block, last)  # the host reads this run in one go
        return n, kind, payload

    sent = 0
    pieces = list(_pieces(ranges, codec.BLOCK))

    def start(i: int) -> Any:
        if i >= len(pieces):
            return None
        return asyncio.ensure_future(asyncio.to_thread(prepare, *pieces[i],
                                                       i == len(pieces) - 1))
    i = 0
    ready: Any = start(0)
    while ready is not None:
        n, kind, payload = await ready
        i += 1
        ready = start(i)
        try:
            began = time.perf_counter()
            await stream.write(codec.HEAD.pack(kind, n, len(payload)))
            view = memoryview(payload)
            for at in range(0, len(payload), channel.SEND_SLICE):
                await stream.write(view[at:at + channel.SEND_SLICE])
                await asyncio.sleep(0)
            enc.sent(codec.HEAD.size + len(payload), time.perf_counter() - began)
        except BaseException:
            # Never leave a thread reading the file behind (a failed write, a cancel).
            if ready is not None:
                await asyncio.gather(ready, return_exceptions=True)
            raise
        sent += n
        report(sent)
