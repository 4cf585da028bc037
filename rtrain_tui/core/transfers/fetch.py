"""Fetching a run's files: the host program's `send`, each file landed under a
temporary name and renamed into place once its bytes hash to what the host hashed
(lander.py), into a destination this fetch holds the lock of.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import posixpath
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transfers import codec
from rtrain_tui.core.transfers.channel import Progress, Stream, Warn
from rtrain_tui.core.transfers.lander import CHANGED, CORRUPT, LANDED, Lander, fresh_part
from rtrain_tui.core.transfers.listing import Listing, read_listing, shown
from rtrain_tui.core.transfers.meter import Moving

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection

RETRIES = 3  # a file that shrank or was replaced while it was read is read again

AHEAD_FROM = 16  # from this many files on, their .part files are created in a thread


# -- fetch ----------------------------------------------------------------------------
def _check_local(out: Path, dest: Path, targets: list[Path], single: bool) -> None:
    """Refuse, before any byte moves, a fetch that would collide with local files."""
    if out.exists() and not out.is_dir():
        raise RemoteError(f"--out {out} is a file; give a directory to fetch into.")
    if single:
        if dest.is_dir():
            raise RemoteError(f"a directory sits where {dest} would land; move it or "
                              "choose another --out.")
        return
    if dest.exists() and not dest.is_dir():
        raise RemoteError(f"a file sits where the directory {dest} would land; move it or "
                          "choose another --out.")
    if not os.path.lexists(dest):
        return  # a new directory: nothing under it can be in the way
    good: set[Path] = {dest}
    for target in targets:
        parent = target.parent
        chain = []
        while parent not in good and parent != dest:
            chain.append(parent)
            parent = parent.parent
        for p in chain:
            if p.exists() and not p.is_dir():
                raise RemoteError(f"a file sits where the directory {p} would land; move it "
                                  "or choose another --out.")
            good.add(p)
        if target.is_dir():
            raise RemoteError(f"a directory sits where {target} would land; move it or "
                              "choose another --out.")


def _unchanged(target: Path, size: int, mtime_ns: int) -> bool:
    """A file a previous fetch landed (verified, with the host's mtime) and still the same."""
    try:
        st = target.stat()
    except OSError:
        return False
    return st.st_size == size and st.st_mtime_ns == mtime_ns and target.is_file()


def _prepare_local(out: Path, dest: Path, listing: Listing, targets: list[Path], single: bool,
                   rel: str) -> tuple[list[int], set[Path] | None]:
    """Make the local directories; return the files not already here unchanged, and, when
    the directory fetched into is new, every directory made in it (then nothing else is
    there, and no file is looked at: a stat per file, in three passes, was most of the
    25 ms between a cold fetch's listing and its first byte, 1000 files)."""
    rel_b = os.fsencode(rel)
    out.mkdir(parents=True, exist_ok=True)
    made = None if single or os.path.lexists(dest) else {dest}
    if not single:
        dest.mkdir(exist_ok=True)
        for d in listing.dirs:
            inner = d if rel == "." else d[len(rel_b) + 1:]
            if inner:
                (dest / os.fsdecode(inner)).mkdir(parents=True, exist_ok=True)
                if made is not None:
                    made.add(dest / os.fsdecode(inner))
    if made is not None:
        return list(range(len(listing.files))), made
    return [i for i, (_, size, mtime) in enumerate(listing.files)
            if not _unchanged(targets[i], size, mtime)], None


def _part_names(targets: list[Path], wanted: list[int],
                new_dirs: set[Path] | None = None) -> dict[int, Path]:
    """Each wanted file's temporary name: `NAME.part`, unless that is itself a file of
    this fetch (the host has `ckpt` and `ckpt.part`), something other than a file sits
    there (a FIFO, a symlink, a directory, a hard link: left alone), or NAME is too long.

    A plain file at `NAME.part` is a killed fetch's (this fetch holds the destination's
    lock, so no live one of ours writes there): it is removed, so the name can be
    created afresh, exclusively (lander.py). In a new destination (`new_dirs`: what
    _prepare_local made there, under this fetch's lock) only those directories are
    taken, and nothing is looked at.
    """
    taken = set(targets) | (new_dirs or set())
    parts = {}
    for num in wanted:
        target = targets[num]
        part = target.with_name(target.name + ".part")
        while (len(os.fsencode(part.name)) > 245 or part in taken
               or not (new_dirs is not None or _free_or_file(part))):
            part = fresh_part(target)
        taken.add(part)
        parts[num] = part
    return parts


def _free_or_file(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return True  # free (or not ours to judge: the open names any error)
    # A killed fetch's .part is removed; a hard link to another file is not ours.
    if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
        return False
    try:
        path.unlink()
    except OSError:
        return False
    return True


def _lock_name(dest: Path) -> Path:
    """The lock file of fetches into `dest`, beside it. Two names that are one file on a
    case-insensitive file system give two lock names that are one file there too."""
    name = os.fsencode(dest.name)
    if len(name) > 200:
        name = hashlib.sha256(name).hexdigest()[:32].encode()
    return dest.with_name(f".{os.fsdecode(name)}.rtrain-fetch.lock")


def _lock_destination(dest: Path) -> tuple[Path, int]:
    """Hold the lock of fetches landing at `dest`; refuse at once when another holds it.

    Two fetches into one place would land over each other's files (and, with one
    temporary name, mix their bytes). Refused, not waited for: the second would replace
    what the first fetched anyway. The holder removes the file while it holds it, so a
    lock taken on a file that is no longer at its name is taken again.
    """
    path = _lock_name(dest)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
        except BlockingIOError:
            os.close(fd)
            raise RemoteError(f"another fetch is landing files at {dest} right now; wait for "
                              "it to finish, or fetch into another --out.") from None
        except FileNotFoundError:
            os.close(fd)  # its holder just removed it: take the next one
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            return path, fd
        os.close(fd)


def _unlock_destination(path: Path, fd: int) -> None:
    try:
        path.unlink(missing_ok=True)  # while held: nobody can take the removed file's lock
    finally:
        os.close(fd)


def _check_replaced(lander: Lander, out: Path) -> None:
    """Every file this fetch landed still holds the bytes it verified there; else one line."""
    gone = lander.replaced()
    if not gone:
        return
    first = gone[0]
    twin = next((t for t in lander.landed if t != first
                 and str(t).casefold() == str(first).casefold()), None)
    if twin is not None:
        raise RemoteError(f"{first} and {twin.name} are one file in {out} (a case-insensitive "
                          "file system): fetch them into separate --out directories.")
    raise RemoteError(f"{first} was replaced while this fetch ran (something else writes in "
                      f"{out}); {len(gone)} file(s) do not hold what was fetched: fetch again.")


async def fetch(
    conn: HostConnection, run_dir: str, rel: str, out: Path,
    progress: Progress | None = None, python: str = validate.DEFAULT_PYTHON,
    on_warning: Warn | None = None, on_landed: Callable[[Path], None] | None = None,
) -> Path:
    """Fetch a file or directory from the run dir into `out`; returns the local path.

    `on_landed(path)` hears of each file as it is renamed into place, verified.

    A file being written (a running run's `train.log`) arrives as the bytes it held when
    its copy began. Files that are not regular are skipped and named in one warning.
    Files already here from an earlier fetch, same size and mtime, are not sent again.
    """
    rel = validate.check_fetch_path(rel)
    name = posixpath.basename(rel) if rel != "." else posixpath.basename(run_dir)
    dest = out / name
    command = remote_sh.transfer_command(python, "send", os.fsencode(run_dir), os.fsencode(rel),
                                         codec.ACCEPT)
    stream = await Stream.open(conn, command)
    lander = Lander()
    finished = False
    held: tuple[Path, int] | None = None
    try:
        listing = await read_listing(stream, run_dir, rel)
        rel_b = os.fsencode(rel)
        single = len(listing.files) == 1 and listing.files[0][0] == rel_b and not listing.dirs
        targets = []
        for path, _, _ in listing.files:
            inner = path if rel == "." else path[len(rel_b) + 1:]
            targets.append(dest if single else dest / os.fsdecode(inner))
        # Stats and mkdirs for thousands of files run in a thread: on the event loop they
        # held the TUI for 100+ ms.
        await asyncio.to_thread(_check_local, out, dest, targets, single)
        if listing.skipped and on_warning:
            what = ", ".join(f"{shown(p)} ({kind})" for p, kind in listing.skipped[:10])
            more = len(listing.skipped) - 10
            on_warning(f"skipped {len(listing.skipped)} entries that are not regular files: {what}"
                       + (f" and {more} more" if more > 0 else ""))
        if not single and not listing.files and not listing.dirs and listing.skipped:
            raise RemoteError(f"{shown(rel)} is not a regular file or directory "
                              f"({listing.skipped[0][1]}); nothing to fetch.")
        await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
        held = _lock_destination(dest)  # not in a thread: a cancel must never orphan the lock
        wanted, new_dirs = await asyncio.to_thread(_prepare_local, out, dest, listing, targets,
                                                   single, rel)
        total = sum(listing.files[i][1] for i in wanted)
        parts = await asyncio.to_thread(_part_names, targets, wanted, new_dirs)
        if len(wanted) >= AHEAD_FROM:
            lander.create_ahead(parts)
        done = [0, 0]  # raw bytes landed, bytes on the wire
        for _attempt in range(RETRIES):
            if not wanted:
                break
            wanted = await _receive(stream, lander, wanted, listing, targets, parts, rel,
                                    done, total, progress, on_landed)
        else:
            if wanted:
                raise RemoteError(
                    f"{shown(listing.files[wanted[0]][0])} kept shrinking or being replaced "
                    "while it was read; fetch it again once it is written."
                )
        await stream.write(b"\n")
        finished = True
        # Said "fetched" only if every final name still holds the bytes verified there.
        await asyncio.to_thread(_check_replaced, lander, out)
    finally:
        try:
            await stream.aclose(finished)
        finally:
            # Removes every .part a failed or cancelled fetch left. In a thread: thousands
            # of removals held the loop 60 ms, and there a second Ctrl-C cannot cut the
            # cleanup short (the interpreter waits for the thread before it exits).
            await asyncio.to_thread(lander.close)
            if held is not None:
                await asyncio.to_thread(_unlock_destination, *held)
    if progress:
        progress(Moving(rel, done[1]), total, total)
    return dest


async def _receive(stream: Stream, lander: Lander, wanted: list[int], listing: Listing,
                   targets: list[Path], parts: dict[int, Path], rel: str, done: list[int],
                   total: int, progress: Progress | None,
                   on_landed: Callable[[Path], None] | None = None) -> list[int]:
    """Ask for `wanted` files, land the ones that verify; return those to read again."""
    again: list[int] = []
    batches = [wanted[at:at + 512] for at in range(0, len(wanted), 512)]
    # Every request at once (a few bytes per file): the host then never waits for us
    # between batches, and the channel's window bounds what is in flight.
    await stream.write(b"".join(" ".join(map(str, b)).encode() + b"\n" for b in batches))
    try:
        for batch in batches:
            for _ in batch:
                num, result = await _receive_one(stream, lander, targets, parts, rel, done,
                                                 total, progress)
                if result == CHANGED:
                    again.append(num)
                elif result == CORRUPT:
                    raise RemoteError(f"{shown(listing.files[num][0])} arrived corrupted; "
                                      "fetch again.")
                elif result == LANDED and on_landed is not None:
                    on_landed(targets[num])
            if await stream.exactly(1) != b"B":
                raise RemoteError(f"{stream.conn.alias}: the transfer stream broke; fetch again.")
    except OSError as exc:  # from the lander: this machine's disk, not the host
        raise RemoteError(f"cannot write {exc.filename}: {exc.strerror}") from None
    return again


async def _receive_one(stream: Stream, lander: Lander, targets: list[Path],
                       parts: dict[int, Path], rel: str, done: list[int], total: int,
                       progress: Progress | None) -> tuple[int, str | None]:
    """One file's answer: its number and how it landed (None: the host skipped it)."""
    tag = await stream.exactly(1)
    if tag == b"S":
        (num,) = struct.unpack(">I", await stream.exactly(4))
        return num, None  # gone since the listing, or no longer a regular file
    if tag != b"H":
        raise RemoteError(f"{stream.conn.alias}: the transfer stream broke; fetch again.")
    num, size, mtime = struct.unpack(">IQQ", await stream.exactly(20))
    if num not in parts:  # a file not asked for
        raise RemoteError(f"{stream.conn.alias}: the transfer stream broke; fetch again.")
    target = targets[num]
    landing = lander.begin(parts[num], target, mtime, key=num)
    left = size
    while left:  # the file's blocks (transfer_program.py), each raw or compressed
        kind, n, wire = codec.HEAD.unpack(await stream.exactly(codec.HEAD.size))
        done[1] += codec.HEAD.size
        try:
            codec.check_head(kind, n, wire, left)
            if kind == codec.RAW:
                async for piece in stream.pieces(wire):
                    lander.write(landing, piece)
                    done[0] += len(piece)
                    done[1] += len(piece)
                    if progress:
                        progress(Moving(rel, done[1]), min(done[0], total), total)
                    # Pieces already buffered come without a real wait: yield, so a Ctrl-C
                    # (a task cancel) and the TUI's redraws are served meanwhile.
                    await asyncio.sleep(0)
            else:
                lander.write(landing, codec.decode_block(kind, await stream.exactly(wire), n))
                done[0] += n
                done[1] += wire
                if progress:
                    progress(Moving(rel, done[1]), min(done[0], total), total)
                await asyncio.sleep(0)
        except codec.CorruptBlock:
            return num, CORRUPT  # its .part is left to the lander's close: never landed
        left -= n
    trailer = await stream.exactly(34)
    if trailer[:1] != b"T":
        raise RemoteError(f"{stream.conn.alias}: the transfer stream broke; fetch again.")
    return num, lander.finish(landing, trailer[1] == 1, trailer[2:])

