"""The run index: atomic, merged under a lock, and never overwritten when corrupt."""

import multiprocessing
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rtrain_tui.core.errors import IndexBusyError, IndexCorruptError, RemoteError, ValidationError
from rtrain_tui.core.runs.index import RunIndex, RunRecord, utc_now


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


# -- a file that cannot be used as a whole --------------------------------------------
GOOD = '[[runs]]\nhost = "h"\nrun_id = "r"\nworkdir = "~/w"\nstate = "running"\n'
UNUSABLE = {
    "invalid TOML": b"[[runs]\nthis is not toml",
    "truncated": GOOD.encode()[:30],  # cut inside a string
    "not UTF-8": GOOD.encode().replace(b'"r"', b'"r\xff\xfe"'),
    "runs is a number": b"runs = 1\n",
    "runs is a table": b'[runs]\nhost = "h"\n',
    "runs holds numbers": b"runs = [1, 2]\n",
    "runs mixes tables and text": b'runs = [{host = "h", run_id = "r", workdir = "w"}, "x"]\n',
}


def _expect_corrupt(index: RunIndex, action: Callable[[], object]) -> str:
    with pytest.raises(IndexCorruptError) as info:
        action()
    message = str(info.value)
    assert "\n" not in message and str(index.path) in message and "left untouched" in message
    return message


