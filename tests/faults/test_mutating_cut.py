"""Fault (10): the connection is cut while each script that changes the host runs.

The script runs to its end on the host, but its answer is lost with the connection: the
engine reconnects (through the proxy, which lets new connections in) and sends it once
more. Each script must then act once and answer as if nothing had happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from rtrain_tui.core.engine import Engine, StartRequest
from rtrain_tui.core.runs.index import RunIndex
from rtrain_tui.core.transport import shell
from rtrain_tui.core.transport.connection import ConnectionPool
from tests.conftest import write_config
from tests.faults.conftest import ALIAS
from tests.faults.proxy import FaultProxy

# A fragment only the one script has, so the cut hits exactly it (the first time).
SCRIPTS = {
    "make run dir": "mkdir -m 700",
    "launch": "mkdir launch.lock",
    "stop signal": "result=signalled",
    "mark stopped": ": > \"$rd/stopped\"",
}


def cut_after(proxy: FaultProxy, fragment: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the first script containing `fragment` lose its answer; returns a cut log."""
    real_run = shell.Shell.run
    cuts: list[str] = []

    async def run(self, script: str, limit: float | None = None) -> str:  # type: ignore[no-untyped-def]
        out = await real_run(self, script, limit)
        if fragment in script and not cuts:
            cuts.append(fragment)
            proxy.cut()  # the answer arrived here, but the user's link just went
            raise ConnectionResetError("connection cut by the fault proxy")
        return out

    monkeypatch.setattr(shell.Shell, "run", run)
    return cuts


def wrapper_pids(token: str) -> list[int]:
    """Live launches: `sh ./run.sh` processes carrying the run's marker whose parent is
    not one (the wrapper's stall watchdog is a forked subshell of it, not a launch)."""
    shells: dict[int, int] = {}  # pid -> parent pid
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if f"RTRAIN_RUN={token}".encode() in env and cmd[:2] == [b"sh", b"./run.sh"]:
            shells[int(proc.name)] = parent
    return [pid for pid, parent in shells.items() if parent not in shells]


@pytest.mark.parametrize("what", list(SCRIPTS))
def test_a_cut_during_a_mutating_script_acts_once(
    what: str, proxy: FaultProxy, proxy_config: Path, tmp_path: Path, workdir: str,
    monkeypatch: pytest.MonkeyPatch, fault_row: Callable[[str, str], object],
) -> None:
    row = fault_row(f"(10) cut during {what}", "answer lost, script re-sent")
    cuts = cut_after(proxy, SCRIPTS[what], monkeypatch)
    engine = Engine(ConnectionPool(proxy_config), RunIndex(tmp_path / "runs.toml"))
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)

    wrappers: list[int] = []

    async def go() -> str:
        try:
            started = await engine.start(StartRequest(host=ALIAS, config=config, gpus=0,
                                                      run_id="once", workdir=workdir))
            assert started.run_id == "once"
            await asyncio.sleep(0.5)  # a second wrapper, had one been launched, is up by now
            wrappers.extend(wrapper_pids(started.record.token))
            return await engine.stop(ALIAS, workdir, "once", grace=2)
        finally:
            await engine.close()

    outcome = asyncio.run(asyncio.wait_for(go(), 60))
    assert cuts == [SCRIPTS[what]], "the fault was not injected"
    assert len(wrappers) == 1, f"launched {len(wrappers)} times"
    assert outcome == "stopped once on viaproxy"
    assert sorted(p.name for p in Path(workdir).iterdir()) == ["once"]
    assert [(r.run_id, r.state) for r in RunIndex(tmp_path / "runs.toml").load()] == [("once", "stopped")]
    row.lost = 0  # type: ignore[attr-defined]
    row.duplicated = 0  # type: ignore[attr-defined]
