"""Fetched files are renamed into place only when what was written verifies."""

from __future__ import annotations

import errno
import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rtrain_tui.core.transfers import lander as lander_module
from rtrain_tui.core.transfers.lander import CHANGED, CORRUPT, LANDED, Lander


def land(tmp_path: Path, name: str, data: bytes, whole: bool, digest: bytes) -> str:
    lander = Lander()
    try:
        landing = lander.begin(tmp_path / f"{name}.part", tmp_path / name, 10**18)
        for at in range(0, len(data), 1000):
            lander.write(landing, data[at:at + 1000])
        return lander.finish(landing, whole, digest)
    finally:
        lander.close()


def test_a_verified_file_lands_with_the_hosts_mtime(tmp_path: Path) -> None:
    data = b"abc" * 1000
    assert land(tmp_path, "f", data, True, hashlib.sha256(data).digest()) == LANDED
    assert (tmp_path / "f").read_bytes() == data
    assert (tmp_path / "f").stat().st_mtime_ns == 10**18
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_a_corrupt_file_and_one_the_host_saw_change_never_land(tmp_path: Path) -> None:
    good = b"good bytes"
    assert land(tmp_path, "corrupt", b"what arrived", True,
                hashlib.sha256(b"what the host read").digest()) == CORRUPT
    assert land(tmp_path, "changed", good, False, hashlib.sha256(good).digest()) == CHANGED
    assert list(tmp_path.iterdir()) == []


def test_closing_midway_removes_the_part_file(tmp_path: Path) -> None:
    lander = Lander()
    landing = lander.begin(tmp_path / "half.part", tmp_path / "half", 0)
    lander.write(landing, b"x" * 5000)
    assert (tmp_path / "half.part").exists()
    lander.close()  # as a cancelled fetch does: the file never finished
    assert list(tmp_path.iterdir()) == []


def test_a_rename_that_fails_is_named_by_its_file_and_leaves_no_part(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()  # a directory where the file lands
    (tmp_path / "taken" / "inside").write_text("keeps the directory non-empty")
    lander = Lander()
    landing = lander.begin(tmp_path / "taken.part", tmp_path / "taken", 0)
    lander.write(landing, b"data")
    with pytest.raises(OSError) as failed:
        lander.finish(landing, True, hashlib.sha256(b"data").digest())
    assert failed.value.filename == str(tmp_path / "taken")
    assert failed.value.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST)
    lander.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def land_ahead(tmp_path: Path, n: int, landed: range,
               then: Callable[[], None] = lambda: None) -> list[str]:
    """Create n .part files ahead, land files `landed` as fast as possible, `then`, close."""
    parts = {num: tmp_path / f"f{num:04d}.part" for num in range(n)}
    lander = Lander()
    lander.create_ahead(parts)
    try:
        for num in landed:
            data = b"%d" % num
            landing = lander.begin(parts[num], tmp_path / f"f{num:04d}", 0, key=num)
            lander.write(landing, data)
            assert lander.finish(landing, True, hashlib.sha256(data).digest()) == LANDED
        then()
    finally:
        lander.close()
    return sorted(p.name for p in tmp_path.iterdir())


def test_files_created_ahead_land_and_a_close_removes_the_rest(tmp_path: Path) -> None:
    assert land_ahead(tmp_path, 300, range(10)) == [f"f{num:04d}" for num in range(10)]
    (tmp_path / "all").mkdir()
    assert land_ahead(tmp_path / "all", 2000, range(2000)) == [
        f"f{num:04d}" for num in range(2000)]


def test_a_receiver_that_overtakes_the_creating_thread_leaves_no_part_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread is stuck creating file 0 (a slow disk) while the receiver lands files
    1-199 (file 0 vanished on the host). When the thread goes on it must not create
    .part files again behind files already renamed into place."""
    unstick = threading.Event()
    create = lander_module._create_empty

    def slow_create(part: Path) -> None:
        if part.name == "f0000.part":
            unstick.wait(10)
        create(part)

    monkeypatch.setattr(lander_module, "_create_empty", slow_create)

    def release_the_thread() -> None:
        unstick.set()
        deadline = time.monotonic() + 10
        while not (tmp_path / "f0399.part").exists():  # it went on to the end
            assert time.monotonic() < deadline
            time.sleep(0.01)

    got = land_ahead(tmp_path, 400, range(1, 200), then=release_the_thread)
    assert got == [f"f{num:04d}" for num in range(1, 200)]  # and file 0's .part removed


def test_a_create_ahead_that_fails_leaves_the_error_to_the_receiver(tmp_path: Path) -> None:
    gone = tmp_path / "gone"  # the directory vanished: every create fails
    lander = Lander()
    lander.create_ahead({num: gone / f"f{num}.part" for num in range(50)})
    with pytest.raises(OSError) as failed:
        lander.begin(gone / "f0.part", gone / "f0", 0, key=0)
    assert failed.value.filename == str(gone / "f0")
    lander.close()
    assert list(tmp_path.iterdir()) == []


def test_a_part_that_cannot_be_removed_does_not_stop_the_cleanup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One removal failed (a read-only directory): the loop stopped there, the create
    thread was never stopped, and it went on making .part files after the fetch ended."""
    unlink = Path.unlink

    def failing_unlink(self: Path, missing_ok: bool = False) -> None:
        if self.name == "f0000.part":
            raise OSError(30, "Read-only file system", str(self))
        unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", failing_unlink)
    parts = {num: tmp_path / f"f{num:04d}.part" for num in range(500)}
    lander = Lander()
    lander.create_ahead(parts)
    landing = lander.begin(parts[0], tmp_path / "f0000", 0, key=0)
    lander.write(landing, b"half")
    lander.close()  # as a failed fetch does; must not raise over the fetch's own error
    time.sleep(0.2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f0000.part"]


def test_two_fetches_of_one_file_never_share_a_part_and_the_replaced_one_is_told(tmp_path: Path) -> None:
    """Both used to open `f.part` (the second one truncating the first's bytes and both
    writing into it) and both said "landed". Each now writes a .part it created itself,
    and the first learns that the final name no longer holds what it verified there."""
    first, second = Lander(), Lander()
    try:
        a = first.begin(tmp_path / "f.part", tmp_path / "f", 10**18)
        b = second.begin(tmp_path / "f.part", tmp_path / "f", 10**18)
        assert a.part == tmp_path / "f.part" and b.part != a.part and b.part.name.startswith(".rtrain-")
        first.write(a, b"from run A")
        second.write(b, b"from run B")
        assert first.finish(a, True, hashlib.sha256(b"from run A").digest()) == LANDED
        assert first.replaced() == []
        assert second.finish(b, True, hashlib.sha256(b"from run B").digest()) == LANDED
        assert (tmp_path / "f").read_bytes() == b"from run B"
        assert first.replaced() == [tmp_path / "f"] and second.replaced() == []
    finally:
        first.close()
        second.close()
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_a_part_someone_else_made_is_never_written_nor_removed(tmp_path: Path) -> None:
    theirs = tmp_path / "f.part"
    theirs.write_bytes(b"another fetch's bytes")
    lander = Lander()
    landing = lander.begin(theirs, tmp_path / "f", 10**18)
    lander.write(landing, b"mine")
    lander.close()  # cancelled: removes its own .part only
    assert theirs.read_bytes() == b"another fetch's bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.part"]
