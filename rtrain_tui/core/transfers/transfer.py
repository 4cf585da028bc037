"""File transfers: datasets up, adapters, checkpoints and logs back, every byte verified.

Bulk data travels over one exec channel per transfer, to a small Python program that
runs on the host with the trainer's interpreter (`host/transfer_program.py`; the host has
it by definition). Why not SFTP: the host then hashes in the same pass that reads or
writes the bytes (SFTP needs a second full read on the host, serially), and many small
files cost no round trip each. A dataset big enough to pay for a second login reaches
that program through the system's `ssh` instead of asyncssh (openssh_pipe.py), with a
fallback. Measured against scp and `ssh tar` in `tests/benchmarks/transfer.py`.

Every file lands under a temporary name and is renamed into place only once the bytes
that arrived hash to what the host hashed (a SHA-256 each side, in the same pass as the
copy), so an interrupted transfer never leaves a file that looks complete; a cancelled
one removes its temporary files. Fetches are confined to the run directory: the path
is checked before any connection (validate.check_fetch_path) and again on the host,
after symlinks resolve. Client memory stays bounded: data moves in ≤ 1 MiB pieces under
the channel's flow control.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import posixpath
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rtrain_tui.core.errors import NoSuchPathError, RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transfers import codec
from rtrain_tui.core.transfers.lander import CHANGED, CORRUPT, LANDED, Lander, fresh_part
from rtrain_tui.core.transfers.meter import Moving
from rtrain_tui.core.transport import cold_ssh, openssh_pipe
from rtrain_tui.core.transport.bounded import bounded

if TYPE_CHECKING:

    from rtrain_tui.core.transfers import delta
    from rtrain_tui.core.transport.connection import HostConnection

# progress(label, bytes done, bytes total); the label of an upload or a fetch is a Moving
# (meter.py): a str that also carries the bytes on the wire.
Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]
CHUNK = 1 << 20
SEND_SLICE = 128 << 10  # what one turn of the event loop encrypts and sends
STALL_TIMEOUT = 30.0  # a transfer that moves no byte for this long is abandoned
OPEN_TIMEOUT = 20.0  # opening the exec channel (a login shell runs first)
RETRIES = 3  # a file that shrank or was replaced while it was read is read again
FREE_MARGIN = 1 << 20  # leave this much beyond the dataset itself
AHEAD_FROM = 16  # from this many files on, their .part files are created in a thread


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def shown(name: bytes | str) -> str:
    """A host file name for a one-line message: quoted, every control escaped."""
    if isinstance(name, str):
        name = os.fsencode(name)
    return repr(name.decode("utf-8", "backslashreplace"))


# -- the exec channel ---------------------------------------------------------------
class _Stream:
    """The host program's stdin/stdout, every wait bounded by time without progress.

    The program runs over the open asyncssh connection, or, for transfers big enough
    to pay for a new login, through the system's `ssh` (openssh_pipe.py); both
    processes have the same stdin/stdout/stderr streams. Its first line is a greeting,
    so a login banner or a wrong interpreter is told apart from an answer.
    """

    def __init__(self, conn: HostConnection, process: Any, system: bool = False,
                 stdin_fd: int | None = None) -> None:
        self.conn = conn
        self.process = process
        self.system = system  # the process is a local `ssh`, not an asyncssh channel
        self.stdin_fd = stdin_fd  # system, for an upload: the pipe to its stdin, blocking
        self._buf = bytearray()
        self._greeted = False
        self.codecs = codec.HostCodecs()  # what the host program decodes and encodes
        self.stderr_line = ""  # why the program ended early: its stderr's last line
        # A line the program says while it reads nothing, busy (delta's `p`): heard while
        # a write waits, it counts as progress (write). b"": none.
        self.keepalive = b""

    @classmethod
    async def open(cls, conn: HostConnection, command: str, bulk: int = 0,
                   upload: bool = False, early: EarlyBulk | None = None) -> _Stream:
        """Start the program; through the system's `ssh` when `bulk` bytes will move.

        `upload`: a system `ssh` gets its stdin from a plain pipe (`stdin_fd`), which a
        thread fills; an asyncssh channel is written as usual. `early`: that `ssh`, for
        this very command, may have been started already (EarlyBulk).
        """
        if bulk >= openssh_pipe.MIN_BYTES:
            stream = await early.take(command) if early is not None else None
            if stream is None:
                stream = await cls._open_system(conn, command, upload)
            if stream is not None:
                return stream
        import asyncssh

        ssh = await conn.connect()
        try:
            process = await bounded(
                ssh.create_process(command, encoding=None), OPEN_TIMEOUT)
        except TimeoutError:
            raise RemoteError(f"{conn.alias}: the transfer did not start within "
                              f"{OPEN_TIMEOUT:g} s; check the host's load and try again.") from None
        except (asyncssh.Error, OSError) as exc:
            raise RemoteError(f"{conn.alias}: cannot open a channel for the transfer: {exc}") from None
        return cls(conn, process)

    @classmethod
    async def _open_system(cls, conn: HostConnection, command: str, upload: bool,
                           spawned: cold_ssh.Spawned | None = None) -> _Stream | None:
        """The program through `ssh`, greeted; None when `ssh` cannot log in (not retried).
        `spawned`: that upload's `ssh`, started before `conn` was made (cold_ssh.py)."""
        write_end: int | None = None
        if spawned is not None:
            spawned.taken = True
            process, write_end = spawned.process, spawned.write_end
        elif upload:  # a cancel meanwhile (an early start no longer needed) leaves no pipe
            started = await openssh_pipe.with_stdin_pipe(
                lambda read_end: openssh_pipe.start(conn, command, read_end))
            if started is None:
                return None
            process, write_end = started
        else:
            found = await openssh_pipe.start(conn, command)
            if found is None:
                return None
            process = found
        stream = cls(conn, process, system=True, stdin_fd=write_end)
        ok = False
        try:
            async with asyncio.timeout(OPEN_TIMEOUT):
                await stream._greet()
            ok = True
            return stream
        except TimeoutError:
            conn.refuse_bulk_client(f"it did not log in within {OPEN_TIMEOUT:g} s")
            return None
        except RemoteError:
            if await openssh_pipe.failed_login(conn, process, stream.stderr_line):
                return None
            raise
        finally:
            if not ok:
                await stream.aclose()

    async def _greet(self) -> None:
        self._greeted = True
        codecs = codec.parse_greeting(await self.line())
        if codecs is None:
            raise RemoteError(f"{self.conn.alias}: the transfer program answered nonsense; "
                              "is the host's python the trainer's?")
        self.codecs = codecs

    async def greeted(self) -> codec.HostCodecs:
        """The host program's codecs, once it greeted."""
        if not self._greeted:
            await self._greet()
        return self.codecs

    async def aclose(self, finished: bool = False) -> None:
        """End the program; `finished`: it gave its last answer, so it may end by itself."""
        if self.system:
            await openssh_pipe.end(self.process, grace=2 if finished else 0)
        else:
            self.process.close()
        self.close_stdin_fd()

    def close_stdin_fd(self) -> None:
        if self.stdin_fd is not None:
            fd, self.stdin_fd = self.stdin_fd, None
            os.close(fd)

    async def _more(self, want: int) -> bytes:
        import asyncssh

        try:
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for swallows a Ctrl-C
            # (a cancel) that lands as the read completes, and a fast fetch then ran on.
            async with asyncio.timeout(STALL_TIMEOUT):
                return await self.process.stdout.read(want)
        except TimeoutError:
            raise RemoteError(f"{self.conn.alias}: the transfer moved no data for "
                              f"{STALL_TIMEOUT:g} s; it was abandoned.") from None
        except (asyncssh.Error, OSError) as exc:
            raise RemoteError(f"{self.conn.alias}: the transfer was cut: {exc}") from None

    async def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            data = await self._more(max(CHUNK, n - len(self._buf)))
            if not data:
                raise RemoteError(await self._died())
            self._buf += data

    async def exactly(self, n: int) -> bytes:
        if not self._greeted:
            await self._greet()
        await self._fill(n)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def line(self) -> bytes:
        if not self._greeted:
            await self._greet()
        while (end := self._buf.find(b"\n")) < 0:
            data = await self._more(CHUNK)
            if not data:
                raise RemoteError(await self._died())
            self._buf += data
        data = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return data

    async def pieces(self, n: int) -> Any:
        """Yield exactly `n` bytes in pieces of at most CHUNK, as they arrive."""
        if not self._greeted:
            await self._greet()
        while n:
            if not self._buf:
                data = await self._more(min(n, CHUNK))
                if not data:
                    raise RemoteError(await self._died())
                self._buf += data
            take = min(n, len(self._buf), CHUNK)
            piece = bytes(self._buf[:take])
            del self._buf[:take]
            n -= take
            yield piece

    async def _died(self) -> str:
        """Why the host program ended early: its stderr's first line, inert."""
        from rtrain_tui.core.safety.sanitize import safe_line

        try:
            err = await bounded(self.process.stderr.read(4096), 2)
        except Exception:  # noqa: BLE001 - the reason is best effort; the failure is not
            err = b""
        text = err.decode("utf-8", "replace").strip().splitlines()
        self.stderr_line = safe_line(text[-1])[:200] if text else ""
        why = self.stderr_line or "the host program ended early"
        if self.system and not self.stderr_line:
            # The local `ssh` killed (a signal: the OOM killer, a `kill`) is not the host
            # program ending: said as the host's would send the user looking there.
            try:
                code = await bounded(self.process.wait(), 2)
            except TimeoutError:
                code = None
            if code is not None and code < 0:
                why = f"the local ssh client carrying it was killed (signal {-code})"
        return f"{self.conn.alias}: the transfer failed: {why}"

    async def write(self, data: bytes | memoryview) -> None:
        self.process.stdin.write(data)
        while True:
            try:
                async with asyncio.timeout(STALL_TIMEOUT):  # not wait_for: see _more
                    await self.process.stdin.drain()
                return
            except TimeoutError:
                # A program that reads nothing while it works (a delta copying stored
                # chunks) says `keepalive` lines: one heard meanwhile restarts the bound.
                if not (self.keepalive and await self._heard_keepalives()):
                    raise RemoteError(f"{self.conn.alias}: the transfer moved no data for "
                                      f"{STALL_TIMEOUT:g} s; it was abandoned.") from None

    async def _heard_keepalives(self) -> bool:
        """Drop the keepalive lines the program has said by now; whether there was one.
        Any other line is its answer: it is kept for `line()`."""
        import asyncssh

        heard = False
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                if bytes(self._buf[:end]) != self.keepalive:
                    return heard
                del self._buf[:end + 1]
                heard = True
                continue
            try:
                async with asyncio.timeout(0.1):  # what is here comes at once
                    data = await self.process.stdout.read(CHUNK)
            except (TimeoutError, asyncssh.Error, OSError):
                return heard
            if not data:
                return heard
            self._buf += data


