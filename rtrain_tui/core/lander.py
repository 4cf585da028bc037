"""Fetched files land: written as a `.part`, hashed, renamed into place once verified.

Every file is written under a temporary name and renamed only once the bytes written
hash to what the host hashed while it read them. `close()` removes whatever `.part` is
left, so a failed or cancelled fetch leaves none. Errors name the file they were landing,
for a one-line message.

This runs on the event loop, between pieces. A worker thread was tried and measured
slower everywhere (the 200 MB file: 1.32 s against 1.10 s; 2,000 small files: 2.71 s
against 2.36 s): the thread and asyncssh's decryption took turns at the GIL. Plain
descriptors, not Python file objects: thousands of small files pay per call.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

LANDED, CHANGED, CORRUPT = "landed", "changed", "corrupt"


class Landing:
    """One file on its way: its `.part`, its descriptor and its running hash."""

    def __init__(self, part: Path, target: Path, mtime_ns: int) -> None:
        self.part, self.target, self.mtime_ns = part, target, mtime_ns
        self.fd: int | None = None
        self.hash = hashlib.sha256()

    def open(self) -> None:
        self.fd = os.open(self.part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

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

    def discard(self) -> None:
        self.close()
        self.part.unlink(missing_ok=True)


class Lander:
    """The files of one fetch that have begun and not finished."""

    def __init__(self) -> None:
        self._open: dict[int, Landing] = {}

    def begin(self, part: Path, target: Path, mtime_ns: int) -> Landing:
        landing = Landing(part, target, mtime_ns)
        self._open[id(landing)] = landing
        _named(landing, landing.open)
        return landing

    def write(self, landing: Landing, piece: bytes) -> None:
        _named(landing, landing.write, piece)

    def finish(self, landing: Landing, host_read_it_whole: bool, digest: bytes) -> str:
        result = _named(landing, landing.finish, host_read_it_whole, digest)
        self._open.pop(id(landing), None)  # only now: a failed rename leaves it to close()
        return result

    def close(self) -> None:
        """Remove every `.part` of a file that began and did not finish."""
        for landing in self._open.values():
            landing.discard()
        self._open.clear()


def _named(landing: Landing, step, *args):  # type: ignore[no-untyped-def]
    try:
        return step(*args)
    except OSError as exc:  # named by the file it was landing, for a one-line error
        raise OSError(exc.errno, exc.strerror, str(landing.target)) from None
