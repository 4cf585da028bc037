"""Before a fetch's first byte: what is checked and made on this machine (fetch.py's
_check_local, _prepare_local and _part_names), on real directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rtrain_tui.core.transfers import fetch
from rtrain_tui.core.transfers.listing import Listing


def listing_of(n: int) -> Listing:
    """A run dir's `out` with n files in `out/d`, and `out/d/f0.part` a directory."""
    files = [(f"out/d/f{i}".encode(), 10, 10**18) for i in range(n)]
    return Listing(files=files, dirs=[b"out/d", b"out/d/f0.part"])


def prepare(out: Path, dest: Path, n: int) -> tuple[list[int], dict[int, Path]]:
    listing = listing_of(n)
    targets = [dest / "d" / f"f{i}" for i in range(n)]
    fetch._check_local(out, dest, targets, single=False)
    wanted, new_dirs = fetch._prepare_local(out, dest, listing, targets, False, "out")
    return wanted, fetch._part_names(targets, wanted, new_dirs)


def test_a_fetch_into_a_new_directory_looks_at_no_file_in_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, n = tmp_path / "here", 300
    dest = out / "out"
    looked: list[str] = []
    real_stat, real_lstat = os.stat, os.lstat

    def stat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        looked.append(os.fsdecode(path))
        return real_stat(path, *args, **kwargs)

    def lstat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        looked.append(os.fsdecode(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "lstat", lstat)
    wanted, parts = prepare(out, dest, n)
    monkeypatch.undo()
    assert wanted == list(range(n))
    # The directory the host has at `f0.part` is made, so f0 takes a hidden name.
    assert parts[0].parent == dest / "d" and parts[0].name.startswith(".rtrain-")
    assert parts == {0: parts[0], **{i: dest / "d" / f"f{i}.part" for i in range(1, n)}}
    in_d = [p for p in looked if Path(p).parent == dest / "d"]
    assert in_d == [], f"{len(in_d)} looks at files in a directory this fetch made"


def test_a_fetch_into_a_directory_already_there_skips_what_is_unchanged_and_clears_a_stale_part(
        tmp_path: Path) -> None:
    out = tmp_path / "here"
    dest = out / "out"
    (dest / "d" / "f0.part").mkdir(parents=True)
    same = dest / "d" / "f1"
    same.write_bytes(b"0123456789")
    os.utime(same, ns=(10**18, 10**18))
    (dest / "d" / "f2.part").write_bytes(b"a killed fetch's")
    wanted, parts = prepare(out, dest, 3)
    assert wanted == [0, 2]
    assert parts[0].name.startswith(".rtrain-") and parts[2] == dest / "d" / "f2.part"
    assert not parts[2].exists()  # removed, so it is created afresh, exclusively
