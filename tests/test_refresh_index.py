"""A refresh and the index (issue 15 items 1 and 4): a `starting` entry is settled only
from a probe taken after its start was over, and a refresh reads the index once."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.hostconfig import HostConfig
from rtrain_tui.core.probes import RunProbe
from tests.conftest import write_config
from tests.sshd import SshHosts


def test_a_start_that_finishes_during_a_refresh_is_never_dropped(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """`start` in one terminal while the app refreshes: the refresh probed the run before
    its launch, found the start's lock free afterwards, and forgot a run that was
    training. Here the interleaving is pinned: the refresh's probe is answered while the
    start is uploading, and the start finishes before the refresh settles the entry."""
    index = RunIndex(tmp_path / "runs.toml")
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    uploading, probed = threading.Event(), threading.Event()
    started: list[object] = []

    def hold_upload(_label: str, _done: int, _total: int) -> None:
        uploading.set()
        assert probed.wait(60), "the refresh never probed"

    def other_terminal() -> None:  # its own thread and event loop, as another process
        async def go() -> None:
            engine = Engine(ConnectionPool(hosts.ssh_config), index, HostConfig())
            try:
                started.append(await engine.start(
                    StartRequest("gpu", config, run_id="raced", workdir=workdir, gpus=0),
                    progress=hold_upload))
            finally:
                await engine.close()
        asyncio.run(go())

    starter = threading.Thread(target=other_terminal)
    starter.start()
    assert uploading.wait(60), "the start never began its upload"
    refresher = Engine(ConnectionPool(hosts.ssh_config), index, HostConfig())
    real_probe = refresher.probe_many

    async def probe_then_let_the_start_finish(*args: object, **kw: object) -> list[RunProbe]:
        answer = await real_probe(*args, **kw)  # type: ignore[arg-type]
        assert [(p.exists, p.launched) for p in answer] == [(True, False)]
        probed.set()
        await asyncio.to_thread(starter.join, 60)
        assert started, "the start failed"
        return answer

    refresher.probe_many = probe_then_let_the_start_finish  # type: ignore[method-assign]

    async def refresh_twice() -> list[dict[tuple[str, str, str], str]]:
        try:
            first = await refresher.refresh()
            refresher.probe_many = real_probe  # type: ignore[method-assign]
            return [first, await refresher.refresh()]
        finally:
            await refresher.close()

    first, second = asyncio.run(refresh_twice())
    key = ("gpu", workdir, "raced")
    assert first == {key: "starting"}  # that probe was older than the start's end
    assert second == {key: "running"}
    assert [(r.run_id, r.state) for r in index.load()] == [("raced", "running")]
    assert (Path(workdir) / "raced" / "train.pid").exists()