@pytest.mark.parametrize("content", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_an_unusable_file_is_refused_by_every_call_and_left_byte_for_byte(
        tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "runs.toml"
    path.write_bytes(content)
    index = RunIndex(path)
    rec = RunRecord(host="h", run_id="new", workdir="~/w")
    for action in (index.load, index.problems, index.check, lambda: index.add(rec),
                   lambda: index.remove(rec.key),
                   lambda: index.set_states({rec.key: ("running", False, "t")})):
        _expect_corrupt(index, action)
    assert path.read_bytes() == content
    assert not list(tmp_path.glob(".runs.*"))


def test_an_index_that_is_a_directory_is_reported_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    path.mkdir()
    index = RunIndex(path)
    assert "is a directory" in _expect_corrupt(index, index.load)
    _expect_corrupt(index, index.check)
    _expect_corrupt(index, lambda: index.add(RunRecord(host="h", run_id="r", workdir="~/w")))
    assert path.is_dir() and not list(path.iterdir())


def test_an_unreadable_index_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.toml"
    path.write_text(GOOD)
    real = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self == path:  # what a chmod 000 file gives a non-root user
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    index = RunIndex(path)
    assert "Permission denied" in _expect_corrupt(index, index.load)
    _expect_corrupt(index, index.check)
    monkeypatch.undo()
    assert path.read_text() == GOOD


# -- records with wrong types ------------------------------------------------------------
MIXED = """\
[[runs]]
host = "h"
run_id = "ok-1"
workdir = "~/w"
state = "running"

[[runs]]
host = 1
run_id = "int-host"
workdir = "~/w"

[[runs]]
host = "h"
run_id = "int-state"
workdir = "~/w"
state = 7

[[runs]]
host = "h"
run_id = "dt-start"
workdir = "~/w"
started_at = 2026-11-29T13:12:00Z

[[runs]]
host = "h"
run_id = "list-workdir"
workdir = ["x"]

[[runs]]
run_id = "no-host"
workdir = "~/w"

[[runs]]
host = "h"
workdir = "~/w"

[[runs]]
host = "h"
run_id = "bad id; touch P"
workdir = "~/w"

[[runs]]
host = "h"
run_id = "ok-2"
workdir = "~/w"
state = "starting"
"""


def test_records_with_wrong_types_are_reported_and_skipped_one_line_each(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    path.write_text(MIXED)
    index = RunIndex(path)
    report = index.load_report()
    assert [r.run_id for r in report.records] == ["ok-1", "ok-2"]
    assert report.records[1].state == "starting"
    assert index.problems() == report.problems
    problems = report.problems
    assert len(problems) == 7 and all("\n" not in p for p in problems)
    expected = [("#2", "host should be text"), ("#3", "state should be text"),
                ("#4", "started_at should be text, not a TOML date-time"),
                ("#5", "workdir should be text, not an array"), ("#6", "host is missing"),
                ("#7", "run_id is missing"), ("#8", "run_id 'bad id; touch P' is not usable")]
    for line, (position, field) in zip(problems, expected):
        assert f"run {position}" in line and field in line and "kept in the file" in line


def test_a_rewrite_keeps_skipped_records_and_unknown_fields_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    path.write_text('version = 2\n' + MIXED.replace('state = "running"\n',
                                                   'state = "running"\nnote = "from a newer version"\n'))
    before = tomllib.loads(path.read_text())
    index = RunIndex(path)
    index.add(RunRecord(host="h", run_id="added", workdir="~/w"))
    index.set_states({("h", "~/w", "ok-1"): ("completed", False, "2026-11-29T14:00:00+00:00")})
    assert index.remove(("h", "~/w", "ok-2"))
    after = tomllib.loads(path.read_text())
    assert after["version"] == 2
    assert after["runs"][1:8] == before["runs"][1:8]  # the skipped ones, in place, untouched
    assert after["runs"][0]["state"] == "completed"
    assert after["runs"][0]["note"] == "from a newer version"
    assert [r.run_id for r in index.load()] == ["ok-1", "added"]
    assert len(index.problems()) == 7


def test_a_job_id_older_versions_wrote_as_slurm_job_id_is_read_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    path.write_text('[[runs]]\nhost = "login"\nrun_id = "old"\nworkdir = "~/w"\nstate = "queued"\n'
                    'backend = "slurm"\nslurm_job_id = "4242"\n')
    index = RunIndex(path)
    assert index.get("login", "old").job_id == "4242"
    index.set_states({("login", "~/w", "old"): ("running", False, "2026-11-29T14:00:00+00:00")})
    table = tomllib.loads(path.read_text())["runs"][0]
    # Rewritten under the new name, and the old one kept for the versions that read it.
    assert (table["job_id"], table["slurm_job_id"], table["state"]) == ("4242", "4242", "running")
    assert index.get("login", "old").job_id == "4242"


def test_an_invalid_record_is_refused_before_it_reaches_the_file(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    with pytest.raises(ValidationError, match="run_id"):
        index.add(RunRecord(host="h", run_id="a\nb", workdir="~/w"))
    assert not index.path.exists()


# -- check and remove ----------------------------------------------------------------------
def test_check_passes_for_a_new_index_and_creates_nothing(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "not" / "yet" / "runs.toml")
    index.check()
    assert not (tmp_path / "not").exists()


def test_check_refuses_an_index_whose_lock_cannot_be_opened(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    index.lock_path.mkdir()
    _expect_corrupt(index, index.check)
    _expect_corrupt(index, lambda: index.add(RunRecord(host="h", run_id="r", workdir="~/w")))


def test_remove_forgets_one_run_and_says_whether_it_was_there(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    a, b = (RunRecord(host="h", run_id=i, workdir="~/w") for i in "ab")
    index.add(a)
    index.add(b)
    assert index.remove(a.key) is True
    assert index.load() == [b]
    assert index.remove(a.key) is False


# -- states: a probe never overwrites a later verdict -----------------------------------
def test_a_probe_started_before_a_stop_never_overwrites_its_verdict(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    rec = RunRecord(host="h", run_id="r", workdir="~/w", state="running")
    index.add(rec)
    probe_started = utc_now()
    index.set_states({rec.key: ("stopped", False, utc_now())})  # the stop's verdict
    index.set_states({rec.key: ("running", False, utc_now())}, observed_at=probe_started)
    index.set_states({rec.key: ("unreachable", True, utc_now())}, observed_at=probe_started)
    (got,) = index.load()
    assert (got.state, got.stale) == ("stopped", False)
    index.set_states({rec.key: ("completed", False, utc_now())}, observed_at=utc_now())
    assert index.load()[0].state == "completed"


@pytest.mark.parametrize(("recorded", "observed", "overwritten"), [
    # second precision (older indexes) against microseconds: parsed, not compared as text
    ("2026-11-29T10:00:05+00:00", "2026-11-29T10:00:05.000001+00:00", True),
    ("2026-11-29T10:00:05.500000+00:00", "2026-11-29T10:00:05+00:00", False),
    # the same instant in another offset, and a naive time (read as UTC)
    ("2026-11-29T12:00:00+02:00", "2026-11-29T11:00:00+00:00", True),
    ("2026-11-29T10:00:06", "2026-11-29T10:00:05.999999+00:00", False),
    ("not a time", "2026-11-29T10:00:05+00:00", True),
])
def test_update_times_compare_as_times(tmp_path: Path, recorded: str, observed: str,
                                       overwritten: bool) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    rec = RunRecord(host="h", run_id="r", workdir="~/w", state="stopped", updated_at=recorded)
    index.add(rec)
    index.set_states({rec.key: ("running", False, "2026-11-29T10:00:07+00:00")}, observed_at=observed)
    assert (index.load()[0].state == "running") is overwritten


def test_utc_now_keeps_microseconds() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", utc_now())


# -- no write for nothing -------------------------------------------------------------------
def test_a_merge_that_changes_nothing_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.toml"
    path.write_text('[[runs]]\nhost = "h"\nrun_id = "r"\nworkdir = "~/w"\nstate = "running"\n')
    index = RunIndex(path)
    rec = index.load()[0]
    before = path.stat()
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    index.set_states({rec.key: ("running", False, utc_now())})  # same state: no news
    index.add(rec)  # the same record again
    assert index.remove(("h", "~/w", "other")) is False
    index.set_states({})
    after = path.stat()
    assert fsyncs == [] and (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert path.read_text().count("\n") == 5  # not rewritten with defaults filled in
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.toml"]  # not even a lock file
    RunIndex(tmp_path / "none.toml").remove(rec.key)
    assert not (tmp_path / "none.toml").exists()


def test_an_unchanged_state_keeps_when_it_last_changed(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    rec = RunRecord(host="h", run_id="r", workdir="~/w", state="running", updated_at="t0")
    index.add(rec)
    index.set_states({rec.key: ("running", False, "t1")})
    assert index.load()[0].updated_at == "t0"
    index.set_states({rec.key: ("completed", False, "t2")})
    assert index.load()[0].updated_at == "t2"


# -- the lock ------------------------------------------------------------------------------
@contextmanager
def lock_held_elsewhere(lock_path: Path) -> Iterator[None]:
    """Another process holds the index's lock until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         "f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('locked', flush=True); time.sleep(120)", str(lock_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.serial
def test_a_lock_held_elsewhere_is_an_error_after_a_bounded_wait(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml", lock_timeout=0.5)
    rec = RunRecord(host="h", run_id="r", workdir="~/w", state="running")
    index.add(rec)
    with lock_held_elsewhere(index.lock_path):
        began = time.monotonic()
        with pytest.raises(IndexBusyError, match="locked by another process") as info:
            index.add(RunRecord(host="h", run_id="s", workdir="~/w"))
        assert 0.5 <= time.monotonic() - began < 3
        assert isinstance(info.value, RemoteError) and "\n" not in str(info.value)
        assert index.load() == [rec]  # reads never wait for the lock
        index.set_states({rec.key: ("running", False, utc_now())})  # a no-op needs no lock
    index.add(RunRecord(host="h", run_id="s", workdir="~/w"))
    assert len(index.load()) == 2


def test_the_default_lock_wait_is_a_few_seconds() -> None:
    assert 1 <= RunIndex(Path("x")).lock_timeout <= 10


def _add_five(path: str, prefix: str) -> None:
    index = RunIndex(Path(path))  # the default lock wait: 20 writers must not time out either
    for i in range(5):
        index.add(RunRecord(host="h", run_id=f"{prefix}-{i}", workdir="~/w"))


def test_twenty_concurrent_writers_lose_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    procs = [multiprocessing.Process(target=_add_five, args=(str(path), f"p{n}")) for n in range(20)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 20
    ids = {r.run_id for r in RunIndex(path).load()}
    assert ids == {f"p{n}-{i}" for n in range(20) for i in range(5)}


def test_forget_drops_only_the_start_that_still_has_its_token_and_is_starting(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("h", "gone", "~/w", state="starting", token="a" * 32))
    index.add(RunRecord("h", "retaken", "~/w", state="starting", token="b" * 32))  # a new start's
    index.add(RunRecord("h", "launched", "~/w", state="running", token="c" * 32))
    forget = {("h", "~/w", "gone"): "a" * 32, ("h", "~/w", "retaken"): "d" * 32,
              ("h", "~/w", "launched"): "c" * 32}
    index.set_states({}, forget=forget)
    assert [(r.run_id, r.state) for r in index.load()] == [("retaken", "starting"), ("launched", "running")]


def test_a_resumed_runs_attempt_is_kept_and_a_bad_one_reported(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    index = RunIndex(path)
    index.add(RunRecord("gpu", "r1", "~/w", state="running", attempt=2))
    assert [r.attempt for r in RunIndex(path).load()] == [2]
    path.write_text(path.read_text() + '[[runs]]\nhost = "gpu"\nrun_id = "r2"\nworkdir = "~/w"\n'
                    'attempt = 0\n')
    report = RunIndex(path).load_report()
    assert [r.run_id for r in report.records] == ["r1"]
    assert "attempt should be a whole number 1 or more, not a number (0)" in report.problems[0]


def test_a_multi_node_runs_nodes_are_kept_and_a_single_node_run_writes_none(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    index = RunIndex(path)
    index.add(RunRecord("slurm", "pair", "~/w", gpus=4, nodes=2))
    index.add(RunRecord("slurm", "one", "~/w", gpus=4))
    assert [(r.run_id, r.nodes) for r in RunIndex(path).load()] == [("pair", 2), ("one", 1)]
    assert path.read_text().count("nodes") == 1  # other runs' tables stay as they were
    path.write_text(path.read_text() + '[[runs]]\nhost = "gpu"\nrun_id = "r2"\nworkdir = "~/w"\n'
                    'nodes = 0\n')
    report = RunIndex(path).load_report()
    assert "nodes should be a whole number 1 or more, not a number (0)" in report.problems[0]


def test_when_an_attempt_began_running_is_kept_only_for_the_attempt_the_run_is_on(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("gpu", "r1", "~/w", state="running", attempt=2))
    key = ("gpu", "~/w", "r1")
    index.set_states({}, running={key: (1, "2026-12-01T10:00:00+00:00")})  # attempt 1's: old
    assert index.get("gpu", "r1").running_at == ""  # type: ignore[union-attr]
    index.set_states({}, running={key: (2, "2026-12-01T11:00:00+00:00")})
    assert RunIndex(index.path).get("gpu", "r1").running_at == "2026-12-01T11:00:00+00:00"  # type: ignore[union-attr]
    # It went on to attempt 3 (resumed elsewhere): attempt 2's launch is no longer its own.
    index.set_states({}, went_on={key: 3})
    assert index.get("gpu", "r1").running_at == ""  # type: ignore[union-attr]
