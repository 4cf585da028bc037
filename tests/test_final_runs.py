"""Final is final (issue 17): a refresh probes the runs that can still change, not the
ended ones whose end time is recorded; `--all` asks about every run. Against the real sshd.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, RunRecord, StartRequest, host_view
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.hostconfig import HostConfig
from tests.conftest import Cli, write_config
from tests.sshd import SshHosts
from tests.test_discover import STARTED, seed_run
from tests.unit.test_remote_sh import sh, wait_for

ENDED = "2023-11-14T22:14:02+00:00"


def probed_runs(scripts: list[str]) -> list[str]:
    """The run dirs the probes among `scripts` asked about (one `probe I RUNDIR` line each)."""
    return [m.group(1) for s in scripts for m in re.finditer(r"^probe \d+ (\S+)", s, re.M)]


def _recording(engine: Engine, host: str) -> list[str]:
    conn = engine.host(host)
    real, sent = conn.run, []

    async def run(script: str, *args: object, **kw: object) -> str:
        sent.append(script)
        return await real(script, *args, **kw)  # type: ignore[arg-type]

    conn.run = run  # type: ignore[method-assign]
    return sent


def test_a_refresh_does_not_probe_a_run_that_ended_with_its_end_recorded(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """Of four ended runs only the one whose end is recorded (and not stale) is left alone;
    it keeps its state and end time, in the index and in the host's view. `all_runs`
    probes it too."""
    work = Path(workdir)
    for run_id in ("settled", "no-end", "was-stale", "crashed"):
        seed_run(work, run_id, code=None if run_id == "crashed" else "0\n")
    index = RunIndex(tmp_path / "runs.toml")
    index.add_new([
        RunRecord("gpu", "settled", workdir, state="completed", ended_at=ENDED),
        RunRecord("gpu", "no-end", workdir, state="completed"),
        RunRecord("gpu", "was-stale", workdir, state="completed", ended_at=ENDED, stale=True),
        RunRecord("gpu", "crashed", workdir, state="running"),
    ])
    shutil.rmtree(work / "settled")  # were it asked about, it would read `unknown`

    async def go() -> tuple[list[str], dict[str, host_view.HostView], list[str]]:
        engine = Engine(ConnectionPool(hosts.ssh_config), index, HostConfig())
        try:
            sent = _recording(engine, "gpu")
            views = await host_view.refresh(engine, index.load(), words=False)
            first = probed_runs(sent)
            sent.clear()
            await engine.refresh(all_runs=True)
            return first, views, probed_runs(sent)
        finally:
            await engine.close()

    first, views, with_all = asyncio.run(go())
    assert sorted(Path(d).name for d in first) == ["crashed", "no-end", "was-stale"]
    key = ("gpu", workdir, "settled")
    assert views["gpu"].states[key] == "completed" and views["gpu"].reached
    assert sorted(Path(d).name for d in with_all) == ["crashed", "no-end", "settled", "was-stale"]
    by_id = {r.run_id: r for r in index.load()}
    assert (by_id["no-end"].ended_at, by_id["was-stale"].stale) == (ENDED, False)
    assert by_id["crashed"].state == "lost" and by_id["crashed"].ended_at
    assert by_id["settled"].state == "unknown"  # only --all saw its directory gone


def test_a_host_whose_runs_are_all_settled_still_reads_unreachable_when_down(
        hosts: SshHosts, tmp_path: Path) -> None:
    """The app's refresh still asks such a host for its GPUs: no answer is `unreachable`,
    though no run state says so; the runs keep their final states, not stale."""
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("refused", "old", "~/w", state="completed", ended_at=ENDED))

    async def go() -> tuple[host_view.HostView, host_view.HostView]:
        engine = Engine(ConnectionPool(hosts.ssh_config), index, HostConfig())
        try:
            asked = await host_view.refresh(engine, index.load(), words=False, sample_gpus=True)
            silent = await host_view.refresh(engine, index.load(), words=False)
            return asked["refused"], silent["refused"]
        finally:
            await engine.close()

    asked, silent = asyncio.run(go())
    assert not asked.reached
    assert asked.states == {}  # no final line to read from a host that did not answer
    assert silent.reached  # asked nothing: no verdict, as with a host with no runs
    (old,) = index.load()
    assert (old.state, old.stale, old.ended_at) == ("completed", False, ENDED)


def test_a_run_that_ends_between_two_refreshes_gets_its_end_time_and_its_final_line(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    go_on = tmp_path / "go_on"  # the run waits at step 2 until the first refresh saw it live
    config = write_config(tmp_path / "c.yaml", hf_style=True, steps=4, step_seconds=0.01,
                          hold_at=2, hold_file=go_on)
    index = RunIndex(tmp_path / "runs.toml")
    status = Path(workdir) / "ends" / "status"

    async def go() -> list[tuple[host_view.HostView, list[str]]]:
        engine = Engine(ConnectionPool(hosts.ssh_config), index, HostConfig())
        try:
            await engine.start(StartRequest("gpu", config, run_id="ends", workdir=workdir, gpus=0))
            sent = _recording(engine, "gpu")
            views = []
            for _ in range(3):
                sent.clear()
                view = (await host_view.refresh(engine, index.load()))["gpu"]
                views.append((view, probed_runs(sent)))
                go_on.touch()
                await asyncio.to_thread(wait_for, status.exists, 60)
            return views
        finally:
            await engine.close()

    (live, probed1), (ended, probed2), (after, probed3) = asyncio.run(go())
    key = ("gpu", workdir, "ends")
    assert live.states[key] == "running" and len(probed1) == 1
    assert ended.states[key] == "completed" and len(probed2) == 1
    (line,) = [x for x in ended.lines if x.key == key]
    assert line.settled and line.progress and "4/4" in line.progress
    (rec,) = index.load()
    assert rec.ended_at == datetime.fromtimestamp(int(status.stat().st_mtime), UTC).isoformat()
    assert probed3 == [] and after.states[key] == "completed"


def test_runs_refresh_all_rechecks_a_run_that_ended(cli: Cli, workdir: str) -> None:
    """A run whose directory was removed on the host reads as such only with --all."""
    seed_run(Path(workdir), "gone")
    RunIndex(cli.index).add(RunRecord("gpu", "gone", workdir, state="completed", ended_at=ENDED))
    shutil.rmtree(Path(workdir) / "gone")
    r = cli("runs", "--refresh", "--json")
    assert r.rc == 0, r.err
    assert [(x["state"], x["ended_at"]) for x in json.loads(r.out)] == [("completed", ENDED)]
    r = cli("status", "gpu", "gone", "--workdir", workdir)  # `status` always asks the host
    assert r.rc == 1 and r.err.startswith("rtrain-tui: no run gone on gpu"), r.err
    r = cli("runs", "--refresh", "--all", "--json")
    assert r.rc == 0, r.err
    assert [x["state"] for x in json.loads(r.out)] == ["unknown"]
    r = cli("runs", "--all")
    assert (r.rc, r.err) == (1, "rtrain-tui: --all goes with --refresh: rtrain-tui runs --refresh --all.\n")


def test_the_index_benchmark_measures_refresh_and_discover_at_scale() -> None:
    """`python -m tests.benchmarks.index --refresh` (small here): every row is measured,
    and the discover row found every run directory."""
    r = subprocess.run([sys.executable, "-m", "tests.benchmarks.index", "--refresh", "--runs", "300",
                        "--dirs", "40", "--repeat", "1"], cwd=Path(__file__).parent.parent,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    timed = re.findall(r"^\| (.+?) \| \d+\.\d\d s \(\d+\.\d\d s CPU\) \| .+ \|$", r.stdout, re.M)
    assert [t.split(" (")[0] for t in timed] == [
        "`runs --refresh`", "`runs --refresh`", "`runs --refresh --all`", "`runs --discover many`",
        "`runs --discover many`, again"], r.stdout
    assert "| … of which found | 40 of 40 | 40 |" in r.stdout, r.stdout


def test_the_listing_tells_which_ended_runs_went_on_after_their_recorded_end(tmp_path: Path) -> None:
    """Told a known run's recorded end, the listing prints it only when its end mark
    (`status`, else the log) was written at another time since, with its attempts: a
    resume moved `status` away, or a later attempt wrote it again. Host time against host
    time. Silent for the runs that did not change, and for those past the limit."""
    for age, run_id in enumerate(["same", "resumed", "again", "live", "old"]):
        run_dir = seed_run(tmp_path, run_id)
        os.utime(run_dir, (STARTED - age, STARTED - age))  # `ls -t`: newest first
    for run_id in ("resumed", "again"):  # as resume.sh leaves attempt 1's files
        (tmp_path / run_id / "attempts" / "1").mkdir(parents=True)
        os.rename(tmp_path / run_id / "status", tmp_path / run_id / "attempts" / "1" / "status")
    (tmp_path / "again" / "status").write_text("1\n")  # attempt 2 ended too, later
    os.utime(tmp_path / "again" / "status", (STARTED + 99, STARTED + 99))
    (tmp_path / "old" / "status").write_text("1\n")  # changed, but not among the newest 4
    end = STARTED + 42
    known = {"same", "resumed", "again", "live", "old"}
    ends = {"same": end, "resumed": end, "again": end, "old": end}
    out = sh(remote_sh.find_runs([str(tmp_path)], [known], limit=4, ended=[ends]))
    lines = out.splitlines()
    log_time = int((tmp_path / "resumed" / "train.log").stat().st_mtime)
    assert sorted(lines[1:]) == [f"end\t0\tagain\t{end}\t2\t{STARTED + 99}",
                                 f"end\t0\tresumed\t{end}\t2\t{log_time}"], out
    assert sorted((w.workdir, w.run_id, w.attempts) for w in probes.parse_went_on(out, 1)) == [
        (0, "again", 2), (0, "resumed", 2)]
    assert probes.parse_found_runs(out, 1)[1] == []  # known: never "found" again
    quiet = sh(remote_sh.find_runs([str(tmp_path)], [known], limit=4,
                                   ended=[{"same": end, "again": STARTED + 99}]))
    assert quiet == f"wd\t0\t{tmp_path}\n"


def test_a_run_resumed_within_the_second_it_ended_is_told_by_its_count_of_attempts(
        tmp_path: Path) -> None:
    """End times are whole seconds: a resume (from another laptop) in the second the run
    ended leaves its end mark (the log, once `status` moved away) at the same second. The
    count of attempts, told beside the recorded end, still says it went on."""
    run_dir = seed_run(tmp_path, "quick")
    (run_dir / "attempts" / "1").mkdir(parents=True)
    os.rename(run_dir / "status", run_dir / "attempts" / "1" / "status")
    end = STARTED + 42
    os.utime(run_dir / "train.log", (end, end))
    out = sh(remote_sh.find_runs([str(tmp_path)], [{"quick"}], limit=4, ended=[{"quick": (end, 1)}]))
    assert [(w.run_id, w.attempts) for w in probes.parse_went_on(out, 1)] == [("quick", 2)], out
    told = sh(remote_sh.find_runs([str(tmp_path)], [{"quick"}], limit=4, ended=[{"quick": (end, 2)}]))
    assert told == f"wd\t0\t{tmp_path}\n"


def _settled(index: RunIndex, run_id: str) -> RunRecord | None:
    rec = next(r for r in index.load() if r.run_id == run_id)
    return rec if rec.ended_at and probes.is_final(rec.state) else None


def test_a_run_resumed_from_another_laptop_is_read_again_by_the_one_that_saw_it_fail(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """Laptop A saw the run fail (settled: never probed again). Laptop B, with its own
    index, resumes it. A's refresh with the listing reads it running as attempt 2, then its
    new end; and, resumed and stopped again while A looked away (the same word, stopped),
    its third attempt's end. A settled run whose directory did not change stays unprobed."""
    # Fails at step 4 once (after checkpoint-2); the resumed attempt trains on.
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.02, save_steps=2,
                          crash_at=4, crash_once=True, crash="nccl_timeout")
    still = seed_run(Path(workdir), "still")  # ended long ago, its end recorded
    (tmp_path / "a").mkdir()
    index_a = RunIndex(tmp_path / "a" / "runs.toml")
    index_a.add(RunRecord("gpu", "still", workdir, state="completed",
                          ended_at=datetime.fromtimestamp(STARTED + 42, UTC).isoformat()))
    status = Path(workdir) / "went" / "status"
    key = ("gpu", workdir, "went")

    def end_of_status() -> str:
        return datetime.fromtimestamp(int(status.stat().st_mtime), UTC).isoformat()

    async def listed(engine: Engine, sent: list[str]) -> tuple[str, list[str]]:
        sent.clear()
        view = (await host_view.refresh(engine, index_a.load(), words=False, find=True))["gpu"]
        return view.states[key], sorted(Path(d).name for d in probed_runs(sent))

    async def go() -> None:
        a = Engine(ConnectionPool(hosts.ssh_config), index_a, HostConfig())
        b: Engine | None = None
        try:
            await a.start(StartRequest("gpu", config, run_id="went", workdir=workdir, gpus=0))
            deadline = asyncio.get_running_loop().time() + 60
            while not _settled(index_a, "went"):
                assert asyncio.get_running_loop().time() < deadline, index_a.load()
                await a.refresh()
                await asyncio.sleep(0.1)
            rec = _settled(index_a, "went")
            assert rec and rec.state == "failed (exit 134)" and rec.ended_at == end_of_status()
            sent = _recording(a, "gpu")
            assert await listed(a, sent) == ("failed (exit 134)", [])  # nothing changed yet

            (tmp_path / "b").mkdir()
            for path in index_a.path.parent.glob("runs*.toml"):
                shutil.copy(path, tmp_path / "b" / path.name)
            b = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "b" / "runs.toml"),
                       HostConfig())
            assert (await b.resume("gpu", workdir, "went")).attempt == 2
            assert await listed(a, sent) == ("running", ["went"])  # "still" is not asked
            rec = next(r for r in index_a.load() if r.key == key)
            assert (rec.state, rec.attempt, rec.ended_at) == ("running", 2, "")

            assert (await b.stop("gpu", workdir, "went", grace=5)).startswith("stopped")
            sent.clear()
            await a.refresh()  # live in A's index again: probed by any refresh
            assert probed_runs(sent) and _settled(index_a, "went")
            second = next(r for r in index_a.load() if r.key == key)
            assert (second.state, second.ended_at) == ("stopped", end_of_status())

            # Resumed and stopped again between two of A's refreshes: the same word, a new end.
            wait_for(lambda: time.time() >= int(status.stat().st_mtime) + 1)
            assert (await b.resume("gpu", workdir, "went")).attempt == 3
            assert (await b.stop("gpu", workdir, "went", grace=5)).startswith("stopped")
            sent.clear()
            await a.refresh()
            assert probed_runs(sent) == []  # settled, and no listing: not asked
            assert await listed(a, sent) == ("stopped", ["went"])
            third = next(r for r in index_a.load() if r.key == key)
            assert (third.state, third.attempt, third.ended_at) == ("stopped", 3, end_of_status())
            assert third.ended_at != second.ended_at
            assert await listed(a, sent) == ("stopped", [])  # its end is its own now
        finally:
            await a.close()
            if b is not None:
                await b.close()

    asyncio.run(go())
    assert still.exists()


