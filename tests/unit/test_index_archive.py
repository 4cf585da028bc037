"""A year of runs in the index: ended runs in monthly archives, a parsed form kept on disk,
older single-file indexes migrated whole, a broken archive left alone (issue 17)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import tomli_w

from rtrain_tui.core.runs import index as index_module
from rtrain_tui.core.runs import index_store
from rtrain_tui.core.runs.index import RunIndex, RunRecord, utc_now

# Runs 520 minutes apart: the months (so the archive files) that runs 52 minutes apart
# fill, with a tenth of the runs, the i-th at the time of the 10i-th. Tests that ask which
# files are read, written or parsed take these: each run costs the index a validation
# and a TOML table on every read and write (6,000 runs: over a second of CPU a test), and
# they need the months. ~85 runs a month keep each archive well past the size from which
# its parsed form is kept (index_store._PERSIST_BYTES, 8 KiB: ~20 runs), as before. Scale is
# measured where it is the point: tests/test_index_two_writers.py (10,000 runs) and the
# benchmark in docs/performance.md (a year of runs).
SPARSE = timedelta(minutes=52 * 10)


def _runs(n: int, first: datetime = datetime(2026, 1, 1, tzinfo=UTC), live: int = 0,
          every: timedelta = timedelta(minutes=52)) -> list[RunRecord]:
    """`n` runs one every 52 minutes (or `every`) from `first`; the last `live` of them running."""
    out = []
    for i in range(n):
        began = (first + every * i).isoformat(timespec="microseconds")
        out.append(RunRecord(host=f"h{i % 20:02d}", run_id=f"run-{i:05d}", workdir="~/w",
                             state="running" if i >= n - live else "completed",
                             started_at=began, updated_at=began, token=f"{i:032x}"))
    return out


def _all_tables(directory: Path) -> list[dict[str, object]]:
    return [t for p in sorted(directory.glob("*.toml"))
            for t in tomllib.loads(p.read_text()).get("runs", [])]


def test_ended_runs_move_to_their_months_archive_and_a_start_writes_the_live_file_alone(
        tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    index.add_new(_runs(300, live=5))
    names = sorted(p.name for p in tmp_path.glob("*.toml"))
    assert names == ["runs-2026-01.toml", "runs.toml"]
    assert {t["state"] for t in tomllib.loads((tmp_path / "runs.toml").read_text())["runs"]} == {"running"}
    archive = (tmp_path / "runs-2026-01.toml").read_bytes()
    new = RunRecord(host="h01", run_id="fresh", workdir="~/w", state="starting",
                    started_at=utc_now(), updated_at=utc_now())
    RunIndex(tmp_path / "runs.toml").add(new)
    assert (tmp_path / "runs-2026-01.toml").read_bytes() == archive  # untouched
    assert len(tomllib.loads((tmp_path / "runs.toml").read_text())["runs"]) == 6
    # A live run that ends moves, and the index still holds each run once.
    key = _runs(300, live=5)[-1].key
    index.set_states({key: ("completed", False, utc_now())})
    assert key not in {RunRecord(**t).key for t in tomllib.loads((tmp_path / "runs.toml").read_text())["runs"]}
    keys = [r.key for r in RunIndex(tmp_path / "runs.toml").load()]
    assert len(keys) == len(set(keys)) == 301


def test_an_old_single_file_index_is_migrated_by_its_first_write_every_table_kept(
        tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    tables = [{**{k: v for k, v in r.__dict__.items()}, "note": "kept"} if i == 3 else dict(r.__dict__)
              for i, r in enumerate(_runs(120, first=datetime(2025, 11, 29, tzinfo=UTC), live=4))]
    odd = {"host": "h", "run_id": "odd", "workdir": "~/w", "state": "completed", "gpus": "two",
           "started_at": "2025-12-01T00:00:00+00:00"}  # skipped (gpus), kept verbatim
    tables.insert(7, odd)
    path.write_text(tomli_w.dumps({"version": 1, "runs": tables}))
    before = RunIndex(path).load_report()
    RunIndex(path).add(RunRecord(host="h", run_id="after", workdir="~/w", state="running"))
    after = RunIndex(path).load_report()
    assert {r.key: r for r in after.records if r.run_id != "after"} == {r.key: r for r in before.records}
    assert len(after.problems) == 1 and "odd" in after.problems[0]
    found = _all_tables(tmp_path)
    for table in tables:  # every table, byte for byte the same values, exactly once
        assert found.count(table) == 1, table
    live = tomllib.loads(path.read_text())
    assert live["version"] == 1 and odd in live["runs"]  # odd ones stay in the live file
    assert {p.name for p in tmp_path.glob("runs-*.toml")} == {"runs-2025-11.toml", "runs-2025-12.toml"}


def test_a_corrupt_archive_is_reported_and_left_alone_while_live_runs_work(tmp_path: Path) -> None:
    path = tmp_path / "runs.toml"
    index = RunIndex(path)
    index.add_new(_runs(100, first=datetime(2026, 3, 1, tzinfo=UTC), live=3))
    archive = tmp_path / "runs-2026-03.toml"
    assert archive.exists()
    archive.write_bytes(b"[[runs]\nnot toml")
    index = RunIndex(path)
    report = index.load_report()
    assert [r.state for r in report.records] == ["running"] * 3
    assert len(report.problems) == 1
    assert str(archive) in report.problems[0] and "left untouched" in report.problems[0]
    # Starts, state changes and ends still work; an end whose archive is broken stays live.
    index.add(RunRecord(host="h", run_id="new", workdir="~/w", state="running",
                        started_at="2026-03-09T00:00:00+00:00"))
    ended = report.records[0]
    index.set_states({ended.key: ("completed", False, utc_now())})
    live = {r.run_id: r.state for r in RunIndex(path).load()}
    assert live == {"new": "running", ended.run_id: "completed",
                    **{r.run_id: "running" for r in report.records[1:]}}
    assert archive.read_bytes() == b"[[runs]\nnot toml"


def test_a_new_process_reads_the_parsed_form_not_the_toml(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.toml"
    RunIndex(path).add_new(_runs(200, every=SPARSE))  # January to March 2026
    expected = RunIndex(path).load()

    def no_parse(_text: str) -> object:
        raise AssertionError("the TOML was parsed again")

    monkeypatch.setattr(index_store.tomllib, "loads", no_parse)
    assert RunIndex(path).load() == expected
    # A file changed behind the cache's back (same size, same second) is parsed again.
    monkeypatch.undo()
    archive = tmp_path / "runs-2026-01.toml"
    archive.write_bytes(archive.read_bytes().replace(b'run_id = "run-00000"', b'run_id = "run-0000X"'))
    assert RunIndex(path).load()[0].run_id == "run-0000X"


def test_a_start_leaves_the_live_files_parsed_form_for_the_next_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`start` is a new process that reads the live file: it should not parse its TOML."""
    path = tmp_path / "runs.toml"
    RunIndex(path).add_new(_runs(60, live=60))
    RunIndex(path).add(RunRecord(host="h", run_id="new", workdir="~/w", state="starting"))
    expected = RunIndex(path).load_live()

    def no_parse(_text: str) -> object:
        raise AssertionError("the TOML was parsed again")

    monkeypatch.setattr(index_store.tomllib, "loads", no_parse)
    index = RunIndex(path)
    index.check()
    assert index.load_live() == expected and expected[-1].run_id == "new"


