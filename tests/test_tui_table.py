"""The runs table with many runs: its order, rows changed in place, the selection kept
by run, and the filters (`/`, `h`, `s`). Driven by Pilot over a fixed index (no host is
reached: poll_runs=False); the last test refreshes a real run on the test sshd."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from textual.pilot import Pilot

from rtrain_tui.core import Engine, RunIndex, StartRequest
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.transport.connection import ConnectionPool
from rtrain_tui.tui.app import RTrainApp, make_app
from rtrain_tui.tui.widgets.runs_table import RunKey
from tests.conftest import write_config
from tests.scenes import NOW, SSH_CONFIG
from tests.sshd import SshHosts
from tests.test_tui import SIZE, screen_text, tui, until

W = "~/.praisonai-train"


def run(host: str, run_id: str, state: str, day: int, **fields: object) -> RunRecord:
    return RunRecord(host, run_id, W, state=state, started_at=f"2026-11-{day:02d}T10:00:00+00:00",
                     updated_at=f"2026-11-{day:02d}T11:00:00+00:00", **fields)  # type: ignore[arg-type]


RECORDS = [
    run("h100-lab", "old-running", "running", 1),
    run("h100-lab", "new-completed", "completed", 29),
    run("a100-rented", "mid-starting", "starting", 20),
    run("a100-rented", "oom", "failed (exit 1)", 28),
    run("uni-cluster", "waits", "queued", 10),
    run("uni-cluster", "vanished", "lost", 27),
    run("uni-cluster", "halted", "stopped", 26),
]
LONG_REASON = "torch.distributed: rank 3 timed out after 600 s in NCCL allreduce (watchdog)"


def app_with(tmp_path: Path, records: list[RunRecord]) -> tuple[RTrainApp, RunIndex]:
    (tmp_path / "ssh_config").write_text(SSH_CONFIG)
    index = RunIndex(tmp_path / "runs.toml")
    index.update(lambda runs: list(records))
    return make_app(tmp_path / "ssh_config", index, clock=lambda: NOW, poll_runs=False), index


async def loaded(app: RTrainApp, pilot: Pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    app.runs_table.focus()
    await pilot.pause()


def ids(app: RTrainApp) -> list[str]:
    """The run ids in the table's rows, top to bottom."""
    table = app.runs_table
    return [str(table.get_row_at(i)[1]).removeprefix("● ") for i in range(table.row_count)]


def test_live_runs_are_on_top_then_the_newest_first(tmp_path: Path) -> None:
    async def go() -> None:
        app, _ = app_with(tmp_path, RECORDS)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            assert ids(app) == ["mid-starting", "waits", "old-running",
                                "new-completed", "oom", "vanished", "halted"]
            # what the screen shows, top to bottom
            text = screen_text(app)
            assert text.index("mid-starting") < text.index("old-running") < text.index("new-completed")

    asyncio.run(go())


def test_a_refresh_changes_only_the_rows_that_changed(tmp_path: Path) -> None:
    """No clear and rebuild: rows of runs that did not change are the same rows; the
    changed run's cells are updated in place."""
    records = [run("h100-lab", f"run-{i:03d}", "completed", 1 + i % 28) for i in range(200)]
    records.append(run("h100-lab", "live", "running", 29))

    async def go() -> None:
        app, _ = app_with(tmp_path, records)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            table = app.runs_table
            rows_before = dict(table.rows)
            cleared: list[bool] = []
            table.clear = lambda *a, **k: cleared.append(True)  # type: ignore[method-assign]
            app.main_screen.show_runs([v.record for v in table.views.values()],
                                      {records[-1].key: "12/100 loss 0.5"})
            await pilot.pause()
            assert not cleared
            assert all(table.rows[k] is row for k, row in rows_before.items())
            assert str(table.get_row_at(0)[3]) == "12/100 loss 0.5"
            # The next progress (as wide: no column widens): only its row is drawn again.
            rendered: list[int] = []  # the rows whose cells are rendered (not from a cache)
            render_cell = table._render_cell

            def tracked(row_index, *args, **kwargs):  # type: ignore[no-untyped-def]
                rendered.append(row_index)
                return render_cell(row_index, *args, **kwargs)

            table._render_cell = tracked  # type: ignore[method-assign]
            app.main_screen.show_runs(None, {records[-1].key: "13/100 loss 0.4"})
            await pilot.pause()
            assert set(rendered) == {0}, sorted(set(rendered))
            assert "13/100 loss 0.4" in screen_text(app)
            # a run written again by the index (the same run, a new record): its row only
            rewritten = [replace(r, updated_at="2026-11-30T00:00:00+00:00")
                         if r.run_id == "run-007" else r for r in (v.record for v in table.views.values())]
            app.main_screen.show_runs(rewritten, None)
            await pilot.pause()
            assert not cleared and all(table.rows[k] is row for k, row in rows_before.items())
            assert table.views[records[7].key].record is rewritten[7]

    asyncio.run(go())