class EarlyBulk:
    """A big upload's `ssh … recv`, started beside the store's check instead of after it.

    The system `ssh` is a second login (0.4-0.6 s here, the largest fixed cost of a big
    upload on a far link), and its command is known before the check (upload_prepare)
    says whether the bytes must go at all. It is started only where it can log in on
    its own: the host's key, and every ProxyJump hop's, already on record
    (HostConnection.host_key_on_record), or this connection made (which records them).
    The host program creates nothing before the first block arrives, so one that is not
    needed (the dataset is stored already, or goes as a delta) is simply ended (`close`):
    its program reads the end of its input and exits, leaving nothing behind.
    """

    def __init__(self, command: str) -> None:
        self.command = command
        # The same command with the store's path resolved (`stands_for`): a store under
        # `~` is named as given, for the host program to expand, so that its login need
        # not wait for the round trip that resolves the workdir here.
        self._same: set[str] = {command}
        self._opening: asyncio.Future[_Stream | None] | None = None

    @classmethod
    async def start(cls, conn: HostConnection, command: str, size: int) -> EarlyBulk:
        """Start `command` through the system `ssh` when `size` bytes would go that way."""
        early = cls(command)
        if size >= openssh_pipe.MIN_BYTES and conn.direct is None \
                and conn.bulk_client_refused is None:
            if not conn.connected and not conn.host_key_on_record():
                await conn.connect()  # it records the key (accept-new), as before
            early._opening = asyncio.ensure_future(_Stream._open_system(conn, command, True))
        return early

    def stands_for(self, command: str, size: int) -> None:
        """`command` does what this one's does: the same program, on the same store, named
        with its path resolved (store_dataset's caller started it before it knew), for
        the same `size` (a file that changed size since is not what it waits for)."""
        if self.command.endswith(f" {size}"):  # transfer_command: the size comes last
            self._same.add(command)

    @classmethod
    def adopt(cls, conn: HostConnection, spawned: cold_ssh.Spawned) -> EarlyBulk:
        """One whose `ssh` a new process started before it had `conn` (cold_ssh.py)."""
        early = cls(spawned.command)
        early._opening = asyncio.ensure_future(
            _Stream._open_system(conn, spawned.command, True, spawned))
        return early

    async def take(self, command: str) -> _Stream | None:
        """The greeted stream, if it runs `command`; None when `ssh` could not log in (the
        connection then knows not to try it again) or there is none."""
        opening, self._opening = self._opening, None
        if opening is None:
            return None
        if command not in self._same:
            await self._end(opening)
            return None
        return await opening

    async def close(self) -> None:
        """End it unless an upload took it: a no-op then."""
        opening, self._opening = self._opening, None
        if opening is not None:
            await self._end(opening)

    @staticmethod
    async def _end(opening: asyncio.Future[_Stream | None]) -> None:
        opening.cancel()  # still logging in or greeting: _open_system ends its ssh
        stream = (await asyncio.gather(opening, return_exceptions=True))[0]
        if isinstance(stream, _Stream):
            # Greeted: the end of its input ends the host program (no file made yet),
            # and with it ssh; a round trip, bounded.
            stream.close_stdin_fd()
            await openssh_pipe.end(stream.process, grace=2)


