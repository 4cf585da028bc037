"""The client's per-run lock (local_locks.HostLock): one taker at a time, and with `remove` no
file left behind, even when a taker waited on the file its holder removed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.local_locks import HostLock


def test_a_removed_lock_leaves_no_file_and_a_waiter_on_the_old_file_still_excludes_others(
        tmp_path: Path) -> None:
    path = tmp_path / "starting" / "resume-x.lock"

    async def go() -> None:
        first, second, third = (HostLock(path, remove=True) for _ in range(3))
        await first.acquire(1, "busy")
        # `second` opens the file `first` holds and waits on it.
        waiting = asyncio.create_task(second.acquire(5, "busy"))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        first.release()  # removes the file it held
        await waiting
        # `second` holds the file now at the path, not the removed one: a third taker,
        # which opens (and makes) the path's file, must wait.
        assert second._fd is not None
        assert os.fstat(second._fd).st_ino == os.stat(path).st_ino
        with pytest.raises(RemoteError, match="busy for over 0.3 s"):
            await third.acquire(0.3, "busy")
        second.release()

    asyncio.run(go())
    assert list(path.parent.iterdir()) == []


def test_a_kept_lock_file_stays_for_the_next_taker(tmp_path: Path) -> None:
    path = tmp_path / "gpus-host.lock"

    async def go() -> None:
        lock = HostLock(path)
        await lock.acquire(1, "busy")
        lock.release()

    asyncio.run(go())
    assert path.exists()


def test_a_waiter_that_cannot_reopen_the_lock_file_says_why_and_closes_its_file_once(tmp_path: Path) -> None:
    path = tmp_path / "gpus-host.lock"

    async def go() -> None:
        first, second = HostLock(path, remove=True), HostLock(path)
        await first.acquire(1, "busy")
        waiting = asyncio.create_task(second.acquire(5, "busy"))
        await asyncio.sleep(0.2)
        first.release()
        path.mkdir()  # where the lock file was: the waiter's reopen fails (EISDIR)
        # Its fd was closed before the reopen: closing it again raised EBADF in place of
        # the reopen's error (or, had the number been reused meanwhile, closed another file).
        with pytest.raises(IsADirectoryError):
            await waiting

    asyncio.run(go())
