"""The run index: atomic, merged under a lock, and never overwritten when corrupt."""

import multiprocessing
from pathlib import Path

import pytest

from rtrain_tui.core.errors import IndexCorruptError
from rtrain_tui.core.index import RunIndex, RunRecord


def _add_many(path: str, prefix: str) -> None:
    index = RunIndex(Path(path))
    for i in range(25):
        index.add(RunRecord(host="h", run_id=f"{prefix}-{i}", workdir="~/w"))


def test_two_processes_adding_runs_lose_none(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    procs = [multiprocessing.Process(target=_add_many, args=(str(path), p)) for p in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    ids = {r.run_id for r in RunIndex(path).load()}
    assert ids == {f"{p}-{i}" for p in "ab" for i in range(25)}


def test_corrupt_index_is_reported_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    path.write_text("[[runs]\nthis is not toml")
    with pytest.raises(IndexCorruptError, match=str(path)):
        RunIndex(path).add(RunRecord(host="h", run_id="r", workdir="~/w"))
    assert path.read_text() == "[[runs]\nthis is not toml"


def test_unreachable_refresh_keeps_last_state_and_marks_stale(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    rec = RunRecord(host="h", run_id="r", workdir="~/w", state="running")
    index.add(rec)
    index.set_states({rec.key: ("unreachable", True, "t1")})
    (got,) = index.load()
    assert (got.state, got.stale) == ("running", True)
    index.set_states({rec.key: ("completed", False, "t2")})
    (got,) = index.load()
    assert (got.state, got.stale, got.updated_at) == ("completed", False, "t2")


def test_missing_index_is_empty_and_no_temp_files_are_left(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "sub" / "runs.toml")
    assert index.load() == []
    index.add(RunRecord(host="h", run_id="r", workdir="~/w"))
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["runs.toml", "runs.toml.lock"]
