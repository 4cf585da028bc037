"""A whole file's upload to the host program's `recv`, hashed here in the same pass as
it is sent, published on the host only under the digest both sides computed; and the
rules every upload shares (a file that changed while it was read, a full disk). Below
transfer.py (the dataset store) and delta.py (which sends a file whole when no delta
can be built): both use these.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.transfers import channel, codec
from rtrain_tui.core.transfers.channel import (
    CHUNK,
    SEND_SLICE,
    EarlyBulk,
    Progress,
    Stream,
)
from rtrain_tui.core.transfers.meter import Moving
from rtrain_tui.core.transport import openssh_pipe

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection


def no_space(conn: HostConnection, where: str, why: str = "") -> RemoteError:
    return RemoteError(f"no space left on {conn.alias} ({where}){why}; free some space there "
                       "and start again.")


async def free_kb(conn: HostConnection, directory: str) -> int | None:
    try:
        out = await conn.run(remote_sh.free_kb(directory))
    except RemoteError:
        return None
    return int(out.strip()) if out.strip().isdigit() else None



def recv_command(python: str, cache_dir: str, size: int) -> str:
    return remote_sh.transfer_command(python, "recv", os.fsencode(cache_dir), size)



async def _send_hashed(f: Any, size: int, h: Any, stream: Stream, enc: Any,
                       progress: Callable[[int], object]) -> int:
    """Send up to `size` bytes of `f` as blocks, hashing them; returns how many were sent.

    Reading, hashing and encoding the next block run in a thread (all release the GIL)
    while this one is encrypted and sent: on a 2-core machine they overlap instead of
    taking turns, which is most of the gap to scp.
    """

    def prepare(want: int, last: bool) -> tuple[int, int, bytes] | None:
        block = f.read(want)
        if not block:
            return None
        h.update(block)
        kind, payload = enc.encode(block, last)
        return len(block), kind, payload

    sent = 0
    nxt: Any = asyncio.ensure_future(asyncio.to_thread(prepare, min(CHUNK, size),
                                                       CHUNK >= size))
    while (ready := await nxt) is not None:
        n, kind, payload = ready
        sent += n
        want = min(CHUNK, size - sent)
        nxt = asyncio.ensure_future(asyncio.to_thread(prepare, want, sent + want == size)
                                    if want > 0 else _none())
        try:
            began = time.perf_counter()
            await stream.write(codec.HEAD.pack(kind, n, len(payload)))
            # In slices, each followed by a turn of the loop: encrypting a whole 1 MiB block
            # at once held the TUI's event loop for ~40 ms.
            view = memoryview(payload)
            for at in range(0, len(payload), SEND_SLICE):
                await stream.write(view[at:at + SEND_SLICE])
                await asyncio.sleep(0)
            enc.sent(codec.HEAD.size + len(payload), time.perf_counter() - began)
        finally:
            # Never leave a thread touching the file or the hash behind (a failed write).
            if not nxt.done():
                await asyncio.gather(nxt, return_exceptions=True)
        progress(sent)
    return sent


async def _none() -> None:
    return None


def _pump(f: Any, size: int, h: Any, fd: int, enc: Any, sent: list[int],
          before: os.stat_result) -> None:
    """In a thread: read `f`, hash it and write it as blocks to the pipe `fd`, then the digest.

    Reading, hashing, compressing and writing a pipe all release the GIL, so this costs
    the event loop nothing; `sent[0]` counts for the progress bar. Stops early (no
    digest) if the file shrank; a killed `ssh` ends it with BrokenPipeError. The time each
    write waits is the encoder's measure of the link.
    """
    buf = memoryview(bytearray(CHUNK))
    while sent[0] < size:
        n = f.readinto(buf[:min(CHUNK, size - sent[0])])
        if not n:
            return
        h.update(buf[:n])
        kind, payload = enc.encode(buf[:n], sent[0] + n == size)
        began = time.perf_counter()
        _write_all(fd, codec.HEAD.pack(kind, n, len(payload)))
        _write_all(fd, payload)
        enc.sent(codec.HEAD.size + len(payload), time.perf_counter() - began)
        sent[0] += n
    as_before(f.fileno(), before)
    os.write(fd, h.hexdigest().encode() + b"\n")


def changed_error(local: Path) -> RemoteError:
    """The one line for a dataset that changed while it was uploaded (nothing published)."""
    return RemoteError(f"{local} changed while it was uploaded; start again.")


class Changed(Exception):
    """The file being sent changed since its upload began (as_before)."""


def as_before(fd: int, before: os.stat_result) -> None:
    """Raise Changed unless the file open as `fd` is still as `before` said (its inode,
    size, modification and change times). Asked once every byte is read, before the
    upload's last word (its digest, a delta's `E`) is said: bytes read before an edit
    and after it hash consistently and make a file that never was, which the host would
    verify and store as the dataset; without that word it stores nothing."""
    now = os.fstat(fd)
    if (now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns) != (
            before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns):
        raise Changed


def _write_all(fd: int, data: bytes | memoryview) -> None:
    piece = memoryview(data)
    while piece:
        piece = piece[os.write(fd, piece):]


async def _pump_system(stream: Stream, f: Any, size: int, h: Any, enc: Any,
                       progress: Callable[[int], object], before: os.stat_result) -> int:
    """Send `f` to a system `ssh` (see _pump); bounded by time without progress."""
    assert stream.stdin_fd is not None
    sent = [0]
    pumping = asyncio.ensure_future(asyncio.to_thread(_pump, f, size, h, stream.stdin_fd,
                                                      enc, sent, before))
    last, moved_at = -1, time.monotonic()
    try:
        while not pumping.done():
            await asyncio.wait({pumping}, timeout=0.1)
            if sent[0] != last:
                last, moved_at = sent[0], time.monotonic()
                progress(sent[0])
            elif time.monotonic() - moved_at > channel.STALL_TIMEOUT:
                raise RemoteError(f"{stream.conn.alias}: the transfer moved no data for "
                                  f"{channel.STALL_TIMEOUT:g} s; it was abandoned.")
        pumping.result()  # BrokenPipeError: ssh or the host program ended early
    finally:
        if not pumping.done():
            # Never leave the thread writing: killing ssh breaks its pipe. Only then is
            # the descriptor closed (a number closed under a writing thread can be reused).
            await openssh_pipe.end(stream.process)
            await asyncio.gather(pumping, return_exceptions=True)
        stream.close_stdin_fd()  # EOF for the host program
    return sent[0]


class Uploaded(NamedTuple):
    """A whole upload's outcome: the SHA-256 the host verified, and the bytes put on the
    wire for it (compressed blocks and their headers; the file's size when raw)."""

    digest: str
    wire: int


async def stream_upload(conn: HostConnection, local: Path, cache_dir: str, size: int,
                         progress: Progress | None, python: str, workdir: str,
                         early: EarlyBulk | None = None,
                         all_sent: Callable[[str], object] | None = None) -> Uploaded:
    """Send `local` to the host program, hashing it here in the same pass (Uploaded).
    `early`: its `ssh`, maybe started already (EarlyBulk). `all_sent(digest)`: every
    byte is on its way, the host's verdict not yet in (what is still in the buffers to
    the host must drain first: 0.17 s at 100 Mbit/s, 0.9 s at 20)."""
    import asyncssh

    label = local.name
    stream = await Stream.open(conn, recv_command(python, cache_dir, size), bulk=size,
                                upload=True, early=early)
    h = hashlib.sha256()
    sent = 0
    wire = 0  # the encoder's count once every block went
    answer = ""
    try:
        if progress:
            progress(label, 0, size)
        try:
            piped = stream.stdin_fd is not None  # a system ssh: a thread sends it all
            enc = codec.encoder_for(await stream.greeted(), local.name)

            def report(n: int) -> None:
                if progress:
                    progress(Moving(label, enc.wire), n, size)
            with local.open("rb", buffering=0) as f:
                before = os.fstat(f.fileno())
                if before.st_size != size:
                    raise Changed
                if piped:
                    sent = await _pump_system(stream, f, size, h, enc, report, before)
                else:
                    sent = await _send_hashed(f, size, h, stream, enc, report)
                    if sent == size:
                        as_before(f.fileno(), before)
            wire = enc.wire
            if sent != size:
                raise Changed
            if not piped:
                await stream.write(h.hexdigest().encode() + b"\n")
                stream.process.stdin.write_eof()
            if all_sent is not None:
                all_sent(h.hexdigest())
        except (asyncssh.Error, OSError, BrokenPipeError, ConnectionError):
            pass  # the host program ended early: its answer says why
        except Changed:
            # Its digest unsaid, the host program stores nothing (it reads a wrong one).
            raise changed_error(local) from None
        why = "the channel closed"
        try:
            answer = (await stream.line()).decode("utf-8", "replace")
        except RemoteError as exc:  # said with the alias, which the error below says first
            answer, why = "", str(exc).removeprefix(f"{conn.alias}: ")
    finally:
        await stream.aclose(finished=bool(answer))
    if answer == f"ok={h.hexdigest()}" and sent == size:
        return Uploaded(h.hexdigest(), wire)
    if answer == "error=nospace":
        raise no_space(conn, workdir)
    if answer == "error=corrupt":
        raise RemoteError(f"{conn.alias}: upload of {local} arrived corrupted; start again.")
    if not answer:
        free = await free_kb(conn, cache_dir)
        if free is not None and free * 1024 < size - sent + 64 * 1024:
            raise no_space(conn, workdir)
    from rtrain_tui.core.safety.sanitize import safe_line

    if not answer:
        raise RemoteError(f"{conn.alias}: upload of {local} failed: {why}")
    raise RemoteError(f"{conn.alias}: upload of {local} failed: "
                      f"{safe_line(answer.removeprefix('error='))[:200]}")
