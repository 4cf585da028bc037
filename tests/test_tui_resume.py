"""`R` in the app: a new attempt of the selected run (issue 18, Resume), against the real sshd."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rtrain_tui.core import ConnectionPool, Engine, RunIndex
from tests.sshd import SshHosts
from tests.test_tui import SIZE, notifications, screen_text, start_run, tui, until


def ended(hosts: SshHosts, tmp_path: Path, run_id: str, want: str) -> None:
    """Wait until the run ended as `want`, and the index says so."""
    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        try:
            for _ in range(300):
                if (await engine.refresh()).get(("gpu", str(tmp_path / "work"), run_id)) == want:
                    return
                await asyncio.sleep(0.1)
            raise AssertionError(f"{run_id} never became {want}")
        finally:
            await engine.close()

    asyncio.run(go())


def test_R_resumes_the_selected_run_and_its_row_says_attempt_2(
        hosts: SshHosts, tmp_path: Path) -> None:
    start_run(hosts, tmp_path, "crashed", steps=400, save_steps=2, die_mid_save=4,
              step_seconds=0.05)
    ended(hosts, tmp_path, "crashed", "failed (exit 137)")

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "crashed" in screen_text(app), "the run's row")
            app.runs_table.focus()
            await pilot.press("R")
            want = "resumed crashed on gpu: attempt 2, from outputs/checkpoint-2"
            await until(pilot, lambda: any(m.startswith(want) for m in notifications(app)), "the toast")
            assert any("skipped outputs/checkpoint-4 incomplete" in m for m in notifications(app))
            await until(pilot, lambda: "attempt 2 ·" in screen_text(app), "the row's attempt")
            view = next(iter(app.runs_table.views.values()))
            assert (view.record.state, view.record.attempt) == ("running", 2)
            # A second R on the live attempt says why not, and starts nothing.
            await pilot.press("R")
            await until(pilot, lambda: any("crashed is running on gpu" in m for m in notifications(app)),
                        "the refusal")
            await pilot.press("x")
            await pilot.pause()
            await pilot.press("y")
            await until(pilot, lambda: "stopped crashed on gpu" in notifications(app), "the stop")
            await app.workers.wait_for_complete()

    asyncio.run(go())
    # Attempt 1 and the resumed attempt 2, each its own directory (.rtrain/attempts/N).
    assert sorted(p.name for p in (tmp_path / "work" / "crashed" / ".rtrain" / "attempts").iterdir()) == ["1", "2"]