# -- listing --------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteEntry:
    """One entry of a run dir listing, for the fetch browser."""

    path: str  # relative to the run dir (non-UTF-8 bytes as surrogate escapes)
    size: int
    is_dir: bool


@dataclass
class _Listing:
    files: list[tuple[bytes, int, int]] = field(default_factory=list)  # (path, size, mtime_ns)
    dirs: list[bytes] = field(default_factory=list)
    skipped: list[tuple[bytes, str]] = field(default_factory=list)  # (path, kind)


async def _read_listing(stream: _Stream, run_dir: str, rel: str) -> _Listing:
    listing = _Listing()
    rows = 0
    rel_b = os.fsencode(rel)
    while (row := await stream.line()) != b"e":
        rows += 1
        if rows % 256 == 0:
            await asyncio.sleep(0)  # a listing already buffered parses without a wait
        try:
            _read_row(row, listing, rel_b)
        except (ValueError, IndexError):
            raise RemoteError(f"{stream.conn.alias}: the transfer program answered nonsense; "
                              "is the host's python the trainer's?") from None
        except _Refused as exc:
            if exc.why == b"listed":
                # The host names where files land here: never anywhere else (scp's
                # CVE-2019-6111 was trusting that), whatever its program was made to say.
                raise RemoteError(f"{stream.conn.alias}: the host listed {shown(exc.path)}, "
                                  f"which is not under {shown(rel)}; nothing was fetched.") from None
            if exc.why == b"outside":
                raise validate.ValidationError(
                    f"{shown(exc.path)} points outside the run directory. Fetch paths are "
                    "relative to it, e.g. 'lora_model' or 'train.log'.") from None
            raise NoSuchPathError(f"{shown(rel)} does not exist in the run directory {run_dir}.") from None
    return listing