def test_runs_refresh_reads_a_settled_run_again_once_another_laptop_resumed_it(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """`runs --refresh` carries the listing too: the run this index saw fail (settled) reads
    running once another laptop resumed it, not `failed` forever."""
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.02, save_steps=2,
                          crash_at=4, crash_once=True, crash="nccl_timeout")
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "r1",
            "--no-follow", "--gpus", "0")
    assert r.rc == 0, r.err

    def row(c: Cli) -> tuple[str, bool]:
        (x,) = [x for x in json.loads(c("runs", "--refresh", "--json").out) if x["run_id"] == "r1"]
        return x["state"], bool(x["ended_at"])

    wait_for(lambda: row(cli) == ("failed (exit 134)", True), 60)
    (tmp_path / "laptop").mkdir()
    for path in cli.index.parent.glob("runs*.toml"):
        shutil.copy(path, tmp_path / "laptop" / path.name)
    laptop = Cli(cli.hosts, tmp_path / "laptop" / "runs.toml")
    assert laptop("resume", "gpu", "r1", "--workdir", workdir).rc == 0
    assert row(cli) == ("running", False)
    assert cli("stop", "gpu", "r1", "--grace", "5", "--workdir", workdir).rc == 0


def test_the_apps_r_key_rechecks_every_run_the_settled_ones_too(hosts: SshHosts, tmp_path: Path) -> None:
    """`r` asks about every run, as `runs --refresh --all` does: a settled run whose
    directory was removed on the host (which no listing can tell) reads `unknown`."""
    from tests.test_tui import SIZE, notifications, screen_text, tui, until

    work = tmp_path / "work"
    seed_run(work, "gone")
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("gpu", "gone", str(work), state="completed", ended_at=ENDED))
    shutil.rmtree(work / "gone")

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "gone" in screen_text(app), "the run's row")
            await until(pilot, lambda: not app.refresher.in_flight, "the first refresh")
            assert [r.state for r in index.load()] == ["completed"]  # settled: not asked
            app.runs_table.focus()
            await pilot.press("r")
            await until(pilot, lambda: any(m.startswith("refreshed ") for m in notifications(app)),
                        "the toast")
            assert [r.state for r in index.load()] == ["unknown"]
            await until(pilot, lambda: "unknown" in screen_text(app), "the row's new state")

    asyncio.run(go())


