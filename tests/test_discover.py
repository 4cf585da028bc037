"""Every run on the host: runs started elsewhere join the index (`runs --discover`, the app).

The run directories are made the way `praisonai train remote` leaves them (train.pid,
train.log, status, config.yaml; no train.token or train.ident) on the real sshd's host.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from rtrain_tui.core import Engine, RunIndex
from rtrain_tui.core.backends import slurm
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.transport.connection import ConnectionPool
from tests.conftest import Cli
from tests.sshd import SshHosts
from tests.unit.test_remote_sh import sh

STARTED = 1_700_000_000  # 2023-11-14T22:13:20Z


def seed_run(workdir: Path, run_id: str, code: str | None = "0\n", pid: int = 999_999_999) -> Path:
    """A run dir as `praisonai train remote` leaves it, started at STARTED."""
    run_dir = workdir / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("model: tiny\n")
    os.utime(run_dir / "config.yaml", (STARTED, STARTED))
    (run_dir / "train.pid").write_text(f"{pid}\n")
    (run_dir / "train.log").write_text("{'loss': 1.0}\n")
    if code is not None:
        (run_dir / "status").write_text(code)
        os.utime(run_dir / "status", (STARTED + 42, STARTED + 42))
    return run_dir


def test_find_runs_lists_run_dirs_and_skips_what_cannot_be_a_run(tmp_path: Path) -> None:
    seed_run(tmp_path, "seed-a")
    seed_run(tmp_path, "seed.b", code=None)
    (tmp_path / "not-a-run").mkdir()  # no train.pid / status / train.log
    (tmp_path / ".datasets").mkdir()
    seed_run(tmp_path, "x")  # what a name with a newline in it must not be read as
    for odd in ("a b", "x\ny", "-rf", "semi;colon", "$(touch pwned)", "`touch pwned`",
                "r" * 65, "*", "a\tb"):
        (tmp_path / odd).mkdir()
        (tmp_path / odd / "train.log").write_text("x\n")
    out = sh(remote_sh.find_runs([str(tmp_path), str(tmp_path / "missing")]), cwd=tmp_path)
    resolved, found = probes.parse_found_runs(out, 2)
    assert resolved == {0: str(tmp_path), 1: str(tmp_path / "missing")}
    assert sorted((f.workdir, f.run_id, f.started) for f in found) == [
        (0, "seed-a", STARTED), (0, "seed.b", STARTED), (0, "x", STARTED)]
    assert not (tmp_path / "pwned").exists()


def test_find_runs_prints_only_unknown_runs_among_the_newest(tmp_path: Path) -> None:
    """The refresh's listing: known names print nothing, and only the newest `limit`
    names are looked at, so a workdir of thousands of runs stays one cheap `ls`."""
    for age, run_id in enumerate(["new-1", "new-2", "known", "old-1", "old-2"]):
        os.utime(seed_run(tmp_path, run_id), (STARTED - age, STARTED - age))
    quiet = sh(remote_sh.find_runs([str(tmp_path)], [{"new-1", "new-2", "known"}], limit=3))
    assert quiet == f"wd\t0\t{tmp_path}\n"  # nothing new among the newest three
    out = sh(remote_sh.find_runs([str(tmp_path)], [{"known"}], limit=3))
    assert sorted(f.run_id for f in probes.parse_found_runs(out, 1)[1]) == ["new-1", "new-2"]
    out = sh(remote_sh.find_runs([str(tmp_path)], [{"known"}]))  # `runs --discover`: all
    assert len(probes.parse_found_runs(out, 1)[1]) == 4


def test_the_listing_can_precede_a_slurm_probe(tmp_path: Path) -> None:
    """On a login node without a GPU sample, the listing rides with the Slurm script."""
    seed_run(tmp_path, "theirs")
    out = sh(remote_sh.find_runs([str(tmp_path)], [{"mine"}], limit=200)
             + slurm.run_states([(str(tmp_path), "mine")]))
    assert [f.run_id for f in probes.parse_found_runs(out, 1)[1]] == ["theirs"]
    assert slurm.parse_run_states(out, 1)[0].exists is False


def _engine(hosts: SshHosts, index: RunIndex) -> Engine:
    return Engine(ConnectionPool(hosts.ssh_config), index)


def test_discover_adds_unknown_runs_once_marked_found(hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    work = Path(workdir)
    seed_run(work, "known")
    seed_run(work, "theirs")  # completed 42 s after it started
    seed_run(work, "crashed", code=None)  # its wrapper is gone, nothing recorded: lost
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("gpu", "known", workdir, state="completed"))

    async def go() -> tuple[list[RunRecord], list[RunRecord]]:
        engine = _engine(hosts, index)
        try:
            return await engine.discover("gpu"), await engine.discover("gpu")
        finally:
            await engine.close()

    first, second = asyncio.run(go())
    assert sorted(r.run_id for r in first) == ["crashed", "theirs"] and second == []
    by_id = {r.run_id: r for r in index.load()}
    assert set(by_id) == {"known", "theirs", "crashed"}
    theirs = by_id["theirs"]
    assert (theirs.state, theirs.origin, theirs.workdir) == ("completed", "found", workdir)
    assert theirs.started_at == "2023-11-14T22:13:20+00:00"
    assert theirs.ended_at == "2023-11-14T22:14:02+00:00"
    assert by_id["crashed"].state == "lost"
    assert by_id["known"].origin == ""  # the index's own record is left as it was


def test_a_workdir_spelled_two_ways_is_one_place(hosts: SshHosts, tmp_path: Path) -> None:
    """`~/runs` and the absolute path are the same directory: nothing is added twice."""
    home_runs = hosts.remote_homes["gpu"] / "runs-two-ways"
    seed_run(home_runs, "once")
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("gpu", "once", "~/runs-two-ways", state="completed"))
    index.add(RunRecord("gpu", "other", str(home_runs), state="unknown"))

    async def go() -> list[RunRecord]:
        engine = _engine(hosts, index)
        try:
            return await engine.discover("gpu")
        finally:
            await engine.close()

    try:
        assert asyncio.run(go()) == []
    finally:
        subprocess.run(["rm", "-rf", str(home_runs)], check=True)


def test_runs_discover_through_the_cli(cli: Cli, tmp_path: Path, workdir: str) -> None:
    seed_run(Path(workdir), "from-praisonai")
    seed_run(Path(workdir), "mine")
    RunIndex(cli.index).add(RunRecord("gpu", "mine", workdir, state="completed"))
    r = cli("runs", "--discover", "gpu")
    assert r.rc == 0, r.err
    assert r.err == "rtrain-tui: gpu: found 1 run started elsewhere: from-praisonai\n"
    assert "from-praisonai  completed (found)" in r.out
    again = cli("runs", "--discover")  # every host in the index: nothing new
    assert again.rc == 0 and again.err == "rtrain-tui: gpu: found 0 runs started elsewhere\n"


def test_runs_discover_of_a_host_that_is_not_there_is_one_line(cli: Cli) -> None:
    r = cli("runs", "--discover", "gpux")
    assert r.rc == 1 and r.out == ""
    assert r.err.startswith("rtrain-tui: gpux is not in") and "did you mean gpu?" in r.err


def test_runs_discover_with_an_empty_index_asks_for_a_host(cli: Cli) -> None:
    r = cli("runs", "--discover")
    assert (r.rc, r.err) == (1, "rtrain-tui: no hosts in the run index yet; name one: "
                                "rtrain-tui runs --discover HOST\n")


def test_a_checked_host_shows_the_runs_started_elsewhere(hosts: SshHosts, tmp_path: Path,
                                                         workdir: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tests.test_tui import SIZE, notifications, tui, until

    monkeypatch.setenv("HOME", str(hosts.home))
    seed_run(Path(workdir), "teammates")
    seed_run(Path(workdir), "mine")
    RunIndex(tmp_path / "runs.toml").add(RunRecord("gpu", "mine", workdir, state="completed"))

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.host_list.focus()
            app.host_list.highlighted = 1  # gpu
            await pilot.press("p")
            await until(pilot, lambda: any("teammates" in m for m in notifications(app)), "toast")
            await until(pilot, lambda: "teammates" in {v.record.run_id for v in
                                                       app.runs_table.views.values()}, "the row")

    asyncio.run(go())


def _count_round_trips(engine: Engine, host: str) -> list[str]:
    """The scripts sent to `host` from now on (each a real round trip, passed through)."""
    conn = engine.host(host)
    real = conn.run
    sent: list[str] = []

    async def counted(script: str, *args: object, **kwargs: object) -> str:
        sent.append(script)
        return await real(script, *args, **kwargs)  # type: ignore[arg-type]

    conn.run = counted  # type: ignore[method-assign]
    return sent


def test_one_probe_of_a_host_adds_a_run_started_elsewhere(hosts: SshHosts, tmp_path: Path,
                                                          workdir: str) -> None:
    """No preflight, no `--discover`: the refresh's own probe lists the workdirs. Something
    new costs one more round trip; nothing new costs none."""
    seed_run(Path(workdir), "mine")
    index = RunIndex(tmp_path / "runs.toml")
    index.add(RunRecord("gpu", "mine", workdir, state="completed"))

    async def go() -> tuple[list[str], list[str], list[str], list[str]]:
        engine = _engine(hosts, index)
        try:
            sent = _count_round_trips(engine, "gpu")
            seed_run(Path(workdir), "other-laptop", code=None)  # as another laptop leaves it
            first = await engine.probe_host("gpu", [(workdir, "mine")], [0], find=True)
            assert first.runs[0].state == "completed"
            trips_first = len(sent)
            # The app's next refresh probes what the index now has (the default workdir
            # may hold other tests' runs: they were added by the first probe too).
            runs = [(r.workdir, r.run_id) for r in index.load() if r.host == "gpu"]
            second = await engine.probe_host("gpu", runs, find=True)
            return ([r.run_id for r in first.found], [r.run_id for r in second.found],
                    sent[:trips_first], sent[trips_first:])
        finally:
            await engine.close()

    found_first, found_second, trips_first, trips_second = asyncio.run(go())
    assert "other-laptop" in found_first and found_second == []
    assert len(trips_first) == 2  # the probe with its listing, then the new run's probe
    assert len(trips_second) == 1  # nothing new: the listing rode with the probe
    theirs = next(r for r in index.load() if r.run_id == "other-laptop")
    assert (theirs.workdir, theirs.origin, theirs.state) == (workdir, "found", "lost")
    assert theirs.started_at == "2023-11-14T22:13:20+00:00"


def test_the_refresh_shows_a_run_started_elsewhere_with_a_toast(
        hosts: SshHosts, tmp_path: Path, workdir: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No preflight: the host is refreshed because it has runs, and its probe finds one more."""
    from tests.test_tui import SIZE, notifications, tui, until

    monkeypatch.setenv("HOME", str(hosts.home))
    seed_run(Path(workdir), "mine")
    RunIndex(tmp_path / "runs.toml").add(RunRecord("gpu", "mine", workdir, state="completed"))

    def rows(app) -> set[str]:  # type: ignore[no-untyped-def]
        return {v.record.run_id for v in app.runs_table.views.values()}

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "mine" in rows(app), "the index's run")
            seed_run(Path(workdir), "teammates-run")
            await until(pilot, lambda: "teammates-run" in rows(app), "the found run's row")
            # (with others, if the host's default workdir holds other tests' runs)
            assert any(" started elsewhere: " in m and "teammates-run" in m
                       for m in notifications(app)), notifications(app)
            assert "gpu" not in app.reports  # found by the refresh, not by a preflight

    asyncio.run(go())