class _Refused(Exception):
    """A listing row that ends the fetch: the host refused the path (`x outside`, `x
    missing`), or listed one that is not under what was asked (`listed`)."""

    def __init__(self, why: bytes, path: bytes) -> None:
        self.why, self.path = why, path


_SKIP_KINDS = {"fifo", "socket", "device", "special", "loop", "dangling", "unreadable"}


def _read_row(row: bytes, listing: _Listing, rel: bytes) -> None:
    """One listing row into `listing` (TRANSFER_PY's format, remote_sh.py)."""
    parts = row.split(b" ")
    tag, path = parts[0], _unhex(parts[-1])
    if tag in (b"f", b"d") and not _under(path, rel):
        raise _Refused(b"listed", path)
    if tag == b"f":
        listing.files.append((path, int(parts[1]), int(parts[2])))
    elif tag == b"d":
        listing.dirs.append(path)
    elif tag == b"s":
        kind = parts[1].decode("ascii", "replace")
        listing.skipped.append((path, kind if kind in _SKIP_KINDS else "special"))
    elif tag == b"x":
        raise _Refused(parts[1], path)
    else:
        raise ValueError(row)


def _under(path: bytes, rel: bytes) -> bool:
    """`path` is `rel` or lies under it: relative, no `..`, `.` or empty part, no NUL."""
    if b"\0" in path or (rel != b"." and path != rel and not path.startswith(rel + b"/")):
        return False
    return all(part not in (b"", b".", b"..") for part in path.split(b"/"))