def test_a_run_in_two_files_is_read_once_the_newer_copy(tmp_path: Path) -> None:
    """What a write cut off between its two renames leaves (the archive is written first)."""
    path = tmp_path / "runs.toml"
    run = _runs(1, first=datetime(2026, 5, 2, tzinfo=UTC))[0]
    path.write_text(tomli_w.dumps({"runs": [dict(replace(run, state="running").__dict__)]}))
    (tmp_path / "runs-2026-05.toml").write_text(
        tomli_w.dumps({"runs": [dict(replace(run, ended_at="2026-05-03T00:00:00+00:00").__dict__)]}))
    index = RunIndex(path)
    assert [(r.state, r.ended_at) for r in index.load()] == [("completed", "2026-05-03T00:00:00+00:00")]
    index.add(RunRecord(host="h", run_id="other", workdir="~/w", state="completed",
                        started_at="2026-06-01T00:00:00+00:00"))
    assert [t["run_id"] for t in _all_tables(tmp_path)].count(run.run_id) == 1


def _cli(tmp_path: Path, *words: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "rtrain_tui", "--index", str(tmp_path / "runs.toml"),
                           *words], capture_output=True, text=True, env=env, timeout=60)


def test_prune_removes_only_the_runs_it_listed_and_a_dry_run_removes_none(tmp_path: Path) -> None:
    now = datetime.now(UTC)

    def run(run_id: str, state: str, ended_days_ago: float) -> RunRecord:
        ended = (now - timedelta(days=ended_days_ago)).isoformat()
        return RunRecord(host="h", run_id=run_id, workdir="~/w", state=state,
                         started_at=ended, updated_at=ended, ended_at="" if state == "running" else ended)

    runs = [run("old-done", "completed", 200), run("old-failed", "failed (exit 1)", 120),
            run("old-stopped", "stopped", 100), run("new-done", "completed", 10),
            run("old-live", "running", 300), run("old-lost", "lost", 150)]
    index = RunIndex(tmp_path / "runs.toml")
    index.add_new(runs)
    before = {r.key: r for r in index.load()}

    dry = _cli(tmp_path, "runs", "--prune", "--older-than", "90d", "--state", "completed,failed",
               "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed = [line.split()[1] for line in dry.stdout.splitlines()[2:-1]]
    assert listed == ["old-done", "old-failed"] and "nothing was removed" in dry.stdout
    assert {r.key: r for r in RunIndex(tmp_path / "runs.toml").load()} == before

    done = _cli(tmp_path, "runs", "--prune", "--older-than", "90d", "--state", "completed,failed")
    assert done.returncode == 0, done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines()[2:-1]] == listed
    assert done.stdout.splitlines()[-1].startswith("removed 2 runs from ")
    left = {r.run_id for r in RunIndex(tmp_path / "runs.toml").load()}
    assert left == {"old-stopped", "new-done", "old-live", "old-lost"}

    # Without --state: every ended state, never a live run, whatever its age.
    rest = _cli(tmp_path, "runs", "--prune", "--older-than", "90d")
    assert sorted(line.split()[1] for line in rest.stdout.splitlines()[2:-1]) == ["old-lost", "old-stopped"]
    assert {r.run_id for r in RunIndex(tmp_path / "runs.toml").load()} == {"new-done", "old-live"}
    refused = _cli(tmp_path, "runs", "--prune", "--older-than", "90d", "--state", "running")
    assert refused.returncode != 0 and "only runs that ended" in refused.stderr


