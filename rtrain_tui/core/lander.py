"""Fetched files land (written, hashed, verified, renamed) in one thread, in order.

Why a thread: the event loop should only receive. Creating a file cost ~1 ms here (2,000
small files: 2 s of the fetch), a 1 MiB write can block for tens of ms while the kernel
throttles dirty pages, and hashing is CPU: done on the loop, each held up the next
file's bytes and the TUI's redraws. One worker keeps the files' order, and writing,
hashing and most file system calls release the GIL.

Every file is written as a `.part` and renamed into place only once the bytes written
hash to what the host hashed while it read them. `close()` waits for the worker, then
removes whatever `.part` is left, so a failed or cancelled fetch leaves none.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

QUEUED_BYTES = 4 << 20  # received but not yet written: the bound on the client's memory
BATCH_STEPS, BATCH_BYTES = 64, 1 << 20

LANDED, CHANGED, CORRUPT = "landed", "changed", "corrupt"


class _File:
    """One file on its way: its `.part`, its descriptor and its running hash.

    Plain descriptors, not Python file objects: thousands of small files pay per call.
    """

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


def _run_steps(steps: list[tuple[_File, Callable[[], object]]]) -> None:
    for landing, step in steps:
        try:
            step()
        except OSError as exc:  # named by the file it was landing, for a one-line error
            raise OSError(exc.errno, exc.strerror, str(landing.target)) from None


class Lander:
    """The worker thread and what is queued for it.

    Steps (open, write, finish) are handed to the worker in batches of up to 64 steps or
    1 MiB: one hand-over per small file cost more than the file itself.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtrain-land")
        self._queued: deque[tuple[Future[None], int]] = deque()
        self._queued_bytes = 0
        self._batch: list[tuple[_File, Callable[[], object]]] = []  # not yet handed over
        self._batch_bytes = 0
        self._files: list[_File] = []  # begun and not finished: removed on close
        self._finished: list[tuple[Any, str]] = []  # (key, LANDED/CHANGED/CORRUPT), by the worker

    def _step(self, landing: _File, step: Callable[[], object], size: int = 0) -> None:
        self._batch.append((landing, step))
        self._batch_bytes += size
        if len(self._batch) >= BATCH_STEPS or self._batch_bytes >= BATCH_BYTES:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._batch:
            steps, size = self._batch, self._batch_bytes
            self._batch, self._batch_bytes = [], 0
            self._queued.append((self._pool.submit(_run_steps, steps), size))
            self._queued_bytes += size

    async def _settle(self, limit: int) -> None:
        """Wait for the oldest work until at most `limit` bytes are queued; raise its error."""
        while self._queued and (self._queued_bytes > limit or self._queued[0][0].done()):
            future, size = self._queued.popleft()
            self._queued_bytes -= size
            await asyncio.wrap_future(future)

    def begin(self, part: Path, target: Path, mtime_ns: int) -> _File:
        landing = _File(part, target, mtime_ns)
        self._files.append(landing)
        self._step(landing, landing.open)
        return landing

    async def write(self, landing: _File, piece: bytes) -> None:
        self._step(landing, partial(landing.write, piece), len(piece))
        await self._settle(QUEUED_BYTES)

    def finish(self, landing: _File, key: Any, host_read_it_whole: bool, digest: bytes) -> None:
        """Queue the file's verification; `wait` returns its result under `key`."""
        def step() -> None:
            self._finished.append((key, landing.finish(host_read_it_whole, digest)))
        self._step(landing, step)

    async def wait(self) -> list[tuple[Any, str]]:
        """Everything queued is done: each finished file's key and result, in order."""
        self._hand_over()
        await self._settle(0)
        done, self._finished = self._finished, []
        self._files = [f for f in self._files if f.fd is not None]
        return done

    async def close(self) -> None:
        """Stop the worker (work not begun is dropped), then remove every `.part` left.

        This waits for the worker's current step (one open, write or rename) on the event
        loop itself: awaiting it instead would let a second Ctrl-C remove files under a
        thread still writing them.
        """
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._queued.clear()
        for landing in self._files:
            landing.discard()
        self._files.clear()
