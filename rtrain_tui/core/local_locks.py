"""The client's own locks, files beside the index (`starting/`), so they hold across
processes on this machine: the host's GPU-choice lock (one start or resume at a time
chooses GPUs on a host), a lock per run for resumes, and the "a start of this run is in
progress" lock named by the run's token, which a refresh reads before it decides that a
`starting` entry never launched.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs.index import RunIndex


def gpu_choice_lock(index: RunIndex, host: str) -> Path:
    """The file of the host's GPU-choice lock on this machine."""
    # Named by a hash: an alias may hold any character a file name cannot.
    digest = hashlib.sha256(host.encode()).hexdigest()[:32]
    return index.path.parent / "starting" / f"gpus-{digest}.lock"


class HostLock:
    """An exclusive file lock, waited for without blocking the event loop (and without a
    thread that could be left holding it after a cancel); released once, by release()
    or on leaving, whichever comes first.

    With `remove`, release() deletes the file (a lock per run would otherwise leave one
    file per resumed run behind for ever). It is deleted while still held, and a taker
    holds the lock only if the file it locked is still the one at the path: one that
    waited on a file deleted meanwhile opens the path again, so two takers never hold
    two different files of the same name."""

    def __init__(self, path: Path, remove: bool = False) -> None:
        self.path = path
        self.remove = remove
        self._fd: int | None = None

    async def acquire(self, timeout: float, busy: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RemoteError(f"{busy} for over {timeout:g} s; try again.") from None
                    await asyncio.sleep(0.05)
                    continue
                if _same_file(fd, self.path):
                    break
                os.close(fd)  # its holder removed it: the lock is the path's file now
                fd = -1  # closed: were the reopen to fail, never closed again (another file's, by then)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            if self.remove:
                self.path.unlink(missing_ok=True)  # still held: nobody can take it in between
            os.close(self._fd)  # closing the file lets go of the lock
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path`."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _starting_lock(index: RunIndex, token: str) -> Path:
    return index.path.parent / "starting" / f"{remote_sh.check_token(token)}.lock"


def start_in_progress(index: RunIndex, token: str) -> bool:
    """True while the process that is starting this run holds its lock."""
    if not token:
        return False
    path = _starting_lock(index, token)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextmanager
def starting(index: RunIndex, token: str) -> Iterator[None]:
    """Hold the lock that says "a start of this run is in progress" (see engine.py's docstring)."""
    path = _starting_lock(index, token)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