def test_prune_lists_times_to_the_second_as_runs_does(tmp_path: Path) -> None:
    """The index keeps microseconds; `runs` shows 2026-12-06T00:41:58+00:00 but the prune
    listing showed 2026-12-06T00:47:39.319062+00:00 for the same kind of time."""
    ended = datetime(2026, 1, 2, 3, 4, 5, 319062, tzinfo=UTC).isoformat()
    index = RunIndex(tmp_path / "runs.toml")
    index.add_new([RunRecord(host="h", run_id="old", workdir="~/w", state="completed",
                             started_at=ended, updated_at=ended, ended_at=ended)])
    dry = _cli(tmp_path, "runs", "--prune", "--older-than", "1d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[2].split() == ["h", "old", "completed", "2026-01-02T03:04:05+00:00"]
    listed = _cli(tmp_path, "runs")
    assert listed.stdout.splitlines()[1].split()[-1] == "2026-01-02T03:04:05+00:00", listed.stdout


def test_prune_keeps_a_run_that_changed_after_it_was_listed(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    old = RunRecord(host="h", run_id="r", workdir="~/w", state="completed",
                    started_at="2020-01-01T00:00:00+00:00", ended_at="2020-01-02T00:00:00+00:00")
    index.add(old)
    listed = index_module.prunable(index.load(), timedelta(days=90))
    assert listed == [old]
    RunIndex(tmp_path / "runs.toml").add(replace(old, state="stopped"))  # another process
    assert index.remove_records(listed) == []
    assert [r.state for r in index.load()] == ["stopped"]


@pytest.mark.parametrize("text", ["90", "d", "-3d", "3m", "1.5d", "90d\n5"])
def test_an_age_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(index_module.ValidationError):
        index_module.parse_age(text)


def test_the_backend_of_a_live_run_is_found_without_reading_the_archives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`status HOST RUN` of a live run, in a new process: the live file tells its backend."""
    import asyncio

    from rtrain_tui.core import ConnectionPool, Engine

    index = RunIndex(tmp_path / "runs.toml")
    index.add_new(_runs(500, live=3))
    live = index.load_live()[-1]
    index = RunIndex(tmp_path / "runs.toml")
    monkeypatch.setattr(index, "load", lambda: pytest.fail("the archives were read"))
    engine = Engine(ConnectionPool(tmp_path / "ssh_config"), index)
    assert asyncio.run(engine.run_backends(live.host, [(live.workdir, live.run_id)])) == ["direct"]


def test_an_archive_emptied_by_a_prune_goes_with_its_parsed_form(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "runs.toml")
    index.add_new(_runs(200, every=SPARSE))  # January to March 2026
    parsed = tmp_path / ".runs-parsed" / "runs-2026-01.toml.json"
    assert parsed.exists()
    january = [r for r in index.load() if r.started_at.startswith("2026-01")]
    assert len(index.remove_records(january)) == len(january)
    assert not (tmp_path / "runs-2026-01.toml").exists() and not parsed.exists()
    assert len(RunIndex(tmp_path / "runs.toml").load()) == 200 - len(january)


def test_a_live_runs_unchanged_state_is_told_from_the_live_file_without_reading_the_archives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`status HOST RUN` of a live run, in a new process: remembering the state it read
    needs the live file and the run's own month's archive, not a year of archives."""
    index = RunIndex(tmp_path / "runs.toml")
    index.add_new(_runs(300, live=3, every=SPARSE))  # January to April 2026
    live = index.load_live()[-1]
    index = RunIndex(tmp_path / "runs.toml")
    read: list[str] = []
    real_read = index._read
    monkeypatch.setattr(index, "_read", lambda path: read.append(path.name) or real_read(path))
    index.set_states({live.key: ("running", False, utc_now())})
    assert read == ["runs.toml", f"runs-{live.started_at[:7]}.toml"]
    # A state that did change is still written, wherever the run is.
    index.set_states({live.key: ("completed", False, utc_now())})
    assert [r.state for r in RunIndex(tmp_path / "runs.toml").load() if r.key == live.key] == ["completed"]


def test_a_live_copy_an_archive_shadows_takes_the_whole_view(tmp_path: Path) -> None:
    """A write cut off between its renames left an ended copy in the archive and the live
    one in runs.toml: the state is applied to the copy that is read (the archive's)."""
    path = tmp_path / "runs.toml"
    run = _runs(1, first=datetime(2026, 5, 2, tzinfo=UTC))[0]
    path.write_text(tomli_w.dumps({"runs": [dict(replace(run, state="running").__dict__)]}))
    (tmp_path / "runs-2026-05.toml").write_text(tomli_w.dumps({"runs": [dict(replace(
        run, updated_at="2026-05-03T00:00:00+00:00").__dict__)]}))
    index = RunIndex(path)
    assert [r.state for r in index.load()] == ["completed"]
    index.set_states({run.key: ("running", False, "2026-05-04T00:00:00+00:00")})
    assert [r.state for r in RunIndex(path).load()] == ["running"]


def _reads(index: RunIndex, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files `index` reads from now on, by name, in order."""
    read: list[str] = []
    real_read = index._read
    monkeypatch.setattr(index, "_read", lambda path: read.append(path.name) or real_read(path))
    return read


def test_a_run_that_ended_is_found_in_the_newer_archives_without_reading_older_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`status HOST RUN` (its backend, its workdir, the state it read) of a run that
    ended last month reads the live file and the archives back to that month."""
    index = RunIndex(tmp_path / "runs.toml")
    runs = _runs(600, live=3, every=SPARSE)  # January to July 2026, one archive a month
    index.add_new(runs)
    archives = [p.name for p in index.archives()]
    ended = next(r for r in reversed(runs) if r.started_at[:7] == archives[-2][5:12])
    newer = ["runs.toml", archives[-1], archives[-2]]
    for ask in (lambda i: i.get(ended.host, ended.run_id),
                lambda i: i.set_states({ended.key: ("completed", False, utc_now())}),
                lambda i: i.find([ended.key])):
        index = RunIndex(tmp_path / "runs.toml")
        read = _reads(index, monkeypatch)
        ask(index)
        assert read == newer, read


def test_find_reads_each_run_as_load_does(tmp_path: Path) -> None:
    """Live, archived, unknown and a run in two files (a write cut off between its
    renames: the live copy is older than the archive's)."""
    path = tmp_path / "runs.toml"
    index = RunIndex(path)
    runs = _runs(300, live=5, every=SPARSE)  # January to April 2026
    index.add_new(runs)
    twice = runs[-1]
    raw = tomllib.loads(path.read_text())
    month = twice.started_at[:7]
    archive = tomllib.loads((tmp_path / f"runs-{month}.toml").read_text())
    archive["runs"].append(dict(replace(twice, state="completed", updated_at=utc_now()).__dict__))
    (tmp_path / f"runs-{month}.toml").write_text(tomli_w.dumps(archive))
    assert [t["run_id"] for t in raw["runs"]].count(twice.run_id) == 1
    everything = {r.key: r for r in RunIndex(path).load()}
    unknown = ("h01", "~/w", "no-such-run")
    for keys in ([runs[0].key], [runs[150].key, runs[-2].key], [twice.key], [unknown],
                 [r.key for r in runs[::10]] + [unknown]):
        got = RunIndex(path).find(keys)
        assert sorted(got, key=lambda r: r.key) == sorted(
            (everything[k] for k in keys if k in everything), key=lambda r: r.key)
    assert RunIndex(path).find([twice.key])[0].state == "completed"


def test_the_backend_of_a_run_that_ended_recently_is_found_in_the_newer_archives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from rtrain_tui.core import ConnectionPool, Engine

    index = RunIndex(tmp_path / "runs.toml")
    runs = _runs(600, live=3, every=SPARSE)  # January to July 2026
    index.add_new([replace(r, backend="slurm") if i == 500 else r for i, r in enumerate(runs)])
    index = RunIndex(tmp_path / "runs.toml")
    read = _reads(index, monkeypatch)
    engine = Engine(ConnectionPool(tmp_path / "ssh_config"), index)
    ended = runs[500]
    assert asyncio.run(engine.run_backends(ended.host, [(ended.workdir, ended.run_id)])) == ["slurm"]
    assert f"runs-{ended.started_at[:7]}.toml" in read and "runs-2026-01.toml" not in read


def test_a_live_run_that_stays_live_rewrites_the_live_file_without_going_through_the_archives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh that finds a live run stale (its host did not answer), or back, changes
    the live file alone: the year of archived runs is not gone through (`update` walks
    every run of the index). A run that ends still takes that path, to its archive."""
    path = tmp_path / "runs.toml"
    index = RunIndex(path)
    index.add_new(_runs(200, live=3, every=SPARSE))  # January to March 2026
    live = [r for r in index.load() if r.state == "running"]
    archives = {p: p.read_bytes() for p in tmp_path.glob("runs-*.toml")}
    walked: list[int] = []
    real_update = index.update

    def update(change):  # type: ignore[no-untyped-def]
        walked.append(1)
        return real_update(change)

    monkeypatch.setattr(index, "update", update)
    index.set_states({live[0].key: ("unreachable", True, utc_now())})
    index.set_states({live[1].key: ("queued", False, utc_now())})
    assert walked == []
    by_key = {r.key: r for r in RunIndex(path).load()}
    assert (by_key[live[0].key].state, by_key[live[0].key].stale) == ("running", True)
    assert by_key[live[1].key].state == "queued" and len(by_key) == 200
    assert {p: p.read_bytes() for p in tmp_path.glob("runs-*.toml")} == archives
    index.set_states({live[0].key: ("running", False, utc_now())})  # answered again
    assert walked == [] and not RunIndex(path).find([live[0].key])[0].stale
    index.set_states({live[2].key: ("completed", False, utc_now())})
    assert walked == [1]
    ended = {r.key: r for r in RunIndex(path).load()}[live[2].key]
    assert ended.state == "completed"
    assert live[2].key not in {RunRecord(**t).key for t in tomllib.loads(path.read_text())["runs"]}
