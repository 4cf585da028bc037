"""A log that hangs when read (a FIFO `train.log`, a file on a hung NFS mount) in an
open pane: the host's run states go on refreshing. Against the real sshd pair."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.transport.connection import ConnectionPool
from rtrain_tui.tui.widgets.log_pane import LogPane
from tests.conftest import write_config
from tests.sshd import SshHosts
from tests.test_tui import SIZE, tui, until


@pytest.fixture(autouse=True)
def _client_home(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "hosts" in request.fixturenames:
        monkeypatch.setenv("HOME", str(request.getfixturevalue("hosts").home))


def _release(fifo: Path) -> None:
    """Let whatever the host left blocked on opening the FIFO go (it sees end-of-file)."""
    for _ in range(50):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return  # no reader left (ENXIO)


def test_a_hung_log_in_an_open_pane_never_freezes_the_hosts_states(hosts: SshHosts, tmp_path: Path) -> None:
    """A run whose train.log is a FIFO, its pane open, and a run started afterwards: the
    refresh shows the new run `completed` when it ends (it used to wait behind the FIFO's
    open on the host's one SFTP channel, 20 s a time, for ever); the pane says why it gave up."""
    work = tmp_path / "work"
    piped = work / "piped"
    piped.mkdir(parents=True)
    fifo = piped / "train.log"
    os.mkfifo(fifo)  # opening it for reading blocks the host's sftp-server until a writer comes
    (piped / "status").write_text("0\n")
    RunIndex(tmp_path / "runs.toml").add(RunRecord("gpu", "piped", str(work), state="completed",
                                                   started_at="2026-11-29T10:00:00+00:00"))
    config = write_config(tmp_path / "c.yaml", steps=5, step_seconds=0.1)

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.runs_table.row_count == 1, "the run in the table")
            app.runs_table.focus()
            await pilot.press("enter")
            await until(pilot, lambda: app.query(LogPane), "its log pane")
            await pilot.pause(1.0)  # the pane has tried to read the log by now
            engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
            await engine.start(StartRequest("gpu", config, run_id="after", workdir=str(work), gpus=0))
            await engine.close()
            state = lambda: {v.record.run_id: v.record.state  # noqa: E731
                             for v in app.runs_table.views.values()}.get("after")
            await until(pilot, lambda: state() == "completed", "the new run's end", timeout=15)
            pane = app.query_one(LogPane)
            assert pane.stream.startswith("gave up") and "FIFO" in pane.stream

    try:
        asyncio.run(go())
    finally:
        _release(fifo)


def test_a_read_stuck_in_the_log_lane_never_delays_the_refreshs_reads(
        hosts: SshHosts, tmp_path: Path) -> None:
    """What a hung NFS file does to a pane (a request the host's sftp-server never
    answers, whatever a stat said) holds up only the log panes' channel: the metrics the
    refresh reads for another run arrive at once, on the host's other channel."""
    from rtrain_tui.core.metrics.metrics_sync import sync_metrics
    from rtrain_tui.core.transport.connection import LOG_LANE

    work = tmp_path / "work"
    (work / "piped").mkdir(parents=True)
    fifo = work / "piped" / "train.log"
    os.mkfifo(fifo)
    (work / "plain").mkdir()
    (work / "plain" / "train.log").write_text("{'loss': 2.5, 'learning_rate': 1e-4, 'epoch': 0.1}\n")

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        try:
            logs = await engine.host("gpu").sftp(LOG_LANE)
            stuck = asyncio.ensure_future(logs.open(str(fifo), "rb"))  # as a hung file would
            await asyncio.sleep(0)  # the request is on its way
            parser = await asyncio.wait_for(
                sync_metrics(engine, "gpu", str(work), "plain", cache_dir=tmp_path / "cache"), 10)
            assert [v for _, v in parser.losses] == [2.5]
            assert not stuck.done()
            stuck.cancel()
        finally:
            _release(fifo)
            await engine.close()

    asyncio.run(go())


