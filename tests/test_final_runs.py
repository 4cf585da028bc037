"""Final is final (issue 17): a refresh probes the runs that can still change, not the
ended ones whose end time is recorded; `--all` asks about every run. Against the real sshd.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, RunRecord, StartRequest, host_view
from rtrain_tui.core.runs.hostconfig import HostConfig
from tests.conftest import Cli, write_config
from tests.sshd import SshHosts
from tests.test_discover import seed_run
from tests.unit.test_remote_sh import wait_for

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