def test_the_selected_run_stays_selected_while_rows_change(tmp_path: Path) -> None:
    """Rows appear above it, go, move past it (a live run ends), and its own cells
    change: the cursor stays on the same run."""
    async def go() -> None:
        app, index = app_with(tmp_path, RECORDS)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            table = app.runs_table
            target: RunKey = RECORDS[3].key  # "oom", in the middle
            table.select_run(target)
            await pilot.pause()

            def still_selected(what: str) -> None:
                assert table.selected is not None and table.selected.key == target, what
                assert table.cursor_row == ids(app).index(target[2]), what

            still_selected("at first")
            changes = [
                ("a new live run on top", lambda runs: [*runs, run("h100-lab", "fresh", "running", 30)]),
                ("a run removed above it",
                 lambda runs: [r for r in runs if r.run_id != "new-completed"]),
                ("a live run ends and moves below it",
                 lambda runs: [replace(r, state="completed") if r.run_id == "old-running" else r
                               for r in runs]),
                ("its own record rewritten",
                 lambda runs: [replace(r, updated_at="2026-11-30T01:00:00+00:00")
                               if r.key == target else r for r in runs]),
            ]
            for what, change in changes:
                index.update(change)
                await app.load_runs().wait()
                await pilot.pause()
                still_selected(what)
            assert ids(app)[:3] == ["fresh", "mid-starting", "waits"]
            assert ids(app).index("old-running") > ids(app).index("oom")
            app.main_screen.show_runs(None, {target: "✗ CUDA out of memory"}, {})
            await pilot.pause()
            still_selected("its progress changed")
            await pilot.press("down")
            assert table.selected is not None and table.selected.key != target

    asyncio.run(go())


def test_s_cycles_the_state_filter_live_failed_all(tmp_path: Path) -> None:
    async def go() -> None:
        app, _ = app_with(tmp_path, RECORDS)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            table = app.runs_table
            assert "s State" in screen_text(app)  # in the footer
            await pilot.press("s")
            await pilot.pause()
            assert ids(app) == ["mid-starting", "waits", "old-running"]
            assert table.border_subtitle == "state: live"
            await pilot.press("s")
            await pilot.pause()
            assert ids(app) == ["oom", "vanished"]
            assert table.border_subtitle == "state: failed"
            assert "state: failed" in screen_text(app)
            await pilot.press("s")
            await pilot.pause()
            assert len(ids(app)) == len(RECORDS) and not table.border_subtitle

    asyncio.run(go())


def test_slash_matches_host_run_id_state_and_the_whole_failure_reason(tmp_path: Path) -> None:
    async def go() -> None:
        app, _ = app_with(tmp_path, RECORDS)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            # The cell cuts a long reason; the filter reads it whole (its end: "watchdog").
            app.main_screen.show_runs(None, {RECORDS[3].key: "✗ torch.distributed: rank 3 timed…"},
                                      {RECORDS[3].key: LONG_REASON})
            for typed, expected in [("watchdog", ["oom"]), ("cluster", ["waits", "vanished", "halted"]),
                                    ("mid", ["mid-starting"]), ("lost", ["vanished"]),
                                    ("RUNNING", ["old-running"])]:
                await pilot.press("slash", *typed)
                await pilot.pause()
                assert ids(app) == expected, typed
                assert app.runs_table.border_subtitle == f"filter: {typed}"
                await pilot.press("escape")
                await pilot.pause()
                assert len(ids(app)) == len(RECORDS)

    asyncio.run(go())