def _unhex(word: bytes) -> bytes:
    return b"" if word == b"-" else bytes.fromhex(word.decode())


async def list_tree(conn: HostConnection, run_dir: str, rel: str = ".",
                    python: str = validate.DEFAULT_PYTHON) -> list[RemoteEntry]:
    """Every file and directory under `rel`, recursively, each confined to the run dir.

    Symlinks that stay inside are followed (a loop is listed once); files that are not
    regular (a FIFO, a socket) are left out, as a fetch skips them.
    """
    rel = validate.check_fetch_path(rel)
    stream = await _Stream.open(conn, remote_sh.transfer_command(
        python, "list", os.fsencode(run_dir), os.fsencode(rel)))
    try:
        listing = await _read_listing(stream, run_dir, rel)
    finally:
        await stream.aclose()
    entries = [RemoteEntry(os.fsdecode(p), s, False) for p, s, _ in listing.files]
    entries += [RemoteEntry(os.fsdecode(p), 0, True) for p in listing.dirs]
    return sorted(entries, key=lambda e: e.path)


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


def _prepare_local(out: Path, dest: Path, listing: _Listing, targets: list[Path], single: bool,
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
    stream = await _Stream.open(conn, command)
    lander = Lander()
    finished = False
    held: tuple[Path, int] | None = None
    try:
        listing = await _read_listing(stream, run_dir, rel)
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


async def _receive(stream: _Stream, lander: Lander, wanted: list[int], listing: _Listing,
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


async def _receive_one(stream: _Stream, lander: Lander, targets: list[Path],
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


# -- upload ---------------------------------------------------------------------------
def _no_space(conn: HostConnection, where: str, why: str = "") -> RemoteError:
    return RemoteError(f"no space left on {conn.alias} ({where}){why}; free some space there "
                       "and start again.")


async def _free_kb(conn: HostConnection, directory: str) -> int | None:
    try:
        out = await conn.run(remote_sh.free_kb(directory))
    except RemoteError:
        return None
    return int(out.strip()) if out.strip().isdigit() else None


async def upload_file(
    conn: HostConnection, sftp: Any, local: Path, remote: str,
    progress: Progress | None = None, digest: str | None = None,
) -> None:
    """Upload a small file (a config) over SFTP via `remote.part`; rename once verified."""
    import asyncssh

    tmp = remote + ".part"
    size = local.stat().st_size
    label = local.name

    def handler(_src: bytes, _dst: bytes, done: int, total: int) -> None:
        if progress:
            progress(label, done, total)

    if progress:
        progress(label, 0, size)
    try:
        await sftp.put(str(local), tmp, progress_handler=handler)
        attrs = await sftp.stat(tmp)
    except (asyncssh.Error, OSError, RemoteError) as exc:
        try:
            await sftp.remove(tmp)
        except (asyncssh.Error, OSError, RemoteError):
            pass
        free = await _free_kb(conn, posixpath.dirname(remote))
        if free is not None and free * 1024 < size + 64 * 1024:
            raise _no_space(conn, posixpath.dirname(remote)) from None
        raise RemoteError(f"{conn.alias}: upload of {local} failed: {exc}") from None
    digest = digest or await asyncio.to_thread(sha256_file, local)
    if attrs.size != size or await remote_sha256(conn, tmp) != digest:
        await sftp.remove(tmp)
        raise RemoteError(f"{conn.alias}: upload of {local} arrived corrupted; start again.")
    await sftp.posix_rename(tmp, remote)
    if progress:
        progress(label, size, size)


async def remote_sha256(conn: HostConnection, path: str) -> str:
    """SHA-256 of one remote file by absolute path, via the host's shell."""
    directory, name = posixpath.split(path)
    out = await conn.run(remote_sh.checksums(directory, [name]), timeout=600)
    digest, _, got = out.strip().partition("  ")
    return digest if got == f"./{name}" else ""


async def ship_dataset(
    conn: HostConnection, sftp: Any, local: Path, run_dir: str,
    progress: Progress | None = None, python: str = validate.DEFAULT_PYTHON,
) -> delta.Shipped:
    """Put the dataset in the run dir under its own name, uploading it only once per host.

    Datasets are kept by content in `<workdir>/.datasets/<sha256>`, published there only
    after their hash was verified on the host, so a file of that name *is* that
    content: a second run on the same data links it instead of sending gigabytes again.
    Each upload writes a temporary name of its own, so concurrent starts with the same
    new data never collide; the first to verify publishes, the others find it there. A
    new dataset close to a stored one sends only the chunks that differ (delta.py).
    Returns how it went (for tests and benchmarks: how many bytes it sent).
    """
    from rtrain_tui.core.transfers import delta

    workdir = posixpath.dirname(run_dir)
    shipped = await _store(conn, local, workdir, progress, python)
    # Placed while its manifest is still being written: neither waits for the other.
    failed = True
    try:
        await place_dataset(conn, local.name, workdir, shipped.digest, run_dir)
        failed = False
    finally:
        await delta.settle(shipped.manifest, abandon=failed)
    return shipped


def early_command(local: Path, workdir: str, python: str = validate.DEFAULT_PYTHON) -> str:
    """The host program that receives `local` into the store of `workdir` as the user gave
    it: a leading `~` is expanded there, as the login shell does (early_store)."""
    store = posixpath.join(workdir.rstrip("/") or "/", ".datasets")
    return _recv_command(python, store, local.stat().st_size)


async def early_store(conn: HostConnection, local: Path, workdir: str,
                      python: str = validate.DEFAULT_PYTHON,
                      spawned: cold_ssh.Spawned | None = None) -> EarlyBulk:
    """A big dataset's bulk `ssh … recv` (early_command), started before `workdir` is
    resolved (a round trip). Handed to store_dataset (`early`) with the resolved workdir.
    `spawned`: that `ssh`, started already, before `conn` was made (cold_ssh.py)."""
    if spawned is not None:
        return EarlyBulk.adopt(conn, spawned)
    return await EarlyBulk.start(conn, early_command(local, workdir, python), local.stat().st_size)


async def store_dataset(
    conn: HostConnection, local: Path, workdir: str,
    progress: Progress | None = None, python: str = validate.DEFAULT_PYTHON,
    later: list[asyncio.Future[None]] | None = None, early: EarlyBulk | None = None,
) -> delta.Shipped:
    """Have `local` in the host's store `<workdir>/.datasets/<sha256>` (an absolute
    workdir), sent only when it is not there yet; how it went (its SHA-256, linked,
    whole or a delta, the bytes on the wire).

    Needs no run dir: a start sends the dataset while its preflight and run dir are
    still under way (engine.py), and a store entry is only ever verified content.
    The write of the dataset's chunk manifest (delta.py), when one is due, is waited for
    here, or, given `later`, appended to it still under way: the caller goes on (places
    the dataset, launches) and settles it (`delta.settle`) before it is done.
    `early`: the bulk channel early_store started for this dataset and workdir (ended
    here when the upload does not take it).
    """
    from rtrain_tui.core.transfers import delta

    shipped = await _store(conn, local, workdir, progress, python, early)
    if later is None:
        await delta.settle(shipped.manifest)
    elif shipped.manifest is not None:
        later.append(shipped.manifest)
    return shipped


async def _store(conn: HostConnection, local: Path, workdir: str, progress: Progress | None,
                 python: str, early: EarlyBulk | None = None) -> delta.Shipped:
    """store_dataset, saying how the dataset went: linked, whole or as a delta."""
    cache_dir = posixpath.join(workdir, ".datasets")
    size = local.stat().st_size
    command = _recv_command(python, cache_dir, size)
    # A big dataset's bulk channel logs in beside the check: most go whole.
    if early is None:
        early = await EarlyBulk.start(conn, command, size)
    else:
        early.stands_for(command, size)
    try:
        shipped = await _store_checked(conn, local, workdir, cache_dir, size, progress, python,
                                       early)
    finally:
        await early.close()
    return replace(shipped, size=size)


def _recv_command(python: str, cache_dir: str, size: int) -> str:
    return remote_sh.transfer_command(python, "recv", os.fsencode(cache_dir), size)


async def _store_checked(conn: HostConnection, local: Path, workdir: str, cache_dir: str,
                         size: int, progress: Progress | None, python: str,
                         early: EarlyBulk) -> delta.Shipped:
    """_store from the store's check on; `early` may carry the whole upload's channel."""
    from rtrain_tui.core.transfers import delta

    facts = await conn.run(remote_sh.upload_prepare(
        cache_dir, size, posixpath.join(workdir, delta.CHUNKS_DIR)))
    free_kb = same = None
    twins = set()
    manifests = 0
    for row in facts.splitlines():
        key, _, value = row.partition("=")
        if key == "free_kb" and value.strip().isdigit():
            free_kb = int(value)
        elif key == "same":
            twins.add(value.strip())
        elif key == "manifests" and value.strip().isdigit():
            manifests = int(value)
    digest = ""  # known below: hashed when a stored twin may match, else by the upload
    if twins:  # a stored dataset of this very size: worth hashing first to skip the upload
        digest = await asyncio.to_thread(sha256_file, local)
        same = digest in twins
    if same:
        shipped = delta.Shipped(digest, "linked", 0)
        if progress:
            progress(f"{local.name} (already on the host)", size, size)
    else:
        if free_kb is not None and free_kb * 1024 < size + FREE_MARGIN:
            raise _no_space(conn, workdir, f": {local.name} needs {_mib(size)}, "
                                           f"{_mib(free_kb * 1024)} free")
        shipped = await delta.ship_new(conn, local, cache_dir, size, progress, python, workdir,
                                       manifests, early)
    return shipped


async def place_dataset(conn: HostConnection, name: str, workdir: str, digest: str,
                        run_dir: str) -> None:
    """Link the stored dataset `digest` into `run_dir` as `name` (copied where links fail)."""
    cached = posixpath.join(workdir, ".datasets", digest)
    out = await conn.run(remote_sh.link_or_copy(cached, posixpath.join(run_dir, name)))
    if out.strip() != "linked=1":
        if "No space" in out:
            raise _no_space(conn, workdir)
        raise RemoteError(f"{conn.alias}: could not place {name} in {run_dir}: {out.strip()[:200]}")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


async def _send_hashed(f: Any, size: int, h: Any, stream: _Stream, enc: Any,
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
    _as_before(f.fileno(), before)
    os.write(fd, h.hexdigest().encode() + b"\n")


def changed_error(local: Path) -> RemoteError:
    """The one line for a dataset that changed while it was uploaded (nothing published)."""
    return RemoteError(f"{local} changed while it was uploaded; start again.")


class _Changed(Exception):
    """The file being sent changed since its upload began (_as_before)."""


def _as_before(fd: int, before: os.stat_result) -> None:
    """Raise _Changed unless the file open as `fd` is still as `before` said (its inode,
    size, modification and change times). Asked once every byte is read, before the
    upload's last word (its digest, a delta's `E`) is said: bytes read before an edit
    and after it hash consistently and make a file that never was, which the host would
    verify and store as the dataset; without that word it stores nothing."""
    now = os.fstat(fd)
    if (now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns) != (
            before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns):
        raise _Changed


def _write_all(fd: int, data: bytes | memoryview) -> None:
    piece = memoryview(data)
    while piece:
        piece = piece[os.write(fd, piece):]


async def _pump_system(stream: _Stream, f: Any, size: int, h: Any, enc: Any,
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
            elif time.monotonic() - moved_at > STALL_TIMEOUT:
                raise RemoteError(f"{stream.conn.alias}: the transfer moved no data for "
                                  f"{STALL_TIMEOUT:g} s; it was abandoned.")
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


async def _stream_upload(conn: HostConnection, local: Path, cache_dir: str, size: int,
                         progress: Progress | None, python: str, workdir: str,
                         early: EarlyBulk | None = None,
                         all_sent: Callable[[str], object] | None = None) -> Uploaded:
    """Send `local` to the host program, hashing it here in the same pass (Uploaded).
    `early`: its `ssh`, maybe started already (EarlyBulk). `all_sent(digest)`: every
    byte is on its way, the host's verdict not yet in (what is still in the buffers to
    the host must drain first: 0.17 s at 100 Mbit/s, 0.9 s at 20)."""
    import asyncssh

    label = local.name
    stream = await _Stream.open(conn, _recv_command(python, cache_dir, size), bulk=size,
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
                    raise _Changed
                if piped:
                    sent = await _pump_system(stream, f, size, h, enc, report, before)
                else:
                    sent = await _send_hashed(f, size, h, stream, enc, report)
                    if sent == size:
                        _as_before(f.fileno(), before)
            wire = enc.wire
            if sent != size:
                raise _Changed
            if not piped:
                await stream.write(h.hexdigest().encode() + b"\n")
                stream.process.stdin.write_eof()
            if all_sent is not None:
                all_sent(h.hexdigest())
        except (asyncssh.Error, OSError, BrokenPipeError, ConnectionError):
            pass  # the host program ended early: its answer says why
        except _Changed:
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
        raise _no_space(conn, workdir)
    if answer == "error=corrupt":
        raise RemoteError(f"{conn.alias}: upload of {local} arrived corrupted; start again.")
    if not answer:
        free = await _free_kb(conn, cache_dir)
        if free is not None and free * 1024 < size - sent + 64 * 1024:
            raise _no_space(conn, workdir)
    from rtrain_tui.core.safety.sanitize import safe_line

    if not answer:
        raise RemoteError(f"{conn.alias}: upload of {local} failed: {why}")
    raise RemoteError(f"{conn.alias}: upload of {local} failed: "
                      f"{safe_line(answer.removeprefix('error='))[:200]}")