def test_the_listing_is_told_only_the_newest_ends_and_an_older_run_that_went_on_is_still_seen(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """A year of ended runs in one workdir: the refresh's listing, which looks at the
    newest FIND_LIMIT names only, is told that many recorded ends, not every one (the
    script grew with the index). The oldest of them, resumed and ended again on the host
    since (its run dir now among the newest), is still read again, with its new end."""
    work = Path(workdir)
    extra = 40
    index = RunIndex(tmp_path / "runs.toml")
    index.add_new([RunRecord("gpu", "old", workdir, state="failed (exit 1)", ended_at=ENDED)] + [
        RunRecord("gpu", f"r{i:04d}", workdir, state="completed",
                  ended_at=datetime.fromtimestamp(STARTED + 3600 * (i + 1), UTC).isoformat())
        for i in range(remote_sh.FIND_LIMIT + extra)])
    seed_run(work, "old", code="0\n")  # ended again now, completed this time
    status = work / "old" / "status"
    key = ("gpu", workdir, "old")

    async def go() -> list[str]:
        engine = Engine(ConnectionPool(hosts.ssh_config), index, HostConfig())
        try:
            sent = _recording(engine, "gpu")
            await host_view.refresh(engine, index.load(), words=False, went_on=True)
            return sent
        finally:
            await engine.close()

    sent = asyncio.run(go())
    told = [m.group(1).split() for s in sent
            for m in re.finditer(rf"^fr_list \d+ {re.escape(workdir)} '([^']*)'", s, re.M)]
    assert len(told) == 1 and sum(":" in name for name in told[0]) == remote_sh.FIND_LIMIT, told
    assert [Path(d).name for d in probed_runs(sent)] == ["old"]
    rec = next(r for r in index.load() if r.key == key)
    end = datetime.fromtimestamp(int(status.stat().st_mtime), UTC).isoformat()
    assert (rec.state, rec.ended_at) == ("completed", end)