def test_h_shows_only_the_selected_hosts_runs_and_filters_combine(tmp_path: Path) -> None:
    async def go() -> None:
        app, _ = app_with(tmp_path, RECORDS)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            app.host_list.highlighted = app.hosts.index("uni-cluster")
            await pilot.pause()
            await pilot.press("h")
            await pilot.pause()
            assert ids(app) == ["waits", "vanished", "halted"]
            assert app.runs_table.border_subtitle == "host: uni-cluster"
            await pilot.press("s", "s")  # and failed ones only
            await pilot.pause()
            assert ids(app) == ["vanished"]
            assert app.runs_table.border_subtitle == "host: uni-cluster · state: failed"
            await pilot.press("s", "h")
            await pilot.pause()
            assert len(ids(app)) == len(RECORDS)

    asyncio.run(go())


def test_progress_is_read_only_for_runs_in_sight(hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    """A live run filtered out of sight is refreshed (its state) but its log is not read;
    once in sight again, its next refresh shows its progress."""
    config = write_config(tmp_path / "c.yaml", steps=400, step_seconds=0.05)

    async def go() -> None:
        engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
        await engine.start(StartRequest("gpu", config, run_id="unseen", workdir=workdir, gpus=0))
        await engine.close()
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            table = app.runs_table
            await until(pilot, lambda: table.row_count == 1, "the run in the table")
            table.text_filter = "no such run"
            table.refilter()
            done = app.refresher._done
            # a refresh already under way may have read it: let it be shown first
            await until(pilot, lambda: done.get("gpu", 0) >= 1 and "gpu" not in app.refresher.in_flight,
                        "a refresh that started out of sight")
            key = next(iter(table.views))
            table.views[key].progress = ""
            seen = done.get("gpu", 0)
            log = Path(workdir) / "unseen" / "train.log"
            await until(pilot, lambda: done.get("gpu", 0) >= seen + 3 and "step" in log.read_text(),
                        "three refreshes while the run logs steps")
            assert table.views[key].progress == ""
            table.text_filter = ""
            table.refilter()
            await until(pilot, lambda: "step" in table.views[key].progress, "its progress")
            await app.engine.stop("gpu", workdir, "unseen", grace=1)

    asyncio.run(go())


def test_polling_starts_once_the_index_runs_are_shown(tmp_path: Path) -> None:
    """The first probes, connections and index reads wait for the table: with 10,000
    runs they took the CPU from filling it. What the first load made is frozen out of the
    collector's passes while the app runs, and handed back when it ends."""
    import gc

    async def go() -> None:
        app, _ = app_with(tmp_path, RECORDS)
        app.poll_runs = True
        read = app.runs_view.read_index
        index_read = asyncio.Event()

        async def slow_read():  # type: ignore[no-untyped-def]
            await index_read.wait()
            return await read()

        app.runs_view.read_index = slow_read  # type: ignore[method-assign]
        polled: list[int] = []
        app.refresher.refresh_all = lambda: polled.append(app.runs_table.row_count)  # type: ignore[method-assign]
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.3)
            assert polled == []  # the first frame is long drawn; the index is not shown yet
            index_read.set()
            await until(pilot, lambda: bool(polled), "polling to start")
            assert polled == [len(RECORDS)]
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0

    asyncio.run(go())


def test_the_end_of_a_long_table_shows_the_oldest_runs_and_they_are_the_ones_in_sight(
        tmp_path: Path) -> None:
    """2,000 rows: ctrl+end scrolls to the oldest run, drawn where it belongs, and the runs
    in sight (whose progress a refresh reads) are the rows on screen, not the top ones."""
    from datetime import timedelta

    records = [RunRecord(f"h{i % 3}", f"run-{i:04d}", W, state="completed",
                         started_at=(NOW - timedelta(minutes=2000 - i)).isoformat())
               for i in range(2000)]

    async def go() -> None:
        app, _ = app_with(tmp_path, records)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            table = app.runs_table
            top = table.on_screen()
            assert records[-1].key in top and records[0].key not in top
            await pilot.press("ctrl+end")
            await pilot.pause()
            assert table.selected is not None and table.selected.record.run_id == "run-0000"
            lines = ["".join(seg.text for seg in table.render_line(y)) for y in range(table.size.height)]
            assert "run-0000" in lines[-1] or "run-0000" in lines[-2], lines[-3:]
            sight = table.on_screen()
            assert records[0].key in sight and records[-1].key not in sight
            assert len(sight) < 40 and all(k[2] in "".join(lines) for k in sight)

    asyncio.run(go())
