"""The lander writes fetched files in a thread and renames only what verifies."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from rtrain_tui.core.lander import CHANGED, CORRUPT, LANDED, Lander


def land(tmp_path: Path, files: dict[str, tuple[bytes, bool, bytes]]) -> list[tuple[str, str]]:
    """Land each name's bytes with (host read it whole?, host's digest); their results."""
    async def go() -> list[tuple[str, str]]:
        lander = Lander()
        try:
            for name, (data, whole, digest) in files.items():
                landing = lander.begin(tmp_path / f"{name}.part", tmp_path / name, 10**18)
                for at in range(0, len(data), 1000):
                    await lander.write(landing, data[at:at + 1000])
                lander.finish(landing, name, whole, digest)
            return await lander.wait()
        finally:
            await lander.close()
    return asyncio.run(go())


def test_verified_files_land_in_order_with_the_hosts_mtime(tmp_path: Path) -> None:
    files = {f"f{i}": (bytes([i]) * (i * 700), True, hashlib.sha256(bytes([i]) * (i * 700)).digest())
             for i in range(200)}  # more than one batch of steps
    assert land(tmp_path, files) == [(name, LANDED) for name in files]
    for name, (data, _, _) in files.items():
        assert (tmp_path / name).read_bytes() == data
        assert (tmp_path / name).stat().st_mtime_ns == 10**18
    assert not list(tmp_path.glob("*.part"))


def test_a_corrupt_file_and_one_the_host_saw_change_never_land(tmp_path: Path) -> None:
    good = b"good bytes"
    files = {
        "corrupt": (b"what arrived", True, hashlib.sha256(b"what the host read").digest()),
        "changed": (good, False, hashlib.sha256(good).digest()),
        "fine": (good, True, hashlib.sha256(good).digest()),
    }
    assert land(tmp_path, files) == [("corrupt", CORRUPT), ("changed", CHANGED), ("fine", LANDED)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fine"]


def test_closing_midway_removes_the_part_files(tmp_path: Path) -> None:
    async def go() -> None:
        lander = Lander()
        landing = lander.begin(tmp_path / "half.part", tmp_path / "half", 0)
        await lander.write(landing, b"x" * (2 << 20))  # more than a batch: handed over
        while not (tmp_path / "half.part").exists():
            await asyncio.sleep(0.001)
        await lander.close()  # as a cancelled fetch does: the file never finished
    asyncio.run(go())
    assert list(tmp_path.iterdir()) == []