def test_help_names_discover() -> None:
    out = subprocess.run([sys.executable, "-m", "rtrain_tui", "runs", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--discover [HOST]" in out and "praisonai train remote" in out


def test_found_runs_join_the_index_oldest_first_like_runs_started_here(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """Found in a new-user trial: `runs` listed found runs newest first (the host's
    listing order) while it lists the runs started here oldest first."""
    for age, run_id in enumerate(["newest", "middle", "oldest"]):
        run_dir = seed_run(Path(workdir), run_id)
        when = STARTED - 3600 * age
        os.utime(run_dir / "config.yaml", (when, when))
        os.utime(run_dir, (when, when))  # the listing's order: newest directory first
    seed_run(Path(workdir), "mine")  # a run the index knows: its workdir gets listed
    RunIndex(cli.index).add(RunRecord("gpu", "mine", workdir, state="completed"))
    r = cli("runs", "--discover", "gpu", "--json")
    assert r.rc == 0, r.err
    assert [x["run_id"] for x in json.loads(r.out)] == ["mine", "oldest", "middle", "newest"]


def test_discover_of_many_run_dirs_finds_all_and_forks_no_date_per_run(
        hosts: SshHosts, tmp_path: Path) -> None:
    """`--discover` of a workdir of 600 runs: every one found with its start and end
    time, the times read by a few `stat`s on the host, not a `date` per run (each cost
    ~3 ms: 5,000 runs took ~30 s of host time between the listing and the probe)."""
    from tests.unit.test_end_times import counted_tools

    bindir, calls = counted_tools(tmp_path)
    home = tmp_path / "many_home"
    for i in range(600):
        run_dir = seed_run(home / ".praisonai-train", f"theirs-{i:03d}")
        os.utime(run_dir / "status", (STARTED + i, STARTED + i))
    config = tmp_path / "ssh_config"
    config.write_text(hosts.ssh_config.read_text() + hosts.extra_host("many", home=home, bin_dir=bindir))

    async def go() -> list[RunRecord]:
        engine = Engine(ConnectionPool(config), RunIndex(tmp_path / "runs.toml"))
        try:
            return await engine.discover("many")
        finally:
            await engine.close()

    added = asyncio.run(go())
    assert len(added) == 600 and {r.state for r in added} == {"completed"}
    assert {r.started_at for r in added} == {"2023-11-14T22:13:20+00:00"}
    ended = sorted(r.ended_at for r in added)
    assert (ended[0], ended[-1]) == ("2023-11-14T22:13:20+00:00", "2023-11-14T22:23:19+00:00")
    made = calls.read_text().split()
    assert made.count("date") == 0 and 0 < made.count("stat") <= 12, made
