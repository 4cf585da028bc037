"""The start form offers "wait for free GPUs" instead of the refusal when fewer GPUs are
free than asked: ticked, the run is shipped now and waits on the host, `queued` in the
runs table with why; the host gives it its GPUs when they free up, with the app open or not.

Pilot against the real sshd; the stand-in nvidia-smi reads the test's GPU file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rtrain_tui.core.runs import probes
from tests.conftest import write_config
from tests.sshd import TWO_GPUS, SshHosts, gpu_state
from tests.test_queue_sshd import BUSY, IDLE, read
from tests.test_tui import (  # noqa: F401 (_client_home: a fixture)
    SIZE,
    _client_home,
    open_start_form,
    screen_text,
    tui,
    until,
)


def test_start_form_offers_to_wait_for_free_gpus_and_the_run_shows_queued(
        hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    from textual.widgets import Checkbox, Static

    hosts.apps_file.unlink(missing_ok=True)
    hosts.gpu_file.write_text(BUSY)
    state = gpu_state(hosts.remote_homes["gpu"])  # the box's queue
    state.mkdir(parents=True, exist_ok=True)
    (state / "every").write_text("1\n")  # the host's pace: 1 s, not 5
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)

    async def go() -> None:
        app = tui(hosts, tmp_path, poll_runs=True, refresh_seconds=0.3)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_start_form(app, pilot, config=str(config), workdir=workdir,
                                         run_id="waits")
            await pilot.press("ctrl+s")
            errors = form.query_one("#errors", Static)
            await until(pilot, lambda: "wait for free GPUs" in str(errors.render()), "the offer")
            assert "has 0 free GPU(s), --gpus 1 needs 1" in str(errors.render())
            assert not Path(workdir, "waits").exists()  # refused before anything was made
            queue = form.query_one("#queue", Checkbox)
            assert form.focused is queue
            allow_busy = form.query_one("#allow_busy", Checkbox)
            allow_busy.value = True
            await pilot.press("space")  # tick "wait for free GPUs": sharing is unticked
            await pilot.pause()
            assert (queue.value, allow_busy.value) == (True, False)
            await pilot.press("ctrl+s")
            await until(pilot, lambda: app.screen is not form, "the form to close")
            await until(pilot, lambda: "waiting for 1 free GPU(s): GPU 0: 97% busy" in screen_text(app),
                        "the queued row with why it waits")
            assert [r.state for r in app.engine.index.load() if r.run_id == "waits"] == [probes.QUEUED]
            hosts.gpu_file.write_text(IDLE)
            await until(pilot, lambda: read(Path(workdir, "waits", "gpus")) == "0", "its GPU")
            await until(pilot, lambda: [r.state for r in app.engine.index.load()
                                        if r.run_id == "waits"] == [probes.RUNNING], "running")

    try:
        asyncio.run(go())
    finally:
        hosts.gpu_file.write_text(TWO_GPUS)
