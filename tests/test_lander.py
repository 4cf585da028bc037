"""Fetched files are renamed into place only when what was written verifies."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

import pytest

from rtrain_tui.core.lander import CHANGED, CORRUPT, LANDED, Lander


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
