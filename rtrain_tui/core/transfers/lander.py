"""Fetched files land: written as a `.part`, hashed, renamed into place once verified.

Every file is written under a temporary name and renamed only once the bytes written
hash to what the host hashed while it read them. A `.part` is created exclusively
(O_EXCL): it is only ever written by the fetch that made it, and a name already taken
(another fetch's, or two names that are one file on a case-insensitive file system)
moves this one to a fresh hidden name. Each file renamed into place is remembered by
its inode, and `replaced()` tells which final names no longer hold the bytes we
verified there. `close()` removes whatever `.part` is left, so a failed or cancelled
fetch leaves none. Errors name the file they were landing, for a one-line message.

The bytes are written and hashed on the event loop, between pieces. A worker thread for
that was measured slower everywhere (the 200 MB file: 1.32 s against 1.10 s; 2,000 small
files: 2.71 s against 2.36 s): the thread and asyncssh's decryption took turns at the GIL.
Measured again with only pieces of 256 KiB+ in a thread, one at a time, pipelined behind
the receiving of the next (as uploads do, upload._send_hashed): no faster (a 100 MiB +
1,000-file fetch, whole command, 8 alternating pairs at load 3.8 on 2 cores: 2.95 s
against 2.69 s median, CPU 1.56 s against 1.50 s) and 40 MiB more peak memory.
What a thread does pay for is creating the files (CreateAhead): that is the kernel's
work, done without the GIL. Plain descriptors, not Python file objects: thousands of
small files pay per call.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
from pathlib import Path

LANDED, CHANGED, CORRUPT = "landed", "changed", "corrupt"
# A .part never follows a symlink and never blocks on a FIFO that someone left at its name.
_PART_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def _create_empty(part: Path) -> None:
    """Create `part` empty, exclusively: FileExistsError when anything sits at its name."""
    os.close(os.open(part, _PART_FLAGS | os.O_EXCL, 0o644))


def fresh_part(target: Path) -> Path:
    """A hidden temporary name beside `target`, for when `NAME.part` cannot be used."""
    return target.with_name(f".rtrain-{secrets.token_hex(6)}.part")


class Landing:
    """One file on its way: its `.part`, its descriptor and its running hash."""

    def __init__(self, part: Path, target: Path, mtime_ns: int) -> None:
        self.part, self.target, self.mtime_ns = part, target, mtime_ns
        self.fd: int | None = None
        self.hash = hashlib.sha256()
        self.identity: tuple[int, int] | None = None  # (device, inode) once landed

    def open(self, created_empty: bool = False) -> None:
        """Open the `.part`: the empty one this fetch created ahead, else a new one made
        exclusively, under a fresh name when its own is taken (never someone else's)."""
        if created_empty:
            self.fd = os.open(self.part, _PART_FLAGS, 0o644)
            return
        while True:
            try:
                self.fd = os.open(self.part, _PART_FLAGS | os.O_EXCL, 0o644)
                return
            except FileExistsError:
                self.part = fresh_part(self.target)

    def write(self, piece: bytes) -> None:
        assert self.fd is not None
        self.hash.update(piece)
        view = memoryview(piece)
        while view:
            view = view[os.write(self.fd, view):]

    def finish(self, host_read_it_whole: bool, digest: bytes) -> str:
        """Close; rename into place if verified. LANDED, CHANGED (read again) or CORRUPT."""
        assert self.fd is not None
        try:
            if host_read_it_whole and self.hash.digest() == digest:
                os.utime(self.fd, ns=(self.mtime_ns, self.mtime_ns))
                st = os.fstat(self.fd)
                self.identity = (st.st_dev, st.st_ino)  # the file that holds our bytes
                os.replace(self.part, self.target)
                return LANDED
        finally:
            self.close()
        self.part.unlink(missing_ok=True)
        return CHANGED if not host_read_it_whole else CORRUPT

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)