def test_a_run_whose_progress_read_got_no_answer_is_left_unread_for_a_while(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running run's train.log on a hung NFS mount: its stat gets no answer, and every
    refresh waited the whole SFTP bound for it again before the next one could start.
    After one such wait the run's progress is not read for a while (the other runs' are)."""
    from rtrain_tui.core import host_view
    from rtrain_tui.core.runs import probes
    from rtrain_tui.core.transport import connection

    monkeypatch.setattr(connection, "SFTP_CALL_TIMEOUT", 2.0)
    work = tmp_path / "work"
    (work / "slow").mkdir(parents=True)
    (work / "slow" / "train.log").write_text("{'loss': 2.5, 'learning_rate': 1e-4, 'epoch': 0.1}\n")
    fifo = tmp_path / "stuck"
    os.mkfifo(fifo)
    run = RunRecord("gpu", "slow", str(work), state=probes.RUNNING)
    states = {run.key: probes.RUNNING}

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        try:
            # The refresh's channel held by a request the host never answers, as a stat
            # on a hung NFS mount holds it; the run's own reads behind it get no answer.
            sftp = await engine.host("gpu").sftp()
            sftp.call_timeout = 60.0
            stuck = asyncio.ensure_future(sftp.open(str(fifo), "rb"))
            await asyncio.sleep(0)  # the request is on its way, under its own bound
            sftp.call_timeout = 2.0
            stalled: dict[tuple[str, str, str], float] = {}
            assert await host_view.lines_for(engine, [run], states, stalled=stalled) == ()
            assert run.key in stalled
            stuck.cancel()
            # The host answers again, but the run is not read until its while is over.
            assert await host_view.lines_for(engine, [run], states, stalled=stalled) == ()
            stalled[run.key] = 0.0  # its while is over
            lines = await host_view.lines_for(engine, [run], states, stalled=stalled)
            assert [(line.key, line.progress is not None) for line in lines] == [(run.key, True)]
            assert run.key not in stalled
        finally:
            _release(fifo)
            await engine.close()

    asyncio.run(go())


def test_a_refresh_shows_the_hosts_states_before_a_hung_progress_read_ends(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """A running run whose train.log sits on a hung NFS mount: its progress read waits
    the SFTP bound (20 s). The refresh's states (another run that ended) used to wait for
    it; they are shown first, and the progress follows when it can."""
    work = Path(workdir)
    fifo = tmp_path / "stuck"
    os.mkfifo(fifo)
    index = RunIndex(tmp_path / "runs.toml")
    slow = write_config(tmp_path / "slow.yaml", steps=100000, step_seconds=0.05)
    quick = write_config(tmp_path / "quick.yaml", steps=3, step_seconds=0.05)

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), index)
        await engine.start(StartRequest("gpu", slow, run_id="slow", workdir=str(work), gpus=0))
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            state = lambda run_id: {v.record.run_id: v.record.state  # noqa: E731
                                    for v in app.runs_table.views.values()}.get(run_id)
            await until(pilot, lambda: state("slow") == "running", "the running run")
            await app.workers.wait_for_complete()
            # The refresh's channel held by a request the host never answers, as a stat
            # on a hung NFS mount holds it: slow's progress read waits its whole bound.
            sftp = await app.engine.host("gpu").sftp()
            stuck = asyncio.ensure_future(sftp.open(str(fifo), "rb"))
            await asyncio.sleep(0)
            await engine.start(StartRequest("gpu", quick, run_id="quick", workdir=str(work), gpus=0))
            status = work / "quick" / "status"
            await until(pilot, status.exists, "the quick run's end on the host")
            await pilot.press("r")
            await until(pilot, lambda: state("quick") == "completed", "the ended run's state",
                        timeout=10)
            stuck.cancel()
        await engine.stop("gpu", str(work), "slow", grace=1)
        await engine.close()

    try:
        asyncio.run(go())
    finally:
        _release(fifo)