class CreateAhead:
    """Creates a fetch's empty `.part` files in a thread, in the order their bytes come.

    Creating a file is the kernel's work (on this VM 0.3-1 ms each, all of it CPU), and
    for a directory of many small files it is most of the fetch. Done here, it overlaps
    the receiving, hashing and writing on the event loop instead of following it: the
    same overlap `tar x` gets from running beside `ssh`. The receiver `claim`s each file
    before it opens it; after that this thread never touches it, so a `.part` is never
    created again behind a file already renamed into place.
    """

    def __init__(self, parts: dict[int, Path]) -> None:
        self._keys = list(parts)  # in the order the files will come
        self._parts = parts
        self._at = {key: k for k, key in enumerate(self._keys)}
        self._next = 0  # the position this thread creates next
        self._busy: int | None = None  # the position being created now
        self._stopped = False
        self._created: set[int] = set()  # positions
        self._claimed: set[int] = set()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rtrain-create-ahead",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped or self._next >= len(self._keys):
                    return
                at = self._busy = self._next
                self._next += 1
            try:
                _create_empty(self._parts[self._keys[at]])
                self._created.add(at)
            except OSError:
                self._stopped = True  # the receiver creates the rest, and names any error
            finally:
                with self._cond:
                    self._busy = None
                    self._cond.notify_all()

    def claim(self, key: int) -> bool:
        """From now on file `key` is the receiver's. True: this thread created it, empty."""
        at = self._at.get(key)
        if at is None:
            return False
        with self._cond:
            if self._next <= at:
                self._next = at + 1  # every earlier file has come already
            self._cond.wait_for(lambda: self._busy != at)  # at most one create's wait
            fresh = at in self._created and at not in self._claimed
            self._claimed.add(at)
            return fresh

    def stop(self) -> list[Path]:
        """Stop creating; the `.part` files it created that the receiver never claimed."""
        with self._cond:
            self._stopped = True
        self._thread.join()
        return [self._parts[self._keys[at]] for at in self._created
                if at not in self._claimed]


class Lander:
    """The files of one fetch that have begun and not finished."""

    def __init__(self) -> None:
        self._open: dict[int, Landing] = {}
        self._ahead: CreateAhead | None = None
        self.landed: dict[Path, tuple[int, int]] = {}  # final name -> the file we put there

    def create_ahead(self, parts: dict[int, Path]) -> None:
        """Create these `.part` files (by file number, in arrival order) in a thread."""
        self._ahead = CreateAhead(parts)

    def begin(self, part: Path, target: Path, mtime_ns: int, key: int | None = None) -> Landing:
        fresh = self._ahead is not None and key is not None and self._ahead.claim(key)
        landing = Landing(part, target, mtime_ns)
        _named(landing, landing.open, fresh)
        self._open[id(landing)] = landing  # only now: close() removes only a .part we made
        return landing

    def write(self, landing: Landing, piece: bytes) -> None:
        _named(landing, landing.write, piece)

    def finish(self, landing: Landing, host_read_it_whole: bool, digest: bytes) -> str:
        result = _named(landing, landing.finish, host_read_it_whole, digest)
        self._open.pop(id(landing), None)  # only now: a failed rename leaves it to close()
        if result == LANDED and landing.identity is not None:
            self.landed[landing.target] = landing.identity
        return result

    def replaced(self) -> list[Path]:
        """The final names that no longer hold the file this fetch verified and put there:
        another program wrote over it, or a later file of this fetch landed on the same
        file (names differing only in case on a case-insensitive file system). Thousands
        of stats: a caller on the event loop runs this in a thread."""
        gone = []
        for target, identity in self.landed.items():
            try:
                st = os.lstat(target)
            except OSError:
                gone.append(target)
                continue
            if (st.st_dev, st.st_ino) != identity:
                gone.append(target)
        return gone

    def close(self) -> None:
        """Remove every `.part` of a file that began and did not finish, or never began.

        Never raises: the thread is stopped first (so it makes no more), a `.part` that
        cannot be removed (a read-only directory) is left and the rest still go, and the
        fetch's own error is the one reported. Thousands of removals take a while, so a
        caller on the event loop runs this in a thread (fetch.py).
        """
        parts = self._ahead.stop() if self._ahead is not None else []
        self._ahead = None
        for landing in self._open.values():
            parts.append(landing.part)
            try:
                landing.close()
            except OSError:
                pass
        self._open.clear()
        for part in parts:
            try:
                part.unlink(missing_ok=True)
            except OSError:
                pass


def _named(landing: Landing, step, *args):  # type: ignore[no-untyped-def]
    try:
        return step(*args)
    except OSError as exc:  # named by the file it was landing, for a one-line error
        raise OSError(exc.errno, exc.strerror, str(landing.target)) from None
